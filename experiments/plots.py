"""Figures of a run (matplotlib, Agg canvas; pyplot and the global backend are left alone).

* ``reprefill_vs_capacity.png``: re-prefill rate against GPU KV capacity, one line per policy.
* ``jain_vs_capacity.png``: Jain's index of service against GPU KV capacity, one line per policy.
* ``hit_rate_by_tier.png``: history tokens served from GPU / CPU / recomputed (and from a
  cluster's shared store, where summary.csv has ``store_hit_rate``), stacked bars per capacity,
  one panel per policy.
* ``ttft_cdf.png``: TTFT CDF per policy at the smallest GPU capacity (log x).

Every figure has one panel per combination of the other grid dimensions that vary (trace, model,
hardware, evict_unit, block_tokens, cpu_kv_gb, and a cluster's router, replicas, store_gb,
store_policy and prefill_replicas);
seeds are averaged (lines show the mean and a band:
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
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, PercentFormatter

from experiments import figure_style as fs
from experiments.design_plots import TIERS, budget_figure, engine_figure, offload_figure
from experiments.plot_points import NO_FIGURES, drawable_points
from experiments.schema import store_policies_vary
from experiments.targets import DEFAULT_TARGETS

FACET_DIMS: tuple[str, ...] = (
    "engine",
    "trace",
    "time_scale",  # a request-rate sweep: each rate its own panel, never pooled like seeds
    "model",
    "hardware",
    "tp",
    "evict_unit",
    "pipelining",
    "budget",
    "sparse",
    "block_tokens",
    "cpu_kv_gb",
    "router",  # a cluster's: each router and size its own panel (routers_vs_replicas compares them)
    "replicas",
    "store_gb",  # a cluster's shared store: each capacity its own panel (store_vs_replicas compares)
    "store_policy",  # and each of its eviction policies
    "prefill_replicas",  # a cluster's prefill pool: each its own panel (disagg_vs_colocated compares)
)
MAX_FACETS = 12
# history tokens a cluster's shared store served (summary.csv's store_hit_rate): a fourth tier
STORE_TIER = ("store_hit_rate", "store hit (loaded)", "#f08c00")


def make_plots(
    summary: pd.DataFrame,
    turns: pd.DataFrame,
    out_dir: str | Path,
    notes: list[str] | None = None,
    targets: Mapping[str, float | None] | None = DEFAULT_TARGETS,
    *,
    resolved: Mapping | None = None,
    fmt: str = fs.DEFAULT_FORMAT,
) -> list[Path]:
    """Write every figure that the data supports into ``out_dir`` as ``fmt`` (png, pdf or svg);
    return their paths. A line per figure skipped or panel left empty is appended to ``notes``
    (when given). The re-prefill and Jain figures draw their threshold in ``targets`` (the
    experiment's) as a dashed line, when set. Each figure carries a stamp (``figure_style.run_stamp``)
    naming the run's model, hardware, trace and kvsim version, from ``resolved`` (the run's
    config.resolved.yaml) where given, else from the summary's labels."""
    fmt = fs.check_format(fmt)
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
    stamp = fs.run_stamp(summary, resolved)
    with fs.style():
        written = [
            _line_plot(
                finite,
                facets,
                policies,
                "reprefill_rate",
                "Re-prefill rate vs GPU KV capacity",
                "re-prefill rate (% of history tokens)",
                out_dir / f"reprefill_vs_capacity.{fmt}",
                notes,
                target=None
                if reprefill is None
                else (reprefill, f"target < {reprefill * 100:g} %"),
                percent=True,
                why="no turn had history tokens",
                stamp=stamp,
            ),
            _line_plot(
                finite,
                facets,
                policies,
                "jain_service",
                "Fairness of service (Jain's index) vs GPU KV capacity",
                "Jain's index of 1 / mean TTFT slowdown",
                out_dir / f"jain_vs_capacity.{fmt}",
                notes,
                target=None if jain is None else (jain, f"target >= {jain:g}"),
                ylim=(0.0, 1.03),
                why="no session completed two or more turns",
                stamp=stamp,
            ),
            _tier_bars(finite, facets, policies, out_dir / f"hit_rate_by_tier.{fmt}", stamp),
            _ttft_cdf(turns, facets, policies, out_dir / f"ttft_cdf.{fmt}", notes, stamp),
            budget_figure(finite, out_dir / f"budget_tradeoff.{fmt}", stamp),
            offload_figure(finite, out_dir / f"offload_vs_capacity.{fmt}", stamp),
            engine_figure(finite, out_dir / f"tiers_by_engine.{fmt}", stamp),
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
    """(title in words, {dim: value}) per combination of the varying non-capacity dimensions."""
    dims = [
        d
        for d in FACET_DIMS
        if d in df.columns
        and df[d].nunique(dropna=False) > 1
        and (d != "store_policy" or store_policies_vary(df))
    ]
    if not dims:
        return [("", {})]
    combos = df[dims].drop_duplicates().to_dict("records")[:MAX_FACETS]
    return [(fs.panel_title(c), c) for c in combos]


def _select(df: pd.DataFrame, where: dict) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for k, v in where.items():
        mask &= (df[k] == v).to_numpy()
    return df[mask]


def _minor_label(v: float, _pos: object = None) -> str:
    """Label the 2x and 5x minor ticks of a log axis (plain numbers, no powers of ten)."""
    mantissa = v / 10 ** math.floor(math.log10(v)) if v > 0 else 0
    return f"{v:g}" if round(mantissa) in (2, 5) and abs(mantissa - round(mantissa)) < 1e-6 else ""


def _grid(n: int, max_cols: int = 4) -> tuple[Figure, list, int, float]:
    """``figure_style.grid``: (figure, axes, columns, panel width in inches)."""
    return fs.grid(n, max_cols=max_cols)


def _capacity_axis(ax, caps: Sequence[float]) -> None:
    fs.capacity_axis(ax, caps)


def _outer_labels(axes: list, cols: int) -> None:
    """Axis labels said once: on a grid of panels, x labels under the bottom row and one y label
    beside the first column (the figure's)."""
    if not axes:
        return
    fig = axes[0].figure
    rows = math.ceil(len(axes) / cols)
    xlabel, ylabel = axes[0].get_xlabel(), axes[0].get_ylabel()
    for k, ax in enumerate(axes):
        if rows > 1 or k % cols:
            ax.set_ylabel("")
        if k + cols < len(axes):
            ax.set_xlabel("")
    if rows > 1 and ylabel:
        fig.supylabel(ylabel, fontsize=fs.FONT_PT)
    if cols > 1 and xlabel:  # under each panel of the bottom row
        for ax in axes[-cols:]:
            ax.set_xlabel(xlabel)


def _save(
    fig: Figure,
    title: str,
    path: Path,
    legend_handles: list,
    legend_labels: list,
    stamp: str | None = None,
) -> Path:
    """Title on top, one shared legend in a row under it, panels below, the stamp under them."""
    fs.finish(fig, title, legend_handles, legend_labels, stamp)
    return fs.save(fig, path, title=title)


def _no_data(ax, text: str) -> None:
    """Say in an empty panel why it is empty."""
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=fs.TICK_PT,
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
    stamp: str | None = None,
) -> Path | None:
    if not np.isfinite(df[metric].to_numpy(dtype=float)).any():
        notes.append(
            f"plots: {path.name} not drawn: {metric} is undefined at every grid point"
            + (f" ({why})" if why else "")
        )
        return None
    fig, axes, cols, panel_w = _grid(len(facets))
    handles: dict[str, object] = {}
    caps = sorted(df["gpu_kv_gb"].unique())
    if ylim is None:  # one y range for every panel, so panels compare at a glance
        top = max(
            [float(np.nanmax(df[metric].to_numpy(dtype=float), initial=0.0))]
            + ([target[0]] if target else [])
        )
        top = top * 1.08 if top > 0 else 1.0
        ylim = (-0.03 * top, top)  # a series at 0 drawn above the axis, not on it
    for ax, (ftitle, where) in zip(axes, facets):
        sub = _select(df, where)
        series = []
        for pol in policies:
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
            if not (g.empty or g["mean"].isna().all()):
                series.append((pol, g))
        shifts = fs.dodge([(g.index, g["mean"]) for _, g in series], span=ylim[1] - ylim[0])
        for i, ((pol, g), shift) in enumerate(zip(series, shifts)):
            st = fs.series_style(pol, i)
            x = np.asarray(g.index, dtype=float) * shift
            (line,) = ax.plot(x, g["mean"], label=pol, **st)
            if (g["hi"] > g["lo"]).any():  # seeds: the 95 % confidence interval of the mean
                ax.fill_between(x, g["lo"], g["hi"], color=st["color"], alpha=0.15, lw=0)
            handles.setdefault(pol, line)
        if target is not None:
            t = ax.axhline(target[0], color="0.35", ls=(0, (4, 2)), lw=0.8, zorder=1)
            handles.setdefault(target[1], t)
        _capacity_axis(ax, caps)
        ax.set_ylabel(ylabel)
        if percent:
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(*ylim)
        if ftitle:
            ax.set_title(fs.panel_title(where, panel_w))
        if not series:
            _no_data(ax, f"no data: {metric} is undefined" + (f"\n({why})" if why else ""))
            notes.append(f"plots: {path.name}: panel {ftitle or '(only panel)'} has no data")
    _outer_labels(axes, cols)
    return _save(fig, title, path, list(handles.values()), list(handles.keys()), stamp)


