"""ShareGPT: the pairing rules with known answers, split-id rebuild, malformed records, real sample."""

from __future__ import annotations

import json

import pytest

from traces import CharEstimate, ThinkTime, TraceError, load_sharegpt, validate_session
from traces.conversation import Message, PairStats, join_pieces, pair_turns, split_record_id


def _m(kind: str, tokens: int, key=None) -> Message:
    return Message(kind, tokens, key if key is not None else (kind, tokens, id(object())))


class WordCount:
    """A test tokenizer with obvious counts: one token per whitespace-separated word."""

    def count(self, text: str) -> int:
        return len(text.split())


def test_split_record_id():
    assert split_record_id("QWJhYvA_0") == ("QWJhYvA", 0)
    assert split_record_id("a_b_12") == ("a_b", 12)
    assert split_record_id("plain") == ("plain", None)
    assert split_record_id("x_y") == ("x_y", None)
    assert split_record_id("_3") == ("_3", None)


def test_pairing_rules_known_answer():
    stats = PairStats()
    msgs = [
        _m("reply", 99),  # leading reply: nothing asked for it -> dropped
        _m("system", 5),
        _m("prompt", 10),  # system text joins the first prompt
        _m("reply", 20),
        _m("prompt", 3),
        _m("prompt", 4),  # consecutive prompts merge
        _m("reply", 30),
        _m("reply", 6),  # consecutive replies merge
        _m("prompt", 7),
        _m("reply", 0),  # empty reply -> 1 token
        _m("prompt", 8),
    ]  # trailing prompt without reply -> dropped
    assert pair_turns(msgs, stats) == [(15, 20), (7, 36), (7, 1)]
    assert stats.as_dict() == {
        "boundary_duplicates": 0,
        "merged_prompts": 1,
        "merged_replies": 1,
        "system_messages": 1,
        "leading_replies_dropped": 1,
        "trailing_prompts_dropped": 1,
        "clamped_outputs": 1,
    }


def test_join_pieces_drops_only_a_repeated_boundary_message():
    stats = PairStats()
    a = [_m("prompt", 1, "p1"), _m("reply", 2, "r1")]
    b = [_m("reply", 2, "r1"), _m("prompt", 3, "p2"), _m("reply", 4, "r2")]  # repeats r1
    c = [_m("prompt", 5, "p3"), _m("reply", 6, "r3")]  # no overlap
    joined = join_pieces([a, b, [], c], stats)
    assert [m.key for m in joined] == ["p1", "r1", "p2", "r2", "p3", "r3"]
    assert stats.boundary_duplicates == 1


def _conv(*pairs):
    return [{"from": f, "value": v} for f, v in pairs]


HAND = [
    {
        "id": "abc_5",
        "conversations": _conv(
            ("gpt", "two words"), ("human", "three more words"), ("gpt", "final answer here ok")
        ),
    },
    {
        "id": "zzz_0",
        "conversations": _conv(
            ("system", "be brief"), ("human", "hi"), ("gpt", "hello there"), ("human", "dangling")
        ),
    },
    {
        "id": "abc_0",
        "conversations": _conv(
            ("human", "one"), ("gpt", "a b"), ("human", "c d"), ("gpt", "two words")
        ),
    },
    {"id": "pn_1", "conversations": _conv(("human", "q2"), ("gpt", "a2 a2"))},
    {"id": "pn_0", "conversations": _conv(("human", "q1"), ("human", "more"), ("gpt", "a1"))},
    {"id": "empty_0", "conversations": []},
    {"id": "solo", "conversations": _conv(("user", "u"), ("chatgpt", ""))},
    {"id": "onlyq_0", "conversations": _conv(("human", "never answered"))},
]


def test_hand_written_split_ids(write_text):
    path = write_text("sg.json", json.dumps(HAND))
    load = load_sharegpt(path, tokenizer=WordCount(), think=ThinkTime(median_s=10.0, sigma=0.0))
    by_id = {s.session_id: s for s in load.sessions}
    assert set(by_id) == {"abc", "zzz", "pn", "solo"}  # empty and unanswered sessions have no turns
    tok = lambda s: [(t.prompt_tokens, t.output_tokens) for t in s.turns]  # noqa: E731
    # abc_0 then abc_5 (offset suffix); abc_5 repeats abc_0's last reply, which is dropped once.
    assert tok(by_id["abc"]) == [(1, 2), (2, 2), (3, 4)]
    assert tok(by_id["zzz"]) == [(2 + 1, 2)]  # system prepended, trailing human dropped
    assert tok(by_id["pn"]) == [(2, 1), (1, 2)]  # pn_0 before pn_1 despite file order
    assert tok(by_id["solo"]) == [(1, 1)]  # user/chatgpt roles; empty reply -> 1
    assert by_id["abc"].meta["pieces"] == 2
    for s in load.sessions:
        validate_session(s)
        assert all(t.think_s == 10.0 for t in s.turns[1:])
    # Poisson starts in order of first appearance in the file, starting at 0
    assert [s.session_id for s in load.sessions] == ["abc", "zzz", "pn", "solo"]
    assert load.sessions[0].start_s == 0.0
    assert load.info["empty_records"] == 1 and load.info["boundary_duplicates"] == 1
    assert load.info["sessions_without_turns"] == 2 and load.skipped == 0


