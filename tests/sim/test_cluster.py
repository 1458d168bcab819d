"""Clusters of replicas behind a router: identity with the single engine at one replica,
hand-worked routing cases, conservation, and exact decode spans on one clock."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.cluster import Arrival, ClusterConfig, make_router, simulate_cluster
from sim.cluster.routers import KVAware, RoundRobin, Router
from sim.config import GIB
from tests.sim.trace_strategies import traces
from traces import load_trace
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16
PAGE = BT * COST.kv_bytes_per_token


def conversation(sid: str, start: float, turns: list[tuple[int, int]], think=100.0) -> Session:
    return Session(
        sid,
        tuple(
            Turn(p, o, arrival_s=start) if k == 0 else Turn(p, o, think_s=think)
            for k, (p, o) in enumerate(turns)
        ),
    )


def synthetic(n: int, seed: int = 1) -> list[Session]:
    return load_trace({"kind": "synthetic", "sessions": n, "seed": seed}).sessions


def mem(gpu_pages: float, cpu_pages: float = 0, unit: str = "block", **kw) -> MemoryConfig:
    return MemoryConfig(
        gpu_kv_gb=gpu_pages * PAGE / GIB if math.isfinite(gpu_pages) else math.inf,
        cpu_kv_gb=cpu_pages * PAGE / GIB,
        block_tokens=BT,
        evict_unit=unit,
        **kw,
    )


def cluster(sessions, memory, replicas=1, router="round-robin", policy="lru", **kw):
    engine = kw.pop("engine", EngineConfig())
    return simulate_cluster(
        sessions,
        COST,
        memory,
        engine,
        policy,
        0,
        ClusterConfig(replicas, router, kw.pop("params", {})),
        debug=kw.pop("debug", True),
        **kw,
    )


def assert_conserved(turns: pd.DataFrame) -> None:
    """Every history token is a GPU hit, a CPU hit or recomputed, exactly once."""
    split = turns.gpu_hit_tokens + turns.cpu_hit_tokens + turns.recomputed_tokens
    assert (split + turns.pruned_tokens == turns.history_tokens).all()


# -- one replica is the single engine -------------------------------------------------------------
SHARED_BLOCK = 32


def _shared_prefix_trace() -> list[Session]:
    """Sessions that share a system prompt (prefix hashes), with later turns."""
    out = []
    for i in range(6):
        hashes = (1, 2, 3 + i % 2)
        turns = [Turn(120, 30, arrival_s=0.3 * i, prefix_hashes=hashes)]
        turns += [Turn(40, 20, think_s=0.5 + 0.1 * i) for _ in range(2)]
        out.append(Session(f"p{i}", tuple(turns), block_tokens=SHARED_BLOCK))
    return out


ONE_REPLICA_CASES = {
    "block, GPU only": (synthetic(60), mem(900), EngineConfig(), "lru"),
    "block, CPU tier, arc": (synthetic(60), mem(700, 1500), EngineConfig(), "arc"),
    "layer_block, pensieve": (
        synthetic(12),
        mem(500, 700, "layer_block"),
        EngineConfig(),
        "pensieve",
    ),
    "session units, s3fifo": (synthetic(60), mem(900, 600, "session"), EngineConfig(), "s3fifo"),
    "chunked prefill, open loop": (
        synthetic(60),
        mem(800),
        EngineConfig(chunked_prefill=True, max_batch_tokens=512, replay="open-loop"),
        "lru",
    ),
    "prefetch": (synthetic(50), mem(700, 1500), EngineConfig(prefetch="think"), "lru"),
    "shared prefixes": (_shared_prefix_trace(), mem(60, 40), EngineConfig(), "lru"),
    "unbounded GPU": (synthetic(60), mem(math.inf), EngineConfig(), "lru"),
}


ROUTERS = ["round-robin", "least-loaded", "session-affinity", "kv-aware"]


# With one replica every router sends every turn to it; kv-aware also reads the replica's KV.
# The default run takes four set-ups with it, the slow suite every set-up with every router.
DEFAULT_CASES = ("block, CPU tier, arc", "session units, s3fifo", "chunked prefill, open loop")


@pytest.mark.parametrize(
    "case",
    [
        c
        if c in DEFAULT_CASES or c == "shared prefixes"
        else pytest.param(c, marks=pytest.mark.slow)
        for c in ONE_REPLICA_CASES
    ],
)
@pytest.mark.parametrize(
    "router", ["kv-aware", *(pytest.param(r, marks=pytest.mark.slow) for r in ROUTERS[:3])]
)
def test_one_replica_is_the_single_engine_bit_for_bit(case, router):
    sessions, memory, engine, policy = ONE_REPLICA_CASES[case]
    one = simulate(sessions, COST, memory, engine, policy=policy, seed=0)
    res = cluster(sessions, memory, 1, router, policy, engine=engine, debug=False)
    assert (res.turns.replica == 0).all()
    pd.testing.assert_frame_equal(
        res.turns.drop(columns=["replica", "elsewhere_tokens"]), one.turns
    )
    mine, theirs = res.replicas[0].stats, one.stats
    for name in ("sim_time_s", "steps", "output_tokens", "gpu_util", "gpu_peak_bytes",
                 "peak_demand_bytes", "swap_in_bytes", "swap_out_bytes", "dropped_bytes",
                 "preemptions", "rejected_turns"):  # fmt: skip
        a, b = getattr(mine, name), getattr(theirs, name)
        assert a == b or (math.isnan(a) and math.isnan(b)), name
    assert len(one.turns) > 0 and one.turns.turn.max() > 0  # later turns were replayed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_one_replica_matches_the_single_engine_on_random_traces(sessions):
    memory = mem(40, 30)
    one = simulate(sessions, COST, memory, EngineConfig(), policy="lru")
    res = cluster(sessions, memory, 1, "kv-aware")
    pd.testing.assert_frame_equal(
        res.turns.drop(columns=["replica", "elsewhere_tokens"]), one.turns
    )


# -- several replicas: spans, invariants, conservation --------------------------------------------
# every replica's statistics but the wall clock's; its simulated time and GPU utilisation are sums
# over steps that a span adds up in another order (their last bits may differ)
SPAN_STATS = ("steps", "output_tokens", "gpu_peak_bytes", "peak_demand_bytes", "swap_in_bytes",
              "swap_out_bytes", "dropped_bytes", "preemptions", "rejected_turns")  # fmt: skip


def assert_same_replica_stats(a, b) -> None:
    for r, (ra, rb) in enumerate(zip(a.replicas, b.replicas, strict=True)):
        for name in SPAN_STATS:
            x, y = getattr(ra.stats, name), getattr(rb.stats, name)
            assert x == y or (math.isnan(x) and math.isnan(y)), (r, name, x, y)
        for name in ("sim_time_s", "gpu_util"):
            x, y = getattr(ra.stats, name), getattr(rb.stats, name)
            assert x == pytest.approx(y, rel=1e-12, nan_ok=True), (r, name)


def spans_are_the_iteration_by_iteration_run(sessions, router: str = "least-loaded") -> None:
    # debug=True checks every replica's invariants after each iteration and span
    memory = mem(30, 20)
    spans = cluster(sessions, memory, 3, router)
    steps = cluster(sessions, memory, 3, router, decode_spans=False)
    pd.testing.assert_frame_equal(spans.turns, steps.turns)
    assert_same_replica_stats(spans, steps)
    assert_conserved(spans.turns)


def test_a_span_stops_where_a_session_it_holds_ends_on_another_replica():
    # s0's three turns go round robin to replicas 0, 1, 2; s1 arrives on replica 0 at 4.5 s, while
    # s0's last turn still runs on replica 2 (it ends at 4.509 s). Replica 0 holds s0's one page:
    # live until 4.509 s, beside s1's first page; s1's second page comes at its 17th token, ~4.6 s,
    # after s0 has ended: the peak is 2 pages, not 3. A span that ran past 4.509 s (the shortest
    # think time, 1.25 s, was its only bound) counted s0's page live with both of s1's.
    s0 = (Turn(0, 1, arrival_s=0.0), Turn(0, 84, think_s=1.25), Turn(0, 120, think_s=1.875))
    sessions = [Session("s0", s0), Session("s1", (Turn(0, 18, arrival_s=4.5),))]
    memory = mem(60, 20)
    spans = cluster(sessions, memory, 3, "round-robin")
    steps = cluster(sessions, memory, 3, "round-robin", decode_spans=False)
    assert spans.turns.replica.tolist() == [0, 1, 2, 0]
    assert spans.replicas[0].stats.peak_demand_bytes == 2 * PAGE
    assert_same_replica_stats(spans, steps)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_decode_spans_on_one_clock_give_the_iteration_by_iteration_run(sessions):
    spans_are_the_iteration_by_iteration_run(sessions)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_decode_spans_on_one_clock_give_the_iteration_by_iteration_run_at_length(sessions):
    spans_are_the_iteration_by_iteration_run(sessions)


# least-loaded and session-affinity run in the slow suite (the default run keeps one router that
# splits conversations and one that reads the replicas' KV)
@pytest.mark.parametrize(
    "router",
    [
        "round-robin",
        "kv-aware",
        *(pytest.param(r, marks=pytest.mark.slow) for r in ("least-loaded", "session-affinity")),
    ],
)
@pytest.mark.parametrize(
    "unit", ["block", "session", pytest.param("layer_block", marks=pytest.mark.slow)]
)
def test_replicas_split_the_trace_and_conserve_history(router, unit):
    sessions = synthetic(12 if unit == "layer_block" else 40)
    res = cluster(sessions, mem(500, 400, unit), 3, router)
    rejected = sum(r.stats.rejected_turns for r in res.replicas)  # longer than a GPU's KV
    assert len(res.turns) + rejected == sum(len(s.turns) for s in sessions)
    assert len(res.turns) > 2 * len(sessions)
    assert sum(len(r.turns) for r in res.replicas) == len(res.turns)
    assert_conserved(res.turns)
    strict = cluster(sessions, mem(500, 400, unit), 3, router, decode_spans=False, debug=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)


# -- hand-worked routing ------------------------------------------------------------------------
# Three conversations of three turns, 100 prompt and 200 output tokens each: a turn decodes for
# over a second, so B arrives (0.1 s) while A runs and C (0.2 s) while both do; think time 100 s.
# After turn 0 a session holds 300 tokens: 18 full pages of 16 and a partial one of 12.
THREE = [conversation(s, 0.1 * i, [(100, 200)] * 3) for i, s in enumerate("ABC")]
H = [0, 300, 600]  # each turn's history


def by_turn(res) -> pd.DataFrame:
    return res.turns.set_index(["session_id", "turn"])


def test_round_robin_splits_conversations_and_recomputes_what_ran_elsewhere():
    t = by_turn(cluster(THREE, mem(math.inf), 2, "round-robin"))
    # arrival order A0 B0 C0 A1 B1 C1 A2 B2 C2 -> replicas 0 1 0 1 0 1 0 1 0
    order = [
        ("A", 0),
        ("B", 0),
        ("C", 0),
        ("A", 1),
        ("B", 1),
        ("C", 1),
        ("A", 2),
        ("B", 2),
        ("C", 2),
    ]
    assert [t.loc[key, "replica"] for key in order] == [0, 1, 0, 1, 0, 1, 0, 1, 0]
    assert list(t.history_tokens.loc[["A"]]) == H
    for s in "ABC":
        # turn 1 runs where the session never ran: all 300 tokens recomputed
        assert t.loc[(s, 1), ["gpu_hit_tokens", "recomputed_tokens"]].tolist() == [0, 300]
        # turn 2 is back where turn 0 ran: its 18 full pages hit, the partial 19th page and
        # turn 1's 300 tokens are recomputed
        assert t.loc[(s, 2), ["gpu_hit_tokens", "recomputed_tokens"]].tolist() == [288, 312]
        # of those, the tokens computed only on the other replica
        assert t.loc[(s, 1), "elsewhere_tokens"] == t.loc[(s, 2), "elsewhere_tokens"] == 300
    later = t[t.index.get_level_values("turn") > 0]
    assert later.gpu_hit_tokens.sum() == 3 * 288
    assert later.recomputed_tokens.sum() == 3 * 300 + 3 * 312


@pytest.mark.parametrize("router", ["session-affinity", "kv-aware"])
def test_affinity_and_kv_aware_routing_keep_every_conversation_warm(router):
    t = by_turn(cluster(THREE, mem(math.inf), 2, router))
    # A0 goes to replica 0 (a tie: round robin starts at 0); B0 finds A0 running there and goes
    # to 1; C0 finds one turn on each: a tie again, and the replica after 1 is 0. Each
    # conversation then stays home.
    homes = {"A": 0, "B": 1, "C": 0}
    for (s, _), replica in t.replica.items():
        assert replica == homes[s]
    later = t[t.index.get_level_values("turn") > 0]
    assert (later.gpu_hit_tokens == later.history_tokens).all()
    assert later.gpu_hit_tokens.sum() == 3 * (300 + 600)
    assert later.recomputed_tokens.sum() == 0 and t.elsewhere_tokens.sum() == 0


class FakeView:
    """A router's view with hand-set numbers."""

    def __init__(self, held: dict[int, tuple[int, int]], load: dict[int, int], capacity=1e9):
        self.replica_count = 2
        self.kv_capacity_tokens = capacity
        self.held, self.load = held, load

    def inflight_turns(self, r: int) -> int:
        return 1 if self.load.get(r) else 0

    def inflight_tokens(self, r: int) -> int:
        return self.load.get(r, 0)

    def cached_tokens(self, r: int, arrival: Arrival) -> tuple[int, int]:
        return self.held.get(r, (0, 0))


