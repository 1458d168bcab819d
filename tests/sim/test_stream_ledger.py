"""A ledger streamed to disk (sim.ledger_spool, sim.run.simulate_to_file): the file holds the
ledger the in-memory run builds, it appears only once complete, the run holds at most one row group
of it, and the summary row and session table read from it are those of the in-memory result."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodels import cost_model
from sim import MemoryConfig, simulate
from sim.ledger_spool import LedgerFile, LedgerSpool, SpooledResult
from sim.metrics import WALL_CLOCK_COLUMNS, Slo, session_table, summarize
from sim.results import TURN_COLUMNS, EngineStats, Ledger, SimResult, ledger_frame
from sim.run import simulate_to_file
from traces.jsonl import iter_jsonl, write_jsonl
from traces.synthetic import SyntheticConfig, generate_synthetic

COST = cost_model("llama-3-8b", "h100-sxm")
SYN = generate_synthetic(SyntheticConfig(sessions=120, seed=5, arrival_rate_per_s=2.0)).sessions
# evictions, drops, preemptions and a few rejected turns (as in test_streaming)
TIGHT = MemoryConfig(gpu_kv_gb=1.5, cpu_kv_gb=0.75)


def assert_same_summary(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        if k in WALL_CLOCK_COLUMNS:
            continue
        x, y = a[k], b[k]
        assert type(x) is type(y) and (x == y or (x != x and y != y)), (k, x, y)


def assert_same_run(listed: SimResult, spooled: SpooledResult) -> None:
    pd.testing.assert_frame_equal(listed.turns, spooled.loaded().turns, check_exact=True)
    sessions = session_table(listed)
    pd.testing.assert_frame_equal(sessions, session_table(spooled), check_exact=True)
    for slo in (None, Slo(ttft_s=0.5, tpot_s=None)):
        assert_same_summary(summarize(listed, slo=slo), summarize(spooled, slo=slo))


@pytest.mark.slow
@pytest.mark.parametrize(
    "policy,unit,rows",
    [("lru", "block", 3), ("lru", "layer_block", 37), ("fifo", "session", 2**18)],
)
def test_a_spooled_run_gives_the_list_runs_ledger_and_summary(tmp_path, policy, unit, rows):
    mem = dataclasses.replace(TIGHT, evict_unit=unit)
    listed = simulate(SYN, COST, mem, policy=policy)
    path = tmp_path / "turns.parquet"
    spooled = simulate_to_file(path, iter(SYN), COST, mem, policy=policy, rows_per_group=rows)
    assert listed.stats.rejected_turns > 0 and len(spooled.ledger) == len(listed.turns)
    assert spooled.labels == listed.labels and spooled.ledger.path == path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["turns.parquet"]
    assert_same_run(listed, spooled)


def test_a_streamed_file_spooled(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(SYN[:40], path)
    listed = simulate(SYN[:40], COST, TIGHT, policy="pensieve")
    spooled = simulate_to_file(
        tmp_path / "turns.parquet", iter_jsonl(path), COST, TIGHT, policy="pensieve"
    )
    assert_same_run(listed, spooled)


def test_the_file_appears_only_when_complete_and_holds_one_row_group_at_most(tmp_path):
    path = tmp_path / "turns.parquet"
    held = []

    def check(sched, step, now):
        assert not path.exists()
        assert isinstance(sched.ledger, LedgerSpool)
        held.append(len(sched.ledger.columns["session_id"]))

    res = simulate_to_file(path, iter(SYN[:60]), COST, TIGHT, on_iteration=check, rows_per_group=16)
    assert max(held) < 16 and len(res.ledger) > 100
    import pyarrow.parquet as pq

    groups = pq.ParquetFile(path).metadata.num_row_groups
    assert groups == math.ceil(len(res.ledger) / 16)


def test_a_failed_run_leaves_no_file(tmp_path):
    path = tmp_path / "turns.parquet"
    calls = [0]

    def fail(sched, step, now):
        calls[0] += 1
        if calls[0] == 500:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        simulate_to_file(path, iter(SYN), COST, TIGHT, on_iteration=fail, rows_per_group=8)
    assert list(tmp_path.iterdir()) == []


def test_every_turn_rejected_gives_an_empty_ledger_with_the_schema(tmp_path):
    tiny = MemoryConfig(gpu_kv_gb=0.01, cpu_kv_gb=0.0)
    listed = simulate(SYN[:5], COST, tiny)
    spooled = simulate_to_file(tmp_path / "t.parquet", iter(SYN[:5]), COST, tiny)
    assert len(listed.turns) == 0 and spooled.stats.rejected_turns > 0
    assert_same_run(listed, spooled)


def test_a_vllm_v1_engine_is_refused(tmp_path):
    from sim import EngineConfig

    with pytest.raises(ValueError, match="kvsim engine"):
        simulate_to_file(tmp_path / "t.parquet", SYN[:3], COST, TIGHT, EngineConfig(kind="vllm-v1"))


# -- the spool against the in-memory ledger, on ledgers hypothesis draws ---------------------------

# ids that sort differently by code point than by a naive byte or case order
IDS = st.text(alphabet="aAbé☃0_", min_size=1, max_size=3)
FLOAT = st.one_of(
    st.just(0.0), st.floats(0.0, 10.0, allow_nan=False), st.floats(1e-9, 1e-6), st.just(math.nan)
)
SMALL = st.integers(0, 4)


@st.composite
def ledgers(draw):
    """Rows of a ledger: sessions of 1-4 turns, finished in a drawn order, with values that hit
    every branch of the metrics (no history, zero ideal TTFT, NaN TPOT, several classes)."""
    ids = draw(st.lists(IDS, min_size=0, max_size=8, unique=True))
    keys = [(i, k) for i in ids for k in range(draw(st.integers(1, 4)))]
    keys = draw(st.permutations(keys))
    priority = {i: draw(st.integers(0, 2)) for i in ids}
    rows = []
    for sid, k in keys:
        ints = [draw(SMALL) for _ in range(15)]
        floats = [draw(FLOAT) for _ in range(10)]
        rows.append(
            (sid, k, priority[sid], *floats[:4], ints[0] + 1, ints[1] + 1, *ints[2:13])
            + (floats[4], ints[13], ints[14], k, *floats[5:10])
        )
    return rows


def _stats() -> EngineStats:
    return EngineStats(1.0, 1, 10, math.inf, 0.0, 0.5, 0, 0, 0, 0, 0, 0, 0, rejected_turns=2)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ledgers(), per_group=st.integers(1, 9))
def test_the_spooled_ledger_is_the_in_memory_ledger(tmp_path_factory, rows, per_group):
    assert all(len(row) == len(TURN_COLUMNS) for row in rows)
    path = tmp_path_factory.mktemp("spool") / "turns.parquet"
    plain, spool = Ledger(), LedgerSpool(path, per_group)
    for row in rows:
        plain.append(*row)
        spool.append(*row)
        assert len(spool) == len(plain)
        assert len(spool.columns["session_id"]) < per_group
    listed = SimResult(ledger_frame(plain, sort=True), _stats())
    spooled = SpooledResult(spool.close(), _stats())
    np.testing.assert_array_equal(
        spooled.ledger.column("turn"), np.frombuffer(plain.columns["turn"], dtype=np.int64)
    )
    assert_same_run(listed, spooled)
    ids, ranks = LedgerFile(path).session_ranks()
    assert list(ids) == sorted(set(plain.columns["session_id"]))
    assert [ids[r] for r in ranks] == plain.columns["session_id"]
