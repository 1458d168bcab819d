"""The layer-wise checkerboard figure and table from a ``kvsim run experiments/layerwise.yaml``
results folder.

    python notebooks/layerwise_figure.py results/layerwise docs/img/layerwise.png [table.csv]
    python notebooks/layerwise_figure.py docs/img/layerwise.csv docs/img/layerwise.png

Per model and GPU capacity, over turns with a history: mean TTFT, mean copy stall of the
admission, the share of history (page, layer) units found dropped, and the share of history
tokens re-prefilled (a page counts once any of its layers is dropped). Prints the table (and
writes it as CSV when a third path is given) and draws TTFT, copy stall and re-prefill, pipelining
on (solid) against off (hatched; absent when the grid ran pipelining on only), in the style of
kvsim's own figures (``experiments.figure_style``; PNG, PDF or SVG by the output's suffix). Given
that CSV instead of a results folder, it draws the figure again from the table (its stamp then
names what the table holds: the models, and the kvsim that drew it).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from experiments import figure_style as fs
from experiments.results import SUMMARY_FILE, read_resolved

KEYS = ["model", "gpu_kv_gb", "policy", "evict_unit", "pipelining"]
# the policies in the order the figure draws them (any others follow, by name)
ORDER = ["lru", "fifo", "pensieve-flat", "pensieve", "pensieve-physics", "pensieve-depth"]


def table(results: Path) -> pd.DataFrame:
    t = pd.read_parquet(results / "turns.parquet")
    t = t[t.turn > 0]
    units = t.gpu_layer_units + t.cpu_layer_units + t.dropped_layer_units
    t = t.assign(units=units)
    g = t.groupby(KEYS).agg(H=("history_tokens", "sum"), d=("recomputed_tokens", "sum"),
                            du=("dropped_layer_units", "sum"), cu=("cpu_layer_units", "sum"),
                            u=("units", "sum"), ttft_ms=("ttft_s", "mean"),
                            stall_ms=("copy_stall_s", "mean"), swap_gib=("swap_in_bytes", "sum"))
    out = pd.DataFrame({
        "ttft_ms": 1e3 * g.ttft_ms, "stall_ms": 1e3 * g.stall_ms,
        "units_dropped_%": 100 * g.du / g.u, "units_cpu_%": 100 * g.cu / g.u,
        "reprefill_%": 100 * g.d / g.H, "swap_in_gib": g.swap_gib / 2**30})
    return out.round(2).reset_index()


UNITS = {"block": ("#868e96", "whole pages (block)"),
         "layer_block": ("#1971c2", "checkerboard (layer_block)")}
ROWS = (("ttft_ms", "mean TTFT (ms)"), ("stall_ms", "mean copy stall per admission (ms)"),
        ("reprefill_%", "re-prefill (% of history tokens)"))


def figure(df: pd.DataFrame, path: Path, stamp: str | None = None) -> Path:
    """One row of panels per model and GPU capacity, one column per metric (``figure_style``: a
    page wide, panel titles in words, one legend, the stamp under the panels); written in the
    format of ``path``'s suffix (png, pdf or svg)."""
    from matplotlib.patches import Patch

    models = list(dict.fromkeys(df.model))
    caps = sorted(df.gpu_kv_gb.unique())
    policies = [p for p in ORDER if p in set(df.policy)]
    policies += sorted(set(df.policy) - set(policies))
    rows = [(m, c) for m in models for c in caps]
    pipes = [p for p in (True, False) if p in set(df.pipelining)]
    with fs.style():
        fig, axes, cols, _ = fs.grid(len(rows) * len(ROWS), max_cols=len(ROWS), panel_h=1.35)
        for r, (model, cap) in enumerate(rows):
            sub = df[(df.model == model) & (df.gpu_kv_gb == cap)]
            for c, (col, label) in enumerate(ROWS):
                ax = axes[r * cols + c]
                for i, pol in enumerate(policies):  # per policy: block, then layer_block
                    for ui, unit in enumerate(UNITS):
                        for k, pipe in enumerate(pipes):
                            v = sub[(sub.policy == pol) & (sub.evict_unit == unit)
                                    & (sub.pipelining == pipe)][col]
                            x = 2.5 * i + 1.1 * ui + (k - (len(pipes) - 1) / 2) * 0.5
                            ax.bar(x, float(v.iloc[0]) if len(v) else 0.0, 0.5,
                                   color=UNITS[unit][0], hatch="" if pipe else "////",
                                   edgecolor="black", linewidth=0.3)
                ticks = [2.5 * i + 0.55 for i in range(len(policies))]
                if r == len(rows) - 1:  # the policies named under the bottom row only
                    ax.set_xticks(ticks, policies, rotation=45, ha="right")
                else:
                    ax.set_xticks(ticks, [])
                ax.set_ylim(bottom=0)
                ax.grid(True, axis="y", alpha=0.3)
                ax.set_axisbelow(True)
                if r == 0:
                    ax.set_title(label)
                if c == 0:  # the row's model and capacity, in words
                    ax.set_ylabel(f"{fs.describe('model', model)}\n"
                                  f"{fs.describe('gpu_kv_gb', cap)}")
                if not (sub[col] > 0).any():  # say so, rather than show empty axes
                    ax.text(0.5, 0.5, "0 for every policy", transform=ax.transAxes,
                            ha="center", va="center", fontsize=fs.TICK_PT, color="0.35")
        handles = [Patch(facecolor=colour, edgecolor="black", linewidth=0.3)
                   for colour, _ in UNITS.values()]
        labels = [name for _, name in UNITS.values()]
        if len(pipes) == 2:
            handles += [Patch(facecolor="white", edgecolor="black", linewidth=0.3),
                        Patch(facecolor="white", edgecolor="black", linewidth=0.3, hatch="////")]
            labels += ["pipelining on", "pipelining off"]
        fs.finish(fig, "The layer-wise checkerboard against whole pages: TTFT, copy stall and "
                  "re-prefill", handles, labels, stamp or fs.run_stamp(df))
        return fs.save(fig, path)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(argv[0])
    if source.suffix == ".csv":  # the table this script wrote: the figure again, as it is drawn now
        df, stamp = pd.read_csv(source), None
    else:
        df = table(source)
        stamp = fs.run_stamp(pd.read_csv(source / SUMMARY_FILE), read_resolved(source))
    print(df.to_string(index=False))
    if len(argv) == 3:
        df.to_csv(argv[2], index=False)
    print(figure(df, Path(argv[1]), stamp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
