"""trace.time_scale stretches arrivals and think times of any trace kind."""

from __future__ import annotations

import pytest

from traces import TraceError, load_trace, write_jsonl
from traces.records import Session, Turn


def test_time_scale_multiplies_arrivals_and_think_times(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(
        [Session("a", (Turn(10, 5, arrival_s=2.0), Turn(3, 4, think_s=1.5, arrival_s=9.0)))], path
    )
    base = load_trace({"kind": "jsonl", "path": str(path)})
    slow = load_trace({"kind": "jsonl", "path": str(path), "time_scale": 4})
    t0, t1 = slow.sessions[0].turns
    assert (t0.arrival_s, t1.think_s, t1.arrival_s) == (8.0, 6.0, 36.0)
    assert (t0.prompt_tokens, t1.output_tokens) == (10, 4)  # tokens untouched
    assert slow.info["time_scale"] == 4.0 and "time_scale" not in base.info


def test_time_scale_applies_to_the_generator_too():
    a = load_trace({"kind": "synthetic", "sessions": 5, "seed": 1})
    b = load_trace({"kind": "synthetic", "sessions": 5, "seed": 1, "time_scale": 0.5})
    assert [s.start_s * 0.5 for s in a.sessions] == [s.start_s for s in b.sessions]


@pytest.mark.parametrize("bad", [0, -1, "fast", True])
def test_time_scale_must_be_a_positive_number(bad):
    with pytest.raises(TraceError, match="time_scale"):
        load_trace({"kind": "synthetic", "sessions": 5, "time_scale": bad})


def test_until_s_keeps_the_sessions_that_start_before_it_after_scaling(tmp_path):
    path = tmp_path / "t.jsonl"
    sessions = [Session(f"s{i}", (Turn(10, 5, arrival_s=float(i)),)) for i in range(10)]
    write_jsonl(sessions, path)
    head = load_trace({"kind": "jsonl", "path": str(path), "until_s": 4.5})
    assert [s.session_id for s in head.sessions] == ["s0", "s1", "s2", "s3", "s4"]
    scaled = load_trace({"kind": "jsonl", "path": str(path), "time_scale": 2, "until_s": 4.5})
    assert [s.session_id for s in scaled.sessions] == ["s0", "s1", "s2"]  # starts 0, 2, 4
    assert head.info["until_s"] == 4.5


@pytest.mark.parametrize("bad", [0, -3, "soon", False])
def test_until_s_must_be_a_positive_number(bad):
    with pytest.raises(TraceError, match="until_s"):
        load_trace({"kind": "synthetic", "sessions": 5, "until_s": bad})
