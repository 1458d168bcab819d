"""Figures of a run (matplotlib, Agg canvas; pyplot and the global backend are left alone).

* ``reprefill_vs_capacity.png``: re-prefill rate against GPU KV capacity, one line per policy.
* ``jain_vs_capacity.png``: Jain's index of service against GPU KV capacity, one line per policy.
* ``hit_rate_by_tier.png``: history tokens served from GPU / CPU / recomputed, stacked bars per
  capacity, one panel per policy.
* ``ttft_cdf.png``: TTFT CDF per policy at the smallest GPU capacity (log x).

Every figure has one panel per combination of the other grid dimensions that vary (trace, model,
hardware, evict_unit, block_tokens, cpu_kv_gb); seeds are averaged (lines show the mean and a band:
the 95 % confidence interval of the mean over seeds, ``seed_interval``). Rows with gpu_kv_gb = inf (the infinite-memory baseline) are
left out of the capacity axes.

What the data cannot support is skipped or marked, never an error: a figure whose metric is undefined
at every point (e.g. Jain's index when no session has a second turn, re-prefill with no history) is
not written, a panel without data says so in the panel, and each such case adds one line to
``notes`` for the caller to print.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, PercentFormatter

from experiments.design_plots import TIERS, budget_figure, engine_figure, offload_figure
from experiments.plot_points import NO_FIGURES, drawable_points
from experiments.targets import DEFAULT_TARGETS

FACET_DIMS: tuple[str, ...] = (
    "engine",
    "trace",
    "model",
    "hardware",
    "tp",
    "evict_unit",
    "pipelining",
    "budget",
    "sparse",
    "block_tokens",
    "cpu_kv_gb",
)
MAX_FACETS = 12
_UNITS = {"cpu_kv_gb": " GiB", "block_tokens": " tok"}
_DPI = 120


def make_plots(
    summary: pd.DataFrame,
    turns: pd.DataFrame,
    out_dir: str | Path,
    notes: list[str] | None = None,
    targets: Mapping[str, float | None] | None = DEFAULT_TARGETS,
) -> list[Path]:
    """Write every figure that the data supports into ``out_dir``; return their paths. A line per
    figure skipped or panel left empty is appended to ``notes`` (when given). The re-prefill and
    Jain figures draw their threshold in ``targets`` (the experiment's) as a dashed line, when set."""
    reprefill = (targets or {}).get("reprefill")
    jain = (targets or {}).get("jain")
    out_dir = Path(out_dir)
    notes = [] if notes is None else notes
    finite = drawable_points(summary)
    if finite.empty:
        notes.append(NO_FIGURES)
        return []
    facets = _facets(finite)
    policies = list(dict.fromkeys(finite["policy"]))
    written = [
        _line_plot(
            finite,
            facets,
            policies,
            "reprefill_rate",
            "Re-prefill rate vs GPU KV capacity",
            "re-prefill rate (% of history tokens)",
            out_dir / "reprefill_vs_capacity.png",
            notes,
            target=None if reprefill is None else (reprefill, f"target < {reprefill * 100:g} %"),
            percent=True,
            why="no turn had history tokens",
        ),
        _line_plot(
            finite,
            facets,
            policies,
            "jain_service",
            "Fairness of service (Jain's index) vs GPU KV capacity",
            "Jain's index of 1 / mean TTFT slowdown",
            out_dir / "jain_vs_capacity.png",
            notes,
            target=None if jain is None else (jain, f"target >= {jain:g}"),
            ylim=(0.0, 1.03),
            why="no session completed two or more turns",
        ),
        _tier_bars(finite, facets, policies, out_dir / "hit_rate_by_tier.png"),
        _ttft_cdf(turns, facets, policies, out_dir / "ttft_cdf.png", notes),
        budget_figure(finite, out_dir / "budget_tradeoff.png"),
        offload_figure(finite, out_dir / "offload_vs_capacity.png"),
        engine_figure(finite, out_dir / "tiers_by_engine.png"),
    ]
    return [w for w in written if w is not None]


# ---------------------------------------------------------------------------------------------

# Student's t, 97.5 % quantile, for 1..30 degrees of freedom (beyond: the normal's 1.96).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def seed_interval(values) -> tuple[float, float]:
    """The 95 % confidence interval of the mean over seeds (Student's t); the value itself when
    there is one seed. NaNs (undefined metrics) are left out."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    if v.size == 1:
        return float(v[0]), float(v[0])
    t = _T975[v.size - 2] if v.size - 1 <= len(_T975) else 1.96
    half = t * float(v.std(ddof=1)) / math.sqrt(v.size)
    return float(v.mean()) - half, float(v.mean()) + half


def _facets(df: pd.DataFrame) -> list[tuple[str, dict]]:
    """(title, {dim: value}) per combination of the varying non-capacity dimensions."""
    dims = [d for d in FACET_DIMS if d in df.columns and df[d].nunique(dropna=False) > 1]
    if not dims:
        return [("", {})]
    combos = df[dims].drop_duplicates().to_dict("records")[:MAX_FACETS]
    return [(", ".join(f"{d} = {_fmt(c[d])}{_UNITS.get(d, '')}" for d in dims), c) for c in combos]


def _select(df: pd.DataFrame, where: dict) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for k, v in where.items():
        mask &= (df[k] == v).to_numpy()
    return df[mask]


def _minor_label(v: float, _pos: object = None) -> str:
    """Label the 2x and 5x minor ticks of a log axis (plain numbers, no powers of ten)."""
    mantissa = v / 10 ** math.floor(math.log10(v)) if v > 0 else 0
    return f"{v:g}" if round(mantissa) in (2, 5) and abs(mantissa - round(mantissa)) < 1e-6 else ""


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _line_style(i: int) -> dict:
    """Marker, size and width by series: later series are drawn smaller on top, so series that
    coincide stay visible."""
    return {
        "marker": _MARKERS[i % len(_MARKERS)],
        "markersize": max(4.0, 9.0 - 1.2 * i),
        "linewidth": max(1.2, 2.6 - 0.35 * i),
    }


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _grid(
    n: int, panel_w: float = 5.2, panel_h: float = 3.8, max_cols: int = 3
) -> tuple[Figure, list, int, int]:
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(panel_w * cols, panel_h * rows + 1.0), dpi=_DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n], rows, cols


def _capacity_axis(ax, caps: Sequence[float]) -> None:
    ax.set_xscale("log", base=2)
    # Limits from the capacities, not from the data: a panel with nothing drawn has no data limits,
    # and a log axis cannot autoscale from none.
    ax.set_xlim(min(caps) / 1.25, max(caps) * 1.25)
    ax.set_xticks(list(caps))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
    ax.set_xlabel("GPU KV capacity (GiB)")
    ax.grid(True, alpha=0.3)


def _save(fig: Figure, title: str, path: Path, legend_handles: list, legend_labels: list) -> Path:
    """Title on top, one shared legend in a row under it, panels below (spacing in inches)."""
    h = fig.get_figheight()
    fig.suptitle(title, fontsize=13, fontweight="bold", y=1 - 0.12 / h, va="top", wrap=True)
    if legend_handles:
        fig.legend(
            legend_handles,
            legend_labels,
            loc="upper center",
            ncol=min(len(legend_handles), 6),
            bbox_to_anchor=(0.5, 1 - 0.5 / h),
            fontsize=9,
            frameon=False,
        )
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.75 if legend_handles else 0.5) / h))
    fig.savefig(path)
    return path


def _no_data(ax, text: str) -> None:
    """Say in an empty panel why it is empty."""
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=9,
        color="0.35",
        wrap=True,
    )


def _line_plot(
    df: pd.DataFrame,
    facets,
    policies,
    metric: str,
    title: str,
    ylabel: str,
    path: Path,
    notes: list[str],
    target: tuple[float, str] | None = None,
    percent: bool = False,
    ylim: tuple[float, float] | None = None,
    why: str = "",
) -> Path | None:
    if not np.isfinite(df[metric].to_numpy(dtype=float)).any():
        notes.append(
            f"plots: {path.name} not drawn: {metric} is undefined at every grid point"
            + (f" ({why})" if why else "")
        )
        return None
    fig, axes, _, _ = _grid(len(facets))
    handles: dict[str, object] = {}
    caps = sorted(df["gpu_kv_gb"].unique())
    if ylim is None:  # one y range for every panel, so panels compare at a glance
        top = max(
            [float(np.nanmax(df[metric].to_numpy(dtype=float), initial=0.0))]
            + ([target[0]] if target else [])
        )
        ylim = (0.0, top * 1.08 if top > 0 else 1.0)
    for ax, (ftitle, where) in zip(axes, facets):
        sub = _select(df, where)
        drawn = False
        for i, pol in enumerate(policies):
            g = (
                sub[sub["policy"] == pol]
                .groupby("gpu_kv_gb")[metric]
                .agg(
                    [
                        "mean",
                        ("lo", lambda v: seed_interval(v)[0]),
                        ("hi", lambda v: seed_interval(v)[1]),
                    ]
                )
            )
            if g.empty or g["mean"].isna().all():
                continue
            drawn = True
            color = f"C{i % 10}"
            (line,) = ax.plot(g.index, g["mean"], color=color, label=pol, **_line_style(i))
            if (g["hi"] > g["lo"]).any():  # seeds: the 95 % confidence interval of the mean
                ax.fill_between(g.index, g["lo"], g["hi"], color=color, alpha=0.15)
            handles.setdefault(pol, line)
        if target is not None:
            t = ax.axhline(target[0], color="0.35", ls="--", lw=1)
            handles.setdefault(target[1], t)
        _capacity_axis(ax, caps)
        ax.set_ylabel(ylabel)
        if percent:
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(*ylim)
        if ftitle:
            ax.set_title(ftitle, fontsize=10)
        if not drawn:
            _no_data(ax, f"no data: {metric} is undefined" + (f"\n({why})" if why else ""))
            notes.append(f"plots: {path.name}: panel {ftitle or '(only panel)'} has no data")
    return _save(fig, title, path, list(handles.values()), list(handles.keys()))


def _tier_bars(df: pd.DataFrame, facets, policies, path: Path) -> Path:
    n = len(facets) * len(policies)
    # a row per facet, a column per policy; one policy: the facets side by side
    cols = min(len(policies), 4) if len(policies) > 1 else min(n, 3)
    fig, axes, _, _ = _grid(n, panel_w=4.6, max_cols=cols)
    handles: dict[str, object] = {}
    caps = sorted(df["gpu_kv_gb"].unique())
    k = 0
    for ftitle, where in facets:
        sub = _select(df, where)
        for pol in policies:
            ax = axes[k]
            k += 1
            g = sub[sub["policy"] == pol].groupby("gpu_kv_gb")[[c for c, _, _ in TIERS]].mean()
            g = g.reindex(caps)
            x = np.arange(len(caps))
            bottom = np.zeros(len(caps))
            for col, label, color in TIERS:
                vals = g[col].fillna(0.0).to_numpy()
                bars = ax.bar(x, vals, bottom=bottom, color=color, width=0.7, label=label)
                handles.setdefault(label, bars)
                bottom += vals
            ax.set_xticks(x, [f"{c:g}" for c in caps])
            ax.set_xlabel("GPU KV capacity (GiB)")
            ax.set_ylabel("share of history tokens")
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(0, 1.0)
            ax.set_title(f"{pol}" + (f"\n{ftitle}" if ftitle else ""), fontsize=10)
            ax.grid(True, axis="y", alpha=0.3)
    return _save(
        fig,
        "Where history tokens came from: GPU hit, CPU hit, recomputed",
        path,
        list(handles.values()),
        list(handles.keys()),
    )


def _ttft_cdf(turns: pd.DataFrame, facets, policies, path: Path, notes: list[str]) -> Path | None:
    if turns.empty:
        notes.append(f"plots: {path.name} not drawn: no turn completed at a finite GPU capacity")
        return None
    finite = turns[np.isfinite(turns["gpu_kv_gb"].astype(float))]
    finite = finite[finite["ttft_s"] > 0]
    if finite.empty:
        notes.append(f"plots: {path.name} not drawn: no turn completed at a finite GPU capacity")
        return None
    fig, axes, _, _ = _grid(len(facets))
    handles: dict[str, object] = {}
    for ax, (ftitle, where) in zip(axes, facets):
        sub = _select(finite, where)
        if sub.empty:
            _no_data(ax, "no data: no turn completed")
            if ftitle:
                ax.set_title(ftitle, fontsize=10)
            notes.append(f"plots: {path.name}: panel {ftitle or '(only panel)'} has no data")
            continue
        cap = float(sub["gpu_kv_gb"].min())
        sub = sub[sub["gpu_kv_gb"] == cap]
        for i, pol in enumerate(policies):
            x = np.sort(sub.loc[sub["policy"] == pol, "ttft_s"].to_numpy(dtype=float))
            if x.size == 0:
                continue
            y = np.arange(1, x.size + 1) / x.size
            (line,) = ax.step(
                x,
                y,
                where="post",
                color=f"C{i % 10}",
                label=pol,
                linewidth=_line_style(i)["linewidth"],
                linestyle=("-", "--", "-.", ":")[i % 4],
            )
            handles.setdefault(pol, line)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        lo, hi = float(sub["ttft_s"].min()), float(sub["ttft_s"].max())
        if hi / lo < 200:  # label 2x and 5x ticks only while they have room
            ax.xaxis.set_minor_formatter(FuncFormatter(_minor_label))
        else:
            ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel("time to first token (s, log scale)")
        ax.set_ylabel("fraction of turns")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.1)
        ax.set_title((f"{ftitle}, " if ftitle else "") + f"GPU KV = {cap:g} GiB", fontsize=10)
    return _save(
        fig,
        "TTFT CDF per policy at the smallest GPU capacity",
        path,
        list(handles.values()),
        list(handles.keys()),
    )
