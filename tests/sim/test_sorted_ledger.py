"""A spooled ledger rewritten in simulate's row order (LedgerFile.write_sorted): the file holds, in
its own row order, the frame ``simulate`` returns for the same ledger, in row groups of at most the
size asked for, and a failed rewrite leaves nothing behind."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.ledger_spool import LedgerFile, LedgerSpool
from sim.results import TURN_COLUMNS, TURN_DTYPES, Ledger, ledger_frame

IDS = st.text(alphabet="aAbé☃0_", min_size=1, max_size=3)  # code point order is not byte order
VALUE = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.just(math.nan), st.just(math.inf))


@st.composite
def rows(draw):
    """A ledger's rows, in a drawn completion order: sessions of 1-5 turns."""
    ids = draw(st.lists(IDS, min_size=0, max_size=7, unique=True))
    keys = draw(st.permutations([(i, k) for i in ids for k in range(draw(st.integers(1, 5)))]))
    out = []
    for sid, k in keys:
        values = []
        for c in TURN_COLUMNS[2:]:
            is_int = TURN_DTYPES[c] == "int64"
            values.append(draw(st.integers(-(2**62), 2**62) if is_int else VALUE))
        out.append((sid, k, *values))
    return out


def file_rows(path) -> pd.DataFrame:
    """The file's rows in its own order, with the ledger's dtypes."""
    return pq.read_table(path).to_pandas().astype(TURN_DTYPES)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=rows(), spool_rows=st.integers(1, 7), sorted_rows=st.integers(1, 9))
def test_the_sorted_file_holds_simulates_frame(tmp_path_factory, drawn, spool_rows, sorted_rows):
    folder = tmp_path_factory.mktemp("sorted")
    plain, spool = Ledger(), LedgerSpool(folder / "spool.parquet", spool_rows)
    for row in drawn:
        plain.append(*row)
        spool.append(*row)
    written = spool.close().write_sorted(folder / "sorted.parquet", sorted_rows)
    assert isinstance(written, LedgerFile) and len(written) == len(drawn)
    expected = ledger_frame(plain, sort=True)
    pd.testing.assert_frame_equal(file_rows(written.path), expected, check_exact=True)
    meta = pq.ParquetFile(written.path).metadata
    assert all(meta.row_group(g).num_rows <= sorted_rows for g in range(meta.num_row_groups))
    assert sorted(p.name for p in folder.iterdir()) == ["sorted.parquet", "spool.parquet"]


def test_a_failed_rewrite_leaves_nothing(tmp_path, monkeypatch):
    spool = LedgerSpool(tmp_path / "spool.parquet", 2)
    for k in range(5):
        spool.append("s", k, *[0] * (len(TURN_COLUMNS) - 2))
    ledger = spool.close()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        ledger.write_sorted(tmp_path / "sorted.parquet")
    assert [p.name for p in tmp_path.iterdir()] == ["spool.parquet"]
