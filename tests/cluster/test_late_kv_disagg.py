"""Late KV events with disaggregation (``cluster.kv_events.delay_ms`` with
``cluster.disaggregation``): each pool's router sees its own pool's KV as it was the delay ago.
Against a plain model (every replica's KV of every session noted after each of its changes in a
run that steps every iteration, read at each turn's view point), decode spans on and off give the
same run and views, a delay of 0 is the run without one, and a hand-worked decode part routed on
a record."""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import ClassVar

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import EngineConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster.disagg import DisaggConfig
from sim.cluster.kvevents import DelayedKV
from sim.cluster.replica import Replica, cached_of
from sim.cluster.routers import KVAware
from tests.sim.test_cluster import COST, mem, synthetic
from tests.sim.trace_strategies import traces
from traces.records import Session, Turn


def run(sessions, memory, delay_ms, replicas=3, prefill=1, **kw):
    cfg = ClusterConfig(
        replicas,
        kw.pop("router", f"{__name__}:Views"),
        disaggregation=DisaggConfig(prefill),
        kv_events_delay_ms=delay_ms,
    )
    engine = kw.pop("engine", EngineConfig())
    policy = kw.pop("policy", "lru")
    return simulate_cluster(
        sessions, COST, memory, engine, policy, 0, cfg, debug=kw.pop("debug", False), **kw
    )


class Views(KVAware):
    """kv-aware, noting every view it routed on: (pool's first replica, session, turn, view
    point's time, history, each replica's (GPU, CPU) tokens of the session)."""

    seen: ClassVar[list[tuple]] = []

    def route(self, arrival, view):
        held = [view.cached_tokens(r, arrival) for r in range(view.replica_count)]
        Views.seen.append(
            (view.first, arrival.session, arrival.k, arrival.time_s, arrival.history_tokens, held)
        )
        return super().route(arrival, view)


# -- the plain model ------------------------------------------------------------------------------
class KVLog:
    """Every replica's KV of every session (``Replica.residency``) after each of its changes:
    an event applied and a delivery count at their moment before planning (phase 0), a planning
    after it (phase 1; a later pass at a moment that has planned counts as after it)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.log: dict[int, list[tuple[tuple[float, int], dict]]] = {}
        self.planned_at = -math.inf

    def note(self, replica: Replica, now: float, planning: bool) -> None:
        if planning:
            self.planned_at = now
        phase = 1 if planning or self.planned_at == now else 0
        kv = replica.sched.kv
        state = {i: replica.residency(i) for i in kv.keys()}
        self.log.setdefault(replica.index, []).append(((now, phase), state))

    def at(self, r: int, i: int, point: float):
        """Replica r's KV of session i at ``point``, after its events and deliveries then."""
        log = self.log.get(r, [])
        j = bisect_right([key for key, _ in log], (point, 0)) - 1
        return log[j][1].get(i) if j >= 0 else None


@pytest.fixture
def kv_log(monkeypatch):
    return record_kv(monkeypatch)


def record_kv(monkeypatch) -> KVLog:
    """A KVLog noting every replica's KV after each event, delivery and planning."""
    record = KVLog()

    def wrap(name, planning):
        original = getattr(Replica, name)

        def wrapped(self, *args):
            out = original(self, *args)
            now = args[-1] if name == "deliver" else args[0]
            record.note(self, now, planning)
            return out

        monkeypatch.setattr(Replica, name, wrapped)

    wrap("event", False)
    wrap("deliver", False)
    wrap("loop_top", True)
    return record


def assert_views_are_the_plain_models(seen, log: KVLog, delay_ms: float, prefill: int) -> None:
    """Each view: its pool's replicas' KV of the session at the turn's arrival less the delay
    (a decode part arrives at its hand-off), against its history."""
    for first, i, _, t, history, held in seen:
        count = prefill if first == 0 else len(log.log) - prefill
        point = t - delay_ms / 1e3
        want = [
            cached_of(log.at(first + r, i, point), history) if history else (0, 0)
            for r in range(count)
        ]
        assert held[: len(want)] == want, (first, i, t)