def test_kv_aware_prefers_the_holder_until_its_load_outweighs_the_hit():
    router = KVAware(2)
    turn = Arrival(session=0, k=1, history_tokens=1010, prompt_tokens=50, time_s=0.0)
    held = {0: (1010, 0)}  # replica 0 holds the whole history on its GPU
    # cost 0 = 50 + load 0, cost 1 = 1060 + load 1: replica 0 while load 0 - load 1 < 1010
    assert router.route(turn, FakeView(held, {0: 1009})) == 0
    assert router.route(turn, FakeView(held, {0: 1011})) == 1
    # a tie goes round robin: to the replica after the last pick, here 1 then 0
    assert router.route(turn, FakeView(held, {0: 1010})) == 0
    assert router.route(turn, FakeView(held, {0: 1010})) == 1
    assert router.route(turn, FakeView(held, {0: 3000, 1: 2000})) == 0
    # history on the CPU counts at cpu_hit_value (0.5 by default): the hit is worth 505
    on_cpu = {0: (0, 1010)}
    assert router.route(turn, FakeView(on_cpu, {0: 504})) == 0
    assert router.route(turn, FakeView(on_cpu, {0: 506})) == 1
    # load_weight 0: the hit always wins
    assert KVAware(2, {"load_weight": 0}).route(turn, FakeView(held, {0: 10**9})) == 0


