"""`kvsim plot DIR`: draw every figure of a results folder again from its tables."""

from __future__ import annotations

import argparse

from experiments.commands.run import format_list


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plot",
        help="re-render the plots of a results folder",
        description="Draw every figure of a results folder again from its "
        "summary.csv and turns.parquet (after a kvsim upgrade, "
        "or after editing the tables). The new plots/ replaces "
        "the old one only once every figure is drawn.",
    )
    p.add_argument("dir", help="a results folder written by kvsim run")
    p.add_argument(
        "--format",
        type=format_list,
        metavar="png|pdf|svg",
        help="file format of the figures, or several comma-separated (pdf and svg: vector, for a "
        "paper; default: the folder's figures.format, as kvsim run wrote them, else png)",
    )
    return p


def main(args: argparse.Namespace) -> int:
    import shutil
    import tempfile
    from pathlib import Path

    import pandas as pd

    from experiments.cluster_plots import cluster_figures
    from experiments.figure_style import formats
    from experiments.load_plots import load_figures
    from experiments.plots import make_plots
    from experiments.results import (
        PLOTS_DIR,
        SUMMARY_FILE,
        TURNS_FILE,
        read_resolved,
        turns_for_figures,
    )
    from experiments.targets import from_resolved

    out = Path(args.dir)
    for name in (SUMMARY_FILE, TURNS_FILE):
        if not (out / name).is_file():
            raise ValueError(
                f"{out / name}: no such file (is {out} a results folder of kvsim run?)"
            )
    # the experiment's targets (dashed lines) and what the figures' stamp names (model, hardware,
    # trace, version); for a folder without its config: the default targets, the summary's labels
    resolved = read_resolved(out)
    targets = from_resolved(resolved)
    fmts = args.format or list(formats(((resolved or {}).get("figures") or {}).get("format")))
    summary = pd.read_csv(out / SUMMARY_FILE)
    turns = turns_for_figures(summary, out / TURNS_FILE)  # the columns the figures read, alone
    tmp = Path(tempfile.mkdtemp(prefix=f".{PLOTS_DIR}.tmp-", dir=out))
    try:
        notes: list[str] = []
        drawn = []
        for i, fmt in enumerate(fmts):
            said = notes if i == 0 else []  # the same data: the same notes, once
            drawn += make_plots(summary, turns, tmp, said, targets, resolved=resolved, fmt=fmt)
            drawn += load_figures(summary, tmp, said, fmt, resolved)  # a request-rate sweep
            drawn += cluster_figures(summary, tmp, said, fmt, resolved)  # a cluster's routers
        old = out / PLOTS_DIR
        if old.exists():
            shutil.rmtree(old)
        tmp.rename(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"{out / PLOTS_DIR}/: {', '.join(p.name for p in drawn) or 'no figures'}")
    for note in notes:
        print(f"note: {note}")
    return 0
