"""Worker processes that always stop: run tasks in spawned processes and end every one of them.

Why not ``concurrent.futures.ProcessPoolExecutor``: its results come back over one pipe that the
calling process also holds open for writing, read by a manager thread. A worker terminated while it
writes a result leaves half a message in that pipe; the reader never sees end-of-file and blocks for
ever, and so does the interpreter's exit, which joins that thread. Here instead:

* each worker has a pipe of its own, and the caller keeps only its end of it: a worker that dies
  mid-message gives end-of-file, never a read that waits for ever;
* there is no thread at all in the calling process: its main thread waits on the pipes and on the
  workers' exit sentinels, and it alone starts, feeds and stops the workers;
* SIGINT and SIGTERM are only recorded while the pool is running (``interrupts_deferred``) and are
  acted on between waits, so an interrupt never lands half-way through starting or stopping a
  worker; stopping terminates every worker, then kills what is still alive, then joins them all;
* a worker ignores SIGINT (a terminal sends it to the whole process group; the caller stops the
  workers itself) and exits as soon as its parent dies (a crash, or SIGKILL), whatever it is doing.

Workers are started with "spawn" (no fork of a process that holds threads), so a script that runs
a pool needs the usual ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

FLUSH_S = 0.25  # a worker reports progress at most this often
_POLL_S = 0.2  # the caller acts on a recorded signal at least this often
_TERM_GRACE_S = 5.0  # from SIGTERM to SIGKILL for a worker that is being stopped
_EXIT_GRACE_S = 5.0  # for a worker told to finish to exit by itself


class WorkerDied(RuntimeError):
    """A worker process ended while it ran a task (killed, out of memory, a crash in C code)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index  # the task it was running


# ---------------------------------------------------------------------------------------------
# Signals in the calling process


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[Callable[[], None]]:
    """While active (main thread only), SIGINT and SIGTERM are recorded, not acted on; the function
    it yields hands a recorded one to the handler that was in place (Ctrl-C's KeyboardInterrupt,
    the `kvsim` command's Terminated, or the default action) at a point the caller chooses.

    A signal still recorded when the block ends normally is acted on then, so none is lost. One
    that comes while the block is already ending with an exception is dropped: that exception is
    already stopping the work."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    got: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: got.append(signum)) for sig in sigs}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def act() -> None:
        if not got:
            return
        restore()
        handler = previous[signal.Signals(got[0])]
        if callable(handler):
            handler(got[0], None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(got[0])

    try:
        yield act
    except BaseException:
        restore()
        raise
    act()
    restore()


# ---------------------------------------------------------------------------------------------
# The worker side


def _exit_with_parent() -> None:
    """Block until the parent process is gone, then end this one at once."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        wait([parent.sentinel])
        os._exit(1)


class _Progress:
    """The progress callback a task gets: counts batched onto the worker's pipe."""

    def __init__(self, conn: Connection, index: int) -> None:
        self.conn, self.index, self.pending, self.last = conn, index, 0, time.monotonic()

    def __call__(self, n: int) -> None:
        self.pending += n
        if time.monotonic() - self.last >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.conn.send(("progress", self.index, self.pending))
            self.pending, self.last = 0, time.monotonic()


