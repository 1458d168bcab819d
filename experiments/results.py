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

import csv
import dataclasses
import functools
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from experiments.executor import PointResult, TraceInfo
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

if TYPE_CHECKING:
    import pandas as pd

SUMMARY_FILE = "summary.csv"
TURNS_FILE = "turns.parquet"
SESSIONS_FILE = "sessions.parquet"
REPLICAS_FILE = "replicas.csv"
STEPS_FILE = "steps.jsonl"
CONFIG_FILE = "config.resolved.yaml"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class SummaryRows:
    """summary.csv's rows (dicts) and columns, before any frame is made of them."""

    rows: tuple[dict[str, Any], ...]
    columns: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def frame(self) -> pd.DataFrame:
        """The summary as a DataFrame (pandas imported here)."""
        import pandas as pd

        return pd.DataFrame(list(self.rows), columns=list(self.columns))


@dataclass(frozen=True)
class ResultTables:
    """Everything a run produced, as tables (the summary as rows; ``summary``, its frame, and
    ``replicas`` are made on first use, so a run that needs no frame imports no pandas)."""

    summary_rows: SummaryRows  # one row per grid point
    # each point's ledger and session table, in memory or on disk, in grid order
    points: tuple[PointResult, ...]
    steps: tuple[str, ...] = ()  # every point's step log (JSON lines), when asked for
    replica_rows: SummaryRows | None = None  # a cluster run: one row per (grid point, replica)

    @functools.cached_property
    def summary(self) -> pd.DataFrame:
        """summary.csv as a table: one row per grid point."""
        return self.summary_rows.frame()

    @functools.cached_property
    def replicas(self) -> pd.DataFrame | None:
        """replicas.csv as a table (a cluster run), else None."""
        return self.replica_rows.frame() if self.replica_rows is not None else None

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
    summary = SummaryRows(tuple(rows), tuple(_summary_columns(rows)))
    steps = tuple(line for r in results for line in r.steps)
    per_replica = [row for r in results for row in r.replicas]
    replicas = (
        SummaryRows(tuple(per_replica), tuple(_replica_columns(per_replica)))
        if per_replica
        else None
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

_MISSING = object()  # a row without the column: NaN in the frame


def write_csv(table: SummaryRows, path: str | os.PathLike) -> None:
    """``table`` as ``table.frame().to_csv(path, index=False)`` writes it, by the csv module (as
    pandas does) where each column's values are of the kinds ``_csv_cells`` knows; else by
    pandas."""
    cells = [_csv_cells([r.get(c, _MISSING) for r in table.rows]) for c in table.columns]
    if not table.columns or any(c is None for c in cells):
        table.frame().to_csv(path, index=False)
        return
    with open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f, lineterminator="\n")  # pandas' writer and settings
        out.writerow(table.columns)
        out.writerows(zip(*cells))  # type: ignore[arg-type]


def _csv_cells(values: list[Any]) -> list[str] | None:
    """One column's cells as pandas writes them, for Python values of one kind with gaps (None
    or no value; an empty cell): text, booleans, integers, or numbers of a float column
    (integers with gaps are one), written as numpy's ``astype(str)``. None for anything else."""
    present = [v for v in values if v is not _MISSING and v is not None]
    kinds = {type(v) for v in present}
    if int in kinds and any(not -(2**63) <= v < 2**63 for v in present if type(v) is int):
        return None
    if kinds <= {str} or kinds == {bool} or (kinds == {int} and len(present) == len(values)):
        return ["" if v is _MISSING or v is None else str(v) for v in values]
    if kinds <= {int, float}:
        gaps = [v is _MISSING or v is None for v in values]
        numbers = np.array([math.nan if g else v for g, v in zip(gaps, values)], dtype=float)
        text = numbers.astype(str).astype(object)
        text[np.isnan(numbers)] = ""
        return list(text)
    return None


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
        write_csv(tables.summary_rows, tmp / SUMMARY_FILE)
        write_turns(tables.points, tmp / TURNS_FILE)
        write_sessions(tables.points, tmp / SESSIONS_FILE)
        if tables.replica_rows is not None:
            write_csv(tables.replica_rows, tmp / REPLICAS_FILE)
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
        if not _any_drawable(tables.summary_rows):  # no figure: no frame, no pandas
            from experiments.plot_points import NO_FIGURES

            if fmts:
                notes.append(NO_FIGURES)
            fmts = []
        else:
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


def _any_drawable(summary: SummaryRows) -> bool:
    """Whether some row has a finite ``gpu_kv_gb`` (``plot_points.drawable_points`` is not
    empty): the figures' capacity axis."""
    if "gpu_kv_gb" not in summary.columns:
        return bool(len(summary))  # drawable_points would fail as before: let it
    try:
        caps = np.array([r.get("gpu_kv_gb", math.nan) for r in summary.rows], dtype=float)
    except (TypeError, ValueError):
        return True  # let drawable_points judge (and fail) as before
    return bool(np.isfinite(caps).any())


def turns_for_figures(summary: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The turns the figures read, from the turns.parquet just written: the TTFT figure's columns
    alone (its facets' labels, the policy, the capacity and the TTFT), nothing when no figure can
    be drawn."""
    import pandas as pd

    from experiments.plot_points import drawable_points

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
    from experiments.plot_points import NO_FIGURES, drawable_points

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
