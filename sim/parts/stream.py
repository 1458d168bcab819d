"""Sessions from a stream: pulled one at a time, when the run reaches the pulled session's first
arrival, so a trace read lazily from disk never sits in memory whole (docs/semantics.md,
section 1)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from sim.units import SessionKV
from traces.records import Session

if TYPE_CHECKING:
    from sim.scheduler import Scheduler

# Arrivals' tie-break for first turns: before every later turn's arrival at the same time, in trace
# order (what scheduling every first arrival up front, as a list of sessions does, gives).
FIRST_ORDER = -(1 << 62)


class StreamIntake:
    def __init__(self, core: Scheduler, sessions: Iterable[Session], max_sessions: int) -> None:
        self.core = core
        self.max_sessions = max_sessions
        self._stream: Iterator[Session] | None = iter(sessions)
        self._head = -1  # index of the pulled session whose first turn is due
        self._start = -math.inf  # its first arrival (a stream's order is checked)
        self._head_id = ""  # its name (its record may be gone when the next is checked)
        self.pull()

    def arrived(self, i: int) -> None:
        """Session i's turn arrived: if it is the pulled session's first, pull the next."""
        if i == self._head and self._stream is not None:
            self.pull()

    def pull(self) -> None:
        """Take the stream's next session and schedule its first arrival (none: the stream ends)."""
        assert self._stream is not None
        s = next(self._stream, None)
        if s is None:
            self._stream = None
            return
        core = self.core
        i = self._head + 1
        start = s.turns[0].arrival_s if s.turns else None
        if start is None:
            raise ValueError(
                f"session stream: session {s.session_id!r} (#{i}) has no first "
                f"turn with arrival_s: a stream needs every session's start"
            )
        if start < self._start:
            raise ValueError(
                f"session stream out of order: session {s.session_id!r} (#{i}) "
                f"starts at {start}, before the previous session "
                f"{self._head_id!r} ({self._start}); a stream must come in order of first "
                f"arrival"
            )
        if i >= self.max_sessions:
            raise ValueError(f"session stream: more than {self.max_sessions} sessions")
        core.share_if_hashed(s)
        core.sessions[i] = s
        core.kv[i] = SessionKV(i, s.session_id, s.turns[0].priority)
        core.arrivals.schedule(i, start, order=FIRST_ORDER + i)
        self._head, self._start, self._head_id = i, start, s.session_id
