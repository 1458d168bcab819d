"""Run a whole experiment: grid -> executor -> tables -> results folder (the API behind `kvsim run`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.executor import run_points, trace_info
from experiments.results import WrittenResults, check_out_dir, collect, write_results
from experiments.schema import Experiment


@dataclass(frozen=True)
class RunOutcome:
    summary: pd.DataFrame     # summary.csv as a table
    written: WrittenResults   # where it all went


def default_out_dir(experiment: Experiment) -> Path:
    return Path("results") / experiment.name


def run_experiment(experiment: Experiment, out: str | os.PathLike | None = None, *,
                   force: bool = False, show_progress: bool = True) -> RunOutcome:
    """Run every grid point (plus the infinite-memory baselines when asked for) and write the
    results folder. An existing ``out`` is refused up front unless ``force``."""
    out = check_out_dir(out if out is not None else default_out_dir(experiment), force)
    points = experiment.grid() + experiment.baseline_points()
    results = run_points(points, experiment.executor, debug=experiment.debug,
                         show_progress=show_progress, source=experiment.source)
    tables = collect(results)
    infos = [trace_info(spec) for spec in experiment.trace_specs()]
    written = write_results(out, experiment, tables, force=force, traces=infos)
    return RunOutcome(summary=tables.summary, written=written)
