"""Routers against cluster size: the figure of an experiment with a ``cluster`` section.

``routers_vs_replicas.png`` (or .pdf, .svg: the run's figure format) has three panels against the
number of replicas, one line per router: TTFT p50, TTFT p90 and the re-prefill rate (the history
tokens recomputed, a turn sent where its conversation's KV is not among them). It is drawn when
summary.csv has a ``router`` column. A line is one router at one value of every other grid label
that varies (``policy=lru``, ``gpu_kv_gb=1``, ... name it in the legend); seeds are averaged.
Points whose value is not finite, and rows with gpu_kv_gb = inf (the infinite-memory baseline), are
left out; a figure with no finite point is not written, and ``notes`` says so.

It is drawn in the look of the run's other figures (``experiments.figure_style``: the page width,
the stamp under the panels); pyplot and the global backend are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.plot_points import drawable_points
from experiments.schema import LABEL_COLUMNS

CLUSTER_FIGURE = "routers_vs_replicas"  # .png, or the run's figure format
SIZE_AXIS = "replicas"
# The grid labels a line may be told apart by besides the router: seed is averaged over, and a
# cluster runs full KV without sparse decode, so budget and sparse never vary.
_LINE_LABELS = tuple(c for c in LABEL_COLUMNS if c not in ("name", "budget", "sparse", "seed"))
PANELS: tuple[tuple[str, str, bool], ...] = (  # column, axis title, a share (0 to 1)
    ("ttft_p50_s", "TTFT p50 (s)", False),
    ("ttft_p90_s", "TTFT p90 (s)", False),
    ("reprefill_rate", "re-prefill rate (% of history tokens)", True),
)
# The built-in routers' colour, marker and line style, the same in every run (a user's router:
# the look figure_style gives a name it does not know).
ROUTER_STYLES = {
    "round-robin": ("#1f77b4", "o", "-"),
    "least-loaded": ("#ff7f0e", "s", "--"),
    "session-affinity": ("#2ca02c", "^", "-."),
    "kv-aware": ("#d62728", "D", ":"),
}
_DASHES = ("-", "--", ":", "-.")


def has_cluster(summary: pd.DataFrame) -> bool:
    """The run's points ran on clusters: summary.csv has their router and replicas columns."""
    return {"router", SIZE_AXIS} <= set(summary.columns)


def router_lines(summary: pd.DataFrame, column: str) -> dict[tuple[str, str], pd.Series]:
    """Each line of one panel: (router, legend text) -> ``column`` by replicas (ascending), the
    mean over seeds, non-finite values left out."""
    others = [c for c in _LINE_LABELS if c in summary.columns and summary[c].map(str).nunique() > 1]
    rows = summary[np.isfinite(summary[column].astype(float))]
    out: dict[tuple[str, str], pd.Series] = {}
    for key, group in rows.groupby(["router", *others], sort=False, dropna=False):
        values = key if isinstance(key, tuple) else (key,)
        name = ", ".join(
            [str(values[0]), *(f"{c}={_plain(v)}" for c, v in zip(others, values[1:]))]
        )
        series = group.groupby(SIZE_AXIS)[column].mean().astype(float).sort_index()
        out[(str(values[0]), name)] = series
    return out


def router_style(router: str, variant: int, i: int) -> dict[str, Any]:
    """A router's look; the lines of one router told apart by their dashes."""
    from experiments import figure_style as fs

    look = fs.series_style(router, i)
    if router in ROUTER_STYLES:
        look["color"], look["marker"], look["linestyle"] = ROUTER_STYLES[router]
    if variant:
        look["linestyle"] = _DASHES[variant % len(_DASHES)]
    return look


def cluster_figures(
    summary: pd.DataFrame,
    out_dir: str | Path,
    notes: list[str],
    fmt: str = "png",
    resolved: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``CLUSTER_FIGURE``.``fmt`` into ``out_dir`` when the run ran clusters; the paths
    written. ``resolved``: the run's config.resolved.yaml, for the stamp under the panels."""
    if not has_cluster(summary):
        return []
    rows = drawable_points(summary)
    rows = rows[rows["router"].notna()]
    panels = [(col, title, share, router_lines(rows, col)) for col, title, share in PANELS]
    if not any(lines for *_, lines in panels):
        notes.append(f"plots: {CLUSTER_FIGURE}.{fmt}: no finite TTFT or re-prefill rate")
        return []
    from matplotlib.ticker import PercentFormatter

    from experiments import figure_style as fs

    sizes = sorted(set(rows[SIZE_AXIS].astype(float)))
    title = "Routers against cluster size: TTFT and re-prefill"
    with fs.style():
        fig, axes, _, _ = fs.grid(len(panels))
        handles: dict[str, Any] = {}
        for ax, (col, head, share, lines) in zip(axes, panels):
            variants: dict[str, int] = {}
            for i, ((router, name), series) in enumerate(lines.items()):
                n = variants[router] = variants.get(router, -1) + 1
                look = router_style(router, n, i)
                (handles[name],) = ax.plot(series.index, series.to_numpy(), label=name, **look)
            if not lines:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
            ax.set_title(head)
            fs.capacity_axis(ax, sizes, "replicas (cluster size)")
            if share:
                ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(bottom=0)
        fs.finish(
            fig, title, list(handles.values()), list(handles), fs.run_stamp(summary, resolved)
        )
        path = fs.save(fig, Path(out_dir) / f"{CLUSTER_FIGURE}.{fmt}", fmt, title)
    return [path]


def _plain(v: object) -> str:
    if isinstance(v, float) and not math.isinf(v) and v == int(v):
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)
