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

Where every point's rows are in a file, each of them, labels included, of a kind this module
knows (64-bit integers, floats, booleans, text, a label of None), and every point has the same
columns of the same kinds, the file is written by pyarrow alone, without pandas (``_ArrowPlan``):
the same schema, metadata and values (NaN written as null, as pandas' conversion writes it), the
same row groups, so the same bytes. Anything else takes pandas' way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from sim import arrow_arrays
from sim.ledger_spool import ROWS_PER_GROUP

if TYPE_CHECKING:
    import pandas as pd


def with_labels(df: pd.DataFrame, labels: Mapping[str, Any]) -> pd.DataFrame:
    """``df`` with a column per grid label in front, the point's value on every row."""
    import pandas as pd

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
        import pandas as pd

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
        import pandas as pd

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
    import pandas as pd

    return "" if pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype) else 0


def combined_schema(parts: Sequence[PointRows]) -> pa.Schema:
    """The schema ``pd.concat`` of every point's labelled rows would be written with, from a row
    of each point (none of an empty one)."""
    import pandas as pd

    heads = [p.head() for p in parts]
    return pa.Schema.from_pandas(
        pd.concat(heads, ignore_index=True) if heads else pd.DataFrame(), preserve_index=False
    )


def write_points(
    parts: Sequence[PointRows], path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP
) -> None:
    """The file at ``path``: the points' rows in the order of ``parts``."""
    plan = _ArrowPlan.of(parts)
    if plan is not None:
        plan.write(path, rows_per_group)
        return
    import pandas as pd

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


# ---------------------------------------------------------------------------------------------
# Without pandas

# kind -> (arrow type, pandas_type, numpy_type): what ``pa.Table.from_pandas`` writes for a column
# of that pandas dtype ("object": text in an object column; "str": pandas' str dtype, the one it
# infers for text)
_KINDS: dict[str, tuple[Any, str, str]] = {
    "int64": (pa.int64(), "int64", "int64"),
    "float64": (pa.float64(), "float64", "float64"),
    "bool": (pa.bool_(), "bool", "bool"),
    "object": (pa.string(), "unicode", "object"),
    "str": (pa.large_string(), "object", "str"),
}
_BY_PANDAS = {(pt, nt): kind for kind, (_, pt, nt) in _KINDS.items()}
_LABELS = {bool: "bool", int: "int64", float: "float64", str: "str"}
_DTYPES = {np.dtype(t): k for t, k in ((np.int64, "int64"), (float, "float64"), (bool, "bool"))}


def label_kind(value: Any) -> str | None:
    """The kind of the column ``with_labels`` makes of ``value`` (None: one this module does not
    write itself)."""
    if type(value) is int and not -(2**63) <= value < 2**63:
        return None
    return _LABELS.get(type(value))


def _file_kinds(part: PointRows) -> dict[str, str] | None:
    """The kind of each column of a point's file as ``PointRows.chunks`` reads it: its dtypes
    given (text: object), else its footer's pandas metadata (None: a column of another kind)."""
    assert part.path is not None
    schema = pq.read_schema(part.path)
    if part.dtypes is not None:
        if list(part.dtypes) != schema.names:
            return None
        kinds = {}
        for f in schema:
            text = pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            try:
                dtype = np.dtype(part.dtypes[f.name])
            except TypeError:  # one of pandas' own
                return None
            kind = "object" if text and dtype.kind == "O" else _DTYPES.get(dtype)
            if kind is None or not (text or f.type.equals(_KINDS[kind][0])):
                return None
            kinds[f.name] = kind
        return kinds
    meta = json.loads((schema.metadata or {}).get(b"pandas", b"{}")).get("columns", [])
    found = {c["field_name"]: _BY_PANDAS.get((c["pandas_type"], c["numpy_type"])) for c in meta}
    got = {f.name: found.get(f.name) for f in schema}
    ok = all(k is not None and f.type.equals(_KINDS[k][0]) for f, k in zip(schema, got.values()))
    return got if ok else None  # type: ignore[return-value]


@cache
def _pandas_version() -> str:
    """pandas' version (what ``from_pandas`` records), read from its version file without
    importing it where it has one."""
    if "pandas" not in sys.modules:
        spec = importlib.util.find_spec("pandas")
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            try:
                text = (Path(folder) / "_version_meson.py").read_text(encoding="utf-8")
            except OSError:
                continue
            found = re.search(r'^__version__\s*=\s*"([^"]+)"\s*$', text, re.M)
            if found:
                return found.group(1)
    import pandas as pd

    return str(pd.__version__)


