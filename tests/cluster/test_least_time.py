"""The least-time router (``sim.cluster.routers.LeastTime``): kv-aware's cost in tokens, in seconds
at each replica's prefill speed. Against a plain model of its rule on random views; with replicas
alike it routes as kv-aware (and, with no prefill weight, as least-loaded) does, bit for bit; an
H100 and an A100, worked by hand, where it picks the H100 although it has more tokens in flight;
the pool view prices each replica on its own group's hardware; a view without speeds still
works."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodels import cost_model
from sim.cluster import Arrival, ClusterConfig, make_router
from sim.cluster.disagg import DisaggConfig
from sim.cluster.routers import LeastTime
from sim.cluster.store import StoreConfig
from tests.cluster.test_hetero import BT, PAGE, assert_same_run, mem, run
from tests.sim.trace_strategies import traces
from traces import load_trace

H100 = cost_model("llama-3-8b", "h100-sxm")
A100 = cost_model("llama-3-8b", "a100-sxm")


class HandView:
    """A router's view of replicas with hand-set loads, KV of the session, prefill speeds and
    decode speeds (a function of the batch's sequences and context each; none: not asked)."""

    def __init__(self, inflight, cached, prefill_s, decode_s=None) -> None:
        self.inflight, self.cached, self.prefill_s = inflight, cached, prefill_s
        self.decode_s = decode_s

    @property
    def replica_count(self) -> int:
        return len(self.inflight)

    @property
    def kv_capacity_tokens(self) -> float:
        return 1e9

    def replica_kv_capacity_tokens(self, r: int) -> float:
        return 1e9

    def replica_prefill_s(self, r: int, tokens: int, context: int = 0) -> float:
        return self.prefill_s[r](tokens)

    def replica_decode_s(self, r: int, seqs: int, context: int) -> float:
        assert self.decode_s is not None, "a decode speed asked of a view without one"
        return self.decode_s[r](seqs, context)

    def inflight_turns(self, r: int) -> int:
        return 1 if self.inflight[r] else 0

    def inflight_tokens(self, r: int) -> int:
        return self.inflight[r]

    def cached_tokens(self, r: int, arrival: Arrival) -> tuple[int, int]:
        return self.cached[r]


# -- the rule, against a plain model -----------------------------------------------------------
def plain_least_time(views, arrivals, params) -> list[int]:
    """Each pick: the replica of the lowest s_r x kv-aware cost, plus decode_weight x
    decode_tokens x its decode step of its in-flight turns and this one (when the weight is not
    0), ties to the first at or after the one after the last pick."""
    p = {"prefill_weight": 1.0, "cpu_hit_value": 0.5, "load_weight": 1.0, "speed_tokens": 2048}
    p |= {"decode_weight": 0.0, "decode_tokens": 256} | params
    picks, start = [], 0
    for view, a in zip(views, arrivals, strict=True):
        costs = []
        for r in range(view.replica_count):
            g, c = view.cached[r] if a.history_tokens else (0, 0)
            s = view.prefill_s[r](p["speed_tokens"]) / p["speed_tokens"]
            tokens = p["prefill_weight"] * (a.tokens - g - p["cpu_hit_value"] * c)
            cost = s * (tokens + p["load_weight"] * view.inflight[r])
            if p["decode_weight"]:
                turns = view.inflight_turns(r) + 1
                step = view.decode_s[r](turns, view.inflight[r] + a.tokens)
                cost += p["decode_weight"] * p["decode_tokens"] * step
            costs.append(cost)
        best = min(costs)
        n = len(costs)
        r = next((start + j) % n for j in range(n) if costs[(start + j) % n] == best)
        picks.append(r)
        start = (r + 1) % n
    return picks


@st.composite
def views_and_arrivals(draw):
    n = draw(st.integers(1, 4))
    # a replica's prefill time: a fixed part and a per-token part (a few speeds, so ties happen)
    speeds = [
        (draw(st.sampled_from([0.0, 1e-3])), draw(st.sampled_from([1e-5, 2e-5, 3e-5])))
        for _ in range(n)
    ]
    prefill_s = [lambda t, a=a, b=b: a + b * t for a, b in speeds]
    # a decode step: a fixed part, a part per sequence and one per token of context
    steps = [
        (
            draw(st.sampled_from([5e-3, 8e-3])),
            draw(st.sampled_from([0.0, 1e-5])),
            draw(st.sampled_from([1e-7, 3e-7])),
        )
        for _ in range(n)
    ]
    decode_s = [lambda b, c, x=x, y=y, z=z: x + y * b + z * c for x, y, z in steps]
    views, arrivals = [], []
    for _ in range(draw(st.integers(1, 8))):
        history = draw(st.integers(0, 400))
        cached = [
            (g, draw(st.integers(0, history - g)))
            for g in [draw(st.integers(0, history)) for _ in range(n)]
        ]
        inflight = [draw(st.sampled_from([0, 100, 250, 1000])) for _ in range(n)]
        views.append(HandView(inflight, cached, prefill_s, decode_s))
        arrivals.append(Arrival(0, 1, history, draw(st.integers(0, 300)), 0.0))
    return views, arrivals


PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "prefill_weight": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        "cpu_hit_value": st.sampled_from([0.0, 0.5, 1.0]),
        "load_weight": st.sampled_from([0.0, 1.0, 3.0]),
        "speed_tokens": st.sampled_from([1, 256, 2048]),
        "decode_weight": st.sampled_from([0.0, 0.5, 1.0]),
        "decode_tokens": st.sampled_from([1, 128, 256]),
    },
)


