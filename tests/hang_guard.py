"""A pytest plugin so that a test run cannot hang silently.

* The session fails if a test leaves a process pool, a worker process or a non-daemon thread alive,
  and names what was left and the test after which it was first seen.
* ``kill -USR1 PID`` prints the stack of every thread of the run (``.ci/pytest-bounded`` sends it
  when a run passes its time bound, before it kills it).

Why: a process pool whose manager thread is blocked (a worker killed while it wrote a result) makes
the interpreter wait for ever at exit, after every test has passed; a run like that never finishes
and says nothing. Here such a leftover fails the run with its name instead, and the process exits
without joining it.

After each test it notes what is alive that was not before (cheap: the thread list and this
process's children from /proc). At the end of the session it waits up to ``GRACE_S`` for those to
end by themselves; whatever is still alive then is reported, the run's exit status becomes 1,
leftover child processes are killed, and the process ends with ``os._exit`` so that a blocked thread
cannot hold it. The one child expected to live as long as this process is multiprocessing's
resource tracker, which exits when this process does.

``tests/conftest.py`` registers it; ``pytest -p hang_guard`` loads it into another session.
``KVSIM_LEAK_GRACE_S`` overrides ``GRACE_S`` (the tests of this plugin shorten it).
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

GRACE_S = float(os.environ.get("KVSIM_LEAK_GRACE_S", 10.0))  # for leftovers to end by themselves

_first_seen: dict[str, str] = {}  # a leftover's description -> the test after which it appeared
_leaked: list[str] = []
_keep: list = []
STACKS_DIR_ENV = "KVSIM_STACKS_DIR"  # where xdist workers write their stacks on SIGUSR1


def _children() -> list[tuple[int, str]]:
    """(pid, command line) of this process's live children, the resource tracker left out."""
    if not Path("/proc").is_dir():  # not Linux: the multiprocessing ones only
        import multiprocessing

        return [(p.pid, p.name) for p in multiprocessing.active_children()]
    import proc_table

    return [(p.pid, p.cmdline[:160]) for p in proc_table.children(os.getpid())]


def _pool_threads() -> set[threading.Thread]:
    """The manager threads of concurrent.futures process pools that have not shut down."""
    import concurrent.futures.process as cfp

    return set(getattr(cfp, "_threads_wakeups", {}))


def leftovers() -> dict[str, int | threading.Thread]:
    """What is alive now that a finished test must not leave: description -> pid or thread."""
    found: dict[str, int | threading.Thread] = {}
    pools = _pool_threads()
    for t in threading.enumerate():
        if t is threading.main_thread() or not t.is_alive():
            continue
        if t in pools:
            found[
                f"process pool manager thread {t.name!r} (a ProcessPoolExecutor not shut down)"
            ] = t
        elif not t.daemon:
            found[f"non-daemon thread {t.name!r} ({type(t).__module__}.{type(t).__name__})"] = t
    for pid, cmd in _children():
        found[f"child process {pid}: {cmd}"] = pid
    return found


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(signal, "SIGUSR1"):
        return
    # An xdist worker has workerinput (not the environment's PYTEST_XDIST_WORKER, which a pytest
    # started by a test in a worker inherits).
    worker = getattr(config, "workerinput", {}).get("workerid")
    chain = False  # to a Python handler of our own; the default action of SIGUSR1 ends the process
    stacks_dir = os.environ.get(STACKS_DIR_ENV)
    if worker and stacks_dir:
        # An xdist worker: the signal reaches every process of the group at once, and dumps
        # written to one stderr together interleave word by word; each worker writes its own file
        # and the controller prints them one after another.
        out = open(Path(stacks_dir) / f"{worker}.txt", "w")
    else:
        # The dump must reach the real stderr, not the running test's captured output (lost when
        # the run is killed): a copy of descriptor 2 taken now, while pytest's capture is suspended.
        out = os.fdopen(os.dup(2), "w")
        if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
            stacks_dir = tempfile.mkdtemp(prefix="kvsim-stacks-")
            os.environ[STACKS_DIR_ENV] = stacks_dir  # the workers, spawned later, inherit it
            _keep.append(stacks_dir)  # removed at the end of the session
            signal.signal(signal.SIGUSR1, lambda *_: _print_worker_stacks(out, Path(stacks_dir)))
            chain = True
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True, chain=chain)
    _keep.append(out)  # faulthandler holds only its descriptor


def _print_worker_stacks(out, stacks_dir: Path, wait_s: float = 2.0) -> None:
    """After this process's own dump: each xdist worker's, read from the file it wrote."""
    time.sleep(wait_s)  # the workers got the signal when this process did
    for path in sorted(stacks_dir.glob("*.txt")):
        out.write(f"\n--- stacks of xdist worker {path.stem} ---\n{path.read_text()}")
    out.flush()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    for what in leftovers():
        _first_seen.setdefault(what, item.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    deadline = time.monotonic() + GRACE_S
    while (alive := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not alive:
        return
    _leaked[:] = [
        f"{what}; first seen after {_first_seen.get(what, 'the session')}" for what in alive
    ]
    for what in alive.values():
        if isinstance(what, int):
            try:
                os.kill(what, 9)
            except OSError:
                pass
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if not _leaked:
        return
    terminalreporter.section("leaked at the end of the session", sep="=", red=True, bold=True)
    for line in _leaked:
        terminalreporter.write_line(f"LEAKED {line}", red=True)
    terminalreporter.write_line(
        "the run fails: a test left these alive (a blocked pool thread would make the interpreter "
        "wait for ever at exit)"
    )


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        for kept in _keep:
            if isinstance(kept, str):
                shutil.rmtree(kept, ignore_errors=True)
    if _leaked:  # do not let a blocked thread hold the exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(pytest.ExitCode.TESTS_FAILED))
