"""The invariant checker on random traces and capacities, for every registered policy (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, available_policies, simulate
from sim.config import GIB
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE16 = 16 * COST.kv_bytes_per_token
UNITS = ["session", "block", "layer_block"]


@st.composite
def traces(draw):
    n = draw(st.integers(1, 6))
    sessions = []
    for i in range(n):
        turns = []
        for k in range(draw(st.integers(1, 4))):
            p, o = draw(st.integers(0, 300)), draw(st.integers(1, 120))
            if k == 0:
                turns.append(Turn(p, o, arrival_s=draw(st.floats(0, 5))))
            else:
                turns.append(Turn(p, o, think_s=draw(st.floats(0, 3))))
        sessions.append(Session(f"s{i}", tuple(turns)))
    return sessions


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sessions=traces(),
    gpu_pages=st.integers(8, 200),
    cpu_pages=st.sampled_from([0, 10, 60]),
    block=st.sampled_from([8, 16, 32]),
    unit=st.sampled_from(UNITS),
    policy=st.sampled_from(available_policies()),
    max_running=st.integers(1, 8),
    pipelining=st.booleans(),
    async_save=st.booleans(),
    fused_recompute=st.booleans(),
    prefetch=st.sampled_from(["off", "queue", "think"]),
)
def test_invariants_hold_every_step(
    sessions,
    gpu_pages,
    cpu_pages,
    block,
    unit,
    policy,
    max_running,
    pipelining,
    async_save,
    fused_recompute,
    prefetch,
):
    page = block * COST.kv_bytes_per_token
    mem = MemoryConfig(
        gpu_kv_gb=gpu_pages * page / GIB,
        cpu_kv_gb=cpu_pages * page / GIB,
        block_tokens=block,
        evict_unit=unit,
    )
    eng = EngineConfig(
        max_batch_tokens=512,
        max_running=max_running,
        pipelining=pipelining,
        async_save=async_save,
        fused_recompute=fused_recompute,
        prefetch=prefetch,
    )
    res = simulate(sessions, COST, mem, eng, policy=policy, debug=True)
    t = res.turns
    total_turns = sum(len(s.turns) for s in sessions)
    assert len(t) + res.stats.rejected_turns == total_turns
    assert (t.gpu_hit_tokens + t.cpu_hit_tokens + t.recomputed_tokens == t.history_tokens).all()
    assert (t.first_token_s >= t.admit_s).all() and (t.finish_s >= t.first_token_s).all()
    assert (t.admit_s >= t.arrival_s).all()
    if cpu_pages == 0:
        assert t.cpu_hit_tokens.sum() == 0 and res.stats.swap_out_bytes == 0
    assert (t.prefetched_bytes <= t.swap_in_bytes).all()
    if prefetch == "off":
        assert t.prefetched_bytes.sum() == 0
    assert res.stats.output_tokens == int(t.output_tokens.sum())
    units = t.gpu_layer_units + t.cpu_layer_units + t.dropped_layer_units
    layers = COST.model.num_layers
    assert (units == layers * ((t.history_tokens + block - 1) // block)).all()
    if unit != "layer_block":  # whole pages: a page's layers share one tier
        assert (t.gpu_layer_units == layers * ((t.gpu_hit_tokens + block - 1) // block)).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sessions=traces(),
    gpu_pages=st.integers(8, 200),
    cpu_pages=st.sampled_from([0, 10, 60]),
    unit=st.sampled_from(UNITS),
    policy=st.sampled_from(available_policies()),
    max_running=st.integers(1, 8),
    async_save=st.booleans(),
    prefetch=st.sampled_from(["off", "think"]),
)
@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_decode_spans_give_the_ledger_of_one_event_per_iteration(
    sessions, gpu_pages, cpu_pages, unit, policy, max_running, async_save, prefetch
):
    mem = MemoryConfig(
        gpu_kv_gb=gpu_pages * PAGE16 / GIB,
        cpu_kv_gb=cpu_pages * PAGE16 / GIB,
        block_tokens=16,
        evict_unit=unit,
    )
    eng = EngineConfig(
        max_batch_tokens=512, max_running=max_running, async_save=async_save, prefetch=prefetch
    )
    fast = simulate(sessions, COST, mem, eng, policy=policy, debug=True)
    slow = simulate(sessions, COST, mem, eng, policy=policy, debug=True, decode_spans=False)
    exact = [
        "session_id",
        "turn",
        "history_tokens",
        "gpu_hit_tokens",
        "cpu_hit_tokens",
        "recomputed_tokens",
        "gpu_layer_units",
        "cpu_layer_units",
        "dropped_layer_units",
        "swap_in_bytes",
        "prefetched_bytes",
        "preemptions",
        "preempt_recompute_tokens",
    ]
    assert fast.turns[exact].equals(slow.turns[exact])
    for col in ("arrival_s", "admit_s", "first_token_s", "finish_s"):
        assert np.allclose(fast.turns[col], slow.turns[col], rtol=1e-9, atol=1e-9)
    assert fast.stats.steps == slow.stats.steps
    assert np.allclose(fast.stats.step_s, slow.stats.step_s, rtol=1e-12)
    assert fast.stats.gpu_util == pytest.approx(slow.stats.gpu_util, rel=1e-9, nan_ok=True)
