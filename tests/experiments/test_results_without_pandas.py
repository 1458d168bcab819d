"""A run that draws no figure and prints no table writes its results without pandas: the session
table and summary from numpy (``sim.metrics.session_columns``), summary.csv by the csv module
(``experiments.results.write_csv``), turns.parquet and sessions.parquet by pyarrow
(``experiments.point_rows``). Each is checked against the pandas way it replaces, to the byte: the
same text, the same files (schema, metadata, values, row groups), the same table values. And the
single-turn run imports no pandas at all (checked in a fresh interpreter), while the same run with
its summary table printed does."""

from __future__ import annotations

import dataclasses
import filecmp
import math
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments import point_rows
from experiments.point_rows import PointRows, write_columns, write_points, write_unlabelled
from experiments.results import SummaryRows, write_csv
from sim.metrics import SESSION_COLUMNS, session_columns, session_frame, session_table, summarize
from sim.results import TURN_COLUMNS, TURN_DTYPES, EngineStats, SimResult
from sim.samples import Samples

REPO_ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
name: no-pandas
trace: {kind: synthetic, sessions: 20, seed: 1, turns_pmf: [1.0]}
model: llama-3-8b
hardware: a100-sxm
memory: {gpu_kv_gb: .inf, cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
engine: {max_batch_tokens: 4096, max_running: 128}
policies: [lru]
seeds: [1]
executor: {kind: local, workers: 1}
"""


def _run_imports_pandas(tmp_path: Path, *flags: str) -> bool:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "out"
    code = (
        "import sys; from experiments.cli import main; "
        f"rc = main(['run', {str(cfg)!r}, '--out', {str(out)!r}, *{list(flags)!r}]); "
        "print(rc, 'pandas' in sys.modules)"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    rc, imported = got.stdout.strip().splitlines()[-1].split()
    assert rc == "0" and (out / "summary.csv").is_file(), got.stderr
    for name in ("turns.parquet", "sessions.parquet"):
        assert pq.ParquetFile(out / name).metadata.num_rows == 20
    return imported == "True"


def test_a_quiet_single_turn_run_imports_no_pandas(tmp_path):
    assert not _run_imports_pandas(tmp_path, "--quiet")


def test_the_run_with_its_table_printed_imports_pandas(tmp_path):
    """The twin: the summary table on the terminal is a frame (``experiments.report``)."""
    assert _run_imports_pandas(tmp_path)


# ---------------------------------------------------------------------------------------------
# summary.csv

CELL = st.one_of(
    st.none(),
    st.just("<missing>"),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e16, 1e-5, 0.1, 123456789.125, 2.0**60, math.nan, math.inf]),
    st.text(alphabet="ab,\"' \né", max_size=4),
    st.sampled_from([np.float64(0.1), np.int64(3), np.bool_(True), np.float32(0.5), (1, 2)]),
)


@st.composite
def summaries(draw):
    """Rows of a few columns; each column's cells of one kind or mixed (a kind per column is the
    usual summary: labels, counts, rates, verdicts with None)."""
    n_cols, n_rows = draw(st.integers(1, 4)), draw(st.integers(0, 4))
    columns = [f"c{i}" for i in range(n_cols)]
    rows: list[dict] = [{} for _ in range(n_rows)]
    for c in columns:
        cell = draw(st.sampled_from([CELL, CELL.filter(lambda v: v is not None)]))
        for row in rows:
            v = draw(cell)
            if not (isinstance(v, str) and v == "<missing>"):
                row[c] = v
    return SummaryRows(tuple(rows), tuple(columns))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=summaries())
def test_write_csv_is_pandas_to_csv(tmp_path_factory, table):
    folder = tmp_path_factory.mktemp("csv")
    write_csv(table, folder / "got.csv")
    table.frame().to_csv(folder / "want.csv", index=False)
    assert (folder / "got.csv").read_bytes() == (folder / "want.csv").read_bytes()


def test_write_csv_writes_a_summary_row_itself(tmp_path):
    """A summary's kinds (text, integers, floats with NaN and inf, verdicts with None) need no
    frame: the csv module writes it, the same text as pandas."""
    rows = (
        {"policy": "lru", "gpu_kv_gb": math.inf, "turns": 3, "jain": math.nan, "pass_x": None},
        {"policy": "a,b", "gpu_kv_gb": 0.5, "turns": 4, "jain": 0.25, "pass_x": True},
    )
    table = SummaryRows(rows, ("policy", "gpu_kv_gb", "turns", "jain", "pass_x"))
    with mock.patch.object(SummaryRows, "frame", side_effect=AssertionError("a frame")):
        write_csv(table, tmp_path / "got.csv")
    table.frame().to_csv(tmp_path / "want.csv", index=False)
    assert (tmp_path / "got.csv").read_bytes() == (tmp_path / "want.csv").read_bytes()


# ---------------------------------------------------------------------------------------------
# the session table

FLOATS = st.one_of(
    st.floats(min_value=-1e6, max_value=1e6),
    st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-300, 0.1, 1 / 3]),
)


@st.composite
def ledgers(draw, nan=True):
    """A ledger in (session_id, turn) order: sessions of 1-40 turns (a long one sums in several
    of numpy's blocks), floats of any size, NaN and infinities among them where ``nan``."""
    floats = FLOATS if nan else st.floats(min_value=-1e6, max_value=1e6)
    rows = []
    for s in range(draw(st.integers(1, 12))):
        sid = f"s{s:02d}"
        for k in range(draw(st.sampled_from([1, 1, 2, 3, 9, 17, 40]))):
            row = {c: 0 for c in TURN_COLUMNS}
            row.update(session_id=sid, turn=k, priority=draw(st.integers(0, 2)))
            for c in ("history_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "recomputed_tokens"):
                row[c] = draw(st.integers(0, 50))
            row["ttft_s"], row["ttft_ideal_s"] = draw(floats), draw(floats)
            rows.append(row)
    return pd.DataFrame(rows, columns=list(TURN_COLUMNS)).astype(TURN_DTYPES)


def pandas_session_table(turns: pd.DataFrame) -> pd.DataFrame:
    """The session table as the code before this one built it: pandas' groupby of the rows in
    (session_id, turn) order by their sorted session ranks."""
    codes, uniques = pd.factorize(turns["session_id"], sort=True)
    order = np.lexsort((turns["turn"].to_numpy(), codes))
    keys = codes[order].astype(np.int32)

    def grouped(name, how):
        return getattr(pd.Series(turns[name].to_numpy()[order]).groupby(keys), how)()

    out = pd.DataFrame(
        {
            "turns": grouped("turn", "size"),
            "priority": grouped("priority", "first"),
            **{
                c: grouped(c, "sum")
                for c in ("history_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "recomputed_tokens")
            },
        }
    )
    ttft = turns["ttft_s"].to_numpy()[order]
    ideal = turns["ttft_ideal_s"].to_numpy()[order]
    out["ttft_mean_s"] = pd.Series(ttft.copy()).groupby(keys).mean()
    with np.errstate(all="ignore"):
        slowdown = ttft / ideal
    slowdown[~(ideal > 0)] = np.nan
    out["mean_slowdown"] = pd.Series(slowdown).groupby(keys).mean()
    hist = out["history_tokens"].astype(float)
    out["hit_fraction"] = ((out["gpu_hit_tokens"] + out["cpu_hit_tokens"]) / hist).where(hist > 0)
    out.index = pd.Index(np.asarray(uniques, dtype=object), name="session_id")
    return out.reset_index()[list(SESSION_COLUMNS)]


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=st.one_of(ledgers(), ledgers(nan=False)))
def test_session_columns_are_pandas_groupby(turns):
    """To the bit: the means summed by numpy's reduceat where the column has no NaN, by Kahan's
    sum with NaN left out where it has (pandas' two ways)."""
    got = session_table(SimResult(turns=turns, stats=None))  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(got, pandas_session_table(turns), check_exact=True)


def _stats() -> EngineStats:
    base = {f.name: 0 for f in dataclasses.fields(EngineStats)}
    base.update(sim_time_s=10.0, output_tokens=100, tbt=Samples.of([0.01, 0.02], [3, 1]))
    base.update(evict_ns=Samples.of([], None), gpu_util=0.5)
    return EngineStats(**base)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=ledgers())
def test_summarize_reads_columns_as_the_frame(turns):
    """summarize given session_columns' arrays, the frame of them, or nothing: the same row
    (per-class Jain columns included, NaN where NaN)."""
    result = SimResult(turns=turns, stats=_stats())
    columns = session_columns(result)
    rows = [summarize(result, columns), summarize(result, session_frame(columns))]
    rows.append(summarize(result))
    for row in rows[1:]:
        assert row.keys() == rows[0].keys()
        for k, v in rows[0].items():
            assert v == row[k] or (v != v and row[k] != row[k]), k


# ---------------------------------------------------------------------------------------------
# turns.parquet, sessions.parquet

LABEL_VALUES = {
    "str": st.sampled_from(["lru", "é", ""]),
    "int64": st.integers(-3, 3),
    "float64": st.sampled_from([0.5, math.inf, math.nan, -0.0]),
    "bool": st.booleans(),
}


@st.composite
def points(draw):
    """1-4 points, each a file of its own (a ledger written as the spool writes it, or a session
    table as ``write_columns`` does), labels of one kind per name over the points."""
    kinds = draw(st.lists(st.sampled_from(list(LABEL_VALUES)), min_size=1, max_size=4))
    sessions = draw(st.booleans())  # one kind of file for the whole run, as a run's
    out = []
    for _ in range(draw(st.integers(1, 4))):
        labels = {f"l{i}": draw(LABEL_VALUES[k]) for i, k in enumerate(kinds)}
        n = draw(st.integers(1, 7))
        floats = [draw(FLOATS) for _ in range(n)]
        ints = [draw(st.integers(-(2**40), 2**40)) for _ in range(n)]
        ids = [draw(st.sampled_from(["a", "b", "é"])) for _ in range(n)]
        out.append((labels, sessions, ids, ints, floats))
    return out


def _write_point(path: Path, sessions: bool, ids, ints, floats, file_rows: int) -> PointRows:
    if sessions:
        cols = {
            "session_id": np.array(ids, dtype=object),
            "turns": np.array(ints, dtype=np.int64),
            "hit_fraction": np.array(floats),
        }
        write_columns(
            cols,
            {"session_id": "str", "turns": "int64", "hit_fraction": "float64"},
            path,
            file_rows,
        )
        return PointRows({}, path=str(path))
    schema = pa.schema(
        [("session_id", pa.string()), ("turn", pa.int64()), ("ttft_s", pa.float64())]
    )
    table = pa.Table.from_arrays(
        [pa.array(ids, pa.string()), pa.array(np.array(ints)), pa.array(np.array(floats))],
        schema=schema,
    )  # NaN kept as NaN, as the spool writes it
    pq.write_table(table, path, row_group_size=file_rows)
    return PointRows(
        {}, path=str(path), dtypes={"session_id": object, "turn": "int64", "ttft_s": "float64"}
    )


@pytest.mark.slow
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pts=points(), rows=st.integers(1, 4), file_rows=st.integers(1, 3))
def test_pyarrow_writes_pandas_bytes(tmp_path_factory, pts, rows, file_rows):
    """write_points by pyarrow alone (every point on disk, one kind per column) against the
    pandas way (forced): the same bytes, so the same schema, metadata, values and row groups."""
    folder = tmp_path_factory.mktemp("arrow")
    parts = []
    for i, (labels, sessions, ids, ints, floats) in enumerate(pts):
        part = _write_point(folder / f"p{i}.parquet", sessions, ids, ints, floats, file_rows)
        parts.append(dataclasses.replace(part, labels=labels))
    assert point_rows._ArrowPlan.of(parts) is not None  # the way under test is taken
    write_points(parts, folder / "arrow.parquet", rows)
    with mock.patch.object(point_rows._ArrowPlan, "of", return_value=None):
        write_points(parts, folder / "pandas.parquet", rows)
    assert filecmp.cmp(folder / "arrow.parquet", folder / "pandas.parquet", shallow=False)
    a, b = pq.read_table(folder / "arrow.parquet"), pq.read_table(folder / "pandas.parquet")
    assert a.equals(b, check_metadata=True)


