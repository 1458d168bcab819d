"""SIGTERM stops `kvsim run` as Ctrl-C does: workers stopped, no results folder, status 143
(130 after SIGINT); the message says which finished grid points stay for a rerun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import proc_table
import pytest

REPO = Path(__file__).resolve().parents[2]

SLOW = """
name: slow
trace: {kind: synthetic, sessions: 2000, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [0.5, 1], cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
policies: [lru, fifo]
seeds: [1]
executor: {kind: local, workers: 2}
"""  # about 15 s on 2 cores: no point ends in the 2-3 s before the signal (each takes ~6 s)


def _session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, state) of every live (non-zombie) process in session ``sid``."""
    return [(p.pid, p.state) for p in proc_table.session_members(sid)]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize(
    "signum,status,words",
    [
        (signal.SIGTERM, 143, "kvsim: terminated (SIGTERM)"),
        (signal.SIGINT, 130, "kvsim: interrupted"),
    ],
)
def test_signal_stops_workers_and_leaves_no_results(tmp_path, signum, status, words):
    cfg = tmp_path / "slow.yaml"
    cfg.write_text(SLOW)
    out = tmp_path / "results" / "slow"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments", "run", str(cfg), "--out", str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # its own session: find its children
    try:
        # Wait for the parent, the two spawned workers and the resource tracker.
        deadline = time.monotonic() + 60
        while len(_session_members(proc.pid)) < 4 and proc.poll() is None:
            assert time.monotonic() < deadline, _session_members(proc.pid)
            time.sleep(0.1)
        time.sleep(1.5)  # the workers are simulating now
        assert proc.poll() is None, "the run finished before it could be stopped"
        proc.send_signal(signum)  # to the parent only, as `kill PID` does
        assert proc.wait(timeout=30) == status
        # no worker or tracker left behind (the tracker exits once its last client is gone)
        assert proc_table.left_in_session(proc.pid, 10.0) == []
        _, err = proc.communicate(timeout=10)
    finally:
        proc_table.kill_session(proc.pid)
        if proc.poll() is None:
            proc.wait()
    assert words in err and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]  # after the progress bar
    assert last.startswith(words) and "no grid point had finished" in last, err
    assert not out.exists()
    results = tmp_path / "results"
    assert not results.exists() or list(results.iterdir()) == []  # no .slow.tmp-* folder either


ONE_QUICK = """
name: one-quick
trace: [{kind: synthetic, sessions: 20, seed: 3}, {kind: synthetic, sessions: 2000, seed: 3}]
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.5, cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
policies: [lru]
seeds: [1]
executor: {kind: local, workers: 1}
"""  # the first point ends in well under a second, the second takes several seconds


@pytest.mark.parametrize(
    "signum,status,words",
    [
        (signal.SIGTERM, 143, "kvsim: terminated (SIGTERM); worker processes stopped"),
        (signal.SIGINT, 130, "kvsim: interrupted"),
    ],
)
def test_signal_says_which_finished_points_are_kept_for_a_rerun(tmp_path, signum, status, words):
    from experiments.checkpoint import partial_dir

    cfg = tmp_path / "one-quick.yaml"
    cfg.write_text(ONE_QUICK)
    out = tmp_path / "results" / "one-quick"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments", "run", str(cfg), "--out", str(out), "--quiet"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(partial_dir(out).glob("*.pkl")) and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be stopped"
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == status
        _, err = proc.communicate(timeout=10)
    finally:
        proc_table.kill_session(proc.pid)
        if proc.poll() is None:
            proc.wait()
    kept = partial_dir(out)
    assert len(list(kept.glob("*.pkl"))) == 1 and not out.exists()
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line, err
    assert line.startswith(words), err
    assert f"1 finished grid point kept in {kept}/" in line, err
    assert "run the same command again to resume" in line, err
    assert "no partial results" not in line, err


@pytest.mark.parametrize(
    "signum,raised",
    [(signal.SIGTERM, "Terminated"), (signal.SIGINT, "KeyboardInterrupt")],
)
def test_signals_while_waiting_on_workers_take_effect_at_the_safe_point(signum, raised):
    # While the pool is waited on, a signal is only recorded, and the handler in place before
    # (here the kvsim command's) acts when the loop asks: never half-way through starting or
    # stopping a worker.
    from experiments.cli import Terminated, sigterm_raises
    from experiments.worker_pool import interrupts_deferred

    expected = {"Terminated": Terminated, "KeyboardInterrupt": KeyboardInterrupt}[raised]
    reached = False
    with sigterm_raises():
        before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        with pytest.raises(expected):
            with interrupts_deferred() as act:
                act()  # nothing recorded: nothing happens
                os.kill(os.getpid(), signum)
                for _ in range(1000):  # bytecodes run: a handler in place would have raised
                    time.sleep(0)
                reached = True
                act()
        assert reached
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
