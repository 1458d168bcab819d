"""The package: imported from this checkout, no imports of other project packages, load_trace dispatch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import traces
from traces import ThinkTime, TraceError, TraceLoad, load_trace

REPO_ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"sim", "costmodels", "experiments", "calibration", "notebooks"}


def test_traces_is_imported_from_this_repository():
    assert Path(traces.__file__).resolve().parent == REPO_ROOT / "traces"


def test_traces_imports_nothing_else_of_the_project():
    for py in (REPO_ROOT / "traces").glob("*.py"):
        for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not {n.split(".")[0] for n in names} & FORBIDDEN, (py.name, names)
    code = (
        "import sys, traces; print(sorted({m.split('.')[0] for m in sys.modules} & "
        f"set({sorted(FORBIDDEN)!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_public_names():
    for name in traces.__all__:
        assert hasattr(traces, name), name


def _jsonl(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        '{"session_id": "s", "turn": 0, "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 2}\n'
    )
    return p


def test_dispatch_every_kind(tmp_path):
    sg = tmp_path / "sg.json"
    sg.write_text(
        json.dumps(
            [
                {
                    "id": "a_0",
                    "conversations": [
                        {"from": "human", "value": "hi"},
                        {"from": "gpt", "value": "yo"},
                        {"from": "human", "value": "more"},
                        {"from": "gpt", "value": "ok"},
                    ],
                }
            ]
        )
    )
    mc = tmp_path / "mc.jsonl"
    mc.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n')
    az = tmp_path / "az.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    bg = tmp_path / "bg.csv"
    bg.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
    )
    loads = {
        "synthetic": load_trace({"kind": "synthetic", "sessions": 4, "seed": 1}),
        "sharegpt": load_trace(
            {
                "kind": "sharegpt",
                "path": str(sg),
                "tokenizer": "chars:1",
                "think": {"median_s": 7, "sigma": 0},
                "seed": 2,
            }
        ),
        "mooncake": load_trace({"kind": "mooncake", "path": str(mc), "jitter": False}),
        "azure": load_trace({"kind": "azure", "path": str(az)}),
        "burstgpt": load_trace({"kind": "burstgpt", "path": str(bg)}),
        "jsonl": load_trace({"kind": "jsonl", "path": str(_jsonl(tmp_path)), "on_error": "skip"}),
    }
    assert set(loads) == set(traces.TRACE_KINDS)
    assert all(isinstance(x, TraceLoad) and x.sessions for x in loads.values())
    sg_turns = loads["sharegpt"].sessions[0].turns
    assert [(t.prompt_tokens, t.output_tokens) for t in sg_turns] == [(2, 2), (4, 2)]
    assert sg_turns[1].think_s == 7.0


@pytest.mark.parametrize(
    "spec, words",
    [
        ({}, "needs 'kind'"),
        ({"kind": "vidur", "path": "x"}, "unknown kind 'vidur'"),
        ({"kind": "jsonl"}, "missing 'path'"),
        ({"kind": "jsonl", "path": "x", "seed": 1}, "unknown option(s) 'seed'"),
        ({"kind": "mooncake", "path": "x", "jiter": True}, "unknown option(s) 'jiter'"),
        ({"kind": "synthetic", "sesions": 3}, "unknown synthetic option(s) 'sesions'"),
        ({"kind": "synthetic", "sessions": "many"}, "sessions must be an integer"),
        (
            {"kind": "sharegpt", "path": "x", "think": {"median": 3}},
            "trace.think: unknown key(s) 'median'",
        ),
        ("synthetic", "trace spec must be a mapping"),
    ],
)
def test_bad_specs_name_the_problem(spec, words):
    with pytest.raises(TraceError) as exc:
        load_trace(spec)
    assert words in str(exc.value), str(exc.value)


def test_think_time_validation():
    with pytest.raises(TraceError, match="think.median_s"):
        ThinkTime(median_s=-1)
    assert ThinkTime(median_s=4, sigma=0).sample(np.random.default_rng(0), 3).tolist() == [4, 4, 4]
    capped = ThinkTime(median_s=30, sigma=2, max_s=60).sample(np.random.default_rng(0), 1000)
    assert capped.max() == 60 and capped.min() > 0
