"""`kvsim run` end to end with the real trace generator, cost model and simulator.

Determinism: the same config and seed give a byte-identical summary.csv once the wall-clock columns
(sim.metrics.WALL_CLOCK_COLUMNS: wall_s, evict_us_p50, evict_us_p99) are taken out -- those time the
simulator itself and differ between any two runs. pass_evict_us derives from evict_us_p50 and is
left out for the same reason.
"""

from __future__ import annotations

import csv
import io
import math

import pandas as pd
import pytest
import yaml
from test_exp_results import DESIGN_SUMMARY_COLUMNS

from experiments.cli import main
from sim.metrics import WALL_CLOCK_COLUMNS

E2E = """
name: e2e
trace: {kind: synthetic, sessions: 10, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [0.25, 1], cpu_kv_gb: [0, 2], block_tokens: 16, evict_unit: block}
policies: [lru, fifo]
seeds: [1]
baseline_infinite: true
executor: {kind: local, workers: WORKERS}
"""
NOT_REPRODUCIBLE = set(WALL_CLOCK_COLUMNS) | {"pass_evict_us"}


def _run(folder, name: str, workers: int, seed: int = 3) -> tuple[int, object]:
    cfg = folder / f"{name}.yaml"
    cfg.write_text(E2E.replace("WORKERS", str(workers)).replace("seed: 3", f"seed: {seed}"))
    out = folder / name
    return main(["run", str(cfg), "--out", str(out), "--quiet"]), out


@pytest.fixture(scope="module")
def run_one(tmp_path_factory):
    """One in-process run, shared by the tests of this module."""
    rc, out = _run(tmp_path_factory.mktemp("e2e"), "one", 1)
    assert rc == 0
    return out


def _reproducible_csv(path) -> str:
    """summary.csv as written, with the wall-clock columns removed (other bytes untouched)."""
    rows = list(csv.reader(io.StringIO(path.read_text())))
    keep = [i for i, c in enumerate(rows[0]) if c not in NOT_REPRODUCIBLE]
    assert len(keep) == len(rows[0]) - len(NOT_REPRODUCIBLE)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[r[i] for i in keep] for r in rows])
    return buf.getvalue()


def test_run_produces_every_file(run_one):
    out = run_one
    assert {p.name for p in out.iterdir()} == {
        "summary.csv",
        "turns.parquet",
        "sessions.parquet",
        "config.resolved.yaml",
        "plots",
    }
    assert len(list((out / "plots").glob("*.png"))) == 4
    summary = pd.read_csv(out / "summary.csv")
    assert set(DESIGN_SUMMARY_COLUMNS) <= set(summary.columns)
    assert len(summary) == 2 * 2 * 2 + 2 * 2  # grid + one infinite baseline per (policy, cpu)
    assert "pass_throughput_impact" in summary.columns
    base = summary[summary["gpu_kv_gb"].map(math.isinf)]
    assert (base["reprefill_rate"] == 0).all() and (base["throughput_impact"] == 0).all()
    small = summary[(summary["gpu_kv_gb"] == 0.25) & (summary["cpu_kv_gb"] == 0)]
    assert (small["reprefill_rate"] > 0).all()  # a quarter GiB holds ~2k Llama-3-8B tokens
    turns = pd.read_parquet(out / "turns.parquet")
    assert len(turns) == summary["turns"].sum()
    assert (
        turns.groupby(["policy", "gpu_kv_gb", "cpu_kv_gb"]).size().to_dict()
        == summary.set_index(["policy", "gpu_kv_gb", "cpu_kv_gb"])["turns"].to_dict()
    )
    sessions = pd.read_parquet(out / "sessions.parquet")
    assert len(sessions) == summary["sessions"].sum()
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    (loaded,) = resolved["traces_loaded"]
    assert loaded["where"] == "trace" and loaded["sessions"] == 10 and loaded["skipped"] == 0
    assert loaded["turns"] == base["turns"].iloc[0]  # nothing rejected with infinite memory


def test_same_config_and_seed_give_identical_summary(run_one, tmp_path):
    """workers=1 (in process) and workers=2 (spawned processes) write the same summary.csv."""
    out1 = run_one
    rc2, out2 = _run(tmp_path, "two", 2)
    assert rc2 == 0
    assert _reproducible_csv(out1 / "summary.csv") == _reproducible_csv(out2 / "summary.csv")
    t1, t2 = pd.read_parquet(out1 / "turns.parquet"), pd.read_parquet(out2 / "turns.parquet")
    pd.testing.assert_frame_equal(t1, t2)


def test_a_different_seed_is_a_different_run(run_one, tmp_path):
    """Guards the determinism test against comparing constant output: the trace seed matters."""
    rc, out = _run(tmp_path, "s5", 1, seed=5)
    assert rc == 0
    assert _reproducible_csv(run_one / "summary.csv") != _reproducible_csv(out / "summary.csv")


BOOM = '''
from sim.policies import policy_class


class Boom(policy_class("lru")):
    """LRU until a worker builds it: then it fails, as a buggy user policy would."""

    def __init__(self, ctx):
        raise RuntimeError("boom policy cannot be built")
'''


def test_worker_failure_names_the_point_and_leaves_no_results(tmp_path, monkeypatch):
    """A point failing inside a spawned worker surfaces as PointError naming that point."""
    from experiments.executor import PointError
    from experiments.runner import run_experiment
    from experiments.schema import load_experiment

    (tmp_path / "boom_policy.py").write_text(BOOM)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned workers inherit sys.path
    cfg = tmp_path / "boom.yaml"
    cfg.write_text(
        E2E.replace("WORKERS", "2")
        .replace("[lru, fifo]", "[lru, 'boom_policy:Boom']")
        .replace("baseline_infinite: true", "baseline_infinite: false")
    )
    out = tmp_path / "out"
    # Points 2 and 3 (boom at 0.25 and 1 GiB) both fail; whichever finishes first is reported.
    with pytest.raises(
        PointError,
        match=r"grid point [23] \(policy=boom_policy:Boom .*"
        r"RuntimeError: boom policy cannot be built",
    ):
        run_experiment(load_experiment(cfg), out, show_progress=False)
    assert not out.exists()
    # no results folder; the points that finished (lru's) wait in out.partial for a rerun
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("__")) in (
        ["boom.yaml", "boom_policy.py"],
        ["boom.yaml", "boom_policy.py", "out.partial"],
    )


def test_single_turn_sessions_at_finite_memory_finish_with_a_note(tmp_path, capsys):
    """No session has a second turn, so Jain's index is undefined at every point: the run still
    writes its results, without that figure, and says why."""
    (tmp_path / "one.jsonl").write_text(
        '{"session_id": "s1", "turn": 0, "arrival_s": 0.0, "prompt_tokens": 120, '
        '"output_tokens": 30}\n'
        '{"session_id": "s2", "turn": 0, "arrival_s": 0.5, "prompt_tokens": 80, '
        '"output_tokens": 20}\n'
    )
    cfg = tmp_path / "one.yaml"
    cfg.write_text(
        E2E.replace(
            "{kind: synthetic, sessions: 10, seed: 3}", "{kind: jsonl, path: one.jsonl}"
        ).replace("WORKERS", "1")
    )
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "note: plots: jain_vs_capacity.png not drawn: jain_service is undefined" in printed
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "hit_rate_by_tier.png",
        "reprefill_vs_capacity.png",
        "ttft_cdf.png",
    ]
    assert pd.read_csv(out / "summary.csv")["jain_service"].isna().all()
