"""Latency against load: the figure of a request-rate sweep (a list of ``trace.time_scale`` values).

``latency_vs_load.png`` (or .pdf, .svg: the run's figure format) has four panels against the request rate, one line per policy: TTFT p50,
TTFT p90, SLO attainment and goodput (turns meeting the SLO per simulated second). The request rate
is relative to the trace as recorded: 1 / ``time_scale`` (``time_scale`` 2 replays it at half its
rate, 0.5 at twice). It is drawn only when the run's ``time_scale`` column takes two values or
more. A line is one policy at one value of every other grid label that varies (``gpu_kv_gb=1``,
``cpu_kv_gb=16``, ... name it in the legend); seeds are averaged. Points whose value is not finite
are left out; a figure with no finite point is not written, and ``notes`` says so.

It is drawn in the look of the run's other figures (``experiments.figure_style``: a policy's colour
and marker, the page width, the stamp under the panels); pyplot and the global backend are left
alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

LOAD_FIGURE = "latency_vs_load"  # .png, or the run's figure format
RATE_AXIS = "time_scale"
# The grid labels a line may be told apart by besides the policy (seed is averaged over).
_LINE_LABELS = (
    "engine",
    "model",
    "hardware",
    "tp",
    "trace",
    "gpu_kv_gb",
    "cpu_kv_gb",
    "block_tokens",
    "evict_unit",
    "pipelining",
    "budget",
    "sparse",
    "router",
    "replicas",
)
PANELS: tuple[tuple[str, str, bool], ...] = (  # column, axis title, log y
    ("ttft_p50_s", "TTFT p50 (s)", True),
    ("ttft_p90_s", "TTFT p90 (s)", True),
    ("slo_attainment", "SLO attainment (share of turns)", False),
    ("goodput_turns_s", "goodput (turns within SLO / s)", False),
)


def varies(summary: pd.DataFrame) -> bool:
    """The run swept the request rate: its ``time_scale`` column takes two values or more."""
    return RATE_AXIS in summary.columns and summary[RATE_AXIS].nunique() > 1


def load_lines(summary: pd.DataFrame, column: str) -> dict[str, pd.Series]:
    """Each line of one panel: its legend text -> ``column`` by relative request rate (1 /
    time_scale, ascending), the mean over seeds, non-finite values left out."""
    others = [c for c in _LINE_LABELS if c in summary.columns and summary[c].map(str).nunique() > 1]
    keys = ["policy", *others]
    rows = summary.assign(_rate=1.0 / summary[RATE_AXIS].astype(float))
    rows = rows[np.isfinite(rows[column].astype(float))]
    out: dict[str, pd.Series] = {}
    for key, group in rows.groupby(keys, sort=False, dropna=False):
        values = key if isinstance(key, tuple) else (key,)
        name = ", ".join(
            [str(values[0]), *(f"{c}={_plain(v)}" for c, v in zip(others, values[1:]))]
        )
        out[name] = group.groupby("_rate")[column].mean().astype(float).sort_index()
    return out


def load_figures(
    summary: pd.DataFrame,
    out_dir: str | Path,
    notes: list[str],
    fmt: str = "png",
    resolved: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``LOAD_FIGURE``.``fmt`` into ``out_dir`` when the request rate varies; the paths
    written. ``resolved``: the run's config.resolved.yaml, for the stamp under the panels."""
    if not varies(summary) or summary.empty:
        return []
    from experiments import figure_style as fs

    panels = [(col, title, logy, load_lines(summary, col)) for col, title, logy in PANELS]
    if not any(lines for *_, lines in panels):
        notes.append(
            f"plots: {LOAD_FIGURE}.{fmt}: no finite latency or goodput at any request rate"
        )
        return []
    rates = sorted(set(1.0 / summary[RATE_AXIS].astype(float)))
    title = "Latency and goodput against load"
    with fs.style():
        fig, axes, _, _ = fs.grid(len(panels))
        handles: dict[str, Any] = {}
        for ax, (col, head, logy, lines) in zip(axes, panels):
            variants: dict[str, int] = {}  # lines of one policy told apart by their dashes
            for i, (name, series) in enumerate(lines.items()):
                policy = name.split(", ")[0]
                look = fs.series_style(policy, i)
                n = variants[policy] = variants.get(policy, -1) + 1
                if n:
                    look["linestyle"] = _DASHES[n % len(_DASHES)]
                (handles[name],) = ax.plot(series.index, series.to_numpy(), label=name, **look)
            if not lines:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
            ax.set_title(head)
            fs.capacity_axis(ax, rates, "request rate (x the trace's: 1 / time_scale)")
            if logy and lines and all((s > 0).all() for s in lines.values()):
                ax.set_yscale("log")
            if col == "slo_attainment":
                ax.set_ylim(-0.02, 1.02)
        fs.finish(
            fig, title, list(handles.values()), list(handles), fs.run_stamp(summary, resolved)
        )
        path = fs.save(fig, Path(out_dir) / f"{LOAD_FIGURE}.{fmt}", fmt, title)
    return [path]


_DASHES = ("-", "--", ":", "-.")


def _plain(v: object) -> str:
    if isinstance(v, float) and not math.isinf(v) and v == int(v):
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)
