"""The layer-wise checkerboard figure and table from a ``kvsim run experiments/layerwise.yaml``
results folder.

    python notebooks/layerwise_figure.py results/layerwise docs/img/layerwise.png [table.csv]

Per model and GPU capacity, over turns with a history: mean TTFT, mean copy stall of the
admission, the share of history (page, layer) units found dropped, and the share of history
tokens re-prefilled (a page counts once any of its layers is dropped). Prints the table (and
writes it as CSV when a third path is given) and draws TTFT, copy stall and re-prefill, pipelining
on (solid) against off (hatched; absent when the grid ran pipelining on only).
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

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


def figure(df: pd.DataFrame, path: Path) -> None:
    models = list(dict.fromkeys(df.model))
    caps = sorted(df.gpu_kv_gb.unique())
    policies = [p for p in ORDER if p in set(df.policy)]
    policies += sorted(set(df.policy) - set(policies))
    rows = (("ttft_ms", "mean TTFT (ms)"), ("stall_ms", "mean copy stall per admission (ms)"),
            ("reprefill_%", "re-prefill (% of history tokens)"))
    fig, axes = plt.subplots(len(rows), len(models) * len(caps),
                             figsize=(4.5 * len(models) * len(caps), 10.5), squeeze=False)
    colors = {"block": "#868e96", "layer_block": "#1971c2"}
    for j, (model, cap) in enumerate((m, c) for m in models for c in caps):
        sub = df[(df.model == model) & (df.gpu_kv_gb == cap)]
        for row, (col, label) in enumerate(rows):
            ax = axes[row][j]
            for i, pol in enumerate(policies):  # per policy: block, then layer_block
                for ui, unit in enumerate(("block", "layer_block")):
                    for k, pipe in enumerate((True, False)):
                        v = sub[(sub.policy == pol) & (sub.evict_unit == unit)
                                & (sub.pipelining == pipe)][col]
                        ax.bar(2.5 * i + 1.1 * ui + (k - 0.5) * 0.5,
                               float(v.iloc[0]) if len(v) else 0.0, 0.5, color=colors[unit],
                               hatch="" if pipe else "//", edgecolor="black", linewidth=0.4)
            ax.set_xticks([2.5 * i + 0.55 for i in range(len(policies))])
            ax.set_xticklabels(policies, rotation=45, ha="right", fontsize=7)
            ax.set_ylabel(label, fontsize=8)
            if row == 0:
                ax.set_title(f"{model}, GPU {cap:g} GiB", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Checkerboard (layer_block, blue) against whole pages (block, grey); "
                 "solid: pipelining on, hatched: off", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    df = table(Path(argv[0]))
    print(df.to_string(index=False))
    if len(argv) == 3:
        df.to_csv(argv[2], index=False)
    figure(df, Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
