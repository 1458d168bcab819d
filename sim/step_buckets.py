"""Turns filed under the step at which something falls due for them (a new page, completion,
reaching a token budget's cap), so that an iteration touches only the turns due in it."""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.turns import TurnRun

NEVER = 1 << 62  # the step of an event that does not come


class StepBuckets:
    """step -> [(run, epoch)], with a heap of the steps. Each entry carries the run's epoch when
    it was filed: a preemption bumps the epoch, so its stale entries are skipped when their step
    comes rather than searched for and removed."""

    __slots__ = ("due", "steps")

    def __init__(self) -> None:
        self.due: defaultdict[int, list[tuple[TurnRun, int]]] = defaultdict(list)
        self.steps: list[int] = []  # heap of due's keys (and of keys already taken out)

    def add(self, step: int, run: TurnRun, epoch: int) -> None:
        if step not in self.due:
            heapq.heappush(self.steps, step)
        self.due[step].append((run, epoch))

    def next_step(self) -> int:
        """The first step with entries (NEVER if none); steps taken out leave the heap here."""
        heap, due = self.steps, self.due
        while heap and heap[0] not in due:
            heapq.heappop(heap)
        return heap[0] if heap else NEVER
