"""FIFO: evict the unit that entered this tier first; uses and pins do not reorder it.

The order is the order of entry into the tier (``insert``), kept while the unit is in the tier,
pinned or not, so a unit that is pinned and released keeps its place. ``RunOrder`` keeps it as
runs of a session's consecutive units with pins per session, so a session's history entering,
its pin and release, and the oldest candidates leaving cost O(runs), not O(units).
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy, ReplayHooks
from sim.policies.registry import register
from sim.policies.run_order import RunOrder
from sim.units import join_extents


@register("fifo")
class FIFO(EvictionPolicy):
    reads_last_access = False
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._order = RunOrder()

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._order.enter(uid, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        self._order.enter_many(uids, candidate=not pinned)

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._order.leave(uid)

    def remove_many(self, uids, pinned: bool = False) -> None:
        self._order.leave_many(uids)

    def acquire(self, uids, now: float) -> None:
        self._order.discard_all(uids)  # a use changes nothing here: each is pinned

    def _add(self, uid: int, now: float) -> None:
        self._order.back(uid)  # (a member the policy never saw enter, from adapters, enters)

    def release(self, uids, now: float) -> None:
        self._order.back_many(uids)

    def _discard(self, uid: int) -> None:
        self._order.discard(uid)

    def _evicted(self, uid: int) -> None:
        self._order.leave(uid)

    def evict(self, now: float) -> int | None:
        return self._order.pop_first()

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_bytes(nbytes, now)
        return self._order.pop_many(n)

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_extents(nbytes, now)
        extents = self._order.pop_runs(n)
        return join_extents(sorted(extents)) if self.drops_victims else extents

    def take_in_extents(
        self, extents: list[tuple[int, int]], free_bytes: int, now: float
    ) -> list[tuple[int, int]]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes:
            return super().take_in_extents(extents, free_bytes, now)
        for a, s in extents:  # as take_in: all enter, then the oldest leave
            self._order.enter_many(range(a, s))
        total = sum(s - a for a, s in extents)
        return self._order.pop_runs(max(0, total - free_bytes // unit_bytes))

    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes:
            return super().take_in(uids, free_bytes, now)
        # New entries come last in the queue, so inserting all and then evicting the first is the
        # interleaved evict/insert.
        self._order.enter_many(uids)
        return self._order.pop_many(max(0, len(uids) - free_bytes // unit_bytes))

    def peek(self, now: float) -> int | None:
        return self._order.min()

    def replay_hooks(self) -> ReplayHooks:
        members, push, pop_oldest = self._order.replay_view()
        return ReplayHooks(members=members, on_hit=None, insert=push, evict=pop_oldest)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, uid: int) -> bool:
        return uid in self._order
