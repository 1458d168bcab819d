"""Figures that compare serving designs rather than eviction policies: token budgets (memory saved
against the relevant tokens they prune), decode served from CPU memory (TBT and TTFT against
the GPU capacity, one line per design) and the two engines (where history came from, side by
side). Drawn by ``make_plots`` when a grid varies them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, PercentFormatter

from experiments import figure_style as fs


def design_label(row: pd.Series) -> str:
    """The serving design of a summary row: its sparse mode, else how it recovers evicted KV."""
    sparse = row.get("sparse", "off")
    if isinstance(sparse, str) and sparse != "off":
        return sparse
    return "swap-in" if float(row["cpu_kv_gb"]) > 0 else "recompute"


def _figure(n_series: int):
    """A page-wide figure of two panels side by side, with room above them for a legend of
    ``n_series`` entries."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = -(-n_series // 3)
    fig = Figure(figsize=(fs.DOUBLE_COLUMN_IN, 2.9 + 0.2 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def budget_figure(summary: pd.DataFrame, path: Path, stamp: str | None = None) -> Path | None:
    """Left: the share of history KV a budget prunes (memory saved) against the share of still
    relevant tokens it pruned (quality risk), one point per budget. Right: re-prefill rate against
    GPU capacity, one line per budget."""
    if "budget" not in summary or summary["budget"].nunique() < 2:
        return None
    with fs.style():
        budgets = list(dict.fromkeys(summary["budget"]))
        fig = _figure(len(budgets))
        left, right = fig.subplots(1, 2)
        series = [
            (b, summary[summary["budget"] == b].groupby("gpu_kv_gb")["reprefill_rate"].mean())
            for b in budgets
        ]
        shifts = fs.dodge([(g.index, g.to_numpy()) for _, g in series])
        for i, ((b, g), shift) in enumerate(zip(series, shifts, strict=True)):
            sub = summary[summary["budget"] == b]
            color = f"C{i % 10}"
            marker = fs.FALLBACK_MARKERS[i % len(fs.FALLBACK_MARKERS)]
            left.scatter(
                sub["relevant_pruned_share"].mean(),
                sub["pruned_share"].mean(),
                s=max(18, 40 - 4 * i),
                color=color,
                marker=marker,
                label=b,
                zorder=3 + 0.1 * i,
                edgecolors="white",
                linewidths=0.5,
            )
            right.plot(
                np.asarray(g.index, dtype=float) * shift,
                g.to_numpy(),
                marker=marker,
                color=color,
                label=b,
                markersize=max(3.0, 6.0 - 0.8 * i),
                linestyle=("-", "--", "-.", ":")[i % 4],
                zorder=2 + 0.1 * i,
            )
        left.set_xlabel("relevant tokens pruned (share, relevance model)")
        left.set_ylabel("history KV pruned (memory saved)")
        left.xaxis.set_major_formatter(PercentFormatter(1.0))
        left.yaxis.set_major_formatter(PercentFormatter(1.0))
        left.set_xlim(left=-0.02)
        left.set_ylim(bottom=-0.02)
        left.grid(alpha=0.3)
        fs.capacity_axis(right, sorted(summary["gpu_kv_gb"].unique()))
        right.set_ylabel("re-prefill rate (% of history tokens)")
        right.yaxis.set_major_formatter(PercentFormatter(1.0))
        return _save(
            fig, right, "Token budgets: memory saved against relevant tokens pruned", path, stamp
        )


def offload_figure(summary: pd.DataFrame, path: Path, stamp: str | None = None) -> Path | None:
    """TBT p50 and TTFT p90 against GPU capacity: swap-in, recompute and each sparse mode."""
    if "sparse" not in summary or (summary["sparse"] != "off").sum() == 0:
        return None
    df = summary[np.isfinite(summary["gpu_kv_gb"].astype(float))].copy()
    df["design"] = df.apply(design_label, axis=1)
    designs = list(dict.fromkeys(df["design"]))
    caps = sorted(df["gpu_kv_gb"].unique())
    with fs.style():
        fig = _figure(len(designs))
        axes = fig.subplots(1, 2)
        for ax, metric, ylabel in (
            (axes[0], "tbt_p50_s", "TBT p50 (ms, log scale)"),
            (axes[1], "ttft_p90_s", "TTFT p90 (s, log scale)"),
        ):
            scale = 1e3 if metric.startswith("tbt") else 1.0
            series = [
                (d, df[df["design"] == d].groupby("gpu_kv_gb")[metric].mean()) for d in designs
            ]
            shifts = fs.dodge([(g.index, np.log(g.to_numpy())) for _, g in series])
            for i, ((d, g), shift) in enumerate(zip(series, shifts, strict=True)):
                ax.plot(
                    np.asarray(g.index, dtype=float) * shift,
                    g.to_numpy() * scale,
                    marker=fs.FALLBACK_MARKERS[i % len(fs.FALLBACK_MARKERS)],
                    markersize=max(3.0, 6.0 - 0.8 * i),
                    color=f"C{i % 10}",
                    label=d,
                    ls="--" if d in ("swap-in", "recompute") else "-",
                    zorder=2 + 0.1 * i,
                )
            fs.capacity_axis(ax, caps)
            ax.set_yscale("log")  # designs differ by orders of magnitude
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.1, 1, 10
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3, which="both")
        return _save(
            fig,
            axes[0],
            "Decode from CPU memory (top-K pages through a ring buffer) vs swap-in and recompute",
            path,
            stamp,
        )


# where history tokens came from: summary column, label, colour (every figure that shows tiers)
TIERS = (
    ("gpu_hit_rate", "GPU hit", "#2b8a3e"),
    ("cpu_hit_rate", "CPU hit (swapped in)", "#1971c2"),
    ("reprefill_rate", "recomputed", "#e03131"),
)


def engine_figure(summary: pd.DataFrame, path: Path, stamp: str | None = None) -> Path | None:
    """Where history tokens came from (GPU, CPU, recomputed) in each engine, side by side at each
    GPU capacity: one panel per CPU tier size (and policy, if several)."""
    if "engine" not in summary or summary["engine"].nunique() < 2:
        return None
    df = summary[np.isfinite(summary["gpu_kv_gb"].astype(float))]
    engines = list(dict.fromkeys(df["engine"]))
    panels = list(dict.fromkeys(zip(df["policy"], df["cpu_kv_gb"], strict=True)))
    several = df["policy"].nunique() > 1
    with fs.style():
        fig, axes, cols, panel_w = fs.grid(len(panels), max_cols=4, header_in=0.7)
        width = 0.8 / len(engines)
        for k, (ax, (policy, cpu)) in enumerate(zip(axes, panels, strict=True)):
            sub = df[(df["policy"] == policy) & (df["cpu_kv_gb"] == cpu)]
            caps = sorted(sub["gpu_kv_gb"].unique())
            ticks: list[float] = []
            names: list[str] = []
            for j, engine in enumerate(engines):
                cols_ = [t for t, _, _ in TIERS]
                g = sub[sub["engine"] == engine].groupby("gpu_kv_gb")[cols_].mean().reindex(caps)
                x = np.arange(len(caps)) + (j - (len(engines) - 1) / 2) * width
                bottom = np.zeros(len(caps))
                for col, label, color in TIERS:
                    ax.bar(x, g[col], width * 0.9, bottom=bottom, color=color, label=label, lw=0)
                    bottom += g[col].fillna(0).to_numpy()
                ticks += list(x)
                names += [str(engine)] * len(caps)
            # the engine under each bar, the capacity under each pair
            ax.set_xticks(ticks, names, fontsize=fs.STAMP_PT + 0.5)
            ax.tick_params(axis="x", which="major", length=0, pad=1.5)
            ax.set_xticks(np.arange(len(caps)), [f"{c:g}" for c in caps], minor=True)
            ax.xaxis.remove_overlapping_locs = False
            ax.tick_params(axis="x", which="minor", length=0, pad=fs.STAMP_PT + 5)
            ax.set_xlabel("GPU KV capacity (GiB)" if k + cols >= len(panels) else "")
            where = {"policy": policy, "cpu_kv_gb": cpu} if several else {"cpu_kv_gb": cpu}
            ax.set_title(fs.panel_title(where, panel_w))
            ax.set_ylim(0, 1)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            if k % cols == 0:
                ax.set_ylabel("share of history tokens")
        handles, labels = axes[0].get_legend_handles_labels()
        keep = dict(zip(labels, handles, strict=True))  # one entry per tier
        title = "Where history came from, by engine (" + ", ".join(engines) + ")"
        fs.finish(fig, title, list(keep.values()), list(keep), stamp)
        return fs.save(fig, path, title=title)


def _save(fig, legend_from, title: str, path: Path, stamp: str | None) -> Path:
    """One legend above the panels (from one panel's series), the title, the stamp, the file."""
    handles, labels = legend_from.get_legend_handles_labels()
    fs.finish(fig, title, handles, labels, stamp)
    return fs.save(fig, path, title=title)
