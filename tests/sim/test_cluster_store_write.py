"""``cluster.store.write``: a store written as replicas drop KV (``eviction``), at completions (the
default) or both: a hand-worked case, conservation and exact decode spans, and bad input."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from experiments.schema import ConfigError, load_experiment
from sim import EngineConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster.store import SharedStore, StoreConfig
from sim.memory import TieredMemory
from tests.sim.test_cluster import PAGE, _shared_prefix_trace, by_turn, conversation, mem, synthetic
from tests.sim.test_cluster_store import COST, assert_conserved_with_store, run, store
from tests.sim.trace_strategies import traces

# -- hand-worked ----------------------------------------------------------------------------------
# One replica, a GPU of 12 pages of 16 tokens, no CPU tier, LRU; a store of 4 chunks of 2 pages
# (32 tokens), LRU. A and B alternate, far apart: A0 (t=0), B0 (t=10), A1 and B1 100 s after.
# Turn 0: 100 prompt + 28 output = 128 tokens, 8 full pages (4 chunks); turn 1: 32 + 32 more,
# 192 tokens, 12 pages (6 chunks). Released pages are LRU candidates in page order.
#
# B0 (7 pages at admission, 8 at the end) evicts A's pages 0, 1, 2, then 3 as it decodes.
# A1 (11 pages at admission: its own 4 on the GPU, 4 dropped, 3 new; 12 at the end) evicts B's
#   pages 0..6, then 7. Its history: 64 GPU tokens (pages 4..7) and 64 dropped (pages 0..3).
# B1 (11 pages) evicts A's pages 0..10, then 11. Its history: 128 tokens, all dropped.
#
# completion: A0 writes A's chunks 0..3; B0 writes B's 0..3, evicting A's. A1 finds none of A:
#   64 recomputed. A1 writes A's 6 chunks, evicting B's 4 and its own 5 and 4. B1 finds none of
#   B: 128 recomputed; it writes B's 6. Written: 4 + 4 + 6 + 6 = 20, evicted 20 - 4 = 16.
# eviction: B0's drops write A's chunks 0 (pages 0, 1) and 1 (pages 2, 3: page 3 still held);
#   page 3's own drop finds chunk 1 there: nothing. A1's lookup finds A's chunks 0 and 1: pages
#   0..3 load (64), and its hits make them the most recent; then its drops write B's chunks
#   0..3 (page 6 drops with 7 still held), evicting A's two. B1 loads all 128 tokens; then its
#   drops write A's chunks 0..5 (page 10 drops with 11 still held). Written 2 + 4 + 6 = 12, all
#   at drops, evicted 12 - 4 = 8.
TWO = [
    conversation("A", 0.0, [(100, 28), (32, 32)]),
    conversation("B", 10.0, [(100, 28), (32, 32)]),
]


def hand_run(write: str):
    return run(TWO, mem(12), replicas=1, st=store(8, chunk_tokens=32, write=write))


def test_eviction_writes_what_the_replica_drops_and_keeps_it_for_the_next_turn():
    res = hand_run("eviction")
    t = by_turn(res)
    assert res.turns.replica.tolist() == [0, 0, 0, 0]
    assert t.loc[("A", 1), ["gpu_hit_tokens", "store_tokens", "recomputed_tokens"]].tolist() == [
        64,
        64,
        0,
    ]
    assert t.loc[("B", 1), ["gpu_hit_tokens", "store_tokens", "recomputed_tokens"]].tolist() == [
        0,
        128,
        0,
    ]
    st = res.store
    assert (st.written_chunks, st.drop_written_chunks, st.evicted_chunks) == (12, 12, 8)
    assert st.drop_written_bytes == st.written_bytes == 12 * 2 * 16 * COST.kv_bytes_per_token
    assert st.loaded_bytes == (64 + 128) // 16 * 16 * COST.kv_bytes_per_token
    assert_conserved_with_store(res.turns)


def test_completion_writes_evict_the_chunks_a_small_store_needed():
    res = hand_run("completion")
    t = by_turn(res)
    assert t.loc[("A", 1), ["gpu_hit_tokens", "store_tokens", "recomputed_tokens"]].tolist() == [
        64,
        0,
        64,
    ]
    assert t.loc[("B", 1), ["gpu_hit_tokens", "store_tokens", "recomputed_tokens"]].tolist() == [
        0,
        0,
        128,
    ]
    st = res.store
    assert (st.written_chunks, st.drop_written_chunks, st.evicted_chunks) == (20, 0, 16)
    assert st.loaded_bytes == 0
    assert_conserved_with_store(res.turns)


def test_a_dropped_chunk_the_store_holds_is_no_hit():
    st = SharedStore(store(capacity_pages=8, chunk_tokens=64), PAGE, 16)  # 2 chunks of 4 pages
    st.write(0, 64, now=1.0)
    st.write(1, 64, now=2.0)
    st.write_dropped(0, [0], now=3.0)  # held: left as it is, still the least recent
    st.write_dropped(2, [0], now=4.0)  # lacking: written, evicting session 0's chunk
    assert st.prefix_pages(0) == 0 and st.prefix_pages(1) == 4 and st.prefix_pages(2) == 4
    assert (st.stats.written_chunks, st.stats.drop_written_chunks) == (3, 1)
    assert st.stats.drop_written_bytes == 4 * PAGE


# -- conservation, exact spans --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("write", ["eviction", "both"])
@pytest.mark.parametrize(("replicas", "cpu"), [(1, 0), (3, 0), (3, 100)])
def test_spans_stay_exact_and_history_is_conserved_with_writes_at_drops(write, replicas, cpu):
    sessions = synthetic(30, seed=4)
    st = store(600, chunk_tokens=32, policy="arc", write=write)
    res = run(sessions, mem(400, cpu), replicas, "round-robin", st, debug=replicas == 1)
    strict = run(
        sessions, mem(400, cpu), replicas, "round-robin", st, decode_spans=False, debug=False
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert res.store == strict.store
    assert_conserved_with_store(res.turns)
    assert res.store.drop_written_chunks > 0 and res.turns.store_tokens.sum() > 0
    if write == "both":
        assert res.store.written_chunks > res.store.drop_written_chunks


@pytest.mark.slow
def test_a_clock_reading_replica_policy_writes_its_span_drops_at_their_times():
    """Pensieve's decode spans drop their victims in one batch, each chosen at its step's start
    (one replica: nothing cuts its spans short): written one call at a time, at that time and in
    that order, as step by step."""
    sessions = synthetic(30, seed=4)
    st = store(600, chunk_tokens=32, policy="lru", write="eviction")
    cfg = (sessions, COST, mem(400), EngineConfig(), "pensieve", 0, ClusterConfig(1, store=st))
    res = simulate_cluster(*cfg, debug=True)
    strict = simulate_cluster(*cfg, decode_spans=False, debug=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert res.store == strict.store
    assert res.store.drop_written_chunks > 0


def test_shared_prefixes_with_writes_at_drops_conserve_and_spans_stay_exact():
    sessions = _shared_prefix_trace()
    st = store(40, chunk_tokens=32, write="eviction")
    res = run(sessions, mem(24), 3, "round-robin", st)
    strict = run(sessions, mem(24), 3, "round-robin", st, decode_spans=False, debug=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert_conserved_with_store(res.turns)
    assert res.store.drop_written_chunks > 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=traces())
def test_random_traces_conserve_history_with_writes_at_drops(sessions):
    st = store(80, chunk_tokens=32, policy="s3fifo", write="eviction")
    res = run(sessions, mem(120, 40), 3, "round-robin", st, debug=False)
    assert_conserved_with_store(res.turns)
    strict = run(sessions, mem(120, 40), 3, "round-robin", st, decode_spans=False, debug=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert res.store == strict.store


# -- the default, bad input -----------------------------------------------------------------------
def test_the_default_writes_at_completions_only_and_hooks_nothing():
    assert StoreConfig(capacity_gb=1).write == "completion"
    points = [p for p in load_experiment("experiments/cluster.yaml").grid() if p.store_gb]
    assert points and all(p.cluster.store.write == "completion" for p in points)
    res = run(synthetic(10), mem(200), replicas=2, st=store(chunk_tokens=32))
    assert res.store.drop_written_bytes == 0 and res.store.written_bytes > 0


def test_a_plain_replica_memory_is_untouched_by_the_default(monkeypatch):
    from sim.cluster import replica as replica_module

    kinds = []
    real = replica_module.Replica.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        kinds.append(self)

    monkeypatch.setattr(replica_module.Replica, "__init__", spy)
    run(synthetic(5), mem(200), replicas=2, st=store(chunk_tokens=32))
    assert kinds and all(type(r.sched.mem) is TieredMemory for r in kinds)
    assert not any(r.writes_on_drop for r in kinds)


@pytest.mark.parametrize("bad", ["evict", "", "Completion", None, 1])
def test_a_bad_write_value_is_an_error_naming_the_key(bad):
    with pytest.raises(ValueError, match=r"cluster\.store\.write: must be one of completion"):
        StoreConfig(capacity_gb=1, write=bad)


def test_a_bad_write_value_in_the_yaml_names_the_key(tmp_path):
    path = tmp_path / "bad.yaml"
    text = open("experiments/cluster.yaml").read()
    path.write_text(text.replace("latency_us: 20}", "latency_us: 20, write: evict}"))
    with pytest.raises(ConfigError, match=r"cluster\.store\.write.*completion, eviction, both"):
        load_experiment(path)
    path.write_text(text.replace("latency_us: 20}", "latency_us: 20, write: eviction}"))
    points = [p for p in load_experiment(path).grid() if p.store_gb]
    assert points and all(p.cluster.store.write == "eviction" for p in points)
