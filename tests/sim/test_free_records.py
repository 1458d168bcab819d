"""A run that lets go of finished sessions' records (``Scheduler(free_records=True)``, a stream's
default) against one that keeps them all: the same ledger, iteration by iteration the same records
left (a plain model: every record but those of finished, unpinned sessions with nothing on the GPU
or the CPU), equal to the kept run's, and the engine's invariants hold over what is left. A
layout exporter follows a stream whose records go."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_strategies import traces

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.engine import Engine
from sim.paged_layout import LayoutExporter
from sim.parts.sharing import POOL_INDEX
from sim.scheduler import Scheduler
from sim.units import Tier
from traces.synthetic import SyntheticConfig, generate_synthetic

COST = cost_model("llama-3-8b", "h100-sxm")
POLICIES = ["lru", "fifo", "lfu", "slru", "arc", "twoq", "qos", "session-aware", "belady"]
POLICIES += ["clock", "sieve", "s3fifo", "pensieve", "cost-belady", "predictive"]


def gone(kv) -> bool:
    """The model: a record may go once its session is finished and holds no KV it could use."""
    return kv.done and not kv.pinned and not kv.tier_pages[Tier.GPU] and not kv.tier_pages[Tier.CPU]


def record(kv) -> tuple:
    return (kv.index, kv.tokens, bytes(kv.tier), tuple(kv.tier_pages), kv.done, kv.next_turn)


def run(trace, memory, engine, policy, free, each=True):
    """The run's ledger and, at each iteration (with ``each``, in debug mode) and at the end,
    (records, unfinished sessions): those the model keeps for a run that keeps all, those there
    are for one that lets go."""
    snaps = []

    def snap(sched, *_):
        if free:  # (those let go at the next release are gone already)
            assert all(gone(sched.kv[i]) for i in sched._gone)
            kept = [kv for i, kv in sched.kv.items() if i != POOL_INDEX and i not in sched._gone]
            unfinished = set(sched.sessions)
        else:
            kept = [kv for i, kv in sched.kv.items() if i != POOL_INDEX and not gone(kv)]
            unfinished = {i for i, s in enumerate(sched.sessions) if s is not None}
        snaps.append((sorted(map(record, kept)), sorted(unfinished)))

    sched = Scheduler(trace, COST, memory, engine, policy, free_records=free)
    Engine(sched, debug=each, on_iteration=snap if each else None).run()
    snap(sched)
    return sched, snaps


def assert_same(trace, memory, engine, policy, each=True) -> Scheduler:
    kept, kept_snaps = run(trace, memory, engine, policy, False, each)
    freed, freed_snaps = run(trace, memory, engine, policy, True, each)
    assert freed_snaps == kept_snaps
    a, b = kept.ledger.arrays(), freed.ledger.arrays()
    for c in a:
        if c != "evict_ns":
            np.testing.assert_array_equal(a[c], b[c], err_msg=c)
    return freed


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    traces(),
    st.sampled_from(POLICIES),
    st.sampled_from(["block", "layer_block", "session"]),
    st.sampled_from([0.04, 0.08, 0.2]),  # GPU GiB: a page is 2 MiB; long turns are rejected
    st.sampled_from([0.0, 0.05, 0.3]),  # CPU GiB
    st.sampled_from(["off", "queue", "think"]),
)
def test_freed_records_follow_the_model(trace, policy, unit, gpu, cpu, prefetch):
    if prefetch != "off" and (cpu == 0.0 or unit == "session"):
        prefetch = "off"
    memory = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit)
    assert_same(trace, memory, EngineConfig(prefetch=prefetch), policy)


def test_a_long_run_holds_only_live_records():
    """Many sessions through a small GPU, in decode spans: what is left at the end is what the GPU
    and CPU hold."""
    trace = generate_synthetic(SyntheticConfig(sessions=60, seed=2, arrival_rate_per_s=1.0))
    memory = MemoryConfig(gpu_kv_gb=0.5, cpu_kv_gb=0.3, block_tokens=16)
    freed = assert_same(trace.sessions, memory, EngineConfig(), "lru", each=False)
    assert freed.sessions == {}
    assert 0 < len(freed.kv) < 30


def test_a_layout_exporter_follows_a_stream():
    """The exporter reads the records of sessions whose pages it placed: it sees them go."""
    trace = generate_synthetic(SyntheticConfig(sessions=30, seed=5, arrival_rate_per_s=2.0))
    memory = MemoryConfig(gpu_kv_gb=0.5, cpu_kv_gb=0.0)
    res = simulate(iter(trace.sessions), COST, memory, on_iteration=LayoutExporter())
    listed = simulate(trace.sessions, COST, memory, on_iteration=LayoutExporter())
    pd.testing.assert_frame_equal(res.turns, listed.turns, check_exact=True)