def _tier_bars(df: pd.DataFrame, facets, policies, path: Path, stamp: str | None = None) -> Path:
    """One panel per facet: at each GPU capacity a stacked bar per policy (named under it)."""
    fig, axes, cols, panel_w = _grid(len(facets))
    handles: dict[str, object] = {}
    tiers = list(TIERS)
    if "store_hit_rate" in df.columns:  # a cluster's shared store: loaded, not recomputed
        tiers.insert(2, STORE_TIER)
    caps = sorted(df["gpu_kv_gb"].unique())
    n_pol = len(policies)
    width = 0.8 / n_pol
    longest = max(len(str(p)) for p in policies)
    for k, (ax, (ftitle, where)) in enumerate(zip(axes, facets)):
        sub = _select(df, where)
        bottom_row = k + cols >= len(axes)  # the policies are named there, the same in every panel
        ticks: list[float] = []
        names: list[str] = []
        for j, pol in enumerate(policies):
            g = sub[sub["policy"] == pol].groupby("gpu_kv_gb")[[c for c, _, _ in tiers]].mean()
            g = g.reindex(caps)
            x = np.arange(len(caps)) + (j - (n_pol - 1) / 2) * width
            bottom = np.zeros(len(caps))
            for col, label, color in tiers:
                vals = g[col].fillna(0.0).to_numpy()
                bars = ax.bar(
                    x, vals, bottom=bottom, color=color, width=width * 0.9, label=label, lw=0
                )
                handles.setdefault(label, bars)
                bottom += vals
            ticks += list(x)
            names += [str(pol)] * len(caps)
        groups = [f"{c:g}" for c in caps]
        if n_pol > 1 and bottom_row:  # the policy under each bar, the capacity under each group
            ax.set_xticks(ticks, names, rotation=90, fontsize=fs.STAMP_PT + 0.5)
            ax.tick_params(axis="x", which="major", length=0, pad=1.5)
            ax.set_xticks(np.arange(len(caps)), groups, minor=True)
            ax.xaxis.remove_overlapping_locs = False  # a group's centre may be a bar's
            pad = longest * (fs.STAMP_PT + 0.5) * 0.6 + 4
            ax.tick_params(axis="x", which="minor", length=0, pad=pad, labelsize=fs.TICK_PT)
        else:
            ax.set_xticks(np.arange(len(caps)), groups)
            if n_pol > 1:  # the bars' places, named in the bottom row
                ax.set_xticks(ticks, minor=True)
                ax.tick_params(axis="x", which="minor", length=1.5)
                ax.xaxis.remove_overlapping_locs = False
        ax.set_xlabel("GPU KV capacity (GiB)")
        ax.set_ylabel("share of history tokens")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.0)
        ax.set_xlim(-0.5, len(caps) - 0.5)
        title = fs.panel_title(where, panel_w)
        if n_pol == 1:
            title = f"{policies[0]}" + (f"\n{title}" if title else "")
        if title:
            ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    _outer_labels(axes, cols)
    return _save(
        fig,
        "Where history tokens came from: GPU hit, CPU hit, "
        + ("store hit, " if len(tiers) > len(TIERS) else "")
        + "recomputed",
        path,
        list(handles.values()),
        list(handles.keys()),
        stamp,
    )


