"""Progress of a long sweep on stderr: shapes done / total, elapsed time, an estimate of the rest.

About twenty lines per sweep (every 5 % of the shapes this run measures, and the last one), so a
log of a ten-minute GPU run stays readable. The ETA extrapolates this run's own rate; shapes taken
from an earlier run's raw file count as done but not towards the rate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class SweepProgress:
    def __init__(
        self,
        total: int,
        already: int = 0,
        label: str = "sweep",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
        lines: int = 20,
    ) -> None:
        self.total, self.done, self.label = total, already, label
        self._stream = stream or sys.stderr
        self._clock = clock
        self._t0 = clock()
        self._todo = total - already
        self._every = max(1, -(-self._todo // lines))
        self._new = 0

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._t0

    def step(self, what: str = "") -> None:
        """One more shape measured (``what``: its kind, shown on the printed line)."""
        self.done += 1
        self._new += 1
        if self._new % self._every == 0 or self.done == self.total:
            print(self.line(what), file=self._stream, flush=True)

    def line(self, what: str = "") -> str:
        el = self.elapsed_s
        eta = el / self._new * (self.total - self.done) if self._new else float("nan")
        return (
            f"[{self.label}] {self.done}/{self.total} shapes "
            f"({self.done / max(self.total, 1):.0%}), "
            f"{el:.0f} s elapsed, ETA {eta:.0f} s" + (f" ({what})" if what else "")
        )
