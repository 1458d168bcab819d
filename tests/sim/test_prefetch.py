"""Ahead-of-time swap-in (engine.prefetch) on a hand-sized trace: what it moves and what it hides."""
from __future__ import annotations

import pytest

from costmodels import cost_model
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


def second_turn(unit: str, prefetch: str):
    mem = MemoryConfig(gpu_kv_gb=25 * PAGE / GIB, cpu_kv_gb=100 * PAGE / GIB, block_tokens=16,
                       evict_unit=unit)
    t = simulate([A, B], COST, mem, EngineConfig(prefetch=prefetch), policy="lru", debug=True).turns
    return t[(t.session_id == "a") & (t.turn == 1)].iloc[0]


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
