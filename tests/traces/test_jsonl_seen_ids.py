"""The session ids a JSONL stream remembers (``traces.jsonl.SeenIds``): hashes, 8 bytes an id, in
place of the ids; a hash met is confirmed by reading the file again."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traces.jsonl as tj
from traces.jsonl import SeenIds, _line, iter_jsonl, read_jsonl
from traces.records import Session, TraceError, Turn


def _jsonl(sessions) -> str:
    return "".join(
        json.dumps(_line(s, k, t)) + "\n" for s in sessions for k, t in enumerate(s.turns)
    )


def _sessions(n: int, turns: int = 2) -> list[Session]:
    return [
        Session(
            f"s{i:06d}",
            (Turn(10, 5, arrival_s=float(i)),)
            + tuple(Turn(3, 4, think_s=1.0) for _ in range(turns - 1)),
        )
        for i in range(n)
    ]


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(st.tuples(st.booleans(), st.text(max_size=6)), max_size=300),
    batch=st.integers(1, 8),
)
def test_seen_ids_answers_as_a_set_of_the_ids(ops, batch):
    """Twin: SeenIds against the plain set of the ids it replaced, merges included (a batch of
    1-8). Distinct short strings do not share a 64-bit hash, so the answers are the set's."""
    seen = type("Small", (SeenIds,), {"__slots__": (), "BATCH": batch})()
    plain: set[str] = set()
    for add, sid in ops:
        assert (sid in seen) == (sid in plain)
        if add:
            seen.add(sid)
            plain.add(sid)
    assert len(seen) == len(plain)
    assert all(sid in seen for sid in plain)


def test_seen_ids_keep_eight_bytes_an_id():
    seen = SeenIds()
    for i in range(50_000):
        seen.add(f"syn{i:08d}")
    assert len(seen) == 50_000
    assert len(seen._new) < SeenIds.BATCH  # the rest merged into the array
    assert seen.nbytes == 8 * (50_000 - len(seen._new))
    assert all(f"syn{i:08d}" in seen for i in range(0, 50_000, 97))
    assert not any(f"syn{i:08d}" in seen for i in range(50_000, 51_000))


def test_a_streams_memory_does_not_follow_the_ids_it_has_seen(tmp_path):
    """Read 30,000 sessions and let each go: what the reader still holds is its hashes (8 bytes a
    session, 240 KB), not the ids (about 100 bytes each with a set's entry: 3 MB)."""
    n = 30_000
    path = tmp_path / "t.jsonl"
    path.write_text(_jsonl(_sessions(n, turns=1)))
    stream = iter_jsonl(path)
    next(stream)  # the reader's own start-up (its file buffer) before the count starts
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        got = sum(1 for _ in stream)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert got == n - 1
    assert held < 20 * n, f"{held / n:.0f} bytes a session seen"


def test_distinct_sessions_whose_hashes_collide_still_stream(tmp_path, monkeypatch):
    """Every id with one hash: each new session is checked against the file read again, and the
    stream still gives what read_jsonl gives (the twin)."""
    monkeypatch.setattr(tj, "_id_hash", lambda sid: 7)
    monkeypatch.setattr(SeenIds, "BATCH", 2)
    path = tmp_path / "t.jsonl"
    path.write_text(_jsonl(_sessions(12)))
    reads = []
    real = tj.SessionStream._met_before

    def counted(self, sid, line):
        reads.append(sid)
        return real(self, sid, line)

    monkeypatch.setattr(tj.SessionStream, "_met_before", counted)
    assert tuple(iter_jsonl(path)) == read_jsonl(path).sessions
    assert len(reads) == 11  # every session after the first met a hash already held


@pytest.mark.parametrize("collide", [False, True])
@pytest.mark.parametrize("escaped", [False, True])
def test_a_session_that_comes_back_is_named_at_its_line(tmp_path, monkeypatch, collide, escaped):
    """A session whose lines come back after another's is an error at that line, by a hash that is
    the id's or one that all ids share; its first line names it plainly or with JSON escapes
    (which the file read again decodes)."""
    if collide:
        monkeypatch.setattr(tj, "_id_hash", lambda sid: 7)
    monkeypatch.setattr(SeenIds, "BATCH", 2)  # the hash of "zq" merged into the array by then
    sessions = _sessions(4)
    sessions[0] = Session("zq", sessions[0].turns)
    lines = _jsonl(sessions).splitlines()
    first, back = lines[0], lines[1]  # zq's turn 1 comes after every other session's lines
    if escaped:
        first = first.replace('"zq"', '"\\u007a\\u0071"')
        assert "zq" not in first and json.loads(first)["session_id"] == "zq"
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([first, *lines[2:], back]) + "\n")
    with pytest.raises(
        TraceError, match=r"t\.jsonl:8: session 'zq' continues after other sessions"
    ):
        list(iter_jsonl(path))


def test_a_stream_that_cannot_be_read_again_keeps_the_ids(tmp_path, monkeypatch):
    """A path that is not a regular file (a pipe) is not read twice: its ids are kept whole."""
    monkeypatch.setattr(tj, "_id_hash", lambda sid: 7)  # a hash would say every id came back
    path = tmp_path / "t.jsonl"
    path.write_text(_jsonl(_sessions(5)))
    stream = iter_jsonl(path)
    monkeypatch.setattr(type(stream.path), "is_file", lambda self: False)
    assert tuple(stream) == read_jsonl(path).sessions
