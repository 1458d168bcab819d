"""The shared data folder (real traces) is found wherever it is: ``--data-dir``, else the environment
variable KVSIM_SHARED_DATA, else ../shared/data beside the checkout; the bundled real-trace
experiments name their files through it, so they run from any directory."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.cli import main
from experiments.schema import ConfigError, load_experiment

# the data files the bundled experiments read, relative to the shared data folder
BUNDLED = {
    "sharegpt": ["sharegpt/ShareGPT_V3_unfiltered_cleaned_split-sample.json"],
    "mooncake": ["mooncake/conversation_trace.jsonl"],
    "azure": ["azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"],
    "vllm_reference": [
        "sharegpt/ShareGPT_V3_unfiltered_cleaned_split-sample.json",
        "mooncake/conversation_trace.jsonl",
    ],
}

JSONL = (
    '{"session_id": "a", "turn": 0, "prompt_tokens": 30, "output_tokens": 5, "arrival_s": 0.0}\n'
    '{"session_id": "a", "turn": 1, "prompt_tokens": 20, "output_tokens": 5, "think_s": 1.0}\n'
    '{"session_id": "b", "turn": 0, "prompt_tokens": 40, "output_tokens": 5, "arrival_s": 0.5}\n'
)

CONFIG = """
name: mine
trace: {kind: jsonl, path: "${KVSIM_SHARED_DATA}/mine/t.jsonl"}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 1, cpu_kv_gb: 0}
policies: [lru]
"""


def _fake_data(root: Path, files: list[str]) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("", encoding="utf-8")  # validation only checks that it is there
    return root


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_experiment_finds_its_data_through_the_environment(tmp_path, monkeypatch, name):
    data = _fake_data(tmp_path / "my data", BUNDLED[name])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the repository root
    monkeypatch.setenv("KVSIM_SHARED_DATA", str(data))
    exp = load_experiment(name)
    paths = sorted({Path(t.path) for t in exp.trace if t.path})
    assert paths == sorted({(data / rel).resolve() for rel in BUNDLED[name]})


def test_data_dir_argument_wins_over_the_environment(tmp_path, monkeypatch):
    data = _fake_data(tmp_path / "a", BUNDLED["mooncake"])
    _fake_data(tmp_path / "b", BUNDLED["mooncake"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KVSIM_SHARED_DATA", str(tmp_path / "b"))
    exp = load_experiment("mooncake", data_dir=data)
    assert Path(exp.trace[0].path) == (data / BUNDLED["mooncake"][0]).resolve()


def test_missing_shared_data_says_how_to_point_at_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KVSIM_SHARED_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError) as info:
        load_experiment("mooncake")
    msg = str(info.value)
    assert "trace.path" in msg and str(tmp_path / "nowhere") in msg
    assert "KVSIM_SHARED_DATA" in msg and "--data-dir" in msg


def test_kvsim_run_data_dir_option(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KVSIM_SHARED_DATA", raising=False)
    data = tmp_path / "data"
    (data / "mine").mkdir(parents=True)
    (data / "mine" / "t.jsonl").write_text(JSONL, encoding="utf-8")
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    args = ["run", str(cfg), "--data-dir", str(data), "--out", str(out), "--quiet"]
    assert main(args) == 0, capsys.readouterr().err
    assert len(pd.read_csv(out / "summary.csv")) == 1


def test_kvsim_run_data_dir_must_be_a_folder(tmp_path, capsys):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["run", str(cfg), "--data-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvsim: error: --data-dir") and str(tmp_path / "nope") in err


@pytest.mark.parametrize("how", ["option", "environment"])
def test_kvsim_trace_stats_reads_a_file_of_the_data_folder(tmp_path, monkeypatch, capsys, how):
    data = tmp_path / "data"
    (data / "mine").mkdir(parents=True)
    (data / "mine" / "t.jsonl").write_text(JSONL, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    argv = ["trace", "stats", "mine/t.jsonl"]
    if how == "option":
        monkeypatch.delenv("KVSIM_SHARED_DATA", raising=False)
        argv += ["--data-dir", str(data)]
    else:
        monkeypatch.setenv("KVSIM_SHARED_DATA", str(data))
    assert main(argv) == 0, capsys.readouterr().err
    assert "sessions" in capsys.readouterr().out