def test_session_affinity_leaves_an_overloaded_home():
    router = make_router("session-affinity", 2, {"overload": 0.5})
    first = Arrival(0, 0, 0, 100, 0.0)
    assert router.route(first, FakeView({}, {}, capacity=1000)) == 0
    later = Arrival(0, 1, 300, 100, 5.0)
    # home 0 with 99 in flight: 99 + 400 <= 500 stays; 101 + 400 > 500 moves to replica 1
    assert router.route(later, FakeView({}, {0: 100}, capacity=1000)) == 0
    assert router.route(later, FakeView({}, {0: 101}, capacity=1000)) == 1
    assert router.route(later, FakeView({}, {0: 101}, capacity=1000)) == 1  # its new home


# -- bad input ----------------------------------------------------------------------------------
class ToNowhere(Router):
    name = "to-nowhere"

    def route(self, arrival, view):
        return view.replica_count


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (lambda: ClusterConfig(0), "cluster.replicas: must be >= 1"),
        (lambda: ClusterConfig(1.5), "cluster.replicas: must be an integer"),
        (lambda: make_router("round-robbin", 2), "did you mean 'round-robin'"),
        (lambda: make_router("kv-aware", 2, {"weight": 1}), "weight not a parameter"),
        (lambda: make_router("kv-aware", 2, {"load_weight": -1}), "load_weight: must be a number"),
        (lambda: make_router("nosuch.module:R", 2), "cannot import R from nosuch.module"),
        (lambda: make_router("sim.cluster.routers:Arrival", 2), "not a sim.cluster.Router"),
    ],
)
def test_bad_cluster_input_names_the_key(config, message):
    with pytest.raises(ValueError, match=message):
        config()


