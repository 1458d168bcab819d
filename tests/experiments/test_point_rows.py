"""experiments.point_rows: a file of every point's labelled rows, written a point and a row group at
a time from frames in memory and from files of their own, equals the points' labelled frames
concatenated and written whole (the plain model), schema and all; its schema needs no file's
data."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_exp_turns_file import LABEL  # the labels a point may carry

from experiments.point_rows import (
    PointRows,
    combined_schema,
    with_labels,
    write_points,
    write_unlabelled,
)


@st.composite
def tables(draw):
    """A session table's kinds of columns: text, integers, floats with NaN; 0-6 rows."""
    n = draw(st.integers(0, 6))
    return pd.DataFrame(
        {
            "session_id": pd.Series(
                [draw(st.sampled_from(["s1", "s2", "é"])) for _ in range(n)], dtype="str"
            ),
            "turns": pd.Series([draw(st.integers(0, 9)) for _ in range(n)], dtype="int64"),
            "hit_fraction": pd.Series(
                [draw(st.sampled_from([0.0, 1.5, math.nan])) for _ in range(n)], dtype="float64"
            ),
        }
    )


def whole(frames, path) -> pd.DataFrame:
    (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()).to_parquet(
        path, index=False
    )
    return pd.read_parquet(path)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    points=st.lists(
        st.tuples(tables(), st.tuples(LABEL, LABEL), st.booleans(), st.booleans()),
        min_size=0,
        max_size=4,
    ),
    rows=st.integers(1, 4),
    file_rows=st.integers(1, 3),
)
def test_write_points_is_concat_then_write(tmp_path_factory, points, rows, file_rows):
    folder = tmp_path_factory.mktemp("rows")
    frames, parts = [], []
    for i, (table, (x, y), on_disk, extra) in enumerate(points):
        labels = {"policy": "lru", "x": x, "y": y}
        if extra and not on_disk:  # a column only some points have
            table = table.assign(replica=range(len(table)))
        frames.append(with_labels(table, labels))
        if on_disk:
            path = folder / f"point-{i}.parquet"
            write_unlabelled(table, path, file_rows)
            parts.append(PointRows(labels, path=str(path)))
        else:
            parts.append(PointRows(labels, frame=frames[-1]))
    try:
        expected = whole(frames, folder / "whole.parquet")
    except (TypeError, ValueError):  # labels pyarrow cannot put in one column: no model to match
        return
    write_points(parts, folder / "points.parquet", rows)
    got = pd.read_parquet(folder / "points.parquet")
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert pq.read_schema(folder / "points.parquet").equals(
        pq.read_schema(folder / "whole.parquet"), check_metadata=True
    )
    meta = pq.ParquetFile(folder / "points.parquet").metadata
    assert all(meta.row_group(g).num_rows <= rows for g in range(meta.num_row_groups))
    for part, frame in zip(parts, frames):
        pd.testing.assert_frame_equal(part.whole(), frame, check_exact=True)


def test_the_schema_reads_no_data(tmp_path, monkeypatch):
    """combined_schema reads a file's footer, never a row group."""
    table = pd.DataFrame({"session_id": pd.Series(["a", "b"], dtype="str"), "turns": [1, 2]})
    write_unlabelled(table, tmp_path / "p.parquet")
    part = PointRows({"policy": "lru"}, path=str(tmp_path / "p.parquet"))
    expected = combined_schema([PointRows({"policy": "lru"}, frame=part.whole())])

    def no_reads(*args, **kwargs):
        raise AssertionError("a row group was read")

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", no_reads)
    monkeypatch.setattr(pq.ParquetFile, "read", no_reads)
    monkeypatch.setattr(pq, "read_table", no_reads)
    assert combined_schema([part]).equals(expected, check_metadata=True)
