"""The `kvsim` command line: subcommand discovery, `run` (fake simulator), `list`, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "run" in out and "list" in out


@pytest.mark.parametrize("argv", [["--version"], ["run", "--version"], ["--version", "run"]])
def test_version_prints_the_checkouts_version(argv, capsys):
    from experiments.version import kvsim_version

    with pytest.raises(SystemExit) as info:
        main(argv)
    if argv[0] == "run":  # a command's own options have no --version
        assert info.value.code == 2
        return
    assert info.value.code == 0
    assert capsys.readouterr().out == f"kvsim {kvsim_version()}\n"


def test_commands_register_themselves():
    parser = build_parser()
    args = parser.parse_args(["run", "x.yaml", "--workers", "3", "--force", "--quiet"])
    assert args.command == "run" and args.workers == 3 and args.force and args.quiet
    assert callable(args._command_main)


def test_bad_config_exits_2_with_one_line(write_yaml, capsys):
    path = write_yaml("name: t\nmemory: {gpu_kv_gb: -1}\n", "bad.yaml")
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim: error: {path}: ")
    assert "memory.gpu_kv_gb: must be > 0" in err and "Traceback" not in err


def test_missing_config_exits_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"kvsim: error: {tmp_path / 'nope.yaml'}: no such file, and not a bundled"
    )
    assert "\n" not in err and "quickstart" in err


def test_bad_workers_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "x.yaml", "--workers", "0"])
    assert info.value.code == 2
    assert "must be >= 1" in capsys.readouterr().err


def test_subprocess_exit_code_and_no_traceback(write_yaml):
    path = write_yaml("name: t\nmemory: {gpu_kv_gb: [1, 2}\n", "broken.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "experiments", "run", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "line 2" in proc.stderr and "YAML syntax error" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_run_writes_results_and_prints_table(fake_backend, tiny_yaml, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(tiny_yaml), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"results: {out}/" in printed and "12 grid points" in printed
    assert (out / "summary.csv").is_file() and (out / "plots" / "ttft_cdf.png").is_file()
    assert len(pd.read_csv(out / "summary.csv")) == 12

    # The folder exists now: refused without --force (one line, status 2), replaced with it.
    assert main(["run", str(tiny_yaml), "--out", str(out), "--quiet"]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert main(["run", str(tiny_yaml), "--out", str(out), "--force"]) == 0
    table = capsys.readouterr().out
    header = table.splitlines()[1].split()
    assert header[:4] == ["policy", "gpu_kv_gb", "cpu_kv_gb", "reprefill"]
    assert "jain>=0.8" in header and "util>=90%" in header
    assert len(table.strip().splitlines()) == 2 + 12  # results line, header, one row per point


def test_default_out_is_results_name(fake_backend, tiny_yaml, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(tiny_yaml), "--quiet"]) == 0
    assert (tmp_path / "results" / "tiny" / "summary.csv").is_file()


def test_list(capsys):
    assert main(["list"]) == 0
    blocks = {b.split(" (")[0]: b for b in capsys.readouterr().out.split("\n\n")}
    assert {"models", "hardware", "profiles", "policies", "budget kinds"} <= set(blocks)
    assert "\n  Llama-3-8B " in blocks["models"] and "\n  h100-sxm " in blocks["hardware"]
    assert "\n  lru " in blocks["policies"] and "\n  fifo " in blocks["policies"]
    assert main(["list", "policies"]) == 0
    assert "lru" in capsys.readouterr().out.split()


def test_bad_trace_file_exits_2_naming_the_trace_key(write_yaml, tmp_path, capsys):
    data = tmp_path / "t.jsonl"
    data.write_text('{"session_id": "s1", "turn": 0, "arrival_s": 0.0, "prompt_tokens": 12}\n')
    cfg = write_yaml("""
        name: badtrace
        trace: [{kind: synthetic, sessions: 2}, {kind: jsonl, path: t.jsonl}]
        model: llama-3-8b
        hardware: h100-sxm
        memory: {gpu_kv_gb: 1}
        policies: [lru]
    """)
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim: error: {cfg}: trace[1]: ") and "t.jsonl" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize(
    "old,new,key",
    [
        ("evict_unit: block", "evict_unit: chunk", "memory.evict_unit"),
        ("gpu_kv_gb: [0.5, 1, 2]", "gpu_kv_gb: [0.5, 0.0001]", "memory.gpu_kv_gb[1]"),
        (
            "seeds: [1]",
            "seeds: [1]\nengine: {max_running: 512, max_batch_tokens: 256}",
            "engine.max_batch_tokens",
        ),
    ],
)
def test_impossible_config_exits_2_before_any_work(
    fake_backend, write_yaml, tmp_path, capsys, old, new, key
):
    from exp_fakes import TINY

    assert old in TINY
    cfg = write_yaml(TINY.replace(old, new), "bad.yaml")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim: error: {cfg}: {key}: "), err
    assert len(err.strip().splitlines()) == 1
    assert fake_backend == {"load_trace": 0, "simulate": 0}  # no trace loaded, nothing simulated
    assert not out.exists()


def test_empty_synthetic_trace_exits_2_before_simulating(
    fake_backend, write_yaml, tmp_path, capsys
):
    from exp_fakes import TINY

    cfg = write_yaml(TINY.replace("sessions: 6", "sessions: 0"), "empty.yaml")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"kvsim: error: {cfg}: trace: the trace holds no turns (0 sessions "
        f"from synthetic); nothing to simulate"
    )
    assert fake_backend["simulate"] == 0 and not out.exists()


@pytest.mark.parametrize(
    "lines,words",
    [
        ("", "(0 sessions from jsonl:t.jsonl)"),
        (
            (
                '{"session_id": "s1", "turn": 0, "prompt_tokens": -5, "output_tokens": 3}\n'
                '{"session_id": "s2", "turn": 0, "prompt_tokens": 4}\n'
            ),
            "(0 sessions from jsonl:t.jsonl; 2 session(s) were skipped as malformed)",
        ),
    ],
)
def test_empty_jsonl_trace_exits_2_naming_the_trace(write_yaml, tmp_path, capsys, lines, words):
    """A JSONL file with no turns, or whose every turn is skipped as malformed, is an input error."""
    (tmp_path / "t.jsonl").write_text(lines)
    cfg = write_yaml("""
        name: emptytrace
        trace: [{kind: synthetic, sessions: 2}, {kind: jsonl, path: t.jsonl, on_error: skip}]
        model: llama-3-8b
        hardware: h100-sxm
        memory: {gpu_kv_gb: 1}
        policies: [lru]
    """)
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim: error: {cfg}: trace[1]: the trace holds no turns ")
    assert words in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_quiet_still_prints_where_the_results_went(write_yaml, tmp_path):
    """--quiet hides the progress bar and the table, never the results path (real subprocess)."""
    cfg = write_yaml("""
        name: q
        trace: {kind: synthetic, sessions: 4, seed: 1}
        model: llama-3-8b
        hardware: h100-sxm
        memory: {gpu_kv_gb: 1}
        policies: [lru]
    """)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments", "run", str(cfg), "--out", str(out), "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith(f"results: {out}/ (1 grid points; ")
    assert "policy" not in proc.stdout  # no summary table


def test_step_log_of_both_engines_in_one_run(write_yaml, tmp_path, capsys):
    """`kvsim run --step-log` with engine.kind as an axis: one steps.jsonl, each line naming its
    grid point, each point's steps finishing exactly the turns its ledger holds."""
    import json

    cfg = write_yaml("""
        name: s
        trace: {kind: synthetic, sessions: 8, seed: 1}
        model: llama-3-8b
        hardware: h100-sxm
        memory: {gpu_kv_gb: 1}
        engine: {kind: [kvsim, vllm-v1]}
        policies: [lru]
    """)
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--step-log"]) == 0
    lines = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    summary = pd.read_csv(out / "summary.csv")
    turns = pd.read_parquet(out / "turns.parquet")
    assert list(summary["engine"]) == ["kvsim", "vllm-v1"]
    for point, engine in enumerate(summary["engine"]):
        mine = [e for e in lines if e["point"] == point]
        assert [e["step"] for e in mine] == list(range(len(mine))) and mine
        done = sorted(rid for e in mine for rid in e["done"])
        t = turns[turns["engine"] == engine]
        assert done == sorted(t["session_id"] + "/" + t["turn"].astype(str))
        keys = {"sched", "hit", "preempted", "free_blocks", "running", "waiting", "t", "dur"}
        assert keys <= set(mine[0])
    # without the flag, no step log
    out2 = tmp_path / "out2"
    assert main(["run", str(cfg), "--out", str(out2), "--quiet"]) == 0
    assert not (out2 / "steps.jsonl").exists()


