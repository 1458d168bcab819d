"""Streaming a trace: a stream of sessions gives the ledger the list gives, is pulled lazily, lets
go of finished sessions, and checks its order; the ledger is kept as columns."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import pandas as pd
import pytest

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import GIB
from sim.engine import Engine
from sim.results import TURN_COLUMNS, TURN_DTYPES, Ledger, TurnRecord, ledger_frame
from sim.samples import Samples
from sim.scheduler import POOL_INDEX, Scheduler
from traces.jsonl import _line, iter_jsonl, read_jsonl, write_jsonl
from traces.records import Session, TraceError, Turn
from traces.synthetic import SyntheticConfig, generate_synthetic

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token
SYN = generate_synthetic(SyntheticConfig(sessions=120, seed=5, arrival_rate_per_s=2.0)).sessions
# A GPU far below the trace's demand (10 GiB) and a small CPU tier: evictions, drops, preemptions,
# and a few turns longer than the whole GPU (rejected with the rest of their session).
TIGHT = MemoryConfig(gpu_kv_gb=1.5, cpu_kv_gb=0.75)
# the only fields of the result that are not simulated (the number of eviction timings is)
WALL_CLOCK = {"wall_s", "evict_ns"}


class Counted:
    """A stream that counts the sessions taken from it."""

    def __init__(self, sessions) -> None:
        self._it = iter(sessions)
        self.pulled = 0

    def __iter__(self):
        return self

    def __next__(self) -> Session:
        s = next(self._it)
        self.pulled += 1
        return s


def assert_same_result(a, b) -> None:
    pd.testing.assert_frame_equal(a.turns, b.turns, check_exact=True)
    assert list(a.turns.dtypes) == list(b.turns.dtypes)
    for f in dataclasses.fields(a.stats):
        if f.name in WALL_CLOCK:
            continue
        x, y = getattr(a.stats, f.name), getattr(b.stats, f.name)
        if isinstance(x, Samples):
            assert x.exact and y.exact, f.name
            for xa, ya in zip(x.arrays(), y.arrays(), strict=True):
                np.testing.assert_array_equal(xa, ya, err_msg=f.name)
        elif isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y or (x != x and y != y), f.name
    assert len(a.stats.evict_ns) == len(b.stats.evict_ns)


# The slower policies on the first 60 sessions (still evicting and dropping; no turn rejected).
@pytest.mark.parametrize(
    "policy,unit,n",
    [
        ("lru", "block", 120),
        ("lru", "layer_block", 120),
        ("fifo", "session", 120),
        ("belady", "block", 60),
        ("s3fifo", "block", 60),
        ("arc", "block", 60),
    ],
)
def test_a_stream_gives_the_ledger_of_the_list(policy, unit, n):
    mem = dataclasses.replace(TIGHT, evict_unit=unit)
    trace = SYN[:n]
    listed = simulate(trace, COST, mem, policy=policy)
    streamed = simulate(Counted(trace), COST, mem, policy=policy)
    assert len(listed.turns) + listed.stats.rejected_turns == sum(len(s.turns) for s in trace)
    assert listed.stats.swap_out_bytes > 0 and listed.stats.dropped_bytes > 0  # evictions happen
    assert listed.stats.rejected_turns > 0 or n < len(SYN)
    assert_same_result(listed, streamed)


def test_a_streamed_file_gives_the_ledger_of_the_file_read_whole(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(SYN, path)  # the loaders' order: one a stream can read
    whole = read_jsonl(path).sessions[:60]
    path = tmp_path / "head.jsonl"
    write_jsonl(whole, path)
    engine = EngineConfig(prefetch="think")
    for policy in ("lru", "pensieve"):
        assert_same_result(
            simulate(whole, COST, TIGHT, engine, policy=policy),
            simulate(iter_jsonl(path), COST, TIGHT, engine, policy=policy),
        )


def test_the_stream_is_pulled_lazily_and_finished_sessions_are_let_go():
    trace = SYN[:60]
    stream = Counted(trace)
    starts = sorted(s.start_s for s in trace)
    seen = []

    def check(sched, step, now):
        # Pulled: every session that has started, and the next one (its first arrival scheduled).
        started = int(np.searchsorted(starts, now, side="right"))
        assert stream.pulled == min(len(trace), started + 1)
        live = sum(not kv.done for i, kv in sched.kv.items() if i != POOL_INDEX)
        assert sum(s is not None for s in sched.sessions) == live
        seen.append((sched.completed, stream.pulled))

    res = simulate(stream, COST, TIGHT, policy="lru", on_iteration=check)
    first_done = next(pulled for completed, pulled in seen if completed >= 1)
    assert first_done < len(trace) // 10
    assert stream.pulled == len(trace)
    # on_iteration runs one iteration at a time (no decode spans): so does the list's run.
    listed = simulate(trace, COST, TIGHT, policy="lru", on_iteration=lambda *a: None)
    assert_same_result(listed, res)


def test_finished_sessions_release_their_records():
    sched = Scheduler(Counted(SYN[:10]), COST, TIGHT, EngineConfig(), "lru")
    Engine(sched).run()
    assert sched.completed == sum(len(s.turns) for s in SYN[:10])
    # every record left is a finished session's that still holds KV on the GPU or the CPU
    assert sched.sessions == {} and all(kv.done for kv in sched.kv)
    assert all(kv.tier_pages[0] + kv.tier_pages[1] for kv in sched.kv)


def test_a_stream_out_of_order_is_an_error():
    swapped = list(SYN[:6])
    swapped[2], swapped[4] = swapped[4], swapped[2]
    late = swapped[3].session_id
    with pytest.raises(ValueError, match=rf"out of order: session '{late}' \(#3\)"):
        simulate(iter(swapped), COST, TIGHT)
    no_start = Session("x", (Turn(10, 10, think_s=1.0),))
    with pytest.raises(ValueError, match="'x' .* arrival_s"):
        simulate(iter([no_start]), COST, TIGHT)


def test_a_policy_fitted_on_the_whole_trace_refuses_a_stream():
    with pytest.raises(ValueError, match="policy 'predictive' .* not a stream"):
        simulate(iter(SYN), COST, TIGHT, policy="predictive")
    simulate(SYN[:20], COST, TIGHT, policy="predictive")  # a list is fine


# -- prefix sharing --------------------------------------------------------------------------------


def hashed_trace(n: int = 60, seed: int = 2, plain_first: int = 0) -> list[Session]:
    """Sessions whose first prompts start with one of three shared system prompts."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        turns_later = [
            Turn(rng.randint(1, 100), rng.randint(1, 80), think_s=rng.uniform(0, 5))
            for _ in range(rng.randint(0, 3))
        ]
        if i < plain_first:
            out.append(
                Session(
                    f"p{i:03d}",
                    (
                        Turn(rng.randint(40, 260), rng.randint(1, 120), arrival_s=i * 0.7),
                        *turns_later,
                    ),
                )
            )
            continue
        sys_prompt = rng.choice([1, 2, 3])
        hashes = [sys_prompt * 1000 + j for j in range(rng.randint(1, 6))]
        hashes.append(rng.randint(10**6, 10**7))  # the session's own block
        first = Turn(
            rng.randint(40, 260),
            rng.randint(1, 120),
            arrival_s=i * 0.7,
            prefix_hashes=tuple(hashes),
        )
        out.append(Session(f"h{i:03d}", (first, *turns_later), block_tokens=32))
    return out


