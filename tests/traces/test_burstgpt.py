"""The BurstGPT loader on a small fixture in the published column format."""

from __future__ import annotations

import pytest

from traces import TraceError, load_trace

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def _load(write_text, text: str, **opts):
    path = write_text("BurstGPT_1.csv", text)
    return load_trace({"kind": "burstgpt", "path": str(path), **opts})


def test_rows_without_sessions_are_single_turns_and_failures_are_dropped(write_text):
    got = _load(
        write_text,
        f"""{HEADER}
5,ChatGPT,472,18,490,Conversation log
7,GPT-4,1087,0,1087,API log
9,GPT-4,120,300,420,API log
""",
    )
    s = got.sessions
    assert [x.session_id for x in s] == ["BurstGPT_1-0", "BurstGPT_1-2"]
    assert [(t.prompt_tokens, t.output_tokens, t.arrival_s) for x in s for t in x.turns] == [
        (472, 18, 0.0),
        (120, 300, 4.0),
    ]  # times from the first kept row
    assert got.info["failed_requests"] == 1
    assert s[1].meta == {"model": "GPT-4", "log_type": "API log"}


def test_a_session_id_makes_turns_whose_requests_resend_the_history(write_text):
    got = _load(
        write_text,
        f"""{HEADER},Session ID
10,ChatGPT,100,50,150,Conversation log,a
12,ChatGPT,40,5,45,Conversation log,b
30,ChatGPT,180,20,200,Conversation log,a
50,ChatGPT,90,10,100,Conversation log,a
""",
    )
    by = {x.session_id: x for x in got.sessions}
    # a: H0 = 0, p0 = 100; H1 = 150, p1 = 180 - 150 = 30; H2 = 200 > 90: history dropped.
    assert [(t.prompt_tokens, t.output_tokens, t.arrival_s) for t in by["a"].turns] == [
        (100, 50, 0.0),
        (30, 20, 20.0),
    ]
    assert [(t.prompt_tokens, t.output_tokens) for t in by["a#1"].turns] == [(90, 10)]
    assert by["b"].turns[0].prompt_tokens == 40
    assert got.info["history_dropped_new_session"] == 1
    assert by["a"].history_tokens(1) == 150


def test_log_type_filter(write_text):
    text = f"{HEADER}\n1,ChatGPT,10,5,15,Conversation log\n2,GPT-4,20,5,25,API log\n"
    assert len(_load(write_text, text, log_type="api").sessions) == 1
    with pytest.raises(TraceError, match="log_type"):
        _load(write_text, text, log_type="chat")


@pytest.mark.parametrize(
    "row, message",
    [
        ("1,ChatGPT,10,5,16,Conversation log", ":2: Total tokens '16' is not Request"),
        ("1,ChatGPT,ten,5,15,Conversation log", ":2: Request tokens must be an integer"),
        ("-3,ChatGPT,10,5,15,Conversation log", ":2: Timestamp must be seconds >= 0"),
    ],
)
def test_bad_rows_name_the_file_and_line(write_text, row, message):
    with pytest.raises(TraceError, match=message):
        _load(write_text, f"{HEADER}\n{row}\n")
    assert _load(write_text, f"{HEADER}\n{row}\n", on_error="skip").skipped == 1


def test_missing_columns_are_named(write_text):
    with pytest.raises(TraceError, match=r"BurstGPT_1.csv:1: missing column\(s\) \['Log Type'\]"):
        _load(
            write_text, "Timestamp,Model,Request tokens,Response tokens,Total tokens\n1,x,1,1,2\n"
        )
