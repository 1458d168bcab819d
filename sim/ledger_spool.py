"""The ledger of a long run on disk: a parquet file written one row group at a time.

``LedgerSpool`` is a ``Ledger`` that writes its columns as a row group every ``rows_per_group``
turns and empties them, so a run holds at most one row group of its ledger, whatever its length.
It writes beside its destination (``<name>.part``) and ``close`` moves the file into place: a
reader never sees half a ledger. Rows are in completion order (the order the engine finished the
turns), not the (session_id, turn) order of ``simulate``'s frame. Every column stays exact: int64
and float64 as the in-memory ledger holds them, session ids as strings.

Arrays are made and read by ``sim.arrow_arrays`` (by their buffers: pyarrow's own conversions
import pandas). ``LedgerFile`` reads such a file back one column at a time (``sim.metrics``
summarizes it so); ``SpooledResult`` is what ``sim.run.simulate_to_file`` returns.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from sim import arrow_arrays
from sim.results import TURN_COLUMNS, TURN_DTYPES, EngineStats, Ledger, SimResult

if TYPE_CHECKING:
    import pandas as pd

# 2**14 turns: a row group of under 4 MiB in memory (232 bytes a turn), 61 per million turns.
# Writing one takes several times its size in arrow's buffers (kept by its allocator): at 2**16,
# 72 MiB above the run, where 2**14 takes 23.
ROWS_PER_GROUP = 2**14

LEDGER_SCHEMA = pa.schema(
    [
        (c, pa.string() if c == "session_id" else pa.from_numpy_dtype(np.dtype(TURN_DTYPES[c])))
        for c in TURN_COLUMNS
    ]
)


class LedgerSpool(Ledger):
    """A Ledger that streams to the parquet file ``path``: ``close`` (the run is over) writes the
    last rows and moves the file into place; ``abort`` (the run failed) removes what was written."""

    __slots__ = ("path", "rows_per_group", "_part", "_writer", "_written")

    def __init__(self, path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP) -> None:
        if rows_per_group < 1:
            raise ValueError(f"rows_per_group must be >= 1, got {rows_per_group}")
        super().__init__()
        self.path = Path(path)
        self.rows_per_group = rows_per_group
        self._part = self.path.with_name(self.path.name + ".part")
        # dictionary pages for the ids alone: numbers gain little from them, and they cost the
        # writer a hash table per column
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(
            self._part, LEDGER_SCHEMA, use_dictionary=["session_id"]
        )
        self._written = 0  # rows already in the file

    def append(self, *values) -> None:
        Ledger.append(self, *values)
        if len(self.columns["session_id"]) >= self.rows_per_group:
            self.flush()

    def __len__(self) -> int:
        return self._written + len(self.columns["session_id"])

    def records(self):
        raise TypeError("a spooled ledger's rows are on disk: read them with LedgerFile")

    def flush(self) -> None:
        """Write the rows held in memory as one row group and let their memory go."""
        held = len(self.columns["session_id"])
        if held == 0:
            return
        assert self._writer is not None, "the spool is closed"
        arrays = [
            arrow_arrays.text(self.columns[c])
            if c == "session_id"
            else arrow_arrays.from_numpy(self._array(c))
            for c in TURN_COLUMNS
        ]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=LEDGER_SCHEMA))
        self._written += held
        self.clear()

    def close(self) -> LedgerFile:
        """The run is over: the last rows written, the file moved into place."""
        self.flush()
        assert self._writer is not None, "the spool is closed"
        self._writer.close()
        self._writer = None
        os.replace(self._part, self.path)
        return LedgerFile(self.path)

    def abort(self) -> None:
        """The run failed: no file is left behind."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._part.unlink(missing_ok=True)
        self.clear()