@settings(max_examples=300, deadline=None)
@given(views_and_arrivals(), PARAMS)
def test_least_time_picks_as_its_plain_model(case, params):
    views, arrivals = case
    router = make_router("least-time", views[0].replica_count, params)
    picks = [router.route(a, v) for v, a in zip(views, arrivals, strict=True)]
    assert picks == plain_least_time(views, arrivals, params)


# -- replicas alike: kv-aware's and least-loaded's routes, bit for bit ------------------------------
@st.composite
def clusters_alike(draw):
    """2 to 4 replicas alike (with or without groups that say so), colocated, with a store or a
    prefill pool."""
    replicas = draw(st.integers(2, 4))
    groups = draw(st.sampled_from([(), ({"replicas": replicas, "hardware": "a100-sxm"},)]))
    extra = draw(st.sampled_from(["none", "store", "disagg"]))
    return replicas, groups, extra


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), clusters_alike())
def test_least_time_among_replicas_alike_is_kv_aware_and_least_loaded(sessions, case):
    replicas, groups, extra = case
    memory = mem(40, 30)
    kw: dict = {"groups": groups}
    if extra == "store":
        kw["store"] = StoreConfig(capacity_gb=40 * PAGE / 1e9, chunk_tokens=BT)
    elif extra == "disagg":
        kw["disaggregation"] = DisaggConfig(prefill_replicas=1)

    def both(router, timed, params=None):
        a = run(sessions, memory, ClusterConfig(replicas, router, **kw), debug=True)
        b = run(sessions, memory, ClusterConfig(replicas, timed, params or {}, **kw), debug=True)
        assert_same_run(b, a)

    both("kv-aware", "least-time")
    both("least-loaded", "least-time", {"prefill_weight": 0})


def test_least_time_among_replicas_alike_is_kv_aware_on_a_longer_trace():
    sessions = load_trace({"kind": "synthetic", "sessions": 60, "seed": 3}).sessions
    memory = mem(600, 500)
    for kw in ({}, {"kv_events_delay_ms": 50.0}):
        plain = run(sessions, memory, ClusterConfig(3, "kv-aware", **kw))
        assert_same_run(run(sessions, memory, ClusterConfig(3, "least-time", **kw)), plain)


