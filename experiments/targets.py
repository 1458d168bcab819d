"""An experiment's targets: the thresholds each grid point is judged against (``pass_*`` columns).

The YAML's ``targets:`` section sets them (``experiments.schema.TargetsSpec``); each key is a target
and its threshold, the default today's value of ``sim.metrics`` (``EVICT_US_TARGET``, ...):

* ``evict_us``: ``evict_us_p50`` < the threshold, in microseconds; passes when the engine made no
  eviction call at all (``evict_calls`` = 0).
* ``reprefill``: ``reprefill_rate`` < the threshold.
* ``jain``: ``jain_service`` >= the threshold.
* ``gpu_util``: ``gpu_util`` >= the threshold.
* ``throughput_impact``: ``throughput_impact`` < the threshold, only where that column is present
  (the run had infinite-memory baselines).

A NaN metric fails its target (but for the no-eviction case above). A key set to ``null`` drops
that target (no ``pass_`` column); ``targets: none`` drops them all. An offline policy (its class
has ``offline = True``: belady, cost-belady) reads the future, so it is a bound, not a policy one
could deploy: its verdicts are n/a (an empty ``pass_*`` cell), never pass or FAIL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim import metrics


@dataclass(frozen=True)
class Rule:
    metric: str  # the summary column judged
    op: str  # "<" or ">="
    default: float  # today's threshold (sim.metrics)
    unit: str = ""  # shown after the threshold ("us")
    percent: bool = False  # a fraction, shown as a percentage in the console table
    short: str = ""  # the metric's name in the console table's header


# Every target, in the order of summary.csv's pass_* columns.
RULES: dict[str, Rule] = {
    "evict_us": Rule("evict_us_p50", "<", metrics.EVICT_US_TARGET, unit="us", short="evict_p50"),
    "reprefill": Rule("reprefill_rate", "<", metrics.REPREFILL_TARGET, percent=True),
    "jain": Rule("jain_service", ">=", metrics.JAIN_TARGET),
    "gpu_util": Rule("gpu_util", ">=", metrics.GPU_UTIL_TARGET, percent=True, short="util"),
    "throughput_impact": Rule(
        "throughput_impact", "<", metrics.THROUGHPUT_IMPACT_TARGET, percent=True, short="thr_impact"
    ),
}

DEFAULT_TARGETS: dict[str, float | None] = {name: r.default for name, r in RULES.items()}

# What a verdict is: True (pass), False (FAIL) or None (n/a: an offline policy).
Verdict = bool | None


def judge(
    row: Mapping[str, Any], targets: Mapping[str, float | None] | None, *, offline: bool = False
) -> dict[str, Verdict]:
    """The verdict of each target set in ``targets`` (keys without the ``pass_`` prefix) for one
    summary row; ``None`` for every target of an ``offline`` policy. No targets: empty."""
    if targets is None:
        return {}
    out: dict[str, Verdict] = {}
    for name, rule in RULES.items():
        bound = targets.get(name)
        if bound is None or (name == "throughput_impact" and rule.metric not in row):
            continue
        out[name] = None if offline else _meets(row, rule, bound)
    return out


def _meets(row: Mapping[str, Any], rule: Rule, bound: float) -> bool:
    if rule.metric == "evict_us_p50" and row.get("evict_calls", 1) == 0:
        return True  # no eviction call: nothing to be slow at
    v = row.get(rule.metric, math.nan)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return False
    if math.isnan(v):
        return False
    return v < bound if rule.op == "<" else v >= bound


def rule_text(name: str, bound: float) -> str:
    """``jain_service >= 0.8``: the rule of one target, for the report."""
    r = RULES[name]
    op = "\u2265" if r.op == ">=" else r.op
    return f"{r.metric} {op} {bound:g}" + (f" {r.unit}" if r.unit else "")


def short_header(name: str, bound: float) -> str:
    """``jain>=0.8``, ``reprefill<20%``: the header of one target in the console table."""
    r = RULES[name]
    value = f"{bound * 100:g}%" if r.percent else f"{bound:g}{r.unit}"
    return f"{r.short or name}{r.op}{value}"


def from_resolved(resolved: Any) -> dict[str, float | None] | None:
    """The targets a results folder was judged against, from its config.resolved.yaml (parsed):
    its ``targets`` mapping (a missing key: the default), None when it says ``targets: null``, the
    defaults when it has no ``targets`` key (a folder written before targets were settable)."""
    if not isinstance(resolved, Mapping) or "targets" not in resolved:
        return dict(DEFAULT_TARGETS)
    got = resolved["targets"]
    if got is None:
        return None
    if not isinstance(got, Mapping):
        raise ValueError(f"targets: expected a mapping or null, got {got!r}")
    out: dict[str, float | None] = {}
    for name in RULES:
        v = got.get(name, DEFAULT_TARGETS[name])
        out[name] = None if v is None else float(v)
    return out


def is_offline(policy: str) -> bool:
    """Whether ``policy`` (a registered name or ``module:Class``) is an offline bound."""
    from sim.policies import policy_class

    return bool(getattr(policy_class(policy), "offline", False))
