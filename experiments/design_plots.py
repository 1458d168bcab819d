"""Figures that compare serving designs rather than eviction policies: token budgets (memory saved
against the relevant tokens they prune), decode served from CPU memory (TBT and TTFT against
the GPU capacity, one line per design) and the two engines (where history came from, side by
side). Drawn by ``make_plots`` when a grid varies them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

_DPI = 120


def design_label(row: pd.Series) -> str:
    """The serving design of a summary row: its sparse mode, else how it recovers evicted KV."""
    sparse = row.get("sparse", "off")
    if isinstance(sparse, str) and sparse != "off":
        return sparse
    return "swap-in" if float(row["cpu_kv_gb"]) > 0 else "recompute"


def budget_figure(summary: pd.DataFrame, path: Path) -> Path | None:
    """Left: the share of history KV a budget prunes (memory saved) against the share of still
    relevant tokens it pruned (quality risk), one point per budget. Right: re-prefill rate against
    GPU capacity, one line per budget."""
    if "budget" not in summary or summary["budget"].nunique() < 2:
        return None
    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    budgets = list(dict.fromkeys(summary["budget"]))
    for i, b in enumerate(budgets):
        sub = summary[summary["budget"] == b]
        color = f"C{i % 10}"
        left.scatter(
            sub["relevant_pruned_share"].mean(),
            sub["pruned_share"].mean(),
            s=60,
            color=color,
            label=b,
            zorder=3,
        )
        g = sub.groupby("gpu_kv_gb")["reprefill_rate"].mean()
        right.plot(g.index, g.to_numpy(), marker="o", color=color, label=b)
    left.set_xlabel("relevant tokens pruned (share, relevance model)")
    left.set_ylabel("history KV pruned (memory saved)")
    for ax in (left,):
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlim(left=-0.02)
        ax.set_ylim(bottom=-0.02)
        ax.grid(alpha=0.3)
    right.set_xscale("log", base=2)
    right.set_xlabel("GPU KV capacity (GiB)")
    right.set_ylabel("re-prefill rate (% of history tokens)")
    right.yaxis.set_major_formatter(PercentFormatter(1.0))
    right.grid(alpha=0.3)
    return _save(fig, left, "Token budgets: memory saved against relevant tokens pruned", path, 4)


def offload_figure(summary: pd.DataFrame, path: Path) -> Path | None:
    """TBT p50 and TTFT p90 against GPU capacity: swap-in, recompute and each sparse mode."""
    if "sparse" not in summary or (summary["sparse"] != "off").sum() == 0:
        return None
    df = summary[np.isfinite(summary["gpu_kv_gb"].astype(float))].copy()
    df["design"] = df.apply(design_label, axis=1)
    designs = list(dict.fromkeys(df["design"]))
    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for ax, metric, ylabel in (
        (axes[0], "tbt_p50_s", "TBT p50 (ms)"),
        (axes[1], "ttft_p90_s", "TTFT p90 (s)"),
    ):
        scale = 1e3 if metric.startswith("tbt") else 1.0
        for i, d in enumerate(designs):
            g = df[df["design"] == d].groupby("gpu_kv_gb")[metric].mean()
            ax.plot(
                g.index,
                g.to_numpy() * scale,
                marker="o",
                color=f"C{i % 10}",
                label=d,
                ls="--" if d in ("swap-in", "recompute") else "-",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")  # designs differ by orders of magnitude
        ax.set_xlabel("GPU KV capacity (GiB)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    return _save(
        fig,
        axes[0],
        "Decode from CPU memory (top-K pages through a ring buffer) vs swap-in and recompute",
        path,
        6,
    )


# where history tokens came from: summary column, label, colour (every figure that shows tiers)
TIERS = (
    ("gpu_hit_rate", "GPU hit", "#2b8a3e"),
    ("cpu_hit_rate", "CPU hit (swapped in)", "#1971c2"),
    ("reprefill_rate", "recomputed", "#e03131"),
)


def engine_figure(summary: pd.DataFrame, path: Path) -> Path | None:
    """Where history tokens came from (GPU, CPU, recomputed) in each engine, side by side at each
    GPU capacity: one panel per CPU tier size (and policy, if several)."""
    if "engine" not in summary or summary["engine"].nunique() < 2:
        return None
    df = summary[np.isfinite(summary["gpu_kv_gb"].astype(float))]
    engines = list(dict.fromkeys(df["engine"]))
    panels = list(dict.fromkeys(zip(df["policy"], df["cpu_kv_gb"], strict=True)))
    fig = Figure(figsize=(4.2 * len(panels) + 1, 4.4))
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True))
    width = 0.8 / len(engines)
    for ax, (policy, cpu) in zip(axes, panels, strict=True):
        sub = df[(df["policy"] == policy) & (df["cpu_kv_gb"] == cpu)]
        caps = sorted(sub["gpu_kv_gb"].unique())
        for j, engine in enumerate(engines):
            g = sub[sub["engine"] == engine].groupby("gpu_kv_gb")[[t for t, _, _ in TIERS]].mean()
            g = g.reindex(caps)
            x = np.arange(len(caps)) + (j - (len(engines) - 1) / 2) * width
            bottom = np.zeros(len(caps))
            for col, label, color in TIERS:
                ax.bar(x, g[col], width * 0.92, bottom=bottom, color=color, label=label)
                bottom += g[col].fillna(0).to_numpy()
            for xi in x:
                ax.text(xi, 1.01, engine, ha="center", va="bottom", fontsize=7, rotation=90)
        ax.set_xticks(np.arange(len(caps)), [f"{c:g}" for c in caps])
        ax.set_xlabel("GPU KV capacity (GiB)")
        ax.set_title(f"{policy}, CPU tier {float(cpu):g} GiB", pad=38)
        ax.set_ylim(0, 1)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    axes[0].set_ylabel("share of history tokens")
    handles, labels = axes[0].get_legend_handles_labels()
    keep = dict(zip(labels, handles, strict=True))  # one entry per tier
    fig.legend(list(keep.values()), list(keep), loc="lower center", ncol=3, fontsize=9)
    fig.suptitle("Where history came from, by engine (bars: " + ", ".join(engines) + ")")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI)
    return path


def _save(fig: Figure, legend_from, title: str, path: Path, ncol: int) -> Path:
    """One legend under the panels (from one panel's series), the title, and the file."""
    handles, labels = legend_from.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(ncol, len(labels)), fontsize=9)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI)
    return path
