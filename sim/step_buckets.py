"""Turns filed under the step at which something falls due for them (a new page, completion,
reaching a token budget's cap), so that an iteration touches only the turns due in it."""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.turns import TurnRun

NEVER = 1 << 62  # the step of an event that does not come
# Steps taken out that the heap may hold beyond twice the live ones before it is rebuilt: pushes
# of later steps cost little however deep the heap, so rebuild (a sort of the live steps) rarely.
_SLACK = 4096


class StepBuckets:
    """step -> [(run, epoch)], with a heap of the steps. Each entry carries the run's epoch when
    it was filed: a preemption bumps the epoch, so its stale entries are skipped when their step
    comes rather than searched for and removed."""

    __slots__ = ("due", "steps")

    def __init__(self) -> None:
        self.due: defaultdict[int, list[tuple[TurnRun, int]]] = defaultdict(list)
        self.steps: list[int] = []  # heap of due's keys (and of keys already taken out)

    def add(self, step: int, run: TurnRun, epoch: int) -> None:
        due = self.due
        if step in due:
            due[step].append((run, epoch))
            return
        due[step] = [(run, epoch)]
        heap = self.steps
        heapq.heappush(heap, step)
        if len(heap) > 2 * len(due) + _SLACK:
            self._compact()

    def _compact(self) -> None:
        """Drop the steps taken out: whole spans take keys out of ``due`` without popping them,
        and would leave the heap tens of thousands deep. In place (a sorted list is a heap): a
        caller popping the heap keeps its reference; it pops the same live steps in order."""
        self.steps[:] = sorted(self.due)

    def next_step(self) -> int:
        """The first step with entries (NEVER if none); steps taken out leave the heap here."""
        heap, due = self.steps, self.due
        while heap and heap[0] not in due:
            heapq.heappop(heap)
        return heap[0] if heap else NEVER
