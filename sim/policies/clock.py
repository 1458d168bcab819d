"""CLOCK (second chance, FIFO-reinsertion), as libCacheSim's Clock.c with a 1-bit counter.

Units are kept in FIFO order of entry. A hit sets the unit's reference bit (a counter capped at
``max_freq`` = 1). To pick a victim the hand looks at the oldest unit: if its bit is set, the bit is
cleared and the unit goes back to the newest end; the first unit found with a clear bit is the victim.
A new unit enters with a clear bit. ``evict`` performs those second chances (they reorder, they do
not evict); ``peek`` names the same victim without performing them: the oldest unit with a clear
bit, or, when every bit is set, the oldest unit (a full turn of the hand clears them all).

Pins: a pinned unit leaves the ring but keeps its place and its bit; on unpin it returns to the
place it had (as ``fifo`` does), so a use by a running turn counts as one reference (the engine calls
``access`` before ``pin``), not as a re-insertion.

Order: ``EntryOrder`` (the entry order with candidate flags, as ``fifo``) and the set of members
whose bit is set. A second chance is the unit entering again at the newest end (O(1), paid for by
the hit that set the bit); pins, returns and hits are O(1) with no heap. ``peek`` scans the
candidates oldest first (only tests and users peek). Matches libCacheSim's Clock
(``init_freq=0, n_bit_counter=1``) request by request.
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import EntryOrder


@register("clock")
class Clock(EvictionPolicy):
    reads_last_access = False

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._order = EntryOrder()
        self._referenced: set[int] = set()  # members (pinned or not) whose bit is set

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._referenced.discard(uid)
        self._order.enter(uid, candidate=not pinned)

    def access(self, uid: int, now: float) -> None:
        if self._order.is_member(uid):
            self._referenced.add(uid)

    def referenced(self, uid: int) -> bool:
        """The reference bit of a member (pinned or not)."""
        return uid in self._referenced

    def pin(self, uid: int) -> None:
        self._order.discard(uid)

    def unpin(self, uid: int, now: float) -> None:
        self._order.back(uid)  # a non-member enters, with a clear bit

    def acquire(self, uids, now: float) -> None:
        uids = list(uids)
        is_member = self._order.is_member
        self._referenced.update(u for u in uids if is_member(u))
        self._order.discard_many(uids)

    def release(self, uids, now: float) -> None:
        self._order.back_many(uids)

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._order.leave(uid)
        self._referenced.discard(uid)

    def _add(self, uid: int, now: float) -> None:  # not used: insert/unpin are overridden
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    def peek(self, now: float) -> int | None:
        referenced = self._referenced
        for uid in self._order.candidates():
            if uid not in referenced:
                return uid
        return self._order.min()  # every bit set: a full turn clears them, the oldest goes

    def evict(self, now: float) -> int | None:
        order, referenced = self._order, self._referenced
        while True:
            uid = order.min()
            if uid is None:
                return None
            if uid not in referenced:
                return order.pop_first()
            referenced.discard(uid)  # second chance: the bit cleared, back to the newest end
            order.enter(uid)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, uid: int) -> bool:
        return uid in self._order