def test_a_router_that_names_no_replica_is_an_error():
    with pytest.raises(ValueError, match="sent a turn to replica 2 of 2"):
        cluster(THREE, mem(math.inf), 2, f"{__name__}:ToNowhere")


def test_offline_bounds_and_vllm_engine_are_refused():
    with pytest.raises(ValueError, match="offline bounds run on one engine only"):
        cluster(THREE, mem(100), 2, policy="belady")
    with pytest.raises(ValueError, match="kvsim only"):
        cluster(THREE, mem(100), 2, engine=EngineConfig(kind="vllm-v1"))


def test_least_loaded_spreads_an_idle_cluster_round_robin():
    router = make_router("least-loaded", 3)
    idle = FakeView({}, {})
    idle.replica_count = 3
    assert [router.route(Arrival(i, 0, 0, 10, 0.0), idle) for i in range(4)] == [0, 1, 2, 0]
    busy = FakeView({}, {0: 5, 2: 5})  # replica 1 is the least loaded whatever the turn
    busy.replica_count = 3
    assert [router.route(Arrival(i, 0, 0, 10, 0.0), busy) for i in range(2)] == [1, 1]


def test_round_robin_cycles_whatever_the_session():
    router = RoundRobin(3)
    picks = [router.route(Arrival(i % 2, 0, 0, 1, 0.0), FakeView({}, {})) for i in range(7)]
    assert picks == [0, 1, 2, 0, 1, 2, 0]