@pytest.mark.parametrize("policy", ["lru", "belady", "s3fifo"])
def test_prefix_sharing_with_a_stream(policy):
    trace = hashed_trace(plain_first=5)  # the pool starts when the 6th session comes
    mem = MemoryConfig(gpu_kv_gb=60 * PAGE / GIB, cpu_kv_gb=20 * PAGE / GIB)
    listed = simulate(trace, COST, mem, policy=policy)
    streamed = simulate(iter(trace), COST, mem, policy=policy, debug=True)  # invariants checked
    assert streamed.turns["shared_hit_tokens"].sum() > 0
    assert streamed.stats.dropped_bytes > 0
    assert_same_result(listed, streamed)


def test_prefix_sharing_pool_sits_after_every_session_in_both_modes():
    trace = hashed_trace(n=8)
    mem = MemoryConfig(gpu_kv_gb=math.inf)
    for sessions in (trace, iter(trace)):
        sched = Scheduler(sessions, COST, mem, EngineConfig(), "lru")
        assert sched.share is not None and sched.kv[POOL_INDEX] is sched.share.pool
        assert sched.share.pool.index == POOL_INDEX > len(trace)


def test_prefix_sharing_config_errors_come_with_the_first_hashed_session_of_a_stream():
    trace = hashed_trace(n=10, plain_first=3)
    mem = MemoryConfig(gpu_kv_gb=math.inf, evict_unit="layer_block")
    with pytest.raises(ValueError, match="evict_unit must be block"):
        simulate(iter(trace), COST, mem)
    plain = hashed_trace(n=5, plain_first=5)  # no hashes: no pool, any unit
    simulate(iter(plain), COST, mem)


# -- iter_jsonl ------------------------------------------------------------------------------------


def _jsonl(sessions) -> str:
    """The canonical lines of ``sessions``, in the order given (no checks: for bad files too)."""
    return "".join(
        json.dumps(_line(s, k, t)) + "\n" for s in sessions for k, t in enumerate(s.turns)
    )


