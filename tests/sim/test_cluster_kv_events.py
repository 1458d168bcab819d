"""A router that applies the replicas' KV events late (``cluster.kv_events.delay_ms``): no delay
is today's run bit for bit, a hand-worked conversation routed on what it could see, decode spans
exact with a delay, and bad values named by their key."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from sim import EngineConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster.routers import KVAware
from tests.sim.test_cluster import COST, assert_conserved, mem, synthetic
from tests.sim.trace_strategies import traces
from traces.records import Session, Turn


def run(sessions, memory, replicas, router="kv-aware", delay_ms=None, **kw):
    engine = kw.pop("engine", EngineConfig())
    cfg = (
        ClusterConfig(replicas, router)
        if delay_ms is None
        else ClusterConfig(replicas, router, kv_events_delay_ms=delay_ms)
    )
    return simulate_cluster(
        sessions, COST, memory, engine, "lru", 0, cfg, debug=kw.pop("debug", True), **kw
    )


# -- no delay is today's run --------------------------------------------------------------------
@pytest.mark.parametrize("router", ["kv-aware", "session-affinity"])
def test_a_delay_of_0_is_the_run_without_the_key_bit_for_bit(router):
    sessions = synthetic(40)
    before = run(sessions, mem(300, 200), 3, router)
    after = run(sessions, mem(300, 200), 3, router, delay_ms=0)
    pd.testing.assert_frame_equal(before.turns, after.turns)
    a, b = before.merged().stats, after.merged().stats
    # all but the wall-clock timings, and the TBT samples value by value
    assert dataclasses.replace(a, wall_s=0, evict_ns=None, tbt=None) == dataclasses.replace(
        b, wall_s=0, evict_ns=None, tbt=None
    )
    assert list(a.tbt.values) == list(b.tbt.values)


# -- hand-worked: a conversation whose second turn comes 2 s after its first --------------------
# A's turn 0 (256 prompt + 4 output tokens) arrives at 0 and completes at c, tens of milliseconds
# later; its turn 1 (32 prompt tokens, history H = 260) arrives at a1 = c + 2 s. B1 (48 tokens) at
# 1.0 s and B2 (64 tokens) at 1.1 s decode 2,000 tokens each, so both are in flight at a1.
# Routing (kv-aware, weights 1; the cost is prefill tokens less the GPU hit, plus in-flight
# tokens; ties round robin from the replica after the last pick):
#   A0: a tie at 0 -> replica 0 (the next tie starts at 1);
#   B1: A0 is over, a tie -> replica 1 (next from 0); B2: 64 + 0 against 64 + 48 -> replica 0.
#   A1 seeing its KV on replica 0 (H = 260 on the GPU, which is unbounded):
#       replica 0: 292 - 260 + 64 = 96, replica 1: 292 + 48 = 340 -> replica 0, all 260 a hit;
#   A1 seeing A0's prompt only (a view point inside A0's last iteration: 257 to 259 tokens held,
#       of which the partial last page is dropped when H arrives -> 256 on the GPU):
#       replica 0: 292 - 256 + 64 = 100 -> replica 0;
#   A1 seeing nothing (a view point before A0 arrived):
#       replica 0: 292 + 64 = 356, replica 1: 292 + 48 = 340 -> replica 1 by load, where all 260
#       history tokens ran elsewhere and are recomputed.
# The in-flight counts are the router's own and never delayed: 64 and 48 at A1 in every case.
HAND = [
    Session("A", (Turn(256, 4, arrival_s=0.0), Turn(32, 4, think_s=2.0))),
    Session("B1", (Turn(48, 2000, arrival_s=1.0),)),
    Session("B2", (Turn(64, 2000, arrival_s=1.1),)),
]


class Spy(KVAware):
    """kv-aware, noting what it saw of each turn with a history."""

    seen: ClassVar[list[tuple[list[tuple[int, int]], list[int]]]] = []

    def route(self, arrival, view):
        if arrival.history_tokens:
            held = [view.cached_tokens(r, arrival) for r in range(view.replica_count)]
            load = [view.inflight_tokens(r) for r in range(view.replica_count)]
            Spy.seen.append((held, load))
        return super().route(arrival, view)


@pytest.mark.parametrize(
    ("delay_ms", "held", "replica"),
    [
        (None, (260, 0), 0),  # no key: at once
        (0.0, (260, 0), 0),
        (500.0, (260, 0), 0),  # view point c + 1.5 s: A0 complete
        (2000.001, (256, 0), 0),  # c - 1 us: inside A0's last iteration
        (3000.0, (0, 0), 1),  # about -1 s: nothing yet
    ],
)
@pytest.mark.parametrize("spans", [True, False])
def test_a_late_router_routes_on_the_kv_it_could_see(delay_ms, held, replica, spans):
    Spy.seen.clear()
    res = run(HAND, mem(math.inf), 2, f"{__name__}:Spy", delay_ms, decode_spans=spans)
    t = res.turns.set_index(["session_id", "turn"])
    assert 0 < t.loc[("A", 0), "finish_s"] < 1.0  # the hand-worked timing: A0 over before B1
    assert [t.loc[key, "replica"] for key in [("A", 0), ("B1", 0), ("B2", 0)]] == [0, 1, 0]
    assert Spy.seen == [([held, (0, 0)], [64, 48])]
    a1 = t.loc[("A", 1)]
    assert a1.history_tokens == 260
    assert a1.replica == replica
    # at home all 260 are on the GPU by the time A1 arrives; elsewhere none ran
    assert a1.gpu_hit_tokens == (260 if replica == 0 else 0)
    assert a1.recomputed_tokens == 260 - a1.gpu_hit_tokens
    assert a1.elsewhere_tokens == (0 if replica == 0 else 260)


# -- decode spans stay exact ----------------------------------------------------------------------
class Views(KVAware):
    """kv-aware, noting every view it routed on: (session, turn, each replica's KV, loads)."""

    seen: ClassVar[list[tuple[int, int, list[tuple[int, int]], list[int]]]] = []

    def route(self, arrival, view):
        held = [view.cached_tokens(r, arrival) for r in range(view.replica_count)]
        load = [view.inflight_tokens(r) for r in range(view.replica_count)]
        Views.seen.append((arrival.session, arrival.k, held, load))
        return super().route(arrival, view)


def spans_on_and_off(sessions, memory, replicas, delay_ms, **kw) -> pd.DataFrame:
    """The run with decode spans and the one stepping every iteration: the same ledger, and the
    router saw the same KV at every turn."""
    router = f"{__name__}:Views"
    Views.seen.clear()
    spans = run(sessions, memory, replicas, router, delay_ms, debug=False, **kw)
    seen = list(Views.seen)
    Views.seen.clear()
    steps = run(sessions, memory, replicas, router, delay_ms, decode_spans=False, debug=False, **kw)
    assert seen == Views.seen
    pd.testing.assert_frame_equal(spans.turns, steps.turns)
    assert_conserved(spans.turns)
    return spans.turns


# 50 ms: every view point is a view event (the trace's think times are longer); 10 s and 60 s:
# many are read from the record (a think time shorter than the delay)
@pytest.mark.slow
@pytest.mark.parametrize("delay_ms", [50.0, 10_000.0, 60_000.0])
def test_decode_spans_give_the_iteration_by_iteration_run_with_a_delay(delay_ms):
    sessions = synthetic(40)
    turns = spans_on_and_off(sessions, mem(300, 200), 3, delay_ms)
    at_once = run(sessions, mem(300, 200), 3).turns
    if delay_ms > 1000:  # a view that old changes where turns go
        assert not (turns.replica == at_once.replica).all()


def test_open_loop_replay_with_a_delay_is_exact_too():
    sessions = synthetic(30)
    engine = EngineConfig(replay="open-loop")
    spans_on_and_off(sessions, mem(300, 200), 3, 1000.0, engine=engine)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_decode_spans_with_a_delay_on_random_traces(sessions):
    # think times of 0 to 3 s against a delay of 1 s: view events and records both
    spans_on_and_off(sessions, mem(30, 20), 3, 1000.0)


# -- bad values ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [-1, -0.5, math.inf, math.nan, "50", True, None])
def test_a_bad_delay_names_the_key(value):
    with pytest.raises(ValueError, match=r"cluster\.kv_events\.delay_ms: must be a finite number"):
        ClusterConfig(2, "kv-aware", kv_events_delay_ms=value)


def test_a_delay_with_disaggregation_is_taken():
    # each pool's router sees its own pool late: tests/cluster/test_late_kv_disagg.py
    from sim.cluster.disagg import DisaggConfig

    cfg = ClusterConfig(3, "kv-aware", disaggregation=DisaggConfig(1), kv_events_delay_ms=10)
    assert cfg.kv_events_delay_ms == 10