def test_timing_is_seeded(write_text):
    path = write_text("sg.json", json.dumps(HAND))
    a, b = (load_sharegpt(path, tokenizer=WordCount(), seed=3) for _ in range(2))
    c = load_sharegpt(path, tokenizer=WordCount(), seed=4)
    assert a.sessions == b.sessions
    assert [s.start_s for s in a.sessions] != [s.start_s for s in c.sessions]


def test_max_sessions_takes_the_first_sessions_in_file_order(write_text):
    path = write_text("sg.json", json.dumps(HAND))
    load = load_sharegpt(path, tokenizer=WordCount(), max_sessions=2)
    assert [s.session_id for s in load.sessions] == ["abc", "zzz"]


BAD_RECORDS = [
    ("not a dict", "record 1 (id None): expected an object"),
    ({"conversations": []}, "record 1 (id None): 'id' must be a non-empty string"),
    ({"id": "bad_0"}, "record 1 (id 'bad_0'): no 'conversations' list"),
    ({"id": "bad_0", "conversations": "hi"}, "'conversations' must be a list"),
    (
        {"id": "bad_0", "conversations": [{"from": "human", "value": 3}]},
        "record 1 (id 'bad_0'): message 0: 'value' must be a string",
    ),
    ({"id": "bad_0", "conversations": [{"value": "x"}]}, "message 0: 'from' must be a string"),
    (
        {"id": "bad_0", "conversations": [{"from": "narrator", "value": "x"}]},
        "message 0: unknown role 'narrator'",
    ),
]


@pytest.mark.parametrize("rec, words", BAD_RECORDS, ids=[w for _, w in BAD_RECORDS])
def test_malformed_record_names_index_and_id(write_text, rec, words):
    good = {"id": "ok_0", "conversations": _conv(("human", "q"), ("gpt", "a"))}
    path = write_text("sg.json", json.dumps([good, rec]))
    with pytest.raises(TraceError) as exc:
        load_sharegpt(path, tokenizer=WordCount())
    assert str(exc.value).startswith("sg.json: ") and words in str(exc.value), str(exc.value)
    skipped = load_sharegpt(path, tokenizer=WordCount(), on_error="skip")
    assert [s.session_id for s in skipped.sessions] == ["ok"] and skipped.skipped == 1


def test_skip_drops_every_piece_of_a_bad_session(write_text):
    recs = [
        {"id": "s_0", "conversations": _conv(("human", "q"), ("gpt", "a"))},
        {"id": "t_0", "conversations": _conv(("human", "q"), ("gpt", "a"))},
        {"id": "s_2", "conversations": [{"from": "gpt", "value": None}]},
    ]
    load = load_sharegpt(write_text("sg.json", json.dumps(recs)), on_error="skip")
    assert [s.session_id for s in load.sessions] == ["t"] and load.skipped == 1


def test_file_level_errors(write_text):
    with pytest.raises(TraceError, match=r"^sg\.json:1: invalid JSON"):
        load_sharegpt(write_text("sg.json", "[{"))
    with pytest.raises(TraceError, match="expected a JSON list"):
        load_sharegpt(write_text("sg.json", "{}"))


@pytest.mark.data
def test_real_sample_matches_the_derived_csv(data_file):
    """The loader (text) and the fit's CSV path (token counts) must rebuild the same sessions."""
    from traces.fit_sharegpt import read_messages, sessions_from_messages

    sample = data_file("sharegpt/ShareGPT_V3_unfiltered_cleaned_split-sample.json")
    csv = data_file("sharegpt/sharegpt_v3_messages_derived.csv")
    records = json.loads(sample.read_text(encoding="utf-8"))
    load = load_sharegpt(sample)
    assert load.skipped == 0 and load.info["records"] == len(records)
    bases = {split_record_id(r["id"])[0] for r in records}
    assert len(load.sessions) == len(bases) - load.info["sessions_without_turns"]
    for s in load.sessions:
        validate_session(s)
        assert s.session_id in bases
    df = read_messages(csv)
    ref, _ = sessions_from_messages(df[df["conv_id"].isin({r["id"] for r in records})])
    assert set(ref) == {s.session_id for s in load.sessions}
    assert {s.session_id: len(s.turns) for s in load.sessions} == {
        b: len(t) for b, t in ref.items()
    }
    # CharEstimate vs the real cl100k counts: totals close, since the ratio is token-weighted.
    est = sum(t.prompt_tokens + t.output_tokens for s in load.sessions for t in s.turns)
    real = sum(t.prompt + t.output for turns in ref.values() for t in turns)
    assert abs(est / real - 1) < 0.05


@pytest.mark.data
def test_real_sample_turns_equal_the_csv_rebuild_exactly(data_file):
    """With 1 token per character, every turn of every session equals the CSV rebuild (n_chars)."""
    from traces.fit_sharegpt import read_messages, sessions_from_messages

    sample = data_file("sharegpt/ShareGPT_V3_unfiltered_cleaned_split-sample.json")
    df = read_messages(data_file("sharegpt/sharegpt_v3_messages_derived.csv"))
    ids = {r["id"] for r in json.loads(sample.read_text(encoding="utf-8"))}
    df = df[df["conv_id"].isin(ids)].assign(n_tokens_cl100k=lambda d: d["n_chars"])
    ref, _ = sessions_from_messages(df)
    load = load_sharegpt(sample, tokenizer=CharEstimate(1.0))
    got = {
        s.session_id: [(t.prompt_tokens, t.output_tokens) for t in s.turns] for s in load.sessions
    }
    assert got == {b: [tuple(t) for t in turns] for b, turns in ref.items()}
