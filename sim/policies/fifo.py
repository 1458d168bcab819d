"""FIFO: evict the unit that entered this tier first; uses and pins do not reorder it.

A heap on the tier-entry sequence number with lazy deletion: a unit that is pinned and released
keeps its place, which an ordered dict could not do in O(1). O(log n) per operation, amortised.
"""
from __future__ import annotations

import heapq

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


@register("fifo")
class FIFO(EvictionPolicy):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._heap: list[tuple[int, int, object]] = []  # (tier_seq, key, unit)
        self._live: dict[int, int] = {}                  # key -> tier_seq of candidates
        self._heaped: dict[int, int] = {}                # key -> tier_seq of its entry in the heap

    def _add(self, unit, now: float) -> None:
        seq = unit.tier_seq
        self._live[unit.key] = seq
        if self._heaped.get(unit.key) != seq:
            self._heaped[unit.key] = seq
            heapq.heappush(self._heap, (seq, unit.key, unit))

    def _discard(self, unit) -> None:
        self._live.pop(unit.key, None)

    def victim(self, now: float):
        heap, live = self._heap, self._live
        while heap:
            seq, key, unit = heap[0]
            if live.get(key) == seq:
                return unit
            heapq.heappop(heap)  # stale: removed, or re-entered the tier with a newer seq
            if self._heaped.get(key) == seq:
                del self._heaped[key]
        return None

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, unit) -> bool:
        return unit.key in self._live
