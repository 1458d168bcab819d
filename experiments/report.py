"""A compact text table of summary.csv for the terminal.

Its rows are told apart by every grid label that varies (policy and gpu_kv_gb always), and by the
keys of the trace, budget and sparse mappings that their labels do not show (``axis_columns``:
``trace.seed`` for two draws of one trace file, ``sparse.scorer`` for two quest modes of the same
k); summary.csv keeps its columns.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from experiments.schema import ALL_LABEL_COLUMNS, GridPoint, store_policies_vary
from experiments.targets import DEFAULT_TARGETS, RULES, short_header

if TYPE_CHECKING:
    import pandas as pd

# every grid label but name, policy and gpu_kv_gb, in summary.csv's order
_VARYING_LABELS = tuple(c for c in ALL_LABEL_COLUMNS if c not in ("name", "policy", "gpu_kv_gb"))
_METRICS = {  # column -> (header, format)
    "reprefill_rate": ("reprefill", "{:.1%}"),
    "gpu_hit_rate": ("gpu_hit", "{:.1%}"),
    "cpu_hit_rate": ("cpu_hit", "{:.1%}"),
    "jain_service": ("jain", "{:.3f}"),
    "ttft_p50_s": ("ttft_p50_s", "{:.3f}"),
    "slo_attainment": ("slo_met", "{:.1%}"),  # the share of turns within the experiment's slo
}
_SINCE = {"slo_attainment"}  # metrics a summary.csv written before they existed lacks


def summary_table(
    summary: pd.DataFrame,
    targets: Mapping[str, float | None] | None = DEFAULT_TARGETS,
    axes: pd.DataFrame | None = None,
) -> str:
    """policy, the capacity and any other varying grid label, each followed by its columns of
    ``axes`` (``axis_columns``, one row per summary row; a column ``trace.seed`` follows
    ``trace``), the headline metrics, and one pass / FAIL / n/a (an offline policy) column per
    pass_* column, headed by the rule of ``targets`` (the experiment's thresholds)."""
    import pandas as pd

    if summary.empty:
        return "(no grid points)"
    if axes is not None and len(axes) != len(summary):
        raise ValueError(f"axes has {len(axes)} rows, the summary {len(summary)}")
    extras = {} if axes is None else {str(a): list(axes[a].map(_plain)) for a in axes.columns}
    out = pd.DataFrame(index=summary.index)
    for c in ("policy", "gpu_kv_gb", *_VARYING_LABELS):
        if c == "store_policy" and not store_policies_vary(summary):
            pass  # one policy: store_gb shows which points have a store
        elif c in ("policy", "gpu_kv_gb") or (c in summary and summary[c].nunique() > 1):
            out[c] = summary[c].map(_plain)
        for name, values in extras.items():
            if name.startswith(f"{c}."):
                out[name] = values
    for col, (head, fmt) in _METRICS.items():
        if col in _SINCE and col not in summary:
            continue
        out[head] = summary[col].map(lambda v, fmt=fmt: "-" if _nan(v) else fmt.format(v))
    for col in summary.columns:
        if col.startswith("pass_"):
            out[_target_header(col[5:], targets)] = summary[col].map(_verdict)
    return out.to_string(index=False)


def axis_columns(points: Sequence[GridPoint]) -> pd.DataFrame:
    """One row per point: a column ``<axis>.<key>`` for each key of the trace, budget and sparse
    mappings that differs between points of the same label (the trace's label without its
    ``[i]``), so the label alone cannot tell them apart. Empty (no columns) when the labels do."""
    import pandas as pd

    cols: dict[str, list[Any]] = {}
    for axis, specs, labels in (
        (
            "trace",
            [p.trace.to_dict() for p in points],
            [re.sub(r"\[\d+\]$", "", p.trace.label) for p in points],
        ),
        (
            "budget",
            [dataclasses.asdict(p.budget) for p in points],
            [p.budget.label for p in points],
        ),
        (
            "sparse",
            [dataclasses.asdict(p.sparse) for p in points],
            [p.sparse.label for p in points],
        ),
    ):
        # the time_scale axis has its own label column
        keys = [k for k in dict.fromkeys(k for spec in specs for k in spec) if k != "time_scale"]
        for key in keys:
            seen: dict[str, set[str]] = {}
            for spec, label in zip(specs, labels):
                seen.setdefault(label, set()).add(repr(spec.get(key)))
            if any(len(values) > 1 for values in seen.values()):
                cols[f"{axis}.{key}"] = [_value(spec.get(key)) for spec in specs]
    return pd.DataFrame(cols, index=range(len(points)))


def _value(v: Any) -> Any:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return v


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