def test_layer_wise_replicas_conserve_history_and_match_iteration_by_iteration():
    sessions = synthetic(8)
    res = cluster(sessions, mem(80, 120, "layer_block"), 2, "kv-aware")
    assert_conserved(res.turns)
    assert {0, 1} <= set(res.turns.replica)
    assert res.turns.cpu_hit_tokens.sum() > 0  # the GPU is short: layers went to the CPU
    strict = cluster(
        sessions, mem(80, 120, "layer_block"), 2, "kv-aware", decode_spans=False, debug=False
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)


def test_the_merged_cluster_run_adds_up_its_replicas():
    res = cluster(synthetic(30), mem(400, 300), 3, "least-loaded", debug=False)
    merged, parts = res.merged().stats, [r.stats for r in res.replicas]
    assert merged.steps == sum(p.steps for p in parts)
    assert merged.output_tokens == sum(p.output_tokens for p in parts)
    assert merged.gpu_capacity_bytes == 3 * parts[0].gpu_capacity_bytes
    assert len(merged.tbt) == sum(len(p.tbt) for p in parts)
    # simulated time spans the earliest first iteration to the latest last one
    assert merged.sim_time_s == max(b for _, b in res.active) - min(a for a, _ in res.active)
    assert merged.sim_time_s >= max(p.sim_time_s for p in parts)
    # utilization: the replicas' byte-seconds over the cluster's capacity in that time
    byte_s = sum(p.gpu_util * p.gpu_capacity_bytes * p.sim_time_s for p in parts)
    assert merged.gpu_util == pytest.approx(
        byte_s / (merged.gpu_capacity_bytes * merged.sim_time_s)
    )


def test_progress_hears_of_every_turn_and_the_config_is_hashable():
    heard: list[int] = []
    cfg = ClusterConfig(2, "kv-aware", {"load_weight": 0.5, "cpu_hit_value": 0.25})
    assert hash(cfg) == hash(
        ClusterConfig(2, "kv-aware", {"cpu_hit_value": 0.25, "load_weight": 0.5})
    )
    sessions = synthetic(60)
    res = simulate_cluster(
        sessions, COST, mem(400), EngineConfig(), cluster=cfg, progress=heard.append
    )
    assert sum(heard) == len(res.turns) > 256
    assert max(heard) <= 256 and len(heard) > 1
