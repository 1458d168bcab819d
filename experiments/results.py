"""Collect point results into tables and write the results folder atomically.

The folder is built in a temporary sibling (``.<name>.tmp-*``) and renamed into place only once
every file is written, so ``--out`` either holds a complete run or does not exist. An existing
``--out`` is refused unless ``force``, which replaces it (the old folder is removed only after the
new one is in place).

Files: summary.csv (one row per grid point: grid labels, every ``sim.metrics.summarize`` column,
``throughput_impact`` when an infinite-memory baseline ran, then one ``pass_*`` column per target of
the experiment's ``targets``: True, False, or empty for an offline policy (``experiments.targets``)),
turns.parquet and sessions.parquet (ledgers and session tables with the grid labels, each written a
point and a row group at a time, ``experiments.turns_file``), replicas.csv (a cluster run: one
row per grid point and replica, that replica's summary as a run of its own), config.resolved.yaml,
plots/*.png (or .pdf, .svg).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.executor import PointResult, TraceInfo
from experiments.plot_points import NO_FIGURES, drawable_points
from experiments.schema import ALL_LABEL_COLUMNS, LABEL_COLUMNS, Experiment
from experiments.targets import DEFAULT_TARGETS, is_offline, judge
from experiments.turns_file import (
    combined_frame,
    combined_sessions,
    figure_turns,
    write_sessions,
    write_turns,
)
from experiments.version import kvsim_version
from sim.metrics import SUMMARY_COLUMNS

SUMMARY_FILE = "summary.csv"
TURNS_FILE = "turns.parquet"
SESSIONS_FILE = "sessions.parquet"
REPLICAS_FILE = "replicas.csv"
STEPS_FILE = "steps.jsonl"
CONFIG_FILE = "config.resolved.yaml"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class ResultTables:
    """Everything a run produced, as tables."""

    summary: pd.DataFrame  # one row per grid point
    # each point's ledger and session table, in memory or on disk, in grid order
    points: tuple[PointResult, ...]
    steps: tuple[str, ...] = ()  # every point's step log (JSON lines), when asked for
    replicas: pd.DataFrame | None = None  # a cluster run: one row per (grid point, replica)

    @property
    def turns(self) -> pd.DataFrame:
        """All per-turn ledgers, label columns first: turns.parquet's rows, the whole of them in
        memory (small runs and tests; ``write_results`` writes them a row group at a time)."""
        return combined_frame(self.points)

    @property
    def sessions(self) -> pd.DataFrame:
        """All session tables, label columns first: sessions.parquet's rows, in memory (small
        runs and tests; ``write_results`` writes them a row group at a time)."""
        return combined_sessions(self.points)


@dataclass(frozen=True)
class WrittenResults:
    out_dir: Path
    files: list[Path] = field(default_factory=list)  # relative to out_dir
    plots: list[Path] = field(default_factory=list)  # relative to out_dir
    notes: list[str] = field(default_factory=list)  # figures or panels the data could not support


def collect(
    results: Sequence[PointResult],
    targets: Mapping[str, float | None] | None = DEFAULT_TARGETS,
) -> ResultTables:
    """Build the summary table (with throughput impact against gpu_kv_gb = inf rows, when there are
    any, and a pass_* column per target of ``targets``, None: none), in the order of ``results``;
    the ledgers and session tables stay where the points left them (in memory or on disk) until
    ``write_results`` writes them."""
    rows = [{**r.labels, **r.summary} for r in results]
    _add_throughput_impact(rows)
    offline: dict[str, bool] = {}
    for row in rows:
        policy = str(row["policy"])
        if policy not in offline:
            offline[policy] = is_offline(policy)
        verdicts = judge(row, targets, offline=offline[policy])
        row.update({f"pass_{k}": v for k, v in verdicts.items()})
    summary = pd.DataFrame(rows, columns=_summary_columns(rows))
    steps = tuple(line for r in results for line in r.steps)
    per_replica = [row for r in results for row in r.replicas]
    replicas = (
        pd.DataFrame(per_replica, columns=_replica_columns(per_replica)) if per_replica else None
    )
    return ResultTables(summary, tuple(results), steps, replicas)


def _replica_columns(rows: list[dict[str, Any]]) -> list[str]:
    """replicas.csv's columns: the labels, ``replica``, then the summary's columns."""
    labels = [c for c in ALL_LABEL_COLUMNS if any(c in r for r in rows)]
    rest = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in labels]
    rest.remove("replica")
    return [*labels, "replica", *rest]


def _baseline_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in ALL_LABEL_COLUMNS if k != "gpu_kv_gb")


def _add_throughput_impact(rows: list[dict[str, Any]]) -> None:
    """throughput_impact = 1 - throughput / throughput with gpu_kv_gb = inf and otherwise the same
    labels. Added to every row when the run holds such baseline rows (0 on the baselines)."""
    base = {_baseline_key(r): r["throughput_tok_s"] for r in rows if math.isinf(r["gpu_kv_gb"])}
    if not base:
        return
    for r in rows:
        ref = base.get(_baseline_key(r), math.nan)
        r["throughput_impact"] = (
            1.0 - r["throughput_tok_s"] / ref if ref and not math.isnan(ref) else math.nan
        )


def _summary_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Labels (a cluster's router and replicas only when the rows have them), SUMMARY_COLUMNS,
    extra metric columns (per-class Jain, a cluster's) in first-seen order, then throughput_impact
    and the pass_* columns."""
    labels = [c for c in ALL_LABEL_COLUMNS if c in LABEL_COLUMNS or any(c in r for r in rows)]
    fixed = labels + list(SUMMARY_COLUMNS)
    extra: list[str] = []
    passes: list[str] = []
    for row in rows:
        for k in row:
            if k in fixed or k in extra or k in passes or k == "throughput_impact":
                continue
            (passes if k.startswith("pass_") else extra).append(k)
    tail = ["throughput_impact"] if any("throughput_impact" in r for r in rows) else []
    return fixed + extra + tail + passes


