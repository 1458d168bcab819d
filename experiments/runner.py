"""Run a whole experiment: grid -> executor -> tables -> results folder (the API behind `kvsim run`)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.checkpoint import Checkpoints
from experiments.executor import run_points, trace_info
from experiments.results import (
    ResultTables,
    WrittenResults,
    check_out_dir,
    collect,
    write_results,
)
from experiments.schema import Experiment, FiguresSpec
from experiments.start_up import start_up_frozen

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RunOutcome:
    tables: ResultTables  # what the run produced (the summary's rows among them)
    written: WrittenResults  # where it all went
    resumed: int = 0  # grid points an interrupted run of the same config had finished

    @property
    def summary(self) -> pd.DataFrame:
        """summary.csv as a table (made on first use: pandas is imported then)."""
        return self.tables.summary


def default_out_dir(experiment: Experiment) -> Path:
    return Path("results") / experiment.name


def finished_points(experiment: Experiment, out: str | os.PathLike) -> int:
    """How many of the experiment's grid points (and baselines) have a checkpoint in
    ``<out>.partial/``: what a rerun of the same config would take instead of running."""
    ckpt = Checkpoints(out, experiment.debug)
    points = experiment.grid() + experiment.baseline_points()
    return sum((ckpt.dir / f"{ckpt.key(p)}.pkl").is_file() for p in points)


def run_experiment(
    experiment: Experiment,
    out: str | os.PathLike | None = None,
    *,
    force: bool = False,
    show_progress: bool = True,
    fresh: bool = False,
    plot_format: str | Sequence[str] | None = None,
) -> RunOutcome:
    """Run every grid point (plus the infinite-memory baselines when asked for) and write the
    results folder. An existing ``out`` is refused up front unless ``force``. Each finished point
    is checkpointed (``experiments.checkpoint``): a rerun after an interruption runs only the
    points not yet done, unless ``fresh``. The figures are written in ``plot_format`` (one format
    or several) when given, else in the experiment's ``figures.format``; config.resolved.yaml
    records the formats used."""
    with start_up_frozen() as started:
        started()  # the imported modules (some 80,000 objects) live on: out of the GC's scans
        return _run_experiment(experiment, out, force, show_progress, fresh, plot_format)


def _run_experiment(
    experiment: Experiment,
    out: str | os.PathLike | None,
    force: bool,
    show_progress: bool,
    fresh: bool,
    plot_format: str | Sequence[str] | None,
) -> RunOutcome:
    if plot_format is not None:
        from experiments.figure_style import formats

        fmts = list(formats(plot_format))
        experiment = experiment.with_overrides(
            figures=FiguresSpec(format=fmts[0] if len(fmts) == 1 else fmts)
        )
    fmts = list(experiment.figures.formats())
    out = check_out_dir(out if out is not None else default_out_dir(experiment), force)
    points = experiment.grid() + experiment.baseline_points()
    ckpt = Checkpoints(out, experiment.debug)
    if fresh:
        ckpt.clear()
    have = {i: r for i, p in enumerate(points) if (r := ckpt.load(p)) is not None}
    todo = [p for i, p in enumerate(points) if i not in have]
    if have and show_progress:
        print(
            f"resuming: {len(have)} of {len(points)} grid points were done ({ckpt.dir})",
            file=sys.stderr,
        )
    try:
        new = iter(
            run_points(
                todo,
                experiment.executor,
                debug=experiment.debug,
                show_progress=show_progress,
                source=experiment.source,
                on_result=ckpt.save,
                ledger_dir=ckpt.dir,  # each point's ledger on disk beside its checkpoint
            )
            if todo
            else []
        )
    except BaseException:  # stopped or failed: keep the finished points for a rerun, only them
        ckpt.prune()
        raise
    results = [
        dataclasses.replace(have[i] if i in have else next(new), index=i)
        for i in range(len(points))
    ]
    tables = collect(results, experiment.thresholds())
    infos = [trace_info(spec) for spec in experiment.trace_specs()]
    written = write_results(out, experiment, tables, force=force, traces=infos, plot_format=fmts)
    ckpt.clear()
    return RunOutcome(tables=tables, written=written, resumed=len(have))
