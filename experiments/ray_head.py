"""A Ray head on this machine that lives exactly as long as the process that asked for it.

``ray.init(address="local")`` starts Ray's daemons as children of the calling process and in its
process group. Ray ties most of them to that process, not all: after a SIGKILL of `kvsim run`, its
dashboard and runtime-env agents lived on. So kvsim starts the head through a *keeper*: a small
process that runs ``ray start --head``, reports the address, and waits for its stdin to close. That
happens when kvsim is done with Ray, and also when kvsim dies in any way (the kernel closes a dead
process's pipes). The keeper is a child subreaper (Linux): every process Ray starts, however deep
and whatever its process group, stays its descendant, and the keeper ends them all. That is exact,
where ``ray stop`` would end every Ray of this user on the machine. The keeper and Ray run in a
process group of their own, which keeps a terminal's Ctrl-C away from Ray: kvsim stops the sweep
itself and then lets the keeper end Ray.

Run as ``python -m experiments.ray_head`` it is the keeper; ``local_ray_head()`` starts one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

START_TIMEOUT_S = 180.0  # `ray start` on a busy 2-core machine takes 5-20 s
GRACE_S = 5.0  # SIGTERM to Ray's processes, then SIGKILL to what is left


class RayStartError(RuntimeError):
    """``ray start --head`` failed or did not finish in time."""


@contextlib.contextmanager
def local_ray_head() -> Iterator[str]:
    """Start a Ray head on this machine; yield its address (``127.0.0.1:PORT``). On leaving, or if
    this process dies, every process of that Ray ends."""
    keeper = subprocess.Popen(
        [sys.executable, "-m", "experiments.ray_head"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        process_group=0,  # its own group: the one it ends, and out of reach of the terminal's ^C
        cwd=Path(__file__).resolve().parents[1],  # `experiments` importable, installed or not
    )
    assert keeper.stdin is not None and keeper.stdout is not None
    started = False
    try:
        reply = keeper.stdout.readline().strip()
        if not reply.startswith("address "):
            raise RayStartError(f"could not start a local Ray head: {reply or 'no reply'}")
        started = True
        yield reply.removeprefix("address ")
    finally:
        if started:  # the keeper's signal to end Ray
            keeper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                keeper.wait(timeout=GRACE_S + 10)
        if keeper.poll() is None:  # stopped while Ray was starting, or the keeper is stuck
            os.killpg(keeper.pid, signal.SIGKILL)
            keeper.wait()
        keeper.stdin.close()
        keeper.stdout.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _become_subreaper() -> bool:
    """Linux: adopt every orphaned descendant (Ray's daemons once `ray start` exits, its workers,
    which sit in process groups of their own, once the raylet ends), so that the keeper can find and
    end them all. False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    pr_set_child_subreaper = 36
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0


def _descendants() -> list[int]:
    """Live descendants of this process, from /proc (zombies are reaped on the way)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [os.getpid()]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _end_ray(subreaper: bool) -> None:
    """SIGTERM to every process of this Ray (Ray's daemons shut down on it, as `ray stop` sends),
    SIGKILL to what is left after GRACE_S, then the keeper exits."""
    if not subreaper:  # no adoption (not Linux): the process group, minus Ray's workers
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only now: children must not inherit it
        os.killpg(0, signal.SIGTERM)
        time.sleep(GRACE_S)
        os.killpg(0, signal.SIGKILL)  # the keeper too: its temp dir stays
    deadline, told = time.monotonic() + GRACE_S, set()
    while (alive := _descendants()) and time.monotonic() < deadline:
        _signal_all([pid for pid in alive if pid not in told], signal.SIGTERM)  # a dying raylet
        told.update(alive)  # may still start workers: each new process is told once
        time.sleep(0.1)
    while alive := _descendants():
        _signal_all(alive, signal.SIGKILL)
        time.sleep(0.05)


def keeper_main() -> None:
    subreaper = _become_subreaper()
    port = _free_port()
    # Its own temp dir: `ray start` records "the latest cluster started here" in the temp dir, and a
    # later `ray.init(address="auto")` elsewhere must not try to join this Ray once it has ended.
    temp_dir = tempfile.mkdtemp(prefix="kvsim-ray-")
    cmd = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]
    try:
        started = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            # as ray.init(address="local") does: `ray start` would turn token authentication on,
            # and a driver that has no token cannot join
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )
        if started.returncode == 0:
            print(f"address 127.0.0.1:{port}", flush=True)
            sys.stdin.read()  # until kvsim closes it or dies
        else:
            tail = " | ".join((started.stderr or started.stdout).strip().splitlines()[-5:])
            print(f"`ray start --head` exited {started.returncode}: {tail}", flush=True)
    except subprocess.TimeoutExpired:
        print(f"`ray start --head` did not finish in {START_TIMEOUT_S:.0f} s", flush=True)
    finally:  # whatever happened (kvsim gone: a broken pipe), Ray must not outlive this
        with contextlib.suppress(OSError):
            sys.stdout.close()
        _end_ray(subreaper)
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    keeper_main()
