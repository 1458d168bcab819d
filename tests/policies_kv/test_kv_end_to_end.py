"""Every KV policy through sim.simulate(debug=True) on a small synthetic trace: the invariant checks
run after every iteration (capacity, pinned never a candidate, candidate sets exact), every turn
completes, and H = g + c + d."""

from __future__ import annotations

import dataclasses

import pytest

import traces
from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.engine import Engine
from sim.scheduler import Scheduler

COST = cost_model("llama-3-8b", "h100-sxm")
SESSIONS = traces.load_trace({"kind": "synthetic", "sessions": 30, "seed": 3}).sessions
TURNS = sum(len(s.turns) for s in SESSIONS)
KV_POLICIES = [
    "pensieve",
    "pensieve-flat",
    "pensieve-physics",
    "predictive",
    "qos",
    "session-aware",
    "cost-belady",
]


def check(res) -> None:
    t = res.turns
    assert len(t) == TURNS and res.stats.rejected_turns == 0
    assert (t.gpu_hit_tokens + t.cpu_hit_tokens + t.recomputed_tokens == t.history_tokens).all()
    assert len(res.stats.evict_us) > 100  # the GPU is short: the policy decided many times


@pytest.mark.parametrize("policy", KV_POLICIES)
def test_with_a_cpu_tier(policy):
    mem = MemoryConfig(gpu_kv_gb=2.5, cpu_kv_gb=1.0, block_tokens=64, evict_unit="block")
    res = simulate(SESSIONS, COST, mem, policy=policy, debug=True)
    check(res)
    assert res.turns.cpu_hit_tokens.sum() > 0


@pytest.mark.parametrize("policy", ["pensieve-physics", "cost-belady", "predictive"])
def test_gpu_only(policy):
    mem = MemoryConfig(gpu_kv_gb=2.5, cpu_kv_gb=0.0, block_tokens=64, evict_unit="block")
    res = simulate(SESSIONS, COST, mem, policy=policy, debug=True)
    check(res)
    assert res.turns.recomputed_tokens.sum() > 0


def test_qos_with_priority_classes_evicts_lower_classes_only_when_chosen():
    # Give every third session class 1 and every third class -1; run the engine directly to reach
    # the policy instances and their metrics.
    sessions = [
        dataclasses.replace(
            s, turns=tuple(dataclasses.replace(t, priority=(i % 3) - 1) for t in s.turns)
        )
        for i, s in enumerate(SESSIONS)
    ]
    mem = MemoryConfig(gpu_kv_gb=2.5, cpu_kv_gb=1.0, block_tokens=64, evict_unit="block")
    sched = Scheduler(sessions, COST, mem, EngineConfig(), "qos")
    Engine(sched, debug=True).run()
    gpu = sched.mem.policy[0].metrics()
    assert gpu.victim_calls > 0
    assert sum(gpu.evictions_by_class.values()) > 0
    assert set(gpu.evictions_by_class) <= {-1, 0, 1}


def test_cachesim_objects_without_sessions():
    # A kvsim cachesim object has no session: the formula policies then rank by idle time (LRU),
    # and cost-belady, whose recovery costs are all 0, is Belady (the farther next request first).
    import numpy as np

    from sim.cachesim import simulate_cache, stream_from_arrays
    from sim.policies import PolicyContext
    from sim.units import Tier

    ids = (np.random.default_rng(0).zipf(1.3, 3000) % 200).tolist()
    s = stream_from_arrays(ids)
    ctx = PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32, cost=COST)
    lru = simulate_cache(s, "lru", 40, ctx=ctx).hits
    for p in (
        "pensieve",
        "pensieve-flat",
        "pensieve-physics",
        "predictive",
        "qos",
        "session-aware",
    ):
        assert simulate_cache(s, p, 40, ctx=ctx).hits == lru, p
    assert (
        simulate_cache(s, "cost-belady", 40, ctx=ctx).hits == simulate_cache(s, "belady", 40).hits
    )
