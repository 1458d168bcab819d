"""Token budgets in the engine: the footprint, the bulk prune after prefill, the capped decode, the
ledger (H = g + c + d + pruned), and the invariants under every policy and granularity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_strategies import traces

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, available_policies, simulate
from sim.config import GIB, BudgetConfig
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token
ROOMY = MemoryConfig(gpu_kv_gb=64 * PAGE / GIB, block_tokens=16)


def _one(prompt: int, output: int, *more: tuple[int, int]) -> list[Session]:
    turns = [Turn(prompt, output, arrival_s=0.0)] + [Turn(p, o, think_s=1.0) for p, o in more]
    return [Session("s", tuple(turns))]


def test_the_bulk_prune_after_prefill_and_the_decode_at_the_cap():
    # S=4, W=16: cap 20 tokens. Turn 0: prefill 100 -> 101 tokens (7 pages) held unpruned, pruned
    # to 20 (2 pages); its 49 decode steps attend over 20 tokens each.
    budget = BudgetConfig("streamingllm", sink=4, window=16)
    res = simulate(_one(100, 50, (10, 5)), COST, ROOMY, policy="lru", budget=budget, debug=True)
    t0, t1 = res.turns.iloc[0], res.turns.iloc[1]
    assert res.stats.gpu_peak_bytes == 7 * PAGE
    assert list(res.stats.step_s[:49]) == [COST.decode_step_s(1, 20)] * 49
    # Turn 1: the history is 150 tokens, 20 of them kept (a GPU hit), 130 pruned for good.
    assert (t1.history_tokens, t1.gpu_hit_tokens, t1.pruned_tokens, t1.recomputed_tokens) == (
        150,
        20,
        130,
        0,
    )
    assert (t0.history_tokens, t0.pruned_tokens) == (0, 0)
    # Its prefill: 10 new tokens over the 20 kept (20 + 10 + 1 = 31, pruned again to 20).
    assert res.stats.step_s[49:] == pytest.approx([COST.decode_step_s(1, 20)] * 4)


@pytest.mark.parametrize("policy", ["lru", "lfu"])  # bulk decode spans, and step by step
def test_a_run_grows_to_its_cap_then_holds(policy):
    # Cap 64: after prefill 21 tokens; decode step j attends over min(64, 21 + j) tokens.
    budget = BudgetConfig("smartkv", sink=4, window=28, budget=32, scorer="recency")
    res = simulate(_one(20, 100), COST, ROOMY, policy=policy, budget=budget, debug=True)
    scored = COST.with_token_scoring()
    expect = [scored.decode_step_s(1, min(64, 21 + j)) for j in range(99)]
    assert res.stats.step_s == pytest.approx(expect, rel=1e-12)
    assert res.stats.gpu_peak_bytes == 4 * PAGE  # 64 tokens: the decode never passes 4 pages


def test_scoring_is_charged_per_token_per_layer_plus_a_launch_per_layer():
    extra, launch = 1e-6, 3e-6
    scored = COST.with_token_scoring(extra, launch)
    for seqs, ctx in [(1, 100), (8, 4000)]:
        got = scored.decode_step_s(seqs, ctx) - COST.decode_step_s(seqs, ctx)
        assert got == pytest.approx(32 * (seqs * extra + launch), rel=1e-9)
        many = scored.decode_steps_s(seqs, np.array([ctx]))[0] - COST.decode_steps_s(seqs, [ctx])[0]
        assert many == pytest.approx(got, rel=1e-9)
    got = scored.prefill_s(512) - COST.prefill_s(512)
    assert got == pytest.approx(32 * (512 * extra + launch), rel=1e-9)
    with pytest.raises(ValueError, match="scoring cost"):
        COST.with_token_scoring(-1.0)


def test_the_default_scoring_cost_counts_the_scorer_flops():
    from costmodels.token_scoring import scorer_flops_per_key

    per = scorer_flops_per_key() * COST.model.num_kv_heads / COST.profile.linear.flops
    scored = COST.with_token_scoring()
    assert scored.elementwise_s(1000) - COST.elementwise_s(1000) == pytest.approx(1000 * per)
    assert scored.linear_s(1000) - COST.linear_s(1000) == pytest.approx(COST.profile.linear.tau_s)


def test_full_kv_is_unchanged_by_the_budget_machinery():
    sessions = _one(100, 50, (10, 5))
    a = simulate(sessions, COST, ROOMY, policy="lru")
    b = simulate(sessions, COST, ROOMY, policy="lru", budget=BudgetConfig())
    assert a.turns.equals(b.turns) and (a.turns.pruned_tokens == 0).all()


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"kind": "bogus"}, "budget.kind"),
        ({"kind": "full", "window": 4}, "budget.kind 'full'"),
        ({"kind": "streamingllm", "sink": 4, "window": 8, "budget": 2}, "budget.budget"),
        ({"kind": "smartkv", "sink": -1, "window": 8}, "budget.sink"),
        ({"kind": "smartkv", "window": 8, "scorer": "oracle"}, "budget.scorer"),
        ({"kind": "smartkv"}, "sum must be >= 1"),
    ],
)
def test_bad_budgets_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        BudgetConfig(**kwargs)


BUDGETS = [
    BudgetConfig("streamingllm", sink=4, window=60),
    BudgetConfig("smartkv", sink=2, window=17, budget=30),
    BudgetConfig("smartkv", sink=0, window=1, budget=0),
]


BUDGET_CASES = given(
    sessions=traces(),
    gpu_pages=st.integers(8, 120),
    cpu_pages=st.sampled_from([0, 10, 60]),
    unit=st.sampled_from(["session", "block", "layer_block"]),
    policy=st.sampled_from(available_policies()),
    max_running=st.integers(1, 8),
    budget=st.sampled_from(BUDGETS),
    prefetch=st.sampled_from(["off", "think"]),
)


# The default run draws 20 cases, the slow suite 60.
@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@BUDGET_CASES
def test_budgets_keep_the_invariants_and_the_ledger_of_strict_replay(**case):
    _check_budgets_against_strict_replay(**case)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@BUDGET_CASES
def test_budgets_keep_the_invariants_and_the_ledger_of_strict_replay_at_length(**case):
    _check_budgets_against_strict_replay(**case)


def _check_budgets_against_strict_replay(
    sessions, gpu_pages, cpu_pages, unit, policy, max_running, budget, prefetch
):
    mem = MemoryConfig(
        gpu_kv_gb=gpu_pages * PAGE / GIB,
        cpu_kv_gb=cpu_pages * PAGE / GIB,
        block_tokens=16,
        evict_unit=unit,
    )
    eng = EngineConfig(max_batch_tokens=512, max_running=max_running, prefetch=prefetch)
    fast = simulate(sessions, COST, mem, eng, policy=policy, debug=True, budget=budget)
    slow = simulate(
        sessions, COST, mem, eng, policy=policy, debug=True, budget=budget, decode_spans=False
    )
    t = fast.turns
    assert (
        t.gpu_hit_tokens + t.cpu_hit_tokens + t.recomputed_tokens + t.pruned_tokens
        == t.history_tokens
    ).all()
    # Only what a budget keeps is ever a hit, a swap-in or a recompute.
    assert (t.history_tokens - t.pruned_tokens <= budget.capacity).all()
    assert len(t) + fast.stats.rejected_turns == sum(len(s.turns) for s in sessions)
    exact = [
        "session_id",
        "turn",
        "history_tokens",
        "gpu_hit_tokens",
        "cpu_hit_tokens",
        "recomputed_tokens",
        "pruned_tokens",
        "preemptions",
        "preempt_recompute_tokens",
    ]
    assert t[exact].equals(slow.turns[exact])
    assert np.allclose(fast.stats.step_s, slow.stats.step_s, rtol=1e-12)


def test_a_measured_scorer_cost_reaches_every_decode_step():
    # 1 us per key, no launch: each decode token pays 32 layers x 8 KV heads x 1 us more than
    # StreamingLLM at the same cap (20 tokens either way).
    measured = BudgetConfig(
        "smartkv", sink=4, window=8, budget=8, scorer_s_per_key=1e-6, scorer_launch_s=0.0
    )
    plain = BudgetConfig("streamingllm", sink=4, window=16)
    a = simulate(_one(100, 20), COST, ROOMY, budget=measured)
    b = simulate(_one(100, 20), COST, ROOMY, budget=plain)
    assert a.stats.step_s - b.stats.step_s == pytest.approx([32 * 8 * 1e-6] * 19, rel=1e-9)