# -- an H100 and an A100, by hand ----------------------------------------------------------------
def prefill_by_hand(flops, weight_bw, elementwise_bw, attention_flops, n=2048) -> float:
    """Llama-3-8B's lone prefill of n tokens on an analytic profile: 32 layers of P = 218,103,808
    linear parameters (tau 10 us + the larger of the weight read 2P / weight_bw and the compute
    n * 2P / flops), 196,608 elementwise bytes a token, prefill attention (tau 10 us + n^2 / 2
    pairs at 4 * 32 heads * 128 FLOPs / attention_flops: more than its KV read); then the LM
    head's weight read (525,336,576 parameters, one row) and the 0.5 ms step overhead."""
    P = 218_103_808
    gemms = 10e-6 + max(2 * P / weight_bw, n * 2 * P / flops)
    elementwise = n * 196_608 / elementwise_bw
    attention = 10e-6 + n * n / 2 * 4 * 32 * 128 / attention_flops
    return 32 * (gemms + elementwise + attention) + 2 * 525_336_576 / weight_bw + 0.5e-3


# the datasheets' figures at the analytic profiles' efficiencies (GEMMs 0.7 of dense BF16, weight
# reads 0.8 of HBM, elementwise 0.5 of HBM, attention 0.4 of dense BF16)
H100_2048 = prefill_by_hand(0.7 * 989.4e12, 0.8 * 3.35e12, 0.5 * 3.35e12, 0.4 * 989.4e12)
A100_2048 = prefill_by_hand(0.7 * 312e12, 0.8 * 2.039e12, 0.5 * 2.039e12, 0.4 * 312e12)


def test_the_faster_replica_wins_although_it_has_more_tokens_in_flight_by_hand():
    """Replica 0 an A100, replica 1 an H100. A new conversation of 1000 tokens arrives with 1000
    tokens in flight on the A100 and 2000 on the H100. In tokens (least-loaded: 1000 < 2000;
    kv-aware: 2000 < 3000) the A100 is the less loaded. In time: an H100 prefills 2048 tokens in
    53.3 ms (per layer 1.290 ms of GEMMs, 0.240 ms elementwise, 0.097 ms attention), 26.0 us a
    token; an A100 in 154.1 ms, 75.3 us a token. So 2000 x 75.3 us = 150.5 ms on the A100 against
    3000 x 26.0 us = 78.0 ms on the H100: least-time picks the H100."""
    assert H100_2048 == pytest.approx(53.28e-3, abs=0.01e-3)
    assert A100_2048 == pytest.approx(154.13e-3, abs=0.01e-3)
    # the cost models' own figures are the hand's
    assert H100.lone_prefill_s(2048) == pytest.approx(H100_2048, rel=1e-12)
    assert A100.lone_prefill_s(2048) == pytest.approx(A100_2048, rel=1e-12)
    view = HandView([1000, 2000], [(0, 0), (0, 0)], [A100.lone_prefill_s, H100.lone_prefill_s])
    turn = Arrival(0, 0, 0, 1000, 0.0)
    assert make_router("least-loaded", 2).route(turn, view) == 0
    assert make_router("kv-aware", 2).route(turn, view) == 0
    router = make_router("least-time", 2)
    costs = [2000 * A100_2048 / 2048, 3000 * H100_2048 / 2048]
    assert costs[0] == pytest.approx(0.1505, abs=1e-4)
    assert costs[1] == pytest.approx(0.0780, abs=1e-4)
    assert router.route(turn, view) == 1
    # with 6000 in flight on the H100 (7000 x 26.0 us = 182.1 ms) the A100 is the faster again
    assert router.route(turn, HandView([1000, 6000], view.cached, view.prefill_s)) == 0


class SpeedSpy(LeastTime):
    """least-time, noting each replica's prefill of 2048 tokens as its view gives it."""

    seen: ClassVar[list[list[float]]] = []

    def route(self, arrival: Arrival, view) -> int:
        self.seen.append([view.replica_prefill_s(r, 2048) for r in range(view.replica_count)])
        return super().route(arrival, view)


