"""Mooncake: prefix-chain session rebuild on a hand-built trace with known answers, and the real trace."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from traces import TraceError, load_mooncake, validate_session
from traces.mooncake import estimate_bucket_s

# (line) timestamp ms, input, output, hash_ids. 512-token blocks: full blocks = input // 512.
ROWS = [
    (0, 1100, 100, [0, 1, 2]),  # 1: A, full blocks [0, 1]
    (0, 1200, 900, [0, 5, 6]),  # 2: B, full blocks [0, 5]
    (3000, 1700, 300, [0, 1, 7, 8]),  # 3: continues A (starts with [0, 1]); p = 1700 - 1200
    (6000, 2100, 50, [0, 1, 7, 9, 10]),  # 4: continues 3 (starts with [0, 1, 7]); p = 2100 - 2000
    (6000, 1300, 20, [0, 1, 11]),  # 5: matches A, but A already continued -> new session
    (9000, 1600, 10, [0, 5, 12, 13]),  # 6: continues B; 1600 - 2100 < 0 -> p = 1600 - 1200
    (9000, 2050, 10, [0, 1, 7, 9, 14]),  # 7: matches 4, but input shrank -> new session
    (12000, 700, 0, [3, 4]),  # 8: one full block: can never be a parent; output 0 -> 1
    (12000, 800, 5, [3, 15]),  # 9: new session (8 has < 2 full blocks)
]


def _write(write_text, rows, name="mc.jsonl"):
    return write_text(
        name,
        "\n".join(
            json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
            for t, i, o, h in rows
        )
        + "\n",
    )


def test_hand_built_chains_known_answer(write_text):
    load = load_mooncake(_write(write_text, ROWS), jitter=False)
    got = {
        s.meta["lines"][0]: (s.meta["lines"], [t.prompt_tokens for t in s.turns])
        for s in load.sessions
    }
    assert got == {
        1: ([1, 3, 4], [1100, 500, 100]),
        2: ([2, 6], [1200, 400]),
        5: ([5], [1300]),
        7: ([7], [2050]),
        8: ([8], [700]),
        9: ([9], [800]),
    }
    assert load.info == {
        "requests": 9,
        "sessions": 6,
        "continuations": 3,
        "multi_turn_sessions": 2,
        "branches_started_new_session": 1,
        "shrunk_inputs_started_new_session": 1,
        "prompt_fallbacks": 1,
        "clamped_outputs": 1,
        "bucket_s": 0.0,
    }
    a = next(s for s in load.sessions if s.meta["lines"][0] == 1)
    assert [t.arrival_s for t in a.turns] == [0.0, 3.0, 6.0]
    assert [t.think_s for t in a.turns] == [None, 3.0, 3.0]
    assert a.turns[1].prefix_hashes == (0, 1, 7, 8) and a.block_tokens == 512
    assert next(s for s in load.sessions if s.meta["lines"][0] == 8).turns[0].output_tokens == 1
    for s in load.sessions:
        validate_session(s)


def test_jitter_stays_in_bucket_keeps_order_and_is_seeded(write_text):
    path = _write(write_text, ROWS)
    a = load_mooncake(path, seed=1, bucket_s=3.0)
    b = load_mooncake(path, seed=1, bucket_s=3.0)
    c = load_mooncake(path, seed=2, bucket_s=3.0)
    assert a.sessions == b.sessions and a.sessions != c.sessions and a.info["bucket_s"] == 3.0
    ts = {i + 1: r[0] / 1000 for i, r in enumerate(ROWS)}
    for s in a.sessions:
        for k, (line, t) in enumerate(zip(s.meta["lines"], s.turns)):
            assert ts[line] <= t.arrival_s < ts[line] + 3.0
            if k:
                assert t.think_s == pytest.approx(t.arrival_s - s.turns[k - 1].arrival_s)
                assert t.think_s >= 0


def test_estimate_bucket():
    assert estimate_bucket_s(np.repeat([0.0, 3000.0, 5999.0, 9000.0], 3)) == pytest.approx(
        3.0, abs=0.01
    )
    assert estimate_bucket_s(np.arange(10.0) * 7) == 0.0  # all distinct: not quantised


@pytest.mark.parametrize(
    "line, words",
    [
        ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "missing key 'hash_ids'"),
        (
            '{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": [1]}',
            "'timestamp'",
        ),
        (
            '{"timestamp": 0, "input_length": 5.5, "output_length": 1, "hash_ids": [1]}',
            "'input_length'",
        ),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}',
            "'hash_ids'",
        ),
        ('{"timestamp": 0, "input_length": 5,', "invalid JSON"),
    ],
)
def test_bad_rows_name_the_line_and_skip_counts(write_text, line, words):
    good = '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}'
    path = write_text("mc.jsonl", f"{good}\n{line}\n{good}\n")
    with pytest.raises(TraceError) as exc:
        load_mooncake(path)
    assert str(exc.value).startswith("mc.jsonl:2: ") and words in str(exc.value), str(exc.value)
    load = load_mooncake(path, on_error="skip")
    assert load.skipped == 1 and load.n_turns == 2


@pytest.fixture(scope="module")
def real(request):
    data_file = request.getfixturevalue("data_file")
    path = data_file("mooncake/conversation_trace.jsonl")
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return path, rows, load_mooncake(path, seed=0)


@pytest.mark.data
def test_real_trace_rebuild(real):
    path, rows, load = real
    assert load.n_turns == len(rows) == 12_031  # PROVENANCE 1.1 row count
    info = load.info
    assert info["sessions"] == len(load.sessions) == len(rows) - info["continuations"]
    # PROVENANCE 1.1: 33.3 % of requests extend an earlier request (>= 2 blocks); the chain
    # matches are those continuations plus the ones turned into new sessions (branches, shrinks).
    matched = (
        info["continuations"]
        + info["branches_started_new_session"]
        + info["shrunk_inputs_started_new_session"]
    )
    assert matched / len(rows) == pytest.approx(0.333, abs=0.01)
    assert info["continuations"] / len(rows) == pytest.approx(0.333, abs=0.02)
    assert info["multi_turn_sessions"] == sum(1 for s in load.sessions if len(s.turns) > 1)
    assert info["bucket_s"] == pytest.approx(3.0, abs=0.01)  # PROVENANCE: 2,997-3,003 ms buckets


@pytest.mark.data
def test_real_trace_turns_are_consistent_with_their_rows(real):
    path, rows, load = real
    seen = set()
    for s in load.sessions:
        validate_session(s)
        assert s.block_tokens == 512
        for k, (line, t) in enumerate(zip(s.meta["lines"], s.turns)):
            r = rows[line - 1]
            seen.add(line)
            assert t.prefix_hashes == tuple(r["hash_ids"]) and t.output_tokens == max(
                1, r["output_length"]
            )
            assert r["timestamp"] / 1000 <= t.arrival_s < r["timestamp"] / 1000 + 3.01
            if k == 0:
                assert t.prompt_tokens == r["input_length"]
                assert len(t.prefix_hashes) == math.ceil(r["input_length"] / 512)
            else:
                p = rows[s.meta["lines"][k - 1] - 1]
                full = p["input_length"] // 512
                assert full >= 2 and tuple(r["hash_ids"][:full]) == tuple(p["hash_ids"][:full])
                new = r["input_length"] - p["input_length"] - p["output_length"]
                assert t.prompt_tokens == (
                    new if new >= 0 else r["input_length"] - p["input_length"]
                )
                assert t.think_s == pytest.approx(t.arrival_s - s.turns[k - 1].arrival_s)
    assert len(seen) == len(rows)  # every request is exactly one turn
    unjittered = load_mooncake(path, jitter=False)
    assert (
        max(t.arrival_s for s in unjittered.sessions for t in s.turns)
        == max(r["timestamp"] for r in rows) / 1000
    )
