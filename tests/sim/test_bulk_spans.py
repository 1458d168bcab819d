"""Every policy that declares ``grows_in_bulk`` gives, with decode spans taken in bulk, the ledger
of strict one-event-per-iteration replay, and the bulk path does run (so the check can fail)."""

from __future__ import annotations

import numpy as np
import pytest

import sim.spans
from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import BudgetConfig
from sim.policies import available_policies, policy_class
from traces.synthetic import SyntheticConfig, generate_synthetic

COST = cost_model("llama-3-8b", "h100-sxm")
SESSIONS = generate_synthetic(SyntheticConfig(sessions=25, seed=5)).sessions
BULK = [p for p in available_policies() if policy_class(p).grows_in_bulk]
WINDOW = BudgetConfig(kind="streamingllm", sink=4, window=256)  # prunes pages: indices return
CONFIGS = [  # (gpu GiB, cpu GiB, unit, async_save, token budget)
    (0.3, 0.0, "block", True, None),
    (0.4, 0.5, "block", True, None),
    (0.4, 0.5, "layer_block", True, None),
    (0.1, 0.1, "block", True, WINDOW),
]


def test_the_bulk_policies():
    # the list this file covers; a policy that starts declaring it is covered automatically
    assert {"lru", "fifo", "lfu", "qos", "sieve", "belady", "session-aware", "arc", "twoq"} <= set(
        BULK
    )


@pytest.mark.parametrize("policy", BULK)
def test_bulk_spans_equal_strict_replay(policy, monkeypatch):
    taken = []
    bulk = sim.spans.bulk_span

    def counted(core, *args):
        done = bulk(core, *args)
        taken.append(done)
        return done

    monkeypatch.setattr(sim.spans, "bulk_span", counted)
    for gpu, cpu, unit, async_save, budget in CONFIGS:
        mem = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit)
        eng = EngineConfig(async_save=async_save)
        taken.clear()
        fast = simulate(SESSIONS, COST, mem, eng, policy=policy, seed=1, budget=budget)
        assert any(taken), (policy, gpu, cpu, unit)  # some span did run in bulk
        slow = simulate(
            SESSIONS, COST, mem, eng, policy=policy, seed=1, decode_spans=False, budget=budget
        )
        assert fast.turns.equals(slow.turns), (policy, gpu, cpu, unit)
        assert fast.stats.steps == slow.stats.steps
        assert np.array_equal(fast.stats.step_s, slow.stats.step_s)