def spans_on_and_off(sessions, memory, delay_ms, kv_log, prefill=1, **kw) -> pd.DataFrame:
    """The run stepping every iteration routes on the plain model's views; the run with decode
    spans is the same run, with the same views."""
    Views.seen.clear()
    kv_log.clear()
    steps = run(sessions, memory, delay_ms, prefill=prefill, decode_spans=False, **kw)
    seen = list(Views.seen)
    assert_views_are_the_plain_models(seen, kv_log, delay_ms, prefill)
    Views.seen.clear()
    spans = run(sessions, memory, delay_ms, prefill=prefill, **kw)
    # the same views; a span's end is its start plus its length, which may differ in the last
    # bit from the steps' running sum (as the single engine's does): times to 1e-12
    assert [v[:3] + v[4:] for v in seen] == [v[:3] + v[4:] for v in Views.seen]
    assert [v[3] for v in Views.seen] == pytest.approx([v[3] for v in seen], rel=1e-12, abs=0)
    pd.testing.assert_frame_equal(spans.turns, steps.turns)
    return spans.turns


def examples(n: int):
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# think times of 0 to 3 s against a delay of 1 s: view events and records both (the log is cleared
# at each run)
@examples(8)
@given(traces())
def test_each_pool_routes_on_its_kv_a_delay_ago_on_random_traces(kv_log, sessions):
    spans_on_and_off(sessions, mem(30, 20), 1000.0, kv_log)


@pytest.mark.slow
@examples(30)
@given(traces())
def test_each_pool_routes_on_its_kv_a_delay_ago_on_more_random_traces(kv_log, sessions):
    spans_on_and_off(sessions, mem(30, 20), 1000.0, kv_log)


@pytest.mark.slow
@pytest.mark.parametrize(("delay_ms", "prefill"), [(50.0, 1), (10_000.0, 2), (60_000.0, 1)])
def test_each_pool_routes_on_its_kv_a_delay_ago(kv_log, delay_ms, prefill):
    sessions = synthetic(30)
    turns = spans_on_and_off(sessions, mem(300, 200), delay_ms, kv_log, prefill=prefill, replicas=4)
    at_once = run(sessions, mem(300, 200), 0.0, replicas=4, prefill=prefill).turns
    if delay_ms > 1000:  # a view that old changes where decode parts go
        assert not (turns.decode_replica == at_once.decode_replica).all()


@pytest.fixture
def in_span_notes(monkeypatch):
    """How many records a decode span noted at a step after its first (a time past the loop's
    clock): the spans these tests compare do cross steps where a watched session's KV changed."""
    notes = [0]
    original = DelayedKV.record

    def record(self, r, now, phase=None):
        before = sum(len(log) for log in self.records[r].values())
        original(self, r, now, phase)
        if now > self.shell.now:
            notes[0] += sum(len(log) for log in self.records[r].values()) > before

    monkeypatch.setattr(DelayedKV, "record", record)
    return notes


@pytest.mark.parametrize(
    ("gpu_pages", "cpu_pages", "policy"),
    [
        (40, 0, "lru"),
        (60, 30, "lru"),
        (60, 0, "predictive"),
        (40, 20, "predictive"),
        (40, 0, "s3fifo"),
        (50, 0, "s3fifo"),
    ],
)
def test_decode_spans_note_each_step_while_a_watched_session_is_held(
    kv_log, in_span_notes, gpu_pages, cpu_pages, policy
):
    # GPUs so small that a span's allocations evict the watched sessions' pages step by step
    # (to the CPU tier, or dropped), and view points falling inside such spans: each must read
    # the step the iteration-by-iteration run has (policies in one batch, by time, and in order)
    spans_on_and_off(
        synthetic(24), mem(gpu_pages, cpu_pages), 4000.0, kv_log, replicas=4, policy=policy
    )
    assert in_span_notes[0] > 0


SMALL_GPUS = given(traces(), st.sampled_from([(14, 0), (24, 10)]), st.sampled_from([300.0, 2000.0]))


