"""`kvsim compare A B`: two results folders side by side, point by point (``experiments.compare``)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare",
        help="compare two results folders point by point (A, B, B-A, relative change)",
        description="Compare two results folders of kvsim run. Their grid points are matched on "
        "the grid labels both vary (policy always; a label only one folder varies is said, and "
        "compared at the other's value where it has it), and for each matched point the headline "
        "metrics of summary.csv are printed: A, B, B-A and (B-A)/|A|. The settings of "
        "config.resolved.yaml that differ are named above the table.",
    )
    p.add_argument("a", metavar="A", help="a results folder written by kvsim run (the reference)")
    p.add_argument("b", metavar="B", help="another results folder (compared against A)")
    p.add_argument(
        "--metrics",
        metavar="COLS",
        help="comma-separated summary.csv columns to compare (default: reprefill_rate, "
        "gpu_hit_rate, cpu_hit_rate, jain_service, ttft_p50_s, ttft_p99_s, tbt_p50_s, tbt_p99_s)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw B against A, one dot per matched point, one panel per headline metric "
        "(in the style of kvsim's other figures; its format from --format, else the file's "
        "suffix: .png, .pdf or .svg)",
    )
    p.add_argument(
        "--format",
        choices=("png", "pdf", "svg"),
        help="file format of the --plot figure (default: the file's suffix, else png)",
    )
    p.add_argument(
        "--csv", metavar="FILE", help="also write the table, one row per point and metric"
    )
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.compare import compare, plot, read_folder, render

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    comp = compare(read_folder(args.a), read_folder(args.b), metrics)
    print(render(comp))
    if args.csv:
        from pathlib import Path

        out = Path(args.csv)
        out.parent.mkdir(parents=True, exist_ok=True)
        comp.long_table().to_csv(out, index=False)
        print(f"table: {out}")
    if args.plot:
        print(f"figure: {plot(comp, args.plot, metrics, args.format)}")
    return 0
