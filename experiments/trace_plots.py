"""The headline figure of each real-trace experiment (``experiments/sharegpt.yaml``,
``mooncake.yaml``, ``azure.yaml``): one metric against the GPU KV capacity, one line per policy,
one panel per CPU tier, drawn from the results folder's ``summary.csv``.

    python -m experiments.trace_plots [RESULTS] [--out docs/img] [--only sharegpt,mooncake]

RESULTS holds the folders ``kvsim run`` wrote (default ``results``: ``results/sharegpt/``, ...);
each one present becomes ``<out>/<name>_headline.png`` (``--format pdf`` or ``svg``: vector). A config that lists its trace more than once
(ShareGPT: the same conversations under two seeds of arrivals and think times) has its draws
pooled with the grid's seeds: the line is their mean, the band the 95 % confidence interval of the
mean (``plots.seed_interval``). The metric is the re-prefill rate, except on Azure, whose requests
have no history (re-prefill is 0 by construction): there it is TTFT p90, on a log axis.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, PercentFormatter

from experiments import figure_style as fs
from experiments.plots import (
    _capacity_axis,
    _grid,
    _minor_label,
    _outer_labels,
    _save,
    seed_interval,
)
from experiments.results import read_resolved


@dataclass(frozen=True)
class Headline:
    metric: str
    ylabel: str
    title: str
    percent: bool = False
    log: bool = False
    note: str | None = None  # a summary column whose range each panel states (a percentage)
    note_label: str = ""


HEADLINES: dict[str, Headline] = {
    "sharegpt": Headline(
        "reprefill_rate",
        "re-prefill rate (% of history tokens)",
        "ShareGPT, 200 conversations, Llama-3.1-8B on H100: re-prefill vs GPU KV",
        percent=True,
    ),
    "mooncake": Headline(
        "reprefill_rate",
        "re-prefill rate (% of history tokens)",
        "Mooncake, 12,031 requests (time x 20), prefix sharing: re-prefill vs GPU KV",
        percent=True,
        note="shared_hit_rate",
        note_label="shared-prefix GPU hits: {} of new prompt tokens",
    ),
    "azure": Headline(
        "ttft_p90_s",
        "TTFT p90 (s)",
        "Azure conv, 2,000 one-turn requests: TTFT p90 vs GPU KV (re-prefill is 0)",
        log=True,
    ),
}


def _cpu_title(gb: float) -> str:
    return "no CPU tier (evicted KV is dropped)" if gb == 0 else fs.describe("cpu_kv_gb", gb)


def headline_figure(
    summary: pd.DataFrame,
    spec: Headline,
    path: Path,
    resolved: dict | None = None,
    fmt: str | None = None,
) -> Path:
    """Draw ``spec.metric`` against gpu_kv_gb per policy, one panel per cpu_kv_gb, into ``path``
    (as ``fmt``, default the path's suffix). Rows that differ only in trace (the same trace under
    other seeds) or seed are replicates. ``resolved`` (the run's config.resolved.yaml) names the
    trace and its size in the figure's stamp."""
    with fs.style():
        return _headline(summary, spec, path, resolved, fmt)


def _headline(summary, spec: Headline, path: Path, resolved, fmt) -> Path:
    df = summary[np.isfinite(summary["gpu_kv_gb"].astype(float))]
    policies = list(dict.fromkeys(df["policy"]))
    cpus = sorted(df["cpu_kv_gb"].unique())
    caps = sorted(df["gpu_kv_gb"].unique())
    fig, axes, cols, _ = _grid(len(cpus))
    values = df[spec.metric].to_numpy(dtype=float)
    handles: dict[str, object] = {}
    for ax, cpu in zip(axes, cpus):
        sub = df[df["cpu_kv_gb"] == cpu]
        series = []
        for pol in policies:
            g = (
                sub[sub["policy"] == pol]
                .groupby("gpu_kv_gb")[spec.metric]
                .agg(
                    [
                        "mean",
                        ("lo", lambda v: seed_interval(v)[0]),
                        ("hi", lambda v: seed_interval(v)[1]),
                    ]
                )
            )
            series.append((pol, g))
        ys = [(g.index, np.log(g["mean"]) if spec.log else g["mean"]) for _, g in series]
        finite = values[np.isfinite(values) & ((values > 0) if spec.log else True)]
        span = None  # the y axis' range, as dodge measures it (log units on a log axis)
        if finite.size and spec.log:
            span = float(np.log(finite.max() / finite.min()) + 2 * np.log(1.5))
        elif finite.size:
            span = float(finite.max()) * 1.11
        for i, ((pol, g), shift) in enumerate(zip(series, fs.dodge(ys, span))):
            st = fs.series_style(pol, i)
            x = np.asarray(g.index, dtype=float) * shift
            (line,) = ax.plot(x, g["mean"], label=pol, **st)
            if (g["hi"] > g["lo"]).any():  # replicates: 95 % confidence interval of the mean
                ax.fill_between(x, g["lo"], g["hi"], color=st["color"], alpha=0.15, lw=0)
            handles.setdefault(pol, line)
        _capacity_axis(ax, caps)
        ax.set_ylabel(spec.ylabel)
        ax.set_title(_cpu_title(float(cpu)))
        if spec.log:
            ax.set_yscale("log")
            ax.set_ylim(np.nanmin(values) / 1.5, np.nanmax(values) * 1.5)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(_minor_label))
        else:  # one y range for every panel, so the panels compare at a glance
            top = max(float(np.nanmax(values)), 1e-9) * 1.08
            ax.set_ylim(-0.03 * top, top)  # a series at 0 drawn above the axis, not on it
        if spec.percent:
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        if spec.note is not None:
            lo, hi = sub[spec.note].min(), sub[spec.note].max()
            note_range = (
                f"{100 * lo:.1f} %"
                if round(100 * lo, 1) == round(100 * hi, 1)
                else f"{100 * lo:.1f}-{100 * hi:.1f} %"
            )
            ax.text(
                0.03,
                0.04,
                spec.note_label.format(note_range),
                transform=ax.transAxes,
                fontsize=fs.TICK_PT,
                color="0.3",
            )
    _outer_labels(axes, cols)
    if fmt is not None:
        path = fs.with_format(path, fmt)
    stamp = fs.run_stamp(summary, resolved)
    return _save(fig, spec.title, path, list(handles.values()), list(handles.keys()), stamp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.trace_plots", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "results",
        nargs="?",
        default="results",
        help="folder holding the results folders sharegpt/, mooncake/, azure/",
    )
    ap.add_argument("--out", default="docs/img", help="where <name>_headline.png goes")
    ap.add_argument("--only", default=",".join(HEADLINES), help="comma-separated experiment names")
    ap.add_argument(
        "--format", choices=fs.FORMATS, default=fs.DEFAULT_FORMAT, help="figure file format"
    )
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in HEADLINES]
    if unknown:
        ap.error(f"unknown experiment(s) {', '.join(unknown)}; known: {', '.join(HEADLINES)}")
    drawn = 0
    for name in names:
        summary = Path(args.results) / name / "summary.csv"
        if not summary.is_file():
            print(f"{summary}: not found, skipped (kvsim run experiments/{name}.yaml)")
            continue
        resolved = read_resolved(summary.parent)
        path = headline_figure(
            pd.read_csv(summary),
            HEADLINES[name],
            Path(args.out) / f"{name}_headline.{args.format}",
            resolved,
        )
        print(path)
        drawn += 1
    return 0 if drawn else 1


if __name__ == "__main__":
    sys.exit(main())