@examples(8)
@SMALL_GPUS
def test_decode_spans_with_watched_sessions_on_small_gpus_on_random_traces(
    kv_log, sessions, pages, delay_ms
):
    spans_on_and_off(sessions, mem(*pages), delay_ms, kv_log)


@pytest.mark.slow
@examples(40)
@SMALL_GPUS
def test_decode_spans_with_watched_sessions_on_small_gpus_on_more_random_traces(
    kv_log, sessions, pages, delay_ms
):
    spans_on_and_off(sessions, mem(*pages), delay_ms, kv_log)


def test_open_loop_replay_with_a_delay_and_disaggregation_is_exact_too(kv_log):
    engine = EngineConfig(replay="open-loop")
    spans_on_and_off(synthetic(20), mem(300, 200), 1000.0, kv_log, engine=engine)


def test_a_delay_of_0_with_disaggregation_is_the_run_without_one():
    sessions = synthetic(20)
    cfg = dict(replicas=3, disaggregation=DisaggConfig(1))
    plain = simulate_cluster(
        sessions,
        COST,
        mem(300, 200),
        EngineConfig(),
        "lru",
        0,
        ClusterConfig(router="kv-aware", **cfg),
    )
    zero = simulate_cluster(
        sessions,
        COST,
        mem(300, 200),
        EngineConfig(),
        "lru",
        0,
        ClusterConfig(router="kv-aware", kv_events_delay_ms=0.0, **cfg),
    )
    pd.testing.assert_frame_equal(plain.turns, zero.turns)


# -- hand-worked ------------------------------------------------------------------------------------
# One prefill replica (0) and two decode replicas (1, 2), unbounded GPUs, kv-aware.
# A: turn 0 (256 prompt, 64 output) at 0; turn 1 (32 prompt, 8 output) 0.5 s after A0 completes.
# B: one turn (16 prompt, 4,000 output) at 0.001 s: a long decode that keeps replica 2 loaded.
# Decode parts: A0 is handed off first, a tie at 0 -> replica 1 (decode ties start at 2 next);
# B0 is handed off at its prefill's end: replica 1 holds A0's 257 tokens in flight, replica 2
# none -> replica 2. A1's decode part arrives with history 256 + 64 + 32 = 352 tokens (its
# context after its prefill part):
#   no delay: replica 1 holds A's 320 tokens on its GPU: cost 352 - 320 + 0 (A0 is over) = 32,
#       replica 2: 352 + B's 17 in flight = 369 -> replica 1;
#   a delay of a minute: the view point falls before A0 reached replica 1, so replica 1 shows
#       nothing: 352 against 369 -> replica 1 still (by load).
# The late view changes what the router thinks a replica saves, not here where the part goes, nor
# what crosses the link: replica 1 holds A's 320 tokens whatever the router saw, so 32 cross.
HAND = [
    Session("A", (Turn(256, 64, arrival_s=0.0), Turn(32, 8, think_s=0.5))),
    Session("B", (Turn(16, 4000, arrival_s=0.001),)),
]


@pytest.mark.parametrize(
    ("delay_ms", "held"),
    [
        (None, (320, 0)),
        (100.0, (320, 0)),  # view point 0.4 s after A0 completed: A0's whole context there
        (60_000.0, (0, 0)),  # a minute before: nothing yet
    ],
)
def test_a_late_decode_router_by_hand(delay_ms, held):
    Views.seen.clear()
    cfg = ClusterConfig(
        3,
        f"{__name__}:Views",
        disaggregation=DisaggConfig(1),
        kv_events_delay_ms=0.0 if delay_ms is None else delay_ms,
    )
    res = simulate_cluster(HAND, COST, mem(math.inf), EngineConfig(), "lru", 0, cfg, debug=True)
    t = res.turns.set_index(["session_id", "turn"])
    assert [t.loc[key, "decode_replica"] for key in [("A", 0), ("B", 0), ("A", 1)]] == [1, 2, 1]
    decode_views = [(i, k, h, v) for first, i, k, _, h, v in Views.seen if first == 1]
    assert decode_views[-1] == (0, 1, 352, [held, (0, 0)])
    # what crossed: all but what replica 1 kept of A (320 tokens: 20 whole pages of 16)
    a1 = t.loc[("A", 1)]
    assert a1.transfer_tokens == 352 - 320


