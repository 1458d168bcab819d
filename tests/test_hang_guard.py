"""The guards against a test run that hangs: tests/hang_guard.py fails a session that leaves a
pool, a process or a non-daemon thread alive (and does not wait for it), and .ci/pytest-bounded
stops a run that passes its time bound, with every thread's stack and a message."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Long enough for pytest and its xdist workers to start and register their SIGUSR1 dump on a loaded
# 2-core machine (the rest of the suite runs beside it): a worker still starting when the signal
# comes dies of it, and there is no stack to print.
BOUND_S = 15
KILL_AFTER_S = 3

CLEAN = """
def test_nothing_left():
    assert 1 + 1 == 2
"""

THREAD = """
import threading

STOP = threading.Event()


def test_leaves_a_thread():
    threading.Thread(target=STOP.wait, name="forgotten-waiter").start()  # not a daemon: blocks exit


def test_after():
    pass
"""

POOL = """
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor


def test_leaves_a_process_pool():
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    pool.submit(time.sleep, 600).add_done_callback(lambda f: None)
    time.sleep(1)  # the worker is running the task: the interpreter's exit would wait 600 s
"""

CHILD = """
import subprocess
import sys


def test_leaves_a_child():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
"""

SLOW = """
import pathlib
import time


def test_takes_for_ever():
    pathlib.Path("sleeping").touch()  # the module's other runs start once this one sleeps
    time.sleep(120)
"""


def _command(tmp_path: Path, body: str, bounded: int | None) -> tuple[list[str], dict[str, str]]:
    (tmp_path / "test_inner.py").write_text(body)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "KVSIM_LEAK_GRACE_S": "1",
        "KILL_AFTER": str(KILL_AFTER_S),
    }
    args = ["-p", "hang_guard", "-p", "no:cacheprovider", "-q", "test_inner.py"]
    cmd = [sys.executable, "-m", "pytest", *args]
    if bounded is not None:
        cmd = ["bash", str(REPO / ".ci" / "pytest-bounded"), str(bounded), *args]
    return cmd, env


def _pytest(tmp_path: Path, body: str, *, bounded: int | None = None, timeout: float = 120):
    cmd, env = _command(tmp_path, body, bounded)
    t0 = time.monotonic()
    got = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    return got, time.monotonic() - t0


@pytest.fixture(scope="module", autouse=True)
def past_bound(tmp_path_factory):
    """Bounded runs of SLOW, in one process and on two xdist workers, started before this module's
    other tests: they sleep out their bound and KILL_AFTER while those run (each waits for its test
    to be sleeping before they start, so they do not slow its start-up). Yields, for each number of
    workers, (a thread that ends with the run, what the run gave once it has, folder of its
    output)."""
    runs = {}
    for workers in ("0", "2"):
        tmp_path = tmp_path_factory.mktemp(f"past_bound_n{workers}")
        got: dict[str, float] = {}
        waiter = threading.Thread(
            target=_run_past_bound, args=(tmp_path, workers, got), daemon=True
        )
        waiter.start()
        runs[workers] = (waiter, got, tmp_path)
    for waiter, _, tmp_path in runs.values():
        deadline = time.monotonic() + 150
        while not (tmp_path / "sleeping").exists() and waiter.is_alive():
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    yield runs
    for waiter, _, _ in runs.values():
        waiter.join(timeout=240)


def _run_past_bound(tmp_path: Path, workers: str, got: dict[str, float]) -> None:
    """SLOW under .ci/pytest-bounded; ``got``: its bound, exit status and wall time, taken when it
    ends (the test that reads them may look long after on a loaded machine). A run whose pytest
    had not reached the test by the bound (a worker still starting dies of the signal; nothing to
    show) is run again with twice the bound."""
    bound = BOUND_S
    for _ in range(3):
        (tmp_path / "sleeping").unlink(missing_ok=True)
        cmd, env = _command(tmp_path, SLOW, bounded=bound)
        cmd += ["-n", workers]
        with (tmp_path / "stdout").open("w") as out, (tmp_path / "stderr").open("w") as err:
            t0 = time.monotonic()
            proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=err, text=True)
        got.update(bound=bound, returncode=proc.wait(), s=time.monotonic() - t0)
        if (tmp_path / "sleeping").exists():
            return
        bound *= 2


def test_a_clean_session_passes(tmp_path):
    got, _ = _pytest(tmp_path, CLEAN)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "LEAKED" not in got.stdout


def test_a_leftover_thread_fails_the_session_and_names_the_test(tmp_path):
    got, took = _pytest(tmp_path, THREAD)  # without the guard: passes, then never exits
    assert got.returncode == 1, got.stdout + got.stderr
    assert "2 passed" in got.stdout
    assert "LEAKED non-daemon thread 'forgotten-waiter'" in got.stdout
    assert "first seen after test_inner.py::test_leaves_a_thread" in got.stdout
    assert took < 60


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_leftover_process_pool_fails_the_session_and_its_worker_is_killed(tmp_path):
    got, took = _pytest(tmp_path, POOL)  # without the guard: waits 600 s at exit
    assert got.returncode == 1, got.stdout + got.stderr
    assert "LEAKED process pool manager thread" in got.stdout
    assert "LEAKED child process" in got.stdout and "spawn_main" in got.stdout
    assert "first seen after test_inner.py::test_leaves_a_process_pool" in got.stdout
    assert took < 60


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_leftover_child_process_fails_the_session_and_is_killed(tmp_path):
    got, _ = _pytest(tmp_path, CHILD)
    assert got.returncode == 1, got.stdout + got.stderr
    line = next(ln for ln in got.stdout.splitlines() if ln.startswith("LEAKED child process"))
    pid = int(line.split()[3].rstrip(":"))
    assert "time.sleep(600)" in line
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        assert not Path(f"/proc/{pid}").exists(), f"the leftover child {pid} is still alive"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_run_past_its_bound_is_stopped_with_the_stacks_and_a_message(past_bound, workers):
    waiter, got, folder = past_bound[workers]
    waiter.join(timeout=240)
    stderr = (folder / "stderr").read_text()
    assert got["returncode"] == 1
    assert f"ran past its bound of {got['bound']} s and was stopped: a hang" in stderr
    if workers != "0":  # the worker's dump, printed whole after the controller's own
        stderr = stderr.split("--- stacks of xdist worker gw", 1)[1]
    assert 'test_inner.py", line 8 in test_takes_for_ever' in stderr  # where it stood
    assert got["s"] < got["bound"] + KILL_AFTER_S + 15  # the bound, then KILL_AFTER (SLOW: 120 s)
