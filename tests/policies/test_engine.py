"""The classic policies inside the engine: invariants after every iteration, under GPU and CPU
pressure, session and block units, and the same result twice (the policies are deterministic)."""

from __future__ import annotations

import pytest
from pol_helpers import CLASSIC

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import GIB
from traces import load_trace

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token


@pytest.fixture(scope="module")
def sessions():
    return load_trace({"kind": "synthetic", "sessions": 15, "seed": 3}).sessions


@pytest.mark.parametrize("unit", ("block", "session"))
@pytest.mark.parametrize("policy", CLASSIC)
def test_engine_invariants_and_determinism(sessions, policy, unit):
    mem = MemoryConfig(
        gpu_kv_gb=400 * PAGE / GIB, cpu_kv_gb=150 * PAGE / GIB, block_tokens=16, evict_unit=unit
    )
    eng = EngineConfig(max_batch_tokens=4096, max_running=16)
    a = simulate(sessions, COST, mem, eng, policy=policy, debug=True)
    b = simulate(sessions, COST, mem, eng, policy=policy)
    assert len(a.turns) + a.stats.rejected_turns == sum(len(s.turns) for s in sessions)
    assert a.turns.equals(b.turns)
    t = a.turns
    assert (t.gpu_hit_tokens + t.cpu_hit_tokens + t.recomputed_tokens == t.history_tokens).all()
    assert t.recomputed_tokens.sum() > 0 and t.cpu_hit_tokens.sum() > 0  # under pressure