# ---------------------------------------------------------------------------------------------
# Writing


def read_resolved(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The config.resolved.yaml of a results folder, or None where it has none."""
    path = Path(folder) / CONFIG_FILE
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None


def check_out_dir(out: str | os.PathLike, force: bool) -> Path:
    """Refuse an existing ``out`` unless ``force`` (call before spending time on a run)."""
    out = Path(out)
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    return out


def write_results(
    out: str | os.PathLike,
    experiment: Experiment,
    tables: ResultTables,
    *,
    force: bool = False,
    traces: Sequence[TraceInfo] = (),
    plot_format: str | Sequence[str] = "png",
) -> WrittenResults:
    """Write the results folder atomically; return what was written. ``traces`` (what each trace
    spec loaded to) is recorded in config.resolved.yaml under ``traces_loaded``; the figures are
    ``plot_format`` files (png, pdf or svg; a list: each figure in each, the notes once)."""
    out = check_out_dir(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _usual_permissions(tmp)  # mkdtemp's 0700 would become the results folder's
        tables.summary.to_csv(tmp / SUMMARY_FILE, index=False)
        write_turns(tables.points, tmp / TURNS_FILE)
        write_sessions(tables.points, tmp / SESSIONS_FILE)
        if tables.replicas is not None:
            tables.replicas.to_csv(tmp / REPLICAS_FILE, index=False)
        if tables.steps:
            with (tmp / STEPS_FILE).open("w", encoding="utf-8") as f:
                for line in tables.steps:
                    f.write(line + "\n")
        resolved = {"kvsim_version": kvsim_version(), **experiment.resolved()}
        if traces:
            resolved["traces_loaded"] = [dataclasses.asdict(t) for t in traces]
        (tmp / CONFIG_FILE).write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
        (tmp / PLOTS_DIR).mkdir()
        notes: list[str] = []
        plots = []
        fmts = [plot_format] if isinstance(plot_format, str) else list(plot_format)
        turns = turns_for_figures(tables.summary, tmp / TURNS_FILE)
        for i, fmt in enumerate(fmts):
            drawn = _draw(
                tables.summary,
                turns,
                tmp / PLOTS_DIR,
                notes if i == 0 else [],  # the same data: the same notes, once
                experiment.thresholds(),
                resolved=resolved,
                fmt=fmt,
            )
            plots += [p.relative_to(tmp) for p in drawn]
        files = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if p.is_file())
        _move_into_place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WrittenResults(out_dir=out, files=files, plots=plots, notes=notes)


def _usual_permissions(folder: Path) -> None:
    """Give ``folder`` the mode ``mkdir`` would have (0777 less the umask), read off a folder made
    in it (reading the umask by setting it would race with other threads)."""
    probe = folder / ".mode"
    probe.mkdir()
    mode = stat.S_IMODE(probe.stat().st_mode)
    probe.rmdir()
    os.chmod(folder, mode)


def turns_for_figures(summary: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The turns the figures read, from the turns.parquet just written: the TTFT figure's columns
    alone (its facets' labels, the policy, the capacity and the TTFT), nothing when no figure can
    be drawn."""
    if drawable_points(summary).empty:
        return pd.DataFrame()
    from experiments.plots import FACET_DIMS

    return figure_turns(path, [*FACET_DIMS, "policy", "gpu_kv_gb", "ttft_s"])


def _draw(
    summary: pd.DataFrame,
    turns: pd.DataFrame,
    out_dir: Path,
    notes: list[str],
    targets: Mapping[str, float | None] | None,
    *,
    resolved: Mapping[str, Any] | None = None,
    fmt: str = "png",
) -> list:
    """The figures (``plots.make_plots``, ``load_plots.load_figures`` for a request-rate sweep,
    ``cluster_plots.cluster_figures`` for a cluster's routers); matplotlib is imported only when
    one can be drawn."""
    if drawable_points(summary).empty:
        notes.append(NO_FIGURES)
        return []
    from experiments.cluster_plots import cluster_figures
    from experiments.load_plots import load_figures
    from experiments.plots import make_plots

    drawn = make_plots(summary, turns, out_dir, notes, targets, resolved=resolved, fmt=fmt)
    drawn += load_figures(summary, out_dir, notes, fmt, resolved)
    return drawn + cluster_figures(summary, out_dir, notes, fmt, resolved)


def _move_into_place(tmp: Path, out: Path, force: bool) -> None:
    if not out.exists() and not out.is_symlink():
        os.rename(tmp, out)
        return
    if not force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)  # put the previous results back
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink()
