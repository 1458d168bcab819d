"""Sparse decode from CPU memory in the engine: the offload after prefill, the ring-buffer step
price by hand, the GPU bytes held, the errors, and the invariants under every policy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_strategies import traces

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, available_policies, simulate
from sim.config import GIB, BudgetConfig, SparseConfig
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token
LAYER_PAGE = PAGE // 32  # 16 tokens of one layer: 64 KiB
META = 2 * 8 * 128 * 2  # min and max key per KV head, one page, one layer
MEM = MemoryConfig(gpu_kv_gb=64 * PAGE / GIB, cpu_kv_gb=64 * PAGE / GIB, block_tokens=16)


def _one(prompt: int, output: int) -> list[Session]:
    return [Session("s", (Turn(prompt, output, arrival_s=0.0),))]


def test_a_decode_step_reads_k_pages_through_the_ring_by_hand():
    # Prompt 64 -> 65 tokens after prefill: 4 full pages go to the CPU, the 65th token stays.
    # Quest K=2 through 2 slots: per layer, the local attention (1 token), then two rounds of one
    # page each: copies back to back, each attention after its copy and the one before.
    res = simulate(
        _one(64, 3),
        COST,
        MEM,
        policy="lru",
        debug=True,
        sparse=SparseConfig("quest", k=2, ring_slots=2),
    )
    x = COST.copy_s("h2d", LAYER_PAGE, 1)
    y = COST.decode_attn_s(1, 16)
    scan = 4 * META / COST.profile.decode_attn.kv_bw_Bps

    def step(local_tokens: int) -> float:
        local = COST.decode_attn_s(1, local_tokens)
        end0 = max(x, local) + y
        end1 = max(2 * x, end0) + y
        layer = COST.linear_s(1) + COST.elementwise_s(1) + scan + end1
        return 32 * layer + COST.lm_head_s(1) + COST.profile.step_overhead_s

    save = COST.copy_s("d2h", 4 * PAGE, 4 * 32)  # the offload rides on the first step
    assert res.stats.step_s[0] == pytest.approx(max(step(1), save), rel=1e-12)
    assert res.stats.step_s[1] == pytest.approx(step(2), rel=1e-12)
    # GPU: the ring (2 slots of one layer's page) and the metadata of 4 pages of 32 layers.
    assert res.stats.gpu_reserved_peak_bytes == 2 * LAYER_PAGE + 4 * 32 * META
    assert res.stats.decode_h2d_bytes == 2 * 2 * 32 * LAYER_PAGE  # 2 steps x 2 pages x 32
    assert res.stats.swap_out_bytes == 4 * PAGE


def test_offload_frees_the_gpu_and_full_selection_reads_every_page():
    mem = MemoryConfig(gpu_kv_gb=128 * PAGE / GIB, cpu_kv_gb=128 * PAGE / GIB, block_tokens=16)
    dense = simulate(_one(1000, 50), COST, mem, policy="lru")
    quest = simulate(
        _one(1000, 50), COST, mem, policy="lru", sparse=SparseConfig("quest", k=4, ring_slots=8)
    )
    full = simulate(_one(1000, 50), COST, mem, policy="lru", sparse=SparseConfig("full"))
    # Dense decode grows to 1050 tokens (66 pages); offload peaks at the prefill (1001 tokens,
    # 63 pages) and then holds one page, the ring and metadata.
    assert dense.stats.gpu_peak_bytes == 66 * PAGE
    assert quest.stats.gpu_peak_bytes == 63 * PAGE
    assert quest.stats.gpu_util < dense.stats.gpu_util
    # 1001 tokens: 62 full pages on the CPU, 4 of them read per layer per step (49 steps) ...
    assert quest.stats.decode_h2d_bytes == 49 * 4 * 32 * LAYER_PAGE
    # ... or all of them, one more each time a page fills and follows (at 1008, 1024, 1040).
    pages = [62 + (t >= 1008) + (t >= 1024) + (t >= 1040) for t in range(1001, 1050)]
    assert full.stats.decode_h2d_bytes == sum(pages) * 32 * LAYER_PAGE
    assert full.stats.step_s[5] > quest.stats.step_s[5] > dense.stats.step_s[5]


@pytest.mark.parametrize(
    "memory, sparse, budget, key",
    [
        (
            MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=1.0, evict_unit="session"),
            SparseConfig("full"),
            None,
            "memory.evict_unit",
        ),
        (MemoryConfig(gpu_kv_gb=1.0), SparseConfig("full"), None, "memory.cpu_kv_gb"),
        (
            MEM,
            SparseConfig("full"),
            BudgetConfig("streamingllm", sink=4, window=60),
            "token budgets",
        ),
    ],
)
def test_bad_combinations_name_the_key(memory, sparse, budget, key):
    with pytest.raises(ValueError, match=key):
        simulate(_one(10, 2), COST, memory, sparse=sparse, budget=budget)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        (
            {"kind": "quest", "k": 32, "ring_slots": 16},
            r"sparse.k \(32\) must not exceed sparse.ring_slots",
        ),
        ({"kind": "quest", "k": 8, "phases": ("prefill", "decode")}, "supports only decode"),
        ({"kind": "quest"}, "sparse.k is required"),
        ({"kind": "full", "k": 4}, "sparse.k is for kind 'quest'"),
        ({"kind": "bogus"}, "sparse.kind"),
    ],
)
def test_bad_sparse_settings_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        SparseConfig(**kwargs)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sessions=traces(),
    gpu_pages=st.integers(8, 120),
    cpu_pages=st.sampled_from([4, 20, 80]),
    unit=st.sampled_from(["block", "layer_block"]),
    policy=st.sampled_from(available_policies()),
    max_running=st.integers(1, 8),
    sparse=st.sampled_from([SparseConfig("quest", k=4, ring_slots=4), SparseConfig("full")]),
    prefetch=st.sampled_from(["off", "think"]),
    async_save=st.booleans(),
)
@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_offload_keeps_the_invariants_and_the_ledger_of_strict_replay(
    sessions, gpu_pages, cpu_pages, unit, policy, max_running, sparse, prefetch, async_save
):
    mem = MemoryConfig(
        gpu_kv_gb=gpu_pages * PAGE / GIB,
        cpu_kv_gb=cpu_pages * PAGE / GIB,
        block_tokens=16,
        evict_unit=unit,
    )
    eng = EngineConfig(
        max_batch_tokens=512, max_running=max_running, prefetch=prefetch, async_save=async_save
    )
    fast = simulate(sessions, COST, mem, eng, policy=policy, debug=True, sparse=sparse)
    slow = simulate(
        sessions, COST, mem, eng, policy=policy, debug=True, sparse=sparse, decode_spans=False
    )
    t = fast.turns
    assert (t.gpu_hit_tokens + t.cpu_hit_tokens + t.recomputed_tokens == t.history_tokens).all()
    assert len(t) + fast.stats.rejected_turns == sum(len(s.turns) for s in sessions)
    timeless = [c for c in t.columns if not c.endswith("_s")]
    assert t[timeless].equals(slow.turns[timeless])
    assert np.allclose(fast.stats.step_s, slow.stats.step_s, rtol=1e-12)
    assert fast.stats.decode_h2d_bytes == pytest.approx(slow.stats.decode_h2d_bytes)


@settings(max_examples=40, deadline=None)
@given(
    pages=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    k=st.integers(1, 8),
    slots=st.integers(8, 16),
    local=st.integers(1, 15),
)
def test_the_engine_step_price_equals_the_batch_price_of_the_cost_model(pages, k, slots, local):
    # Two implementations: the engine's running totals with the ring's (a, b) per round shape,
    # and costmodels.sparse_decode's whole-batch recurrence (one gather copy per round).
    from costmodels.sparse_decode import sparse_decode_cost
    from sim.offload import SparseOffload

    off = SparseOffload(SparseConfig("quest", k=k, ring_slots=slots), COST, 16)
    for p in pages:
        off.add(p)
    seqs = len(pages)
    ctx = sum(16 * p + local for p in pages)
    want = sparse_decode_cost(
        COST, 16, np.minimum(pages, k), np.full(seqs, local), sum(pages), slots, gather=True
    ).total_s
    assert off.step_s(seqs, ctx) == pytest.approx(want, rel=1e-12)
    assert off.steps_s(seqs, np.array([ctx]))[0] == off.step_s(seqs, ctx)