def pandas_schema(kinds: Mapping[str, str], version: str) -> pa.Schema:
    """The schema ``pa.Table.from_pandas(frame, preserve_index=False)`` gives a frame whose
    columns are of ``kinds``, its metadata included (pandas ``version``)."""
    columns = [
        {
            "name": name,
            "field_name": name,
            "pandas_type": _KINDS[kind][1],
            "numpy_type": _KINDS[kind][2],
            "metadata": None,
        }
        for name, kind in kinds.items()
    ]
    meta = {
        "index_columns": [],
        "column_indexes": [],
        "columns": columns,
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": version,
    }
    return pa.schema(
        [(name, _KINDS[kind][0]) for name, kind in kinds.items()],
        metadata={b"pandas": json.dumps(meta).encode("utf8")},
    )


def arrow_column(values: Any, kind: str) -> Any:
    """``values`` (a numpy array, or an arrow array or chunked array read from a file) as
    ``pa.Table.from_pandas`` writes a column of ``kind``: NaN as null, text as its type. Built by
    ``sim.arrow_arrays`` (pyarrow's own conversions import pandas)."""
    arrow_type = _KINDS[kind][0]
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if kind == "float64":
            return arrow_arrays.from_numpy(arrow_arrays.to_numpy(values), nan_is_null=True)
        if kind in ("int64", "bool") and values.null_count:
            raise ValueError(f"a {kind} column holds nulls")
        return values.cast(arrow_type)
    if kind in ("object", "str"):
        return arrow_arrays.text(values, arrow_type)
    return arrow_arrays.from_numpy(np.asarray(values, dtype=kind), nan_is_null=True)


def _label_array(value: Any, kind: str, rows: int) -> Any:
    if kind == "str":
        return arrow_arrays.repeated_text(value, rows, pa.large_string())
    return arrow_arrays.from_numpy(np.full(rows, value, dtype=kind), nan_is_null=True)


@dataclass(frozen=True)
class _ArrowPlan:
    """A file written by pyarrow alone: every point's rows in its file, the points' labels and
    columns of one set of kinds (``of``: None where pandas must write it)."""

    parts: tuple[PointRows, ...]
    kinds: dict[str, str]  # every column's, the labels' first

    @classmethod
    def of(cls, parts: Sequence[PointRows]) -> _ArrowPlan | None:
        if not parts or any(p.path is None or p.frame is not None for p in parts):
            return None
        first: dict[str, str] | None = None
        for part in parts:
            labels = {k: label_kind(v) for k, v in part.labels.items()}
            files = _file_kinds(part)
            kinds = {k: v for k, v in labels.items() if v is not None}
            if files is None or len(kinds) < len(labels) or set(kinds) & set(files):
                return None
            if pq.ParquetFile(part.path).metadata.num_rows == 0:
                return None  # an empty point's label columns take pandas' dtypes of nothing
            every = {**kinds, **files}
            if first is None:
                first = every
            elif list(every.items()) != list(first.items()):
                return None
        assert first is not None
        return cls(tuple(parts), first)

    def write(self, path: str | os.PathLike, rows_per_group: int) -> None:
        kinds = self.kinds
        schema = pandas_schema(kinds, _pandas_version())
        with pq.ParquetWriter(path, schema) as out:
            for part in self.parts:
                file = pq.ParquetFile(part.path)
                for g in range(file.num_row_groups):
                    group = file.read_row_group(g)
                    for at in range(0, group.num_rows, rows_per_group):
                        chunk = group.slice(at, rows_per_group)
                        n = chunk.num_rows
                        arrays = [
                            _label_array(part.labels[name], kind, n)
                            if name in part.labels
                            else arrow_column(chunk.column(name), kind)
                            for name, kind in kinds.items()
                        ]
                        out.write_table(pa.Table.from_arrays(arrays, schema=schema))


def write_columns(
    columns: Mapping[str, Any],
    kinds: Mapping[str, str],
    path: str | os.PathLike,
    rows_per_group: int = ROWS_PER_GROUP,
) -> None:
    """``columns`` (numpy arrays, each of its ``kinds``) as ``write_unlabelled`` writes the frame
    of them, without pandas: the same schema, metadata, values and row groups. The file appears
    only once complete."""
    schema = pandas_schema(kinds, _pandas_version())
    part = f"{os.fspath(path)}.part"
    try:
        arrays = [arrow_column(columns[c], kind) for c, kind in kinds.items()]
        pq.write_table(
            pa.Table.from_arrays(arrays, schema=schema), part, row_group_size=rows_per_group
        )
        os.replace(part, path)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise
