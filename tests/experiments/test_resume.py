"""Sweeps that survive a kill: each finished grid point is checkpointed, a rerun of the same config
runs only the rest, and the results equal an uninterrupted run's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from experiments import executor
from experiments.checkpoint import partial_dir
from experiments.runner import run_experiment
from experiments.schema import parse_experiment
from sim.metrics import WALL_CLOCK_COLUMNS

REPO = Path(__file__).resolve().parents[2]
GRID = {
    "name": "resume",
    "trace": {"kind": "synthetic", "sessions": 8, "seed": 3},
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "memory": {"gpu_kv_gb": [0.5, 1.0], "cpu_kv_gb": 0},
    "policies": ["lru", "fifo"],
}


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    # the wall-clock columns, and the target judged on one of them, differ between identical runs
    cols = [c for c in a.columns if c not in (*WALL_CLOCK_COLUMNS, "pass_evict_us")]
    pd.testing.assert_frame_equal(a[cols].reset_index(drop=True), b[cols].reset_index(drop=True))


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path, monkeypatch):
    exp = parse_experiment(GRID)
    reference = run_experiment(exp, tmp_path / "ref", show_progress=False).summary
    out = tmp_path / "out"
    real, calls = executor.run_point, []

    def interrupted(index, point, debug=False, progress=None, ledger_dir=None):
        calls.append(point)
        if len(calls) == 3:  # Ctrl-C during the third point, its ledger half-written
            (Path(ledger_dir) / f"point-{index}-0.spool.parquet.part").write_bytes(b"half")
            raise KeyboardInterrupt
        return real(index, point, debug, progress, ledger_dir)

    monkeypatch.setattr(executor, "run_point", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, out, show_progress=False)
    assert not out.exists()  # no half-written results
    kept = sorted(p.name for p in partial_dir(out).iterdir())
    assert len(kept) == 6 and len([k for k in kept if k.endswith(".pkl")]) == 2, kept
    assert len([k for k in kept if k.endswith(".turns.parquet")]) == 2, kept  # their ledgers
    assert len([k for k in kept if k.endswith(".sessions.parquet")]) == 2, kept  # and sessions
    calls.clear()
    outcome = run_experiment(exp, out, show_progress=False)
    assert outcome.resumed == 2 and len(calls) == 2  # only the rest ran
    _same(outcome.summary, reference)
    assert not partial_dir(out).exists()
    # --fresh forgets what an earlier run left
    (tmp_path / "again").mkdir()
    monkeypatch.setattr(executor, "run_point", interrupted)
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, tmp_path / "again" / "r", show_progress=False)
    calls.clear()

    def counted(index, point, debug=False, progress=None, ledger_dir=None):
        calls.append(point)
        return real(index, point, debug, progress, ledger_dir)

    monkeypatch.setattr(executor, "run_point", counted)
    fresh = run_experiment(exp, tmp_path / "again" / "r", show_progress=False, fresh=True)
    assert fresh.resumed == 0 and len(calls) == 4


def test_a_changed_config_does_not_reuse_points(tmp_path, monkeypatch):
    exp = parse_experiment(GRID)
    out = tmp_path / "out"
    real, calls = executor.run_point, []

    def stop_after_one(index, point, debug=False, progress=None, ledger_dir=None):
        calls.append(point)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(index, point, debug, progress, ledger_dir)

    monkeypatch.setattr(executor, "run_point", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, out, show_progress=False)
    changed = parse_experiment({**GRID, "trace": {"kind": "synthetic", "sessions": 8, "seed": 4}})
    monkeypatch.setattr(executor, "run_point", real)
    assert run_experiment(changed, out, show_progress=False).resumed == 0


@pytest.mark.slow
def test_sigterm_on_a_worker_pool_keeps_finished_points(tmp_path):
    cfg = tmp_path / "big.yaml"
    cfg.write_text(
        "name: big\ntrace: {kind: synthetic, sessions: 60, seed: 3}\n"
        "model: llama-3-8b\nhardware: h100-sxm\n"
        "memory: {gpu_kv_gb: [0.5, 1, 2, 4], cpu_kv_gb: 0}\n"
        "policies: [lru, fifo, lfu]\nexecutor: {kind: local, workers: 2}\n"
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "experiments", "run", str(cfg), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(partial_dir(out).glob("*.pkl")):
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=300)  # generous: a loaded machine stops its pool slowly
    assert proc.returncode != 0 and not out.exists()
    saved = len(list(partial_dir(out).glob("*.pkl")))
    assert 1 <= saved < 12
    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert f"12 grid points, {saved} resumed" in rerun.stdout
    assert len(pd.read_csv(out / "summary.csv")) == 12 and not partial_dir(out).exists()


def test_prune_removes_what_a_terminated_worker_left_midway(tmp_path):
    """A worker ended by SIGTERM runs no ``finally``: a ledger's half-written part file and its
    column scratch folder stay in ``<out>.partial/``. Pruning removes both (the folder too), and
    with nothing finished left, the partial folder itself."""
    from experiments.checkpoint import Checkpoints

    ckpt = Checkpoints(tmp_path / "out")
    ckpt.dir.mkdir()
    (ckpt.dir / ".point-0-abc.turns.parquet.part").write_bytes(b"half")
    scratch = ckpt.dir / ".point-0-abc.turns.parquet.cols-x1y2"
    scratch.mkdir()
    (scratch / "turn").write_bytes(b"\0" * 8)
    ckpt.prune()
    assert not ckpt.dir.exists()
