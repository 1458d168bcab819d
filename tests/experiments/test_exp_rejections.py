"""After a run that rejected turns, `kvsim run` says how many, why, and which YAML keys change it."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

import costmodels
import traces
from experiments.cli import main
from experiments.rejections import rejection_note
from experiments.schema import load_experiment

SMALL = """
name: rej
trace: {{kind: synthetic, sessions: 20, seed: 3}}
model: llama-3-8b
hardware: h100-sxm
memory: {{gpu_kv_gb: {gpu}, cpu_kv_gb: 0}}
engine: {{kind: {engine}}}
policies: [lru]
executor: {{kind: local, workers: 1}}
"""


def small(gpu: str, engine: str = "kvsim") -> str:
    return SMALL.format(gpu=gpu, engine=engine)


def _note(out: str) -> str | None:
    lines = [x for x in out.splitlines() if "rejected_turns" in x and x.startswith("note: ")]
    assert len(lines) <= 1, lines
    return lines[0] if lines else None


def _longest_gib(bt: int = 16) -> float:
    load = traces.load_trace({"kind": "synthetic", "sessions": 20, "seed": 3})
    longest = max(sum(t.prompt_tokens + t.output_tokens for t in s.turns) for s in load.sessions)
    per_token = costmodels.get_model("llama-3-8b").kv_bytes_per_token
    return math.ceil(longest / bt) * bt * per_token / 2**30


def test_a_run_that_rejects_turns_names_the_count_the_cause_and_the_keys(
    write_yaml, tmp_path, capsys
):
    cfg = write_yaml(small("[0.25, 1, 8]"))
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    summary = pd.read_csv(tmp_path / "r" / "summary.csv")
    rejected = summary["rejected_turns"]
    assert (rejected > 0).sum() == 2 and rejected.iloc[2] == 0  # 8 GiB holds every conversation
    note = _note(out)
    assert note is not None
    assert f"2 of 3 grid points rejected turns (up to {rejected.max()} at one)" in note
    assert "at memory.gpu_kv_gb = 0.25, 1 " in note
    assert "larger than the whole GPU KV" in note
    assert "raise memory.gpu_kv_gb" in note
    assert "lower trace.max_context_tokens (now 32768)" in note  # the generator's default cap
    assert "trace.time_scale" not in note  # lengths decide, not times
    assert "trace file" not in note  # a synthetic trace only


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["kvsim", "vllm-v1"])
def test_the_kv_the_note_names_is_what_serves_every_turn(engine, write_yaml, tmp_path, capsys):
    """The GiB the note gives for the longest conversation: a GPU KV just below it rejects that
    conversation's last turn, that many GiB reject nothing (in either engine)."""
    need = _longest_gib()
    cfg = write_yaml(small(f"{need * 0.98:.4f}", engine), "below.yaml")
    assert main(["run", str(cfg), "--out", str(tmp_path / "below"), "--quiet"]) == 0
    note = _note(capsys.readouterr().out)
    assert note is not None and "1 of 1 grid points rejected" in note
    said = re.search(r"tokens, needs ([0-9.]+) GiB of llama-3-8b KV", note)
    assert said is not None
    gib = float(said.group(1))
    assert need <= gib <= need * 1.01
    cfg = write_yaml(small(said.group(1), engine), "said.yaml")
    assert main(["run", str(cfg), "--out", str(tmp_path / "said"), "--quiet"]) == 0
    assert _note(capsys.readouterr().out) is None
    assert pd.read_csv(tmp_path / "said" / "summary.csv")["rejected_turns"].tolist() == [0]


def test_no_note_when_nothing_was_rejected(write_yaml, tmp_path, capsys):
    cfg = write_yaml(small("8"))
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert _note(capsys.readouterr().out) is None


def test_a_trace_file_is_not_told_to_set_a_synthetic_key(write_yaml, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"session_id": "a", "turn": 0, "arrival_s": 0.0, "prompt_tokens": 9000, '
        '"output_tokens": 100}\n',
        encoding="utf-8",
    )
    cfg = write_yaml(
        """
        name: f
        trace: {kind: jsonl, path: t.jsonl}
        model: llama-3-8b
        hardware: h100-sxm
        memory: {gpu_kv_gb: [0.5, 2]}
        policies: [lru]
        """
    )
    exp = load_experiment(cfg)
    summary = pd.DataFrame({"gpu_kv_gb": [0.5, 2.0], "rejected_turns": [1, 0]})
    note = rejection_note(summary, exp)
    assert note is not None
    assert "1 of 2 grid points rejected 1 turn at memory.gpu_kv_gb = 0.5 " in note
    assert "max_context_tokens" not in note
    assert "kvsim trace stats FILE" in note
    # 9,100 tokens of Llama-3-8B KV, in 16-token pages
    assert "9,100 tokens, needs 1.12 GiB of llama-3-8b KV" in note  # 1.1108 GiB, rounded up
    assert rejection_note(summary.assign(rejected_turns=[0, 0]), exp) is None


def test_a_fleet_of_groups_is_told_of_the_groups_own_kv(write_yaml, tmp_path, capsys):
    """A replica of a group with its own gpu_kv_gb rejects by that value: the note names the key."""
    cfg = write_yaml(
        small("8") + "cluster: {groups: [{replicas: 1}, {replicas: 1, gpu_kv_gb: 0.25}], "
        "router: round-robin}\n"
    )
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    note = _note(capsys.readouterr().out)
    assert note is not None and "1 of 1 grid points rejected" in note
    assert "cluster.groups[].gpu_kv_gb" in note
    cfg = write_yaml(small("[0.25]"), "plain.yaml")
    assert main(["run", str(cfg), "--out", str(tmp_path / "p"), "--quiet"]) == 0
    plain = _note(capsys.readouterr().out)
    assert plain is not None and "cluster.groups" not in plain  # no groups, no such hint
