"""experiments.worker_pool: tasks run in spawned workers, and every way of stopping ends them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import proc_table
import pytest

from experiments.worker_pool import WorkerDied, interrupts_deferred, run_tasks

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


# Task functions: module level, so the spawned workers can import them.
def square_with_progress(x: int, progress) -> tuple[int, int]:
    for _ in range(x):
        progress(1)
    return x * x, os.getpid()


def fail_on_three(x: int, progress) -> int:
    if x == 3:
        raise ValueError(f"task {x} cannot be done")
    time.sleep(0.05)
    return x


def big_result_after_writing_pid(path: str, progress) -> bytes:
    result = os.urandom(1) * (400 << 20)  # 400 MiB: long enough in the pipe to be killed mid-way
    Path(path).write_text(str(os.getpid()))  # pickling and sending start now
    return result


def sleep_long(seconds: float, progress) -> None:
    time.sleep(seconds)


def _children(pid: int | None = None) -> list[int]:
    """Live children of ``pid`` (this process), the resource tracker left out."""
    return [p.pid for p in proc_table.children(os.getpid() if pid is None else pid)]


def _assert_nothing_left(threads_before: set[threading.Thread]) -> None:
    new = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert new == [], new
    assert _children() == []


# ---------------------------------------------------------------------------------------------


@linux_only
def test_results_and_progress_come_back_and_the_workers_end():
    before = set(threading.enumerate())
    got, progress = {}, {}

    def on_progress(i, n):
        progress[i] = progress.get(i, 0) + n

    run_tasks(square_with_progress, [(x,) for x in range(7)], 3, got.__setitem__, on_progress)
    assert {i: v for i, (v, _) in got.items()} == {x: x * x for x in range(7)}
    assert progress == {x: x for x in range(1, 7)}  # every unit reported, none twice
    assert len({pid for _, pid in got.values()}) <= 3  # at most 3 workers
    assert os.getpid() not in {pid for _, pid in got.values()}  # ran in workers, not here
    _assert_nothing_left(before)


def test_no_tasks_starts_no_worker():
    run_tasks(square_with_progress, [], 4, lambda i, v: pytest.fail("no task, no result"))


@linux_only
def test_an_exception_in_a_task_is_raised_here_and_stops_every_worker():
    before = set(threading.enumerate())
    got = {}
    with pytest.raises(ValueError, match="task 3 cannot be done"):
        run_tasks(fail_on_three, [(x,) for x in range(20)], 2, got.__setitem__)
    assert 3 not in got and len(got) < 20  # stopped at the failure, not run to the end
    _assert_nothing_left(before)


def kill_mid_write(pid_file: Path) -> None:
    """SIGKILL the worker named in ``pid_file`` once it sleeps after naming itself: it then waits in
    write() for the reader to empty the pipe, with part of its 400 MiB result sent (pickling it
    before keeps it running, not sleeping)."""
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.001)
    pid = int(pid_file.read_text())
    while (p := proc_table.read(pid)) is not None and p.state != "S":
        time.sleep(0.0005)
    os.kill(pid, signal.SIGKILL)


@linux_only
def test_a_worker_killed_while_it_sends_its_result_is_reported_not_waited_for(tmp_path):
    # The case that hung concurrent.futures: half a result in the pipe, its writer gone.
    before = set(threading.enumerate())
    pid_file = tmp_path / "pid"
    killer = threading.Thread(target=kill_mid_write, args=(pid_file,))
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(WorkerDied, match="killed by SIGKILL") as err:
        run_tasks(big_result_after_writing_pid, [(str(pid_file),)], 1, lambda i, v: None)
    killer.join()
    assert err.value.index == 0
    assert "end of file during message" in str(err.value.__cause__)  # it was cut mid-message
    assert time.monotonic() - t0 < 30
    _assert_nothing_left(before)


@linux_only
def test_an_exception_in_the_callers_callback_stops_every_worker():
    before = set(threading.enumerate())

    def on_result(i, value):
        raise KeyboardInterrupt  # as Ctrl-C during a checkpoint write

    with pytest.raises(KeyboardInterrupt):
        run_tasks(square_with_progress, [(x,) for x in range(10)], 2, on_result)
    _assert_nothing_left(before)


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_pool_waits_stops_it_at_once(signum):
    before = set(threading.enumerate())
    raised = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: raised.append(s) or _raise())
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signum))
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_tasks(sleep_long, [(60,), (60,), (60,)], 2, lambda i, v: None)
    finally:
        timer.join()
        signal.signal(signal.SIGTERM, previous)
    assert time.monotonic() - t0 < 15  # not the 60 s the tasks would take
    _assert_nothing_left(before)


def _raise() -> None:
    raise KeyboardInterrupt


PARENT = """
import sys
from experiments.worker_pool import run_tasks
from test_worker_pool import sleep_long

if __name__ == "__main__":
    print("started", flush=True)
    run_tasks(sleep_long, [(600,), (600,)], 2, lambda i, v: None)
"""


@linux_only
def test_workers_end_when_their_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE), str(HERE.parent)])}
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        while len(workers := _children(proc.pid)) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "no workers started"
            time.sleep(0.05)
        proc.kill()  # a crash: no clean-up of any kind runs in the parent
        proc.wait()
        deadline = time.monotonic() + 10
        alive = workers
        while alive and time.monotonic() < deadline:
            alive = [p for p in workers if proc_table.is_alive(p)]
            time.sleep(0.05)
        assert alive == [], f"workers {alive} outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


# ---------------------------------------------------------------------------------------------
# interrupts_deferred


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_recorded_at_the_end_of_the_block_is_not_lost(signum):
    heard = []
    handler = lambda s, f: heard.append(s)  # noqa: E731
    previous = signal.signal(signum, handler)
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # bytecodes run: a handler in place would have run by now
                time.sleep(0)
            assert heard == []  # recorded only
        assert heard == [signum]  # acted on as the block ended
        assert signal.getsignal(signum) is handler  # put back
    finally:
        signal.signal(signum, previous)


def test_a_signal_during_an_exit_by_exception_is_dropped():
    heard = []
    handler = lambda s, f: heard.append(s)  # noqa: E731
    previous = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(RuntimeError):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    time.sleep(0)
                raise RuntimeError("already stopping")
        assert heard == []  # the exception is what stops the work
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)
