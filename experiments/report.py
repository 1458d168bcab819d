"""A compact text table of summary.csv for the terminal."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from experiments.targets import DEFAULT_TARGETS, RULES, short_header

_VARYING_LABELS = (  # every grid label but policy and gpu_kv_gb, in summary.csv's order
    "engine",
    "model",
    "hardware",
    "tp",
    "trace",
    "cpu_kv_gb",
    "block_tokens",
    "evict_unit",
    "pipelining",
    "budget",
    "sparse",
    "seed",
)
_METRICS = {  # column -> (header, format)
    "reprefill_rate": ("reprefill", "{:.1%}"),
    "gpu_hit_rate": ("gpu_hit", "{:.1%}"),
    "cpu_hit_rate": ("cpu_hit", "{:.1%}"),
    "jain_service": ("jain", "{:.3f}"),
    "ttft_p50_s": ("ttft_p50_s", "{:.3f}"),
}


def summary_table(
    summary: pd.DataFrame, targets: Mapping[str, float | None] | None = DEFAULT_TARGETS
) -> str:
    """policy, the capacity and any other varying grid label, the headline metrics, and one
    pass / FAIL / n/a (an offline policy) column per pass_* column, headed by the rule of
    ``targets`` (the experiment's thresholds)."""
    if summary.empty:
        return "(no grid points)"
    labels = ["policy", "gpu_kv_gb"] + [
        c for c in _VARYING_LABELS if c in summary and summary[c].nunique() > 1
    ]
    out = pd.DataFrame({c: summary[c].map(_plain) for c in labels})
    for col, (head, fmt) in _METRICS.items():
        out[head] = summary[col].map(lambda v, fmt=fmt: "-" if _nan(v) else fmt.format(v))
    for col in summary.columns:
        if col.startswith("pass_"):
            out[_target_header(col[5:], targets)] = summary[col].map(_verdict)
    return out.to_string(index=False)


def _target_header(name: str, targets: Mapping[str, float | None] | None) -> str:
    bound = (targets or {}).get(name)
    return short_header(name, bound) if name in RULES and bound is not None else name


def _verdict(v: object) -> str:
    if v is None or _nan(v):
        return "n/a"
    return "pass" if bool(v) else "FAIL"


def _plain(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _nan(v: object) -> bool:
    try:
        return math.isnan(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
