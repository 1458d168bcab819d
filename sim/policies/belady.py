"""Belady's MIN (offline): evict the candidate whose next use is farthest in the future.

The key is ``unit.next_access_s``, read when the unit becomes a candidate and on every hit:

- in ``kvsim cachesim`` it is the index of the object's next request in the stream (``inf`` when
  there is none), precomputed from the whole stream (``offline = True`` asks cachesim for it);
- in the engine it is the arrival of the session's next turn *under the current schedule*: the
  scheduler sets it on each of the session's units when a turn completes (``inf`` after the last
  turn), just before it unpins them. It is an oracle of the trace, not of the contention: a later
  turn's arrival can still move (closed-loop replay: it depends on when this turn completes), and a
  session's units all share one value.

Ties (never in cachesim for finite values, whose next requests are distinct indices; in the engine,
all units of a session) go to the larger key first, so a session loses its last pages before its
first (its prefix stays). Units with no next use (``inf``) go first. Among those, libCacheSim breaks
ties by its binary heap's layout; which dead object goes first never changes a hit (dead objects are
always evicted before any live one, so the bytes left for live objects are the same), so the hit
sequence equals libCacheSim's request by request, unit and variable sizes (tested).

Structure: a heap on (-next_access_s, -key) with lazy deletion; a hit (or an unpin) pushes the new
key and voids the old entry. O(log n) per operation, amortised. Pins: a pinned unit is no
candidate; it rejoins with its next_access_s as it is at unpin.
"""
from __future__ import annotations

import heapq

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


@register("belady")
class Belady(EvictionPolicy):
    offline = True   # reads unit.next_access_s (cachesim fills it from the stream)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._heap: list[tuple[float, int, int, object]] = []   # (-next, -key, token, unit)
        self._live: dict[int, int] = {}                         # key -> token of its entry
        self._tok = 0

    def _push(self, unit) -> None:
        self._tok += 1
        self._live[unit.key] = self._tok
        heapq.heappush(self._heap, (-unit.next_access_s, -unit.key, self._tok, unit))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [e for e in self._heap if self._live.get(e[3].key) == e[2]]
            heapq.heapify(self._heap)

    def _add(self, unit, now: float) -> None:
        self._push(unit)

    def _discard(self, unit) -> None:
        self._live.pop(unit.key, None)

    def access(self, unit, now: float) -> None:
        if unit.key in self._live:
            self._push(unit)

    def victim(self, now: float):
        heap, live = self._heap, self._live
        while heap:
            e = heap[0]
            if live.get(e[3].key) == e[2]:
                return e[3]
            heapq.heappop(heap)
        return None

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, unit) -> bool:
        return unit.key in self._live