def _send_outcome(conn: Connection, kind: str, index: int, value: Any) -> None:
    try:
        data = pickle.dumps((kind, index, value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable result or exception: say so instead
        why = RuntimeError(f"task {index}'s {kind} could not be sent: {type(exc).__name__}: {exc}")
        data = pickle.dumps(("error", index, why))
    conn.send_bytes(data)


def _worker_main(conn: Connection, fn: Callable[..., Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, name="exit-with-parent", daemon=True).start()
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the caller is gone
            return
        if task is None:  # no more work
            return
        index, args = task
        progress = _Progress(conn, index)
        try:
            value = fn(*args, progress)
        except Exception as exc:
            progress.flush()
            _send_outcome(conn, "error", index, exc)
        else:
            progress.flush()
            _send_outcome(conn, "done", index, value)


# ---------------------------------------------------------------------------------------------
# The calling side


class _Worker:
    def __init__(self, ctx: Any, fn: Callable[..., Any], name: str) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, fn), name=name, daemon=True)
        self.proc.start()
        child.close()  # only the worker holds its end: its death is end-of-file here
        self.task: int | None = None  # the index it runs, or None when idle

    def give(self, index: int, args: tuple) -> None:
        self.conn.send((index, args))
        self.task = index

    def died(self) -> WorkerDied:
        assert self.task is not None
        self.proc.join(timeout=1)
        code = self.proc.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exit code {code}"
        )
        return WorkerDied(f"worker process {self.proc.pid} died ({how})", self.task)


def _join_all(workers: list[_Worker], grace: float) -> None:
    deadline = time.monotonic() + grace
    for w in workers:
        w.proc.join(timeout=max(0.0, deadline - time.monotonic()))


def _stop(workers: list[_Worker], finished: bool) -> None:
    """End every worker: told to finish when all went well, terminated otherwise; whatever is still
    alive after its grace is killed; all are joined and their pipes closed."""
    if finished:
        for w in workers:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        _join_all(workers, _EXIT_GRACE_S)
    for w in workers:
        if w.proc.is_alive():
            w.proc.terminate()
    _join_all(workers, _TERM_GRACE_S)
    for w in workers:
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join()
        w.conn.close()
        w.proc.close()


def run_tasks(
    fn: Callable[..., Any],
    tasks: Sequence[tuple],
    workers: int,
    on_result: Callable[[int, Any], None],
    on_progress: Callable[[int, int], None] | None = None,
) -> None:
    """Run ``fn(*tasks[i], progress)`` for every i in up to ``workers`` spawned processes.

    ``fn`` must be a module-level function (it is pickled to the workers); ``progress(n)`` reports
    n units of work done, reaching ``on_progress(i, n)`` here. ``on_result(i, value)`` hears of each
    task as it finishes, in completion order. An exception raised by ``fn`` is raised here (the
    first one to arrive); a worker that dies raises ``WorkerDied`` naming the task. Either way, and
    on SIGINT, SIGTERM or an exception in a callback, every worker is ended before this returns or
    raises: no process or thread is left behind."""
    if not tasks:
        return
    ctx = multiprocessing.get_context("spawn")
    todo = deque(enumerate(tasks))
    pool: list[_Worker] = []
    finished = False
    with interrupts_deferred() as act_on_signals:
        try:
            for k in range(min(workers, len(tasks))):
                pool.append(_Worker(ctx, fn, f"kvsim-worker-{k}"))
            for w in pool:
                if todo:
                    w.give(*todo.popleft())
            while any(w.task is not None for w in pool):
                act_on_signals()  # the safe point: nothing is half-done here
                busy = {w.conn: w for w in pool if w.task is not None}
                sentinels = {w.proc.sentinel: w for w in busy.values()}
                ready = wait([*busy, *sentinels], timeout=_POLL_S)
                for w in dict.fromkeys(busy.get(r) or sentinels[r] for r in ready):
                    _hear(w, todo, on_result, on_progress)
            finished = True
        finally:
            _stop(pool, finished)


def _hear(w: _Worker, todo: deque, on_result, on_progress) -> None:
    """Read what one worker has to say (everything it has sent), and give it its next task."""
    while w.task is not None and w.conn.poll():
        try:
            kind, index, value = w.conn.recv()
        except (EOFError, OSError) as exc:  # died mid-message, or with nothing sent
            raise w.died() from exc
        if kind == "progress":
            if on_progress is not None:
                on_progress(index, value)
            continue
        if kind == "error":
            raise value
        w.task = None
        on_result(index, value)
        if todo:
            w.give(*todo.popleft())
    if w.task is not None and not w.proc.is_alive():
        raise w.died()
