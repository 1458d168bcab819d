"""`kvsim bench` progress: the expected duration and a turn count on stderr; figures on stdout."""

from __future__ import annotations

import re

from experiments.cli import main

ARGS = ["bench", "--sessions", "40", "--repeats", "1", "--no-scaling"]


def test_bench_shows_expected_duration_and_progress_on_stderr(capsys):
    assert main(ARGS) == 0
    out, err = capsys.readouterr()
    first = err.strip().splitlines()[0]
    m = re.fullmatch(
        r"bench: ([\d,]+) turns x 2 runs; expected about \d+:\d\d "
        r"\(calibration: [\d,]+ turns/s on 40 sessions\)",
        first,
    )
    assert m, first
    total = int(m.group(1).replace(",", "")) * 2
    bars = re.findall(r"bench: +(\d+)%\|.*?\| (\d+)/(\d+) \[", err)
    assert bars and all(int(t) == total for _, _, t in bars), err
    assert bars[-1][:2] == ("100", str(total))  # every turn of both runs counted
    # The figures stay on stdout.
    lines = out.strip().splitlines()
    assert re.match(r"40 sessions, \d+ turns, llama-3-8b on h100-sxm, block units, lru: ", lines[0])
    assert [line.split(":")[0].strip() for line in lines[1:4]] == [
        "wall s          min/median/max",
        "turns/s         min/median/max",
        "peak RSS MiB    min/median/max",
    ]
    assert (
        lines[4].strip().startswith("KiB per session min/median/max:")
        and "target <= 40" in lines[4]
    )
    assert re.fullmatch(r"median [\d,]+ turns/s against a target of >= 4,000", lines[5].strip())


def test_bench_quiet_prints_figures_only(capsys):
    assert main([*ARGS, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert len(out.strip().splitlines()) == 6


def test_bench_runs_the_vllm_engine_against_its_own_target(capsys):
    assert main([*ARGS, "--quiet", "--engine", "vllm-v1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.match(r"40 sessions, \d+ turns, .*, lru, engine vllm-v1: ", lines[0])
    assert lines[-1].strip().endswith("against a target of >= 2,000")


def test_bench_refuses_what_the_vllm_engine_cannot_take(capsys):
    assert main([*ARGS, "--quiet", "--engine", "vllm-v1", "--cpu-kv-gb", "4"]) == 2
    assert "--engine vllm-v1 takes no --cpu-kv-gb" in capsys.readouterr().err


def test_peak_demand_is_the_same_under_every_policy():
    """The bench replays the unbounded run under LRU whatever policy it times: with unbounded GPU
    KV nothing is evicted, so every policy gives the same peak demand."""
    import math

    from costmodels import cost_model
    from experiments.bench import _trace
    from sim import MemoryConfig, simulate

    peaks = {
        policy: simulate(
            _trace(60, 1),
            cost_model("llama-3-8b", "h100-sxm"),
            MemoryConfig(gpu_kv_gb=math.inf, block_tokens=16),
            policy=policy,
            seed=1,
        ).stats.peak_demand_bytes
        for policy in ("lru", "pensieve", "session-aware", "s3fifo", "belady")
    }
    assert len(set(peaks.values())) == 1 and peaks["lru"] > 0, peaks