def test_iter_jsonl_yields_what_read_jsonl_reads(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(hashed_trace(n=30, plain_first=4), path)
    stream = iter_jsonl(path)
    got = tuple(stream)
    assert got == read_jsonl(path).sessions
    turns = sum(len(s.turns) for s in got)
    assert (stream.sessions, stream.turns, stream.skipped) == (30, turns, 0)


def test_iter_jsonl_names_the_line_of_a_session_that_is_not_contiguous(tmp_path):
    a = Session("a", (Turn(10, 5, arrival_s=0.0), Turn(3, 4, think_s=1.0)))
    b = Session("b", (Turn(10, 5, arrival_s=1.0),))
    lines = _jsonl([a, b]).splitlines()
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([lines[0], lines[2], lines[1]]) + "\n")  # a0, b0, a1
    assert [s.session_id for s in read_jsonl(path).sessions] == ["a", "b"]  # fine when read whole
    with pytest.raises(TraceError, match=r"t\.jsonl:3: session 'a' continues after other sessions"):
        list(iter_jsonl(path))


def test_iter_jsonl_names_the_line_where_first_arrivals_go_backwards(tmp_path):
    a = Session("a", (Turn(10, 5, arrival_s=2.0),))
    b = Session("b", (Turn(10, 5, arrival_s=1.0),))
    c = Session("c", (Turn(10, 5, arrival_s=1.0),))
    path = tmp_path / "t.jsonl"
    path.write_text(_jsonl([a, b]))
    with pytest.raises(
        TraceError,
        match=r"t\.jsonl:2: session 'b' starts at 1.0 s, before session "
        r"'a' \(line 1, 2.0 s\)",
    ):
        list(iter_jsonl(path))
    path.write_text(_jsonl([c, b]))  # equal starts: session_id order, as read_jsonl's
    with pytest.raises(TraceError, match=r"t\.jsonl:2: session 'b'"):
        list(iter_jsonl(path))
    path.write_text(_jsonl([b, c, a]))
    assert tuple(iter_jsonl(path)) == read_jsonl(path).sessions


def test_iter_jsonl_checks_lines_as_read_jsonl_does(tmp_path):
    good = Session("a", (Turn(10, 5, arrival_s=0.0), Turn(3, 4, think_s=1.0)))
    later = Session("c", (Turn(10, 5, arrival_s=3.0),))
    path = tmp_path / "t.jsonl"
    bad_lines = [
        '{"session_id": "b", "turn": 0, "arrival_s": 1.0, "prompt_tokens": 5, "output_tokens": 0}',
        '{"session_id": "b", "turn": 1, "think_s": 1.0, "prompt_tokens": 5, "output_tokens": 2}',
        "not json",
    ]
    path.write_text(_jsonl([good]) + "\n".join(bad_lines) + "\n" + _jsonl([later]))
    with pytest.raises(TraceError) as whole:
        read_jsonl(path)
    with pytest.raises(TraceError) as streamed:
        list(iter_jsonl(path))
    assert str(streamed.value) == str(whole.value) and "t.jsonl:3:" in str(whole.value)
    skipped = read_jsonl(path, on_error="skip")
    stream = iter_jsonl(path, on_error="skip")
    assert tuple(stream) == skipped.sessions
    assert [s.session_id for s in skipped.sessions] == ["a", "c"]
    assert stream.skipped == skipped.skipped == 2


# -- the columnar ledger ---------------------------------------------------------------------------


def test_the_ledger_is_columns_with_the_schema_of_turn_records():
    sched = Scheduler(list(SYN[:15]), COST, TIGHT, EngineConfig(), "lru")
    Engine(sched).run()
    ledger = sched.ledger
    assert isinstance(ledger, Ledger) and len(ledger) == sched.completed
    assert all(type(col).__name__ in ("array", "list") for col in ledger.columns.values())
    rows = ledger.records()
    assert all(isinstance(r, TurnRecord) for r in rows)
    by_rows, by_columns = ledger_frame(rows), ledger_frame(ledger)
    pd.testing.assert_frame_equal(by_rows, by_columns, check_exact=True)
    assert dict(by_columns.dtypes.astype(str)) == TURN_DTYPES
    assert list(by_columns.columns) == list(TURN_COLUMNS)
    ordered = ledger_frame(ledger, sort=True)
    expect = by_rows.sort_values(["session_id", "turn"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(ordered, expect, check_exact=True)
    first_id = ordered["session_id"].iloc[0]
    assert any(i is first_id for i in ledger.columns["session_id"])  # the ids, not copies
    ledger.append(*dataclasses.astuple(rows[0]))  # a frame made without release: it grows on
    assert len(ledger) == len(rows) + 1
    released = ledger_frame(ledger, sort=True, release=True)
    assert len(ledger) == 0 and len(released) == len(rows) + 1
    ledger.append(*dataclasses.astuple(rows[0]))
    pd.testing.assert_frame_equal(ledger_frame(ledger), by_rows.iloc[:1], check_exact=True)


def test_an_empty_ledger_keeps_the_schema():
    for empty in (Ledger(), []):
        frame = ledger_frame(empty, sort=True)
        assert len(frame) == 0 and dict(frame.dtypes.astype(str)) == TURN_DTYPES