def test_points_of_different_kinds_take_pandas(tmp_path):
    """The twin: a label that is text on one point and a number on another has a column pandas
    unifies (object): no plan; nor a label of None, nor a point in memory."""
    parts = []
    for i, label in enumerate(["a", 1]):
        part = _write_point(tmp_path / f"p{i}.parquet", True, ["a"], [1], [0.5], 4)
        parts.append(dataclasses.replace(part, labels={"x": label}))
    assert point_rows._ArrowPlan.of(parts) is None
    assert point_rows._ArrowPlan.of(parts[:1]) is not None
    assert point_rows._ArrowPlan.of([dataclasses.replace(parts[0], labels={"x": None})]) is None
    frame = PointRows({"x": "a"}, frame=parts[0].whole())
    assert point_rows._ArrowPlan.of([parts[0], frame]) is None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=ledgers(), file_rows=st.integers(1, 5))
def test_write_columns_is_write_unlabelled(tmp_path_factory, turns, file_rows):
    """A point's session file from session_columns' arrays: the bytes write_unlabelled writes
    of session_table's frame."""
    folder = tmp_path_factory.mktemp("sessions")
    from experiments.executor import session_kinds

    columns = session_columns(SimResult(turns=turns, stats=None))  # type: ignore[arg-type]
    write_columns(columns, session_kinds(columns), folder / "a.parquet", file_rows)
    write_unlabelled(session_frame(columns), folder / "b.parquet", file_rows)
    assert filecmp.cmp(folder / "a.parquet", folder / "b.parquet", shallow=False)