class _Exited(Exception):
    pass


@pytest.mark.parametrize("ray_loaded", [False, True])
def test_the_command_exits_with_mains_status_and_skips_teardown_only_after_ray(
    monkeypatch, capsys, ray_loaded
):
    """`kvsim` exits with main()'s status; a process that loaded Ray leaves by os._exit (its
    driver can crash in the interpreter's teardown), with the output flushed first."""
    from experiments import cli

    exits: list[tuple[str, int]] = []

    def fake_exit(how):
        def leave(code):
            exits.append((how, code))
            raise _Exited

        return leave

    monkeypatch.setattr(cli, "main", lambda: print("done") or 130)
    monkeypatch.setattr(cli.os, "_exit", fake_exit("os._exit"))
    monkeypatch.setattr(cli.sys, "exit", fake_exit("sys.exit"))
    # run() freezes what is left for a process about to end; this one goes on running tests
    monkeypatch.setattr(cli.gc, "freeze", lambda: None)
    if ray_loaded:
        monkeypatch.setitem(sys.modules, "ray._raylet", object())
    else:
        monkeypatch.delitem(sys.modules, "ray._raylet", raising=False)
    with pytest.raises(_Exited):
        cli.run()
    assert exits == [("os._exit" if ray_loaded else "sys.exit", 130)]
    assert capsys.readouterr().out == "done\n"
