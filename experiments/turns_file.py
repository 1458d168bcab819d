"""turns.parquet and sessions.parquet: every grid point's ledger, and its session table, with its
labels, written a point and a row group at a time (``experiments.point_rows``), so that writing
either holds one row group of one point's table, whatever the sweep's size.

A point's ledger is either in memory (``PointResult.turns``: Ray, cluster and vllm-v1 points) or on
disk (``PointResult.turns_file``: its rows by (session_id, turn), without the labels); so is its
session table (``sessions`` or ``sessions_file``). Either way the file is what ``pd.concat`` of
every point's frame then ``DataFrame.to_parquet`` would write. Rows are in grid order, each point's
by (session_id, turn), or by session_id.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from experiments.executor import PointResult
from experiments.point_rows import PointRows, write_points
from sim.ledger_spool import ROWS_PER_GROUP
from sim.results import TURN_DTYPES

if TYPE_CHECKING:
    import pandas as pd


def write_turns(
    results: Sequence[PointResult], path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP
) -> None:
    """turns.parquet at ``path``: the points' ledgers in the order of ``results``."""
    write_points([turn_rows(r) for r in results], path, rows_per_group)


def write_sessions(
    results: Sequence[PointResult], path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP
) -> None:
    """sessions.parquet at ``path``: the points' session tables in the order of ``results``."""
    write_points([session_rows(r) for r in results], path, rows_per_group)


def turn_rows(result: PointResult) -> PointRows:
    """A point's ledger as rows of turns.parquet: in memory, or its file (``TURN_DTYPES``)."""
    if result.turns is not None:
        return PointRows(result.labels, frame=result.turns)
    assert result.turns_file is not None
    return PointRows(result.labels, path=result.turns_file, dtypes=TURN_DTYPES)


def session_rows(result: PointResult) -> PointRows:
    """A point's session table as rows of sessions.parquet: in memory, or its file."""
    if result.sessions is not None:
        return PointRows(result.labels, frame=result.sessions)
    assert result.sessions_file is not None
    return PointRows(result.labels, path=result.sessions_file)


def combined_frame(results: Sequence[PointResult]) -> pd.DataFrame:
    """Every point's labelled ledger in one frame (the whole of it in memory: small runs, tests)."""
    import pandas as pd

    if not results:
        return pd.DataFrame()
    return pd.concat([r.ledger() for r in results], ignore_index=True)


def combined_sessions(results: Sequence[PointResult]) -> pd.DataFrame:
    """Every point's labelled session table in one frame (small runs, tests)."""
    import pandas as pd

    if not results:
        return pd.DataFrame()
    return pd.concat([r.session_table() for r in results], ignore_index=True)


def figure_turns(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    """What the TTFT figure reads of turns.parquet: ``columns`` (those the file has) of the turns
    with a positive TTFT at a finite GPU capacity -- the only ones it draws -- with the text
    columns as categories, a few bytes a turn."""
    names = set(pq.read_schema(path).names)
    wanted = [c for c in dict.fromkeys(columns) if c in names]
    table = pq.read_table(
        path,
        columns=wanted,
        filters=[("ttft_s", ">", 0.0), ("gpu_kv_gb", "<", float("inf"))],
    )
    text = [
        f.name
        for f in table.schema
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
    ]
    return table.to_pandas(categories=text) if text else table.to_pandas()