def _ttft_cdf(
    turns: pd.DataFrame, facets, policies, path: Path, notes: list[str], stamp: str | None = None
) -> Path | None:
    if turns.empty:
        notes.append(f"plots: {path.name} not drawn: no turn completed at a finite GPU capacity")
        return None
    finite = turns[np.isfinite(turns["gpu_kv_gb"].astype(float))]
    finite = finite[finite["ttft_s"] > 0]
    if finite.empty:
        notes.append(f"plots: {path.name} not drawn: no turn completed at a finite GPU capacity")
        return None
    fig, axes, cols, panel_w = _grid(len(facets))
    handles: dict[str, object] = {}
    smallest = {
        float(_select(finite, where)["gpu_kv_gb"].min())
        for _, where in facets
        if not _select(finite, where).empty
    }
    one_cap = len(smallest) == 1  # then the figure's title says it, not each panel's
    for ax, (ftitle, where) in zip(axes, facets):
        sub = _select(finite, where)
        if sub.empty:
            _no_data(ax, "no data: no turn completed")
            if ftitle:
                ax.set_title(fs.panel_title(where, panel_w))
            notes.append(f"plots: {path.name}: panel {ftitle or '(only panel)'} has no data")
            continue
        cap = float(sub["gpu_kv_gb"].min())
        sub = sub[sub["gpu_kv_gb"] == cap]
        for i, pol in enumerate(policies):
            x = np.sort(sub.loc[sub["policy"] == pol, "ttft_s"].to_numpy(dtype=float))
            if x.size == 0:
                continue
            y = np.arange(1, x.size + 1) / x.size
            st = fs.series_style(pol, i)
            (line,) = ax.step(
                x,
                y,
                where="post",
                color=st["color"],
                label=pol,
                linewidth=st["linewidth"],
                linestyle=st["linestyle"],
                zorder=st["zorder"],
            )
            # markers along the curve, each policy's at its own levels (staggered between the
            # deciles), so a curve drawn over another still shows
            levels = np.linspace(0.1, 0.9, 9) + 0.1 * (i / len(policies) - 0.5)
            q = np.quantile(x, levels, method="inverted_cdf")
            ax.plot(
                q,
                np.searchsorted(x, q, side="right") / x.size,
                ls="none",
                marker=st["marker"],
                color=st["color"],
                markersize=st["markersize"] * 0.8,
                markeredgewidth=st["markeredgewidth"],
                zorder=st["zorder"],
            )
            handles.setdefault(
                pol,
                Line2D([], [], **{k: st[k] for k in ("color", "marker", "linestyle")}),
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        lo, hi = float(sub["ttft_s"].min()), float(sub["ttft_s"].max())
        if hi / lo < 30 and panel_w > 3:  # label 2x and 5x ticks only while they have room
            ax.xaxis.set_minor_formatter(FuncFormatter(_minor_label))
        else:
            ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel("TTFT (s, log scale)")
        ax.set_ylabel("fraction of turns")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.1)
        if where or not one_cap:
            ax.set_title(fs.panel_title(where if one_cap else {**where, "gpu_kv_gb": cap}, panel_w))
    _outer_labels(axes, cols)
    return _save(
        fig,
        "TTFT CDF per policy at the smallest GPU capacity"
        + (f" ({next(iter(smallest)):g} GiB of GPU KV)" if one_cap else ""),
        path,
        list(handles.values()),
        list(handles.keys()),
        stamp,
    )
