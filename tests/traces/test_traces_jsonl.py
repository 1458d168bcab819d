"""The canonical JSONL format: good files, every class of bad line (named by file:line), skip, round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import Session, TraceError, Turn, read_jsonl, write_jsonl

GOOD = (
    "\n".join(
        [
            '{"session_id": "s2", "turn": 0, "arrival_s": 5.0, "prompt_tokens": 10, "output_tokens": 20}',
            '{"session_id": "s1", "turn": 0, "arrival_s": 0.0, "prompt_tokens": 120, "output_tokens": 300}',
            '{"session_id": "s1", "turn": 1, "think_s": 12.5, "prompt_tokens": 40, "output_tokens": 210}',
            "",
            '{"session_id": "s2", "turn": 1, "arrival_s": 9.5, "think_s": 1, "prompt_tokens": 0, '
            '"output_tokens": 1, "priority": 2, "prefix_hashes": [7, 8], "block_tokens": 16}',
        ]
    )
    + "\n"
)


def test_good_file_sessions_sorted_and_fields(write_text):
    load = read_jsonl(write_text("trace.jsonl", GOOD))
    assert [s.session_id for s in load.sessions] == ["s1", "s2"]  # by start time, not file order
    s1, s2 = load.sessions
    assert s1.turns == (Turn(120, 300, arrival_s=0.0), Turn(40, 210, think_s=12.5))
    assert s2.turns[1] == Turn(0, 1, arrival_s=9.5, think_s=1.0, priority=2, prefix_hashes=(7, 8))
    assert s2.block_tokens == 16 and s1.block_tokens is None
    assert load.skipped == 0 and load.source.endswith("trace.jsonl") and load.n_turns == 4


def test_ties_in_start_time_break_on_session_id(write_text):
    lines = [
        json.dumps(
            {"session_id": sid, "turn": 0, "arrival_s": 1.0, "prompt_tokens": 1, "output_tokens": 1}
        )
        for sid in ("b", "c", "a")
    ]
    load = read_jsonl(write_text("t.jsonl", "\n".join(lines)))
    assert [s.session_id for s in load.sessions] == ["a", "b", "c"]


OK0 = '{"session_id": "s1", "turn": 0, "arrival_s": 0.0, "prompt_tokens": 1, "output_tokens": 1}'

# (bad second line, words the error must contain). Line 2 is always the culprit.
BAD_LINES = [
    ('{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": 1', "invalid JSON"),
    ("[1, 2, 3]", "expected a JSON object"),
    ('{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": 1}', "'output_tokens'"),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": 1, "output_tokens": 1, '
        '"foo": 3}',
        "unknown key(s) 'foo'",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": "12", "output_tokens": 1}',
        "'prompt_tokens' must be an integer",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": 1.5, "output_tokens": 1}',
        "'prompt_tokens' must be an integer",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": true, "output_tokens": 1}',
        "'prompt_tokens' must be an integer",
    ),
    (
        '{"session_id": 7, "turn": 1, "think_s": 1.0, "prompt_tokens": 1, "output_tokens": 1}',
        "'session_id' must be a non-empty string",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": "soon", "prompt_tokens": 1, "output_tokens": 1}',
        "'think_s' must be a number",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": -1.0, "prompt_tokens": 1, "output_tokens": 1}',
        "'think_s' must be finite and >= 0",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": NaN, "prompt_tokens": 1, "output_tokens": 1}',
        "'think_s' must be finite",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": -3, "output_tokens": 1}',
        "'prompt_tokens' must be >= 0",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1.0, "prompt_tokens": 1, "output_tokens": 0}',
        "'output_tokens' must be >= 1",
    ),
    (
        '{"session_id": "s1", "turn": -1, "think_s": 1.0, "prompt_tokens": 1, "output_tokens": 1}',
        "'turn' must be >= 0",
    ),
    (
        '{"session_id": "s1", "turn": 2, "think_s": 1.0, "prompt_tokens": 1, "output_tokens": 1}',
        "expected turn 1",
    ),
    (
        '{"session_id": "s1", "turn": 0, "arrival_s": 3.0, "prompt_tokens": 1, "output_tokens": 1}',
        "expected turn 1",
    ),
    (
        '{"session_id": "s1", "turn": 1, "prompt_tokens": 1, "output_tokens": 1}',
        "needs 'think_s' or 'arrival_s'",
    ),
    (
        '{"session_id": "s2", "turn": 0, "think_s": 1.0, "prompt_tokens": 1, "output_tokens": 1}',
        "turn 0 needs 'arrival_s'",
    ),
    (
        '{"session_id": "s1", "turn": 1, "arrival_s": -0.5, "prompt_tokens": 1, "output_tokens": 1}',
        "'arrival_s' must be finite and >= 0",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1, "prompt_tokens": 1, "output_tokens": 1, '
        '"prefix_hashes": [1, "x"], "block_tokens": 16}',
        "'prefix_hashes' must be a list of integers",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1, "prompt_tokens": 1, "output_tokens": 1, '
        '"block_tokens": 0}',
        "'block_tokens' must be >= 1",
    ),
    (
        '{"session_id": "s1", "turn": 1, "think_s": 1, "prompt_tokens": 1, "output_tokens": 1, '
        '"priority": 1.5}',
        "'priority' must be an integer",
    ),
]


@pytest.mark.parametrize("line, words", BAD_LINES, ids=[w for _, w in BAD_LINES])
def test_bad_line_names_file_and_line(write_text, line, words):
    path = write_text("trace.jsonl", OK0 + "\n" + line + "\n")
    with pytest.raises(TraceError) as exc:
        read_jsonl(path)
    msg = str(exc.value)
    assert msg.startswith("trace.jsonl:2: "), msg
    assert words in msg, msg


def test_arrival_before_previous_turn_is_an_error(write_text):
    text = "\n".join(
        [
            '{"session_id": "a", "turn": 0, "arrival_s": 10.0, "prompt_tokens": 1, "output_tokens": 1}',
            '{"session_id": "a", "turn": 1, "arrival_s": 4.0, "prompt_tokens": 1, "output_tokens": 1}',
        ]
    )
    with pytest.raises(TraceError, match=r"^t\.jsonl:2: .*before turn 0's arrival_s"):
        read_jsonl(write_text("t.jsonl", text))


def test_session_level_errors_name_the_offending_line(write_text):
    hashes_no_block = "\n".join(
        [
            OK0,
            '{"session_id": "s1", "turn": 1, "think_s": 1, "prompt_tokens": 1, "output_tokens": 1, '
            '"prefix_hashes": [4]}',
        ]
    )
    with pytest.raises(TraceError, match=r"^t\.jsonl:2: .*prefix_hashes but no block_tokens"):
        read_jsonl(write_text("t.jsonl", hashes_no_block))
    block_mismatch = "\n".join(
        [
            '{"session_id": "s1", "turn": 0, "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, '
            '"block_tokens": 16}',
            '{"session_id": "s1", "turn": 1, "think_s": 1, "prompt_tokens": 1, "output_tokens": 1, '
            '"block_tokens": 32}',
        ]
    )
    with pytest.raises(TraceError, match=r"^t\.jsonl:2: .*block_tokens 32 differs from 16"):
        read_jsonl(write_text("t.jsonl", block_mismatch))


def test_skip_drops_whole_sessions_and_counts_them(write_text):
    text = "\n".join(
        [
            '{"session_id": "a", "turn": 0, "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}',
            '{"session_id": "b", "turn": 0, "arrival_s": 1, "prompt_tokens": 1, "output_tokens": 1}',
            '{"session_id": "b", "turn": 1, "think_s": -2, "prompt_tokens": 1, "output_tokens": 1}',
            '{"session_id": "b", "turn": 2, "think_s": 2, "prompt_tokens": 1, "output_tokens": 1}',
            "not json at all",
            '{"session_id": "c", "turn": 0, "arrival_s": 2, "prompt_tokens": 1, "output_tokens": 1}',
            '{"session_id": "c", "turn": 1, "think_s": 1, "prompt_tokens": 1, "output_tokens": 1}',
            '{"session_id": "d", "turn": 1, "think_s": 1, "prompt_tokens": 1, "output_tokens": 1}',
        ]
    )
    path = write_text("t.jsonl", text)
    with pytest.raises(TraceError, match=r"^t\.jsonl:3: "):
        read_jsonl(path)
    load = read_jsonl(path, on_error="skip")
    assert [s.session_id for s in load.sessions] == ["a", "c"]
    assert len(load.sessions[1].turns) == 2
    # b (bad think_s; its good lines go too), d (turn 1 without turn 0), one line naming no session
    assert load.skipped == 3
    assert load.info["bad_lines_without_session"] == 1


def test_bad_on_error_value_and_missing_file(tmp_path):
    with pytest.raises(TraceError, match="on_error"):
        read_jsonl(tmp_path / "x.jsonl", on_error="ignore")
    with pytest.raises(TraceError, match="cannot open"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_round_trip_hand_built(tmp_path):
    sessions = (
        Session(
            "s1",
            (
                Turn(120, 300, arrival_s=0.0),
                Turn(40, 210, think_s=12.5),
                Turn(5, 7, arrival_s=100.25, think_s=3.0),
            ),
        ),
        Session(
            "s2",
            (
                Turn(0, 1, arrival_s=0.1, priority=-1, prefix_hashes=(1, 2, 3)),
                Turn(9, 9, think_s=0.0, prefix_hashes=(1, 2, 3, 4)),
            ),
            block_tokens=512,
        ),
    )
    path = tmp_path / "rt.jsonl"
    assert write_jsonl(sessions, path) == 5
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {
        "session_id": "s1",
        "turn": 0,
        "arrival_s": 0.0,
        "prompt_tokens": 120,
        "output_tokens": 300,
    }  # traces/jsonl.py's example line, byte for byte in meaning
    assert read_jsonl(path).sessions == sessions


def test_write_rejects_invalid_sessions(tmp_path):
    with pytest.raises(TraceError, match="turn 0 needs arrival_s"):
        write_jsonl([Session("x", (Turn(1, 1, think_s=1.0),))], tmp_path / "w.jsonl")


_times = st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False)
_turn = st.builds(
    Turn,
    prompt_tokens=st.integers(0, 10**6),
    output_tokens=st.integers(1, 10**5),
    arrival_s=st.none(),
    think_s=_times,
    priority=st.integers(-3, 3),
    prefix_hashes=st.lists(st.integers(-(2**62), 2**62), max_size=4).map(tuple),
)


@st.composite
def _sessions(draw):
    n = draw(st.integers(1, 5))
    out = []
    for i in range(n):
        t0 = Turn(
            prompt_tokens=draw(st.integers(0, 999)),
            output_tokens=draw(st.integers(1, 999)),
            arrival_s=draw(_times),
        )
        rest = draw(st.lists(_turn, max_size=4))
        has_hashes = any(t.prefix_hashes for t in rest)
        out.append(Session(f"s{i}", (t0, *rest), block_tokens=16 if has_hashes else None))
    return sorted(out, key=lambda s: (s.start_s, s.session_id))


@settings(max_examples=60, deadline=None)
@given(sessions=_sessions())
def test_round_trip_property(tmp_path_factory, sessions):
    path = tmp_path_factory.mktemp("rt") / "p.jsonl"
    write_jsonl(sessions, path)
    assert read_jsonl(path).sessions == tuple(sessions)
