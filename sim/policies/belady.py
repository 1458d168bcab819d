"""Belady's MIN (offline): evict the candidate whose next use is farthest in the future.

The key is ``view.next_access_s(uid)``, read when the unit becomes a candidate and on every hit:

- in ``kvsim cachesim`` it is the index of the object's next request in the stream (``inf`` when
  there is none), precomputed from the whole stream (``offline = True`` asks cachesim for it);
- in the engine it is the arrival of the session's next turn *under the current schedule*: the
  scheduler sets it on the session when a turn completes (``inf`` after the last
  turn), just before it unpins them. It is an oracle of the trace, not of the contention: a later
  turn's arrival can still move (closed-loop replay: it depends on when this turn completes), and a
  session's units all share one value.

Ties (never in cachesim for finite values, whose next requests are distinct indices; in the engine,
all units of a session) go to the larger key first, so a session loses its last pages before its
first (its prefix stays). Units with no next use (``inf``) go first. Among those, libCacheSim breaks
ties by its binary heap's layout; which dead object goes first never changes a hit (dead objects are
always evicted before any live one, so the bytes left for live objects are the same), so the hit
sequence equals libCacheSim's request by request, unit and variable sizes (tested).

Structure: a ``LazyHeap`` on (-next_access_s, -uid); a hit (or an unpin) pushes the new key and
voids the old entry. O(log n) per operation, amortised. Pins: a pinned unit is no candidate; it
rejoins with its next_access_s as it is at unpin. (Ties between sessions go to the larger uid, i.e.
the later session in the trace; the uid's page part keeps a session's last pages first.)
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import LazyHeap


@register("belady")
class Belady(EvictionPolicy):
    offline = True  # reads view.next_access_s (cachesim fills it from the stream)
    reads_last_access = False
    grows_in_bulk = True  # keys are read when a unit becomes a candidate, never at eviction

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._heap = LazyHeap()

    def _add(self, uid: int, now: float) -> None:
        self._heap.push(uid, (-self.view.next_access_s(uid), -uid))

    def _discard(self, uid: int) -> None:
        self._heap.discard(uid)

    def access(self, uid: int, now: float) -> None:
        if uid in self._heap:
            self._add(uid, now)

    def peek(self, now: float) -> int | None:
        return self._heap.min()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, uid: int) -> bool:
        return uid in self._heap