# -- a span past a pull's hand-off (regression) ------------------------------------------------------
# One prefill replica (0) with a GPU of 30 pages, two decode replicas (1, 2), round-robin: decode
# parts go C -> 1, D -> 2, A -> 1, B -> 2. C and D (16 prompt, 100 output) decode on 1 and 2 a
# step (~6.8 ms) out of phase (D arrives after C's prefill). A's prefill (300 prompt) ends at
# 0.108765 and its 19 pages are held on replica 0 until replica 1 pulls them; replica 1 is inside
# a step then and admits A's decode part, pulling, at that step's end, 0.114750. B (200 prompt, 13
# pages) arrives at 0.110 and waits on replica 0 (30 - 19 = 11 pages free): replica 0 is idle,
# with no next event, until the pull wakes it. Replica 2 ends a step at 0.111259, between B's
# arrival and the pull, and would run a decode span to the end of D's decode had its horizon
# ignored that idle prefill replica: B's prefill (0.114750 to 0.122269) hands B's decode part to
# replica 2 inside that span, and stepping admits it at replica 2's next step end, 0.124750,
# where the span admitted it at 0.684839. The horizon counts an idle prefill replica with a turn
# waiting on held pages as due at the other decode replicas' next events (``Cluster.pull_s``).
PULL_WAKES = [
    Session("C", (Turn(16, 100, arrival_s=0.0),)),
    Session("D", (Turn(16, 100, arrival_s=0.01),)),
    Session("A", (Turn(300, 2, arrival_s=0.1),)),
    Session("B", (Turn(200, 4, arrival_s=0.11),)),
]


@pytest.mark.parametrize("delay_ms", [0.0, 1000.0])
def test_a_decode_span_stops_where_a_pull_may_wake_a_prefill_replica(delay_ms):
    def run_it(spans):
        cfg = ClusterConfig(
            3, "round-robin", disaggregation=DisaggConfig(1), kv_events_delay_ms=delay_ms
        )
        return simulate_cluster(
            PULL_WAKES, COST, mem(30), EngineConfig(), "lru", 0, cfg, debug=True, decode_spans=spans
        )

    steps, spans = run_it(False), run_it(True)
    pd.testing.assert_frame_equal(spans.turns, steps.turns)
    for stepped, spanned in zip(steps.replicas, spans.replicas, strict=True):
        pd.testing.assert_frame_equal(spanned.turns, stepped.turns)
    t = spans.turns.set_index("session_id")
    assert list(t.decode_replica) == [1, 2, 1, 2]  # A, B, C, D
    a_part = spans.replicas[1].turns.set_index("session_id").loc["A"]
    b_part = spans.replicas[2].turns.set_index("session_id").loc["B"]
    # B waited on replica 0 for A's pull, then its decode part waited for one step of D
    assert t.loc["B", "admit_s"] == a_part.admit_s == pytest.approx(0.114750, abs=1e-6)
    assert b_part.arrival_s == pytest.approx(0.122269, abs=1e-6)
    assert b_part.admit_s == pytest.approx(0.124750, abs=1e-6)


# The example hypothesis found (shrunk): the same wake, with a kv-aware router that sees the KV a
# second late; the span moved s0's decode part, hence its completion and its next turns' views.
FOUND = [
    Session("s0", (Turn(0, 65, arrival_s=4.349191067002199), Turn(0, 12, think_s=0.2177925715773))),
    Session("s1", (Turn(176, 120, arrival_s=1.4375), Turn(104, 2, think_s=2.75))),
    Session("s3", (Turn(0, 8, arrival_s=5.0),)),
    Session("s4", (Turn(0, 79, arrival_s=4.5),)),
]


@pytest.mark.parametrize("unit", ["block", "session", "layer_block"])
def test_a_pull_waking_a_prefill_replica_on_the_found_trace(kv_log, unit):
    spans_on_and_off(FOUND, mem(30, 20, unit=unit), 1000.0, kv_log)