def test_the_pool_view_prices_each_replica_on_its_own_hardware():
    sessions = load_trace({"kind": "synthetic", "sessions": 6, "seed": 2}).sessions
    SpeedSpy.seen.clear()
    groups = ({"replicas": 2}, {"hardware": "a100-sxm"})
    run(sessions, mem(200), ClusterConfig(3, f"{__name__}:SpeedSpy", groups=groups), cost=H100)
    h, a = H100.lone_prefill_s(2048), A100.lone_prefill_s(2048)
    assert SpeedSpy.seen
    assert all(s == [h, h, a] for s in SpeedSpy.seen)
    # with disaggregation each pool's view numbers its own replicas from 0
    SpeedSpy.seen.clear()
    cfg = ClusterConfig(
        3, f"{__name__}:SpeedSpy", groups=groups, disaggregation=DisaggConfig(prefill_replicas=1)
    )
    run(sessions, mem(200), cfg, cost=H100)
    assert {len(s) for s in SpeedSpy.seen} == {1, 2}
    assert all(s in ([h], [h, a]) for s in SpeedSpy.seen)


class OldView(HandView):
    """A view written before views gave replicas' speeds (no ``replica_prefill_s``)."""

    def __getattribute__(self, name):
        if name == "replica_prefill_s":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_view_without_speeds_routes_as_kv_aware():
    view = OldView([1000, 2000], [(0, 0), (0, 0)], [])
    turn = Arrival(0, 0, 0, 1000, 0.0)
    assert make_router("least-time", 2).route(turn, view) == 0


@pytest.mark.parametrize("tokens", [0, 1.5])
def test_speed_tokens_must_be_a_whole_number_of_tokens(tokens):
    with pytest.raises(ValueError, match=r"router_params.speed_tokens: must be an integer >= 1"):
        make_router("least-time", 2, {"speed_tokens": tokens})


# -- decode speed ---------------------------------------------------------------------------------
# Two replicas, nothing in flight, nothing cached, a turn of 1000 tokens: replica 0 prefills at
# 100 us a token and takes 20 ms a decode step, replica 1 prefills at 200 us and decodes in 10 ms.
#   least-time without decode: 0.1 s against 0.2 s -> replica 0;
#   decode_weight 1 and 100 decode tokens: 0.1 + 100 x 20 ms = 2.1 s against 0.2 + 1.0 = 1.2 s
#   -> replica 1; each step priced for a batch of 1 sequence over the turn's 1000 tokens.
def test_a_decode_weight_picks_the_faster_decoder_by_hand():
    asked = []

    def step(ms):
        def decode_s(seqs, context):
            asked.append((seqs, context))
            return ms * 1e-3

        return decode_s

    view = HandView(
        [0, 0], [(0, 0), (0, 0)], [lambda t: 1e-4 * t, lambda t: 2e-4 * t], [step(20), step(10)]
    )
    turn = Arrival(0, 0, 0, 1000, 0.0)
    assert make_router("least-time", 2).route(turn, view) == 0
    assert asked == []  # at weight 0 no decode speed is asked
    params = {"decode_weight": 1.0, "decode_tokens": 100}
    assert make_router("least-time", 2, params).route(turn, view) == 1
    assert asked == [(1, 1000), (1, 1000)]


class DecodeSpy(LeastTime):
    """least-time, noting each replica's decode step of 4 sequences over 8192 tokens."""

    seen: ClassVar[list[list[float]]] = []

    def route(self, arrival: Arrival, view) -> int:
        self.seen.append([view.replica_decode_s(r, 4, 8192) for r in range(view.replica_count)])
        return super().route(arrival, view)


def test_the_pool_view_prices_each_replica_s_decode_on_its_own_hardware():
    sessions = load_trace({"kind": "synthetic", "sessions": 6, "seed": 2}).sessions
    DecodeSpy.seen.clear()
    groups = ({"replicas": 1}, {"hardware": "a100-sxm"}, {"replicas": 1})
    cfg = ClusterConfig(
        3, f"{__name__}:DecodeSpy", groups=groups, disaggregation=DisaggConfig(prefill_replicas=1)
    )
    run(sessions, mem(200), cfg, cost=H100)
    h, a = H100.decode_step_s(4, 8192), A100.decode_step_s(4, 8192)
    assert a > h  # (an A100's HBM is slower)
    assert {len(s) for s in DecodeSpy.seen} == {1, 2}
    assert all(s in ([h], [a, h]) for s in DecodeSpy.seen)
