"""Arrivals and replay: when each turn of each session enters the queue.

A heap of (time, order, session index); ties go to the earlier-scheduled session (first turns
before later ones, in trace order: see ``Scheduler``). ``next_arrival_s``
applies the replay rule for a session's next turn once its previous turn completes.
"""

from __future__ import annotations

import heapq

from traces.records import Turn


class Arrivals:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []  # (time, order, session index)
        self._order = 0

    def schedule(self, session_index: int, t: float, order: int | None = None) -> None:
        """Session ``session_index``'s next turn arrives at ``t``. ``order`` (the tie-break among
        arrivals at one time) defaults to the scheduling order; a stream gives its first turns a
        key of their own (``sim.scheduler``), since it schedules them as it goes."""
        if order is None:
            order = self._order
            self._order += 1
        heapq.heappush(self._heap, (t, order, session_index))

    def schedule_all(self, times: list[float]) -> None:
        """``schedule(i, times[i])`` for every i in turn (a trace's first turns, at its start):
        the heap built in one ``heapify`` rather than a push each. It pops in the same order (its
        entries are distinct)."""
        base, heap = self._order, self._heap
        heap.extend((t, base + i, i) for i, t in enumerate(times))
        heapq.heapify(heap)
        self._order += len(times)

    def next_s(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float):
        """(time, order, session index) of every arrival at or before ``now``, in order."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            yield heapq.heappop(heap)


def next_arrival_s(prev: Turn, nxt: Turn, completed_s: float, replay: str) -> float:
    """When turn ``nxt`` arrives, its predecessor ``prev`` having completed at ``completed_s``.

    Closed loop: ``think_s`` after the completion. Open loop: the recorded ``arrival_s``, but never
    before the predecessor completes. A closed-loop replay of a trace with only absolute times uses
    the recorded gap between the two turns as the think time.
    """
    if replay == "open-loop":
        if nxt.arrival_s is not None:
            return max(nxt.arrival_s, completed_s)
        return completed_s + (nxt.think_s or 0.0)
    if nxt.think_s is not None:
        return completed_s + nxt.think_s
    assert nxt.arrival_s is not None  # a validated later turn has think_s or arrival_s
    return completed_s + max(0.0, nxt.arrival_s - (prev.arrival_s or 0.0))
