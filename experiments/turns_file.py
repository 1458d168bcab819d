"""turns.parquet: every grid point's ledger with its labels, written a point and a row group at a
time, so that writing it holds one row group of one point's ledger, whatever the sweep's size.

A point's ledger is either in memory (``PointResult.turns``: Ray, cluster and vllm-v1 points) or on
disk (``PointResult.turns_file``: its rows by (session_id, turn), without the labels). Either way it
is cut into row groups, each given the point's labels as columns and converted as ``pd.concat`` of
every point's frame then ``DataFrame.to_parquet`` would: the file's schema is that of the
concatenation (columns in first-seen order, dtypes as concat unifies them), found from one row of
each point. Rows are in grid order, each point's by (session_id, turn).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from experiments.executor import PointResult, _with_labels
from sim.ledger_spool import ROWS_PER_GROUP
from sim.results import TURN_DTYPES


def write_turns(
    results: Sequence[PointResult], path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP
) -> None:
    """turns.parquet at ``path``: the points' ledgers in the order of ``results``."""
    schema = combined_schema(results)
    with pq.ParquetWriter(path, schema) as out:
        for result in results:
            for chunk in labelled_chunks(result, rows_per_group):
                for f in schema:  # a column other points have (or null in all): empty here
                    if f.name not in chunk or pa.types.is_null(f.type):
                        chunk[f.name] = pd.Series([None] * len(chunk), dtype=object)
                table = pa.Table.from_pandas(
                    chunk[schema.names], schema=schema, preserve_index=False
                )
                out.write_table(table)


def combined_schema(results: Sequence[PointResult]) -> pa.Schema:
    """The schema ``pd.concat`` of every point's labelled ledger would be written with: the dtypes
    of a frame do not depend on its length, so one row of each point (none of an empty one) stands
    for all of its rows."""
    heads = [next(labelled_chunks(r, 1), None) for r in results]
    frames = [h if h is not None else _empty_ledger(r) for h, r in zip(heads, results)]
    return pa.Schema.from_pandas(
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), preserve_index=False
    )


def combined_frame(results: Sequence[PointResult]) -> pd.DataFrame:
    """Every point's labelled ledger in one frame (the whole of it in memory: small runs, tests)."""
    if not results:
        return pd.DataFrame()
    return pd.concat([r.ledger() for r in results], ignore_index=True)


def labelled_chunks(result: PointResult, rows: int) -> Iterator[pd.DataFrame]:
    """The point's ledger with its labels, ``rows`` rows at a time (a file's row groups are
    read one at a time, and cut again where larger)."""
    if result.turns is not None:
        for at in range(0, len(result.turns), rows):
            yield result.turns.iloc[at : at + rows].reset_index(drop=True)
        return
    assert result.turns_file is not None
    file = pq.ParquetFile(result.turns_file)
    for g in range(file.num_row_groups):
        group = file.read_row_group(g).to_pandas().astype(TURN_DTYPES)
        for at in range(0, len(group), rows):
            part = group.iloc[at : at + rows].reset_index(drop=True)
            yield _with_labels(part, result.labels)


def _empty_ledger(result: PointResult) -> pd.DataFrame:
    """A point's labelled ledger when it holds no turn (every turn rejected)."""
    if result.turns is not None:
        return result.turns
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in TURN_DTYPES.items()})
    return _with_labels(empty, result.labels)


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