class LedgerFile:
    """A ledger written by LedgerSpool (rows in completion order), read a column at a time."""

    __slots__ = ("path", "_rows")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._rows = pq.ParquetFile(self.path).metadata.num_rows

    def __len__(self) -> int:
        return self._rows

    def column(self, name: str) -> np.ndarray:
        """One column, in file order: int64 or float64 (session_id: an object array of str).
        Read a row group at a time into one array: arrow's whole-column read would hold the
        column three times over."""
        file = pq.ParquetFile(self.path)
        out = np.empty(self._rows, dtype=TURN_DTYPES[name])
        at = 0
        for g in range(file.num_row_groups):
            part = file.read_row_group(g, columns=[name]).column(0)
            values = part.to_pylist() if name == "session_id" else arrow_arrays.to_numpy(part)
            out[at : at + len(part)] = values
            at += len(part)
        return out

    def session_ranks(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, ranks): the distinct session ids sorted (an object array of str), and each row's
        index into them (int32), without a string object per row: the ids are read as arrow
        dictionaries, a row group at a time. Arrow orders strings by their UTF-8 bytes, which is
        the code point order Python's sort gives."""
        file = pq.ParquetFile(self.path, read_dictionary=["session_id"])
        groups = [
            file.read_row_group(g, columns=["session_id"]).column(0)
            for g in range(file.num_row_groups)
        ]
        if not groups:
            return np.empty(0, dtype=object), np.empty(0, dtype=np.int32)
        column = pa.chunked_array([c for g in groups for c in g.chunks], groups[0].type)
        del groups
        chunks = pa.table({"id": column}).unify_dictionaries().column("id").chunks
        del column
        names = chunks[0].dictionary  # every chunk's, once unified
        by_name = arrow_arrays.to_numpy(pc.array_sort_indices(names))
        rank = np.empty(len(names), dtype=np.int32)
        rank[by_name] = np.arange(len(names), dtype=np.int32)
        ranks = np.empty(self._rows, dtype=np.int32)
        at = 0
        while chunks:
            chunk = chunks.pop(0)  # let each go once mapped
            ranks[at : at + len(chunk)] = rank[arrow_arrays.to_numpy(chunk.indices)]
            at += len(chunk)
        ids = np.empty(len(names), dtype=object)
        ids[:] = names.take(arrow_arrays.from_numpy(by_name)).to_pylist()
        return ids, ranks

    def write_sorted(
        self, path: str | os.PathLike, rows_per_group: int = ROWS_PER_GROUP
    ) -> LedgerFile:
        """The ledger again at ``path``, its rows by (session_id, turn): ``simulate``'s order. A
        column at a time is read whole, reordered and put in a raw file beside ``path``; the
        row groups are then read back from those. So at most a few columns of 8 bytes a row are
        in memory (under a tenth of the ledger), never the whole ledger. The file appears only
        once complete, as the spool's does."""
        path = Path(path)
        part = path.with_name(path.name + ".part")
        scratch = Path(tempfile.mkdtemp(prefix=f".{path.name}.cols-", dir=path.parent))
        try:
            ids, sorted_ranks = self._reordered_columns(scratch)
            with pq.ParquetWriter(part, LEDGER_SCHEMA, use_dictionary=["session_id"]) as out:
                for at in range(0, self._rows, rows_per_group):
                    end = min(at + rows_per_group, self._rows)
                    arrays = [
                        arrow_arrays.text(ids[sorted_ranks[at:end]])
                        if c == "session_id"
                        else arrow_arrays.from_numpy(
                            np.fromfile(
                                scratch / c,
                                dtype=TURN_DTYPES[c],
                                count=end - at,
                                offset=at * 8,  # every numeric column is 8 bytes a row
                            )
                        )
                        for c in TURN_COLUMNS
                    ]
                    out.write_table(pa.Table.from_arrays(arrays, schema=LEDGER_SCHEMA))
            os.replace(part, path)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return LedgerFile(path)

    def _reordered_columns(self, scratch: Path) -> tuple[np.ndarray, np.ndarray]:
        """Each numeric column in (session_id, turn) order, as a raw file ``scratch/<column>``;
        returns the sorted distinct ids and each sorted row's index into them."""
        ids, ranks = self.session_ranks()
        order = np.lexsort((self.column("turn"), ranks))
        sorted_ranks = ranks[order]
        del ranks
        for c in TURN_COLUMNS:
            if c != "session_id":
                self.column(c)[order].tofile(scratch / c)
        return ids, sorted_ranks

    def frame(self) -> pd.DataFrame:
        """The whole ledger in memory, rows by (session_id, turn): the frame ``simulate`` returns
        for the same run (for small runs and tests)."""
        import pandas as pd  # here: a run that reads its ledger by columns builds no frame

        ids, ranks = self.session_ranks()
        order = np.lexsort((self.column("turn"), ranks))
        cols: dict[str, pd.Series | np.ndarray] = {}
        for c in TURN_COLUMNS:
            if c == "session_id":
                a = ids[ranks[order]]
                cols[c] = pd.Series(a, dtype=object, copy=False)
            else:
                cols[c] = self.column(c)[order]
        return pd.DataFrame(cols, columns=list(TURN_COLUMNS), copy=False).astype(TURN_DTYPES)


@dataclass(frozen=True, slots=True)
class SpooledResult:
    """What ``sim.run.simulate_to_file`` returns: the ledger on disk, the engine statistics, the
    run's labels. ``sim.metrics.summarize`` and ``session_table`` read it as a SimResult."""

    ledger: LedgerFile
    stats: EngineStats
    labels: dict = field(default_factory=dict)

    def loaded(self) -> SimResult:
        """The SimResult ``simulate`` gives for the same run: the ledger read into memory."""
        return SimResult(turns=self.ledger.frame(), stats=self.stats, labels=self.labels)
