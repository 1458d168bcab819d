"""Engine options on a hand-sized trace: layer-wise pipelining, synchronous saves and ahead-of-time
swap-in (engine.prefetch), each against its hand-computed effect in the ledger."""

from __future__ import annotations

import pytest

from costmodels import BatchShape, cost_model, pipelined_time_uniform
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import GIB
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token
# A's first turn fills 20 pages; B's then pushes 15 of them to the CPU (the GPU holds 25 pages).
# A returns 30 s later with its 320-token history: 5 pages still on the GPU, 15 on the CPU.
A = Session("a", (Turn(300, 20, arrival_s=0.0), Turn(50, 10, think_s=30.0)))
B = Session("b", (Turn(300, 20, arrival_s=1.0),))
CPU_PAGES = 15


L = COST.model.num_layers


def ledger(unit: str = "block", **engine):
    mem = MemoryConfig(
        gpu_kv_gb=25 * PAGE / GIB, cpu_kv_gb=100 * PAGE / GIB, block_tokens=16, evict_unit=unit
    )
    t = simulate([A, B], COST, mem, EngineConfig(**engine), policy="lru", debug=True).turns
    return t.set_index(["session_id", "turn"])


def second_turn(unit: str, prefetch: str):
    return ledger(unit, prefetch=prefetch).loc[("a", 1)]


@pytest.mark.parametrize("unit", ["block", "layer_block"])
def test_pipelining_hides_all_but_the_recurrences_stall(unit):
    # A's second turn: 15 CPU pages swapped in, a prefill of 50 tokens after 320, alone in its
    # iteration. Copies first: the whole copy is stall. Pipelined: the uniform recurrence's
    # T - L*t_c with t_x = copy/L and t_c = one layer of that prefill.
    on, off = ledger(unit).loc[("a", 1)], ledger(unit, pipelining=False).loc[("a", 1)]
    h2d = COST.copy_s("h2d", CPU_PAGES * PAGE, CPU_PAGES * L)
    t_c = COST.layer_s(BatchShape.prefill(50, 320))
    hidden = (
        pipelined_time_uniform(L, h2d / L, t_c, COST.profile.overlap.compute_slowdown) - L * t_c
    )
    assert off.copy_stall_s == pytest.approx(h2d, rel=1e-12)
    assert on.copy_stall_s == pytest.approx(hidden, rel=1e-12)
    assert off.ttft_s - on.ttft_s == pytest.approx(h2d - hidden, rel=1e-9)


@pytest.mark.parametrize("unit", ["block", "layer_block"])
def test_per_layer_copies_swap_in_with_one_call_per_layer(unit):
    # The same swap-in, copies first: 15 pages of 32 layers are 480 calls per page, 32 per layer.
    # Only the copy's per-call charge changes; the ledger's hits do not.
    page, layer = (
        ledger(unit, pipelining=False).loc[("a", 1)],
        ledger(unit, pipelining=False, swap_copies="per_layer").loc[("a", 1)],
    )
    assert layer.copy_stall_s == pytest.approx(COST.copy_s("h2d", CPU_PAGES * PAGE, L), rel=1e-12)
    assert page.copy_stall_s - layer.copy_stall_s == pytest.approx(
        (CPU_PAGES * L - L) * COST.profile.h2d.latency_s, rel=1e-9
    )
    assert (layer.gpu_hit_tokens, layer.cpu_hit_tokens) == (
        page.gpu_hit_tokens,
        page.cpu_hit_tokens,
    )


@pytest.mark.parametrize("unit", ["block", "layer_block"])
def test_synchronous_saves_add_the_demotion_copy_to_the_admission(unit):
    # B's admission needs 19 pages with 5 free: 14 of A's pages are demoted in that iteration.
    # Async (default): the D2H copy hides behind B's prefill (no stall). Sync: it comes first.
    on, sync = ledger(unit).loc[("b", 0)], ledger(unit, async_save=False).loc[("b", 0)]
    d2h = COST.copy_s("d2h", 14 * PAGE, 14 * L)
    assert on.copy_stall_s == 0.0
    assert sync.copy_stall_s == pytest.approx(d2h, rel=1e-12)
    assert sync.ttft_s - on.ttft_s == pytest.approx(d2h, rel=1e-9)


@pytest.mark.parametrize("unit", ["block", "layer_block"])
def test_prefetch_moves_the_cpu_pages_and_think_time_hides_their_copy(unit):
    off, queue, think = (second_turn(unit, p) for p in ("off", "queue", "think"))
    nbytes = CPU_PAGES * PAGE
    for row in (off, queue, think):
        # Prefetched pages still count as CPU hits: g + c + d says where the history came from.
        assert (row.gpu_hit_tokens, row.cpu_hit_tokens, row.recomputed_tokens) == (80, 240, 0)
        assert row.swap_in_bytes == nbytes
    assert off.prefetched_bytes == 0 and off.copy_stall_s > 0
    assert queue.prefetched_bytes == nbytes == think.prefetched_bytes
    # The think time (30 s) is far longer than the copy: it is over before A arrives.
    assert think.copy_stall_s == 0.0
    assert think.ttft_s < off.ttft_s
