"""The live processes of this machine, from Linux's /proc (for tests that check what is left)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    pid: int
    state: str  # R, S, D, Z, ...
    ppid: int
    session: int
    cmdline: str


def read(pid: int) -> Proc | None:
    """One process, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:  # exited while we looked
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...
    return Proc(pid, fields[0], int(fields[1]), int(fields[3]), cmd.strip())


def alive() -> list[Proc]:
    """Every process that has not exited (zombies left out)."""
    procs = (read(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit())
    return [p for p in procs if p is not None and p.state != "Z"]


def children(pid: int, *, tracker: bool = False) -> list[Proc]:
    """Live children of ``pid``; multiprocessing's resource tracker (which ends with its parent)
    only if ``tracker``."""
    return [
        p for p in alive() if p.ppid == pid and (tracker or "resource_tracker" not in p.cmdline)
    ]


def session_members(sid: int) -> list[Proc]:
    """Live processes of session ``sid``."""
    return [p for p in alive() if p.session == sid]


def is_alive(pid: int) -> bool:
    p = read(pid)
    return p is not None and p.state != "Z"


def left_in_session(sid: int, bound_s: float) -> list[Proc]:
    """The live processes of session ``sid`` once none is left or ``bound_s`` has passed."""
    deadline = time.monotonic() + bound_s
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_session(sid: int) -> None:
    """SIGKILL every live process of session ``sid`` (what a failed test left behind)."""
    for p in session_members(sid):
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            os.kill(p.pid, signal.SIGKILL)
