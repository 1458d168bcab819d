"""CLOCK (second chance, FIFO-reinsertion), as libCacheSim's Clock.c with a 1-bit counter.

Units are kept in FIFO order of entry. A hit sets the unit's reference bit (a counter capped at
``max_freq`` = 1). To pick a victim the hand looks at the oldest unit: if its bit is set, the bit is
cleared and the unit goes back to the newest end; the first unit found with a clear bit is the victim.
A new unit enters with a clear bit. ``victim`` performs those second chances (they reorder, they do
not evict) and is idempotent: asked twice, it names the same unit.

Pins: a pinned unit leaves the ring but keeps its place and its bit; on unpin it returns to the
place it had (as ``fifo`` does), so a use by a running turn counts as one reference (the engine calls
``access`` before ``pin``), not as a re-insertion.

Order: a heap on a per-policy sequence number with lazy deletion (``SeqQueue``), O(log n) per
operation; each second chance is one O(log n) move, paid for by the hit that set the bit.
Matches libCacheSim's Clock (``init_freq=0, n_bit_counter=1``) request by request.
"""
from __future__ import annotations

import heapq

from sim.policies._lazy_heap import first_live
from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


class SeqQueue:
    """Units ordered by a sequence number, oldest first: a heap with lazy deletion.

    ``push`` with the number a unit had before puts it back in its old place. Entries of units that
    left are dropped when they reach the top, or all at once when they outnumber the live ones.
    """

    __slots__ = ("_heap", "_live", "_tok", "nbytes")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, object]] = []      # (seq, token, unit)
        self._live: dict[int, tuple[int, int, object, int]] = {}  # key -> (seq, token, unit, size)
        self._tok = 0
        self.nbytes = 0

    def push(self, unit, seq: int, size: int) -> None:
        self._tok += 1
        tok = self._tok
        self._live[unit.key] = (seq, tok, unit, size)
        heapq.heappush(self._heap, (seq, tok, unit))
        self.nbytes += size
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [(s, t, u) for s, t, u, _ in self._live.values()]
            heapq.heapify(self._heap)

    def discard(self, key: int):
        """Take ``key`` out; returns its (seq, token, unit, size) or None."""
        e = self._live.pop(key, None)
        if e is not None:
            self.nbytes -= e[3]
        return e

    def oldest(self):
        """The unit with the smallest sequence number, or None."""
        return first_live(self._heap, self._live)

    def seq_of(self, key: int) -> int:
        return self._live[key][0]

    def size_of(self, key: int) -> int:
        return self._live[key][3]

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: int) -> bool:
        return key in self._live


@register("clock")
class Clock(EvictionPolicy):
    max_freq = 1   # libCacheSim's n_bit_counter=1

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._q = SeqQueue()
        self._freq: dict[int, int] = {}      # reference counter of every member, pinned or not
        self._pinned_seq: dict[int, int] = {}
        self._seq = 0

    def insert(self, unit, now: float) -> None:
        self._freq[unit.key] = 0
        self._seq += 1
        if unit.pinned:
            self._pinned_seq[unit.key] = self._seq
        else:
            self._q.push(unit, self._seq, 0)

    def access(self, unit, now: float) -> None:
        f = self._freq.get(unit.key)
        if f is not None and f < self.max_freq:
            self._freq[unit.key] = f + 1

    def pin(self, unit) -> None:
        e = self._q.discard(unit.key)
        if e is not None:
            self._pinned_seq[unit.key] = e[0]

    def unpin(self, unit, now: float) -> None:
        seq = self._pinned_seq.pop(unit.key, None)
        if seq is None:           # not a member yet: treat as an entry
            self.insert(unit, now)
            return
        self._q.push(unit, seq, 0)

    def remove(self, unit) -> None:
        if self._q.discard(unit.key) is None:
            self._pinned_seq.pop(unit.key, None)
        self._freq.pop(unit.key, None)

    def _add(self, unit, now: float) -> None:  # not used: insert/unpin are overridden
        self.insert(unit, now)

    def _discard(self, unit) -> None:
        self.remove(unit)

    def victim(self, now: float):
        q, freq = self._q, self._freq
        while True:
            unit = q.oldest()
            if unit is None:
                return None
            f = freq[unit.key]
            if f < 1:
                return unit
            freq[unit.key] = f - 1                 # second chance: back to the newest end
            q.discard(unit.key)
            self._seq += 1
            q.push(unit, self._seq, 0)

    def __len__(self) -> int:
        return len(self._q)

    def __contains__(self, unit) -> bool:
        return unit.key in self._q
