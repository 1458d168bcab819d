"""What a token budget risks: the share of attention-relevant tokens it pruned, estimated from a
run's ledger under the relevance model of ``sim.token_budget`` (the simulator has no accuracy
model; this number is only as good as the lifespans assumed)."""

from __future__ import annotations

import math

from sim.config import BudgetConfig
from sim.results import SimResult


def budget_quality(result: SimResult, budget: BudgetConfig, layers: int, seed: int) -> dict:
    """Summary columns: ``relevant_pruned_share`` (of the tokens still relevant when a later turn's
    prompt attends, at its true history length, the share a budget had pruned), its standard error
    over the sampled sessions, and how many sessions were sampled. Full KV prunes nothing: 0."""
    if budget.capacity is None:
        return {"relevant_pruned_share": 0.0, "relevant_pruned_stderr": 0.0, "quality_sessions": 0}
    # here: a run without a token budget (most) need not import the relevance model
    from sim.token_budget import LifespanDistribution, TokenBudget, quality_report

    t = result.turns.sort_values(["session_id", "turn"], kind="stable")
    later = t[t["history_tokens"] > 0]
    ends = [g.to_list() for _, g in later.groupby("session_id", sort=True)["history_tokens"]]
    if not ends:
        return {
            "relevant_pruned_share": math.nan,
            "relevant_pruned_stderr": math.nan,
            "quality_sessions": 0,
        }
    dist = (
        LifespanDistribution.from_csv(budget.lifespans)
        if budget.lifespans
        else LifespanDistribution.builtin()
    )
    tb = TokenBudget(budget.sink, budget.window, budget.budget)
    scorer = budget.scorer if budget.kind == "smartkv" else "recency"  # sink + window: by age
    rep = quality_report(ends, tb, scorer, layers, seed, dist, budget.quality_sample)
    return {
        "relevant_pruned_share": rep.pruned_share,
        "relevant_pruned_stderr": rep.share_stderr,
        "quality_sessions": rep.sessions_sampled,
    }
