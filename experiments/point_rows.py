"""A file of every grid point's rows with the point's labels (turns.parquet, sessions.parquet),
written a point and a row group at a time, so that writing it holds one row group of one point's
table, whatever the sweep's size.

A point's table is either in memory, labelled (``PointRows.frame``), or in a parquet file of its
own, without the labels (``PointRows.path``). Either way it is cut into row groups, each given the
point's labels as columns and converted as ``pd.concat`` of every point's frame then
``DataFrame.to_parquet`` would: the file's schema is that of the concatenation (columns in
first-seen order, dtypes as concat unifies them). That schema is found from one row of each point
without reading a file's data: a frame's dtypes do not depend on its values, so a row of zeros
with the file's dtypes (from the schema in its footer, or given) stands for a file's rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from sim.ledger_spool import ROWS_PER_GROUP


def with_labels(df: pd.DataFrame, labels: Mapping[str, Any]) -> pd.DataFrame:
    """``df`` with a column per grid label in front, the point's value on every row."""
    lab = pd.DataFrame({k: [v] * len(df) for k, v in labels.items()}, index=df.index)
    return pd.concat([lab, df], axis=1)


@dataclass(frozen=True)
class PointRows:
    """One point's rows: ``frame`` (labelled, in memory) or the parquet file ``path`` (unlabelled,
    its columns read as ``dtypes``: those given, or the footer's), given ``labels`` as it is read."""

    labels: dict[str, Any]
    frame: pd.DataFrame | None = None
    path: str | os.PathLike | None = None
    dtypes: Mapping[str, Any] | None = None

    def head(self) -> pd.DataFrame:
        """A frame with this point's columns and dtypes: one row (none where it has none)."""
        if self.frame is not None:
            return self.frame.iloc[:1].reset_index(drop=True)
        assert self.path is not None
        rows = pq.ParquetFile(self.path).metadata.num_rows  # the footer alone
        dtypes = self._dtypes()
        typical = {c: pd.Series([_typical(t)], dtype=t) for c, t in dtypes.items()}
        frame = pd.DataFrame(typical, columns=list(dtypes)).iloc[: min(rows, 1)]
        return with_labels(frame.reset_index(drop=True), self.labels)

    def chunks(self, rows: int) -> Iterator[pd.DataFrame]:
        """The labelled rows, ``rows`` at a time (a file's row groups are read one at a time, and
        cut again where larger)."""
        if self.frame is not None:
            for at in range(0, len(self.frame), rows):
                yield self.frame.iloc[at : at + rows].reset_index(drop=True)
            return
        assert self.path is not None
        dtypes = self._dtypes()
        file = pq.ParquetFile(self.path)
        for g in range(file.num_row_groups):
            group = file.read_row_group(g).to_pandas().astype(dtypes)
            for at in range(0, len(group), rows):
                yield with_labels(group.iloc[at : at + rows].reset_index(drop=True), self.labels)

    def whole(self) -> pd.DataFrame:
        """Every labelled row in one frame (small runs and tests)."""
        if self.frame is not None:
            return self.frame
        parts = list(self.chunks(2**62))
        return pd.concat(parts, ignore_index=True) if parts else self.head()

    def _dtypes(self) -> Mapping[str, Any]:
        if self.dtypes is not None:
            return self.dtypes
        empty = pq.read_schema(self.path).empty_table().to_pandas()
        return dict(empty.dtypes.items())


def _typical(dtype: Any) -> Any:
    """A value of ``dtype``: a text column's (strings: the files hold no other objects) or a
    number."""
    return "" if pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype) else 0


def combined_schema(parts: Sequence[PointRows]) -> pa.Schema:
    """The schema ``pd.concat`` of every point's labelled rows would be written with, from a row
    of each point (none of an empty one)."""
    heads = [p.head() for p in parts]
    return pa.Schema.from_pandas(
        pd.concat(heads, ignore_index=True) if heads else pd.DataFrame(), preserve_index=False
    )


def write_points(
    parts: Sequence[PointRows], path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP
) -> None:
    """The file at ``path``: the points' rows in the order of ``parts``."""
    schema = combined_schema(parts)
    with pq.ParquetWriter(path, schema) as out:
        for part in parts:
            for chunk in part.chunks(rows_per_group):
                for f in schema:  # a column other points have (or null in all): empty here
                    if f.name not in chunk or pa.types.is_null(f.type):
                        chunk[f.name] = pd.Series([None] * len(chunk), dtype=object)
                table = pa.Table.from_pandas(
                    chunk[schema.names], schema=schema, preserve_index=False
                )
                out.write_table(table)


def write_unlabelled(
    frame: pd.DataFrame, path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP
) -> None:
    """``frame`` (a point's table, without labels) as the parquet file ``path``, in row groups of
    ``rows_per_group`` rows, read back by ``PointRows`` with the same dtypes and values. The file
    appears only once complete."""
    part = f"{os.fspath(path)}.part"
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(table, part, row_group_size=rows_per_group)
        os.replace(part, path)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise
