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

Order: a ``LazyHeap`` on a per-policy sequence number, O(log n) per operation; each second chance is
one O(log n) move, paid for by the hit that set the bit. A second heap holds the units with a clear
bit, so ``peek`` is O(log n) too. Matches libCacheSim's Clock (``init_freq=0, n_bit_counter=1``)
request by request.
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import LazyHeap


@register("clock")
class Clock(EvictionPolicy):
    max_freq = 1  # libCacheSim's n_bit_counter=1
    reads_last_access = False

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._q = LazyHeap()  # candidates by sequence number (FIFO order)
        self._clear = LazyHeap()  # the candidates whose bit is clear, same keys
        self._freq: dict[int, int] = {}  # reference counter of every member, pinned or not
        self._pinned_seq: dict[int, int] = {}
        self._seq = 0

    def _enter(self, uid: int, seq: int) -> None:
        self._q.push(uid, seq)
        if self._freq[uid] == 0:
            self._clear.push(uid, seq)

    def _leave(self, uid: int) -> int | None:
        seq = self._q.key(uid)
        if seq is not None:
            self._q.discard(uid)
            self._clear.discard(uid)
        return seq

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._freq[uid] = 0
        self._seq += 1
        if pinned:
            self._pinned_seq[uid] = self._seq
        else:
            self._enter(uid, self._seq)

    def access(self, uid: int, now: float) -> None:
        f = self._freq.get(uid)
        if f is not None and f < self.max_freq:
            self._freq[uid] = f + 1
            self._clear.discard(uid)

    def pin(self, uid: int) -> None:
        seq = self._leave(uid)
        if seq is not None:
            self._pinned_seq[uid] = seq

    def unpin(self, uid: int, now: float) -> None:
        seq = self._pinned_seq.pop(uid, None)
        if seq is None:  # not a member yet: treat as an entry
            self.insert(uid, now)
            return
        self._enter(uid, seq)

    def remove(self, uid: int, pinned: bool = False) -> None:
        if self._leave(uid) is None:
            self._pinned_seq.pop(uid, None)
        self._freq.pop(uid, None)

    def _add(self, uid: int, now: float) -> None:  # not used: insert/unpin are overridden
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    def peek(self, now: float) -> int | None:
        uid = self._clear.min()
        return uid if uid is not None else self._q.min()

    def evict(self, now: float) -> int | None:
        q, freq = self._q, self._freq
        while True:
            uid = q.min()
            if uid is None:
                return None
            f = freq[uid]
            if f < 1:
                self.remove(uid)
                return uid
            freq[uid] = f - 1  # second chance: back to the newest end
            q.discard(uid)
            self._seq += 1
            self._enter(uid, self._seq)

    def __len__(self) -> int:
        return len(self._q)

    def __contains__(self, uid: int) -> bool:
        return uid in self._q
