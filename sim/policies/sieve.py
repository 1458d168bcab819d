"""SIEVE (Zhang et al., NSDI'24), as libCacheSim's Sieve.c.

Units sit in FIFO order of entry and never move. A hit sets the unit's visited bit. A hand sweeps
from the oldest unit towards the newest: a visited unit has its bit cleared and is passed over, the
first unvisited unit is the victim, and the hand stays where the victim was (the next sweep resumes
at the next newer unit). Past the newest unit the hand wraps to the oldest. New units enter at the
newest end with the bit clear, so the hand reaches them in this sweep if it has not finished it.

Implementation: ``SweepOrder``, one state byte per entry (member, candidate, visited) and the hand
as an entry number, so finding the next unvisited candidate and clearing the bits the hand passes
are C-level scans of a byte array; a session's units are found by page in a per-session list, so
a session's pins, returns and entries are slices, and a lap's victims leave with one
translation. ``peek`` is the
sweep on a copy (pure, O(n): only tests and users peek).

Pins: a pinned unit leaves the sweep but keeps its place and its bit; on unpin it returns to its
place: ahead of the hand if the hand has not passed that place in this sweep, behind it otherwise.
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import SweepOrder


@register("sieve")
class Sieve(EvictionPolicy):
    reads_last_access = False
    # pins keep their entry number; evictions assign none: a batch of pages equals them one by one
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._order = SweepOrder()

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._order.enter(uid, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        self._order.enter_many(uids, candidate=not pinned)

    def access(self, uid: int, now: float) -> None:
        self._order.mark(uid)

    def visited(self, uid: int) -> bool:
        """The visited bit of a member (pinned or not)."""
        return self._order.marked(uid)

    def pin(self, uid: int) -> None:
        self._order.pin_many((uid,), mark=False)

    def unpin(self, uid: int, now: float) -> None:
        self._order.back_many((uid,))

    def acquire(self, uids, now: float) -> None:
        self._order.pin_many(uids, mark=True)  # access (the bit) then pin, each

    def release(self, uids, now: float) -> None:
        self._order.back_many(uids)

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._order.leave(uid)

    def _add(self, uid: int, now: float) -> None:
        self._order.enter(uid)

    def _discard(self, uid: int) -> None:
        self._order.leave(uid)

    def peek(self, now: float) -> int | None:
        return self._peek_by_dry_run(now)

    def evict(self, now: float) -> int | None:
        return self._order.sweep()

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_bytes(nbytes, now)
        return self._order.sweep_many(n)

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_extents(nbytes, now)
        return self._order.sweep_extents(n, increasing=self.drops_victims)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, uid: int) -> bool:
        return uid in self._order
