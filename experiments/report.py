"""A compact text table of summary.csv for the terminal."""

from __future__ import annotations

import math

import pandas as pd

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
_TARGET_HEADERS = {
    "pass_evict_us": "evict_p50<100us",
    "pass_reprefill": "reprefill<20%",
    "pass_jain": "jain>=0.8",
    "pass_gpu_util": "util>=90%",
    "pass_throughput_impact": "thr_impact<5%",
}


def summary_table(summary: pd.DataFrame) -> str:
    """policy, the capacity and any other varying grid label, the headline metrics, and one
    pass/FAIL column per target."""
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
            out[_TARGET_HEADERS.get(col, col[5:])] = summary[col].map(
                lambda v: "pass" if bool(v) else "FAIL"
            )
    return out.to_string(index=False)


def _plain(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _nan(v: object) -> bool:
    try:
        return math.isnan(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
