"""A worked example: your own eviction policy, run by kvsim without registering it.

Name the class as ``module:Class`` in the experiment YAML and kvsim imports it (the repository root
must be importable, as it is when you run ``kvsim`` from it)::

    policies: [lru, "notebooks.custom_policy_example:LargestSessionFirst"]

or from Python::

    from sim import MemoryConfig, simulate
    simulate(sessions, cost, MemoryConfig(gpu_kv_gb=2, cpu_kv_gb=8),
             policy="notebooks.custom_policy_example:LargestSessionFirst")

What a policy must do (``sim.policies.base.EvictionPolicy``): keep the *candidates* of one tier (the
engine builds one instance per tier and only unpinned units are candidates) and answer
``victim(now)`` with the one to evict next, without removing it -- the engine calls ``remove`` after.
Override ``_add`` (a unit became a candidate), ``_discard`` (it stopped being one), ``victim``,
``__len__`` and ``__contains__``; optionally ``access`` (a hit). Never read a clock: use ``now``.

This one evicts from the session holding the most context first (``SessionKV.tokens``: a long
conversation frees the most room per decision), its last page first; ties go to the session that
came first in the trace. The key cannot change while a unit is a candidate (a session's tokens
only grow while it runs, and then all its units are pinned), so a heap with lazy deletion is exact:
O(log n) per operation.
"""
from __future__ import annotations

import heapq

from sim.policies import EvictionPolicy


class LargestSessionFirst(EvictionPolicy):
    name = "largest-session-first"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._heap: list[tuple] = []          # (-session tokens, session index, -page, seq, unit)
        self._live: dict[int, tuple] = {}     # unit key -> its current heap entry
        self._seq = 0                         # unique per entry: tuples never compare two units

    def _add(self, unit, now: float) -> None:
        s = unit.session
        self._seq += 1
        entry = (-s.tokens, s.index, -unit.first_page, self._seq, unit)
        self._live[unit.key] = entry
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._live) + 64:  # drop stale entries now and then
            self._heap = list(self._live.values())
            heapq.heapify(self._heap)

    def _discard(self, unit) -> None:
        self._live.pop(unit.key, None)

    def victim(self, now: float):
        heap = self._heap
        while heap:
            entry = heap[0]
            if self._live.get(entry[4].key) is entry:
                return entry[4]
            heapq.heappop(heap)  # stale: the unit left, or re-entered with a new entry
        return None

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, unit) -> bool:
        return unit.key in self._live
