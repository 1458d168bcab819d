"""`kvsim run CONFIG`: run an experiment grid and write its results folder."""

from __future__ import annotations

import argparse
from typing import Any


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def format_list(text: str) -> list[str]:
    from experiments.figure_style import formats

    try:
        return list(formats([f.strip() for f in text.split(",")]))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run",
        help="run an experiment YAML and write its results folder",
        description="Run every point of an experiment grid and write summary.csv, turns.parquet, "
        "sessions.parquet, config.resolved.yaml and plots/ into the results folder.",
    )
    p.add_argument("config", help="experiment YAML file (e.g. experiments/quickstart.yaml)")
    p.add_argument("--out", metavar="DIR", help="results folder (default: results/<name>)")
    p.add_argument(
        "--workers",
        type=_positive_int,
        metavar="N",
        help="worker processes (overrides executor.workers)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the shared data folder (real traces) that ${KVSIM_SHARED_DATA} in the YAML's "
        "paths names (default: $KVSIM_SHARED_DATA, else ../shared/data beside the checkout)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing results folder")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over: forget the grid points an interrupted run finished "
        "(kept in <out>.partial/ and otherwise reused)",
    )
    p.add_argument(
        "--debug",
        action="store_true",
        help="check simulator invariants as it runs; show tracebacks",
    )
    p.add_argument(
        "--step-log",
        action="store_true",
        help="also write steps.jsonl: one JSON line per engine step of every grid point "
        "(docs/semantics.md, the step log)",
    )
    p.add_argument(
        "--format",
        type=format_list,
        metavar="png|pdf|svg",
        help="file format of the figures in plots/, or several comma-separated (pdf and svg: "
        "vector, for a paper); overrides the YAML's figures.format (default png)",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar and no summary table (the results folder line, and notes, "
        "still print)",
    )
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.start_up import start_up_frozen

    with start_up_frozen() as started:
        return _main(args, started)


def _main(args: argparse.Namespace, started) -> int:
    from experiments.checkpoint import partial_dir
    from experiments.runner import default_out_dir, finished_points, run_experiment
    from experiments.schema import ConfigError, load_experiment
    from experiments.shared_data import check_data_dir

    check_data_dir(args.data_dir)
    exp = load_experiment(args.config, data_dir=args.data_dir)
    started()  # the libraries are imported and the config read: their objects live on
    updates: dict[str, Any] = {}
    if args.workers is not None:
        updates["executor"] = exp.executor.model_copy(update={"workers": args.workers})
    if args.debug:
        updates["debug"] = True
    if args.step_log:
        if exp.cluster is not None:  # the YAML's step_log is refused the same way
            raise ConfigError(
                f"{exp.source}: --step-log: a cluster (the cluster section) writes no step log",
                file=exp.source,
                key="step_log",
            )
        updates["step_log"] = True
    if updates:
        exp = exp.with_overrides(**updates)
    out = args.out if args.out is not None else default_out_dir(exp)
    try:
        outcome = run_experiment(
            exp,
            out,
            force=args.force,
            show_progress=not args.quiet,
            fresh=args.fresh,
            plot_format=args.format,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (experiments.cli.Terminated)
        kept = finished_points(exp, out)
        exc.add_note(
            f"{kept} finished grid point{'s' if kept != 1 else ''} kept in {partial_dir(out)}/; "
            "run the same command again to resume from them (--fresh starts over)"
            if kept
            else "no grid point had finished, so nothing is kept to resume from"
        )
        raise
    w = outcome.written
    resumed = f", {outcome.resumed} resumed" if outcome.resumed else ""
    rows = outcome.tables.summary_rows
    print(
        f"results: {w.out_dir}/ ({len(rows)} grid points{resumed}; "
        f"{', '.join(str(f) for f in w.files if f.parent.name != 'plots')}, "
        f"{len(w.plots)} plots in plots/)"
    )
    for note in w.notes:
        print(f"note: {note}")
    if not args.quiet:
        from experiments.report import axis_columns, summary_table

        axes = axis_columns(exp.grid() + exp.baseline_points())
        print(summary_table(outcome.summary, exp.thresholds(), axes))
    if _may_have_rejected(rows.rows):  # the note's module (and pandas) only then
        from experiments.rejections import rejection_note

        if (rejected := rejection_note(outcome.summary, exp)) is not None:
            print(rejected)
    return 0


def _may_have_rejected(rows) -> bool:
    """False only where ``rejection_note`` is sure to give None: every row's ``rejected_turns``
    a number, none above 0 (or no row has the column)."""
    for row in rows:
        v = row.get("rejected_turns", 0)
        if type(v) not in (int, float) or not v <= 0:
            return True
    return False
