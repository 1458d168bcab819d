"""A trace read as the wrong kind says which kind the file looks like, not only the parse error."""

from __future__ import annotations

import json

import pytest

from traces import load_trace
from traces.records import TraceError

SHAREGPT = [
    {
        "id": "a_0",
        "conversations": [
            {"from": "human", "value": "hello there"},
            {"from": "gpt", "value": "hi, how can I help?"},
        ],
    }
]
MOONCAKE = [
    {"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]},
    {"timestamp": 5, "input_length": 700, "output_length": 30, "hash_ids": [0, 2]},
]
JSONL = [
    {"session_id": "s", "turn": 0, "prompt_tokens": 10, "output_tokens": 5, "arrival_s": 0.0},
    {"session_id": "s", "turn": 1, "prompt_tokens": 10, "output_tokens": 5, "think_s": 1.0},
]
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"


@pytest.fixture
def files(tmp_path):
    out = {
        "sharegpt": tmp_path / "s.json",
        "mooncake": tmp_path / "m.jsonl",
        "jsonl": tmp_path / "j.jsonl",
        "azure": tmp_path / "a.csv",
    }
    out["sharegpt"].write_text(json.dumps(SHAREGPT, indent=2), encoding="utf-8")
    out["mooncake"].write_text("".join(json.dumps(r) + "\n" for r in MOONCAKE), encoding="utf-8")
    out["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in JSONL), encoding="utf-8")
    out["azure"].write_text(AZURE, encoding="utf-8")
    return out


@pytest.mark.parametrize(
    "actual,given",
    [
        ("sharegpt", "mooncake"),
        ("mooncake", "sharegpt"),
        ("sharegpt", "jsonl"),
        ("mooncake", "jsonl"),
        ("jsonl", "sharegpt"),
        ("azure", "mooncake"),
    ],
)
def test_wrong_kind_names_the_likely_one(files, actual, given):
    with pytest.raises(TraceError) as info:
        load_trace({"kind": given, "path": str(files[actual])})
    msg = str(info.value)
    assert f"looks like a {actual} trace" in msg and f"kind {actual}" in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("kind", ["sharegpt", "mooncake", "jsonl", "azure"])
def test_the_right_kind_still_loads(files, kind):
    assert load_trace({"kind": kind, "path": str(files[kind])}).sessions


def test_a_broken_file_of_the_right_kind_gets_no_other_kind(tmp_path):
    bad = tmp_path / "m.jsonl"
    bad.write_text(json.dumps(MOONCAKE[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(TraceError) as info:
        load_trace({"kind": "mooncake", "path": str(bad)})
    assert "invalid JSON" in str(info.value) and "looks like" not in str(info.value)


def test_kvsim_trace_stats_with_the_wrong_kind(files, capsys):
    from experiments.cli import main

    assert main(["trace", "stats", str(files["sharegpt"]), "--kind", "mooncake"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvsim: error: ") and "\n" not in err
    assert "looks like a sharegpt trace" in err and "kind sharegpt" in err, err
