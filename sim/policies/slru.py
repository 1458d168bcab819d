"""Segmented LRU with 4 equal segments, as libCacheSim's SLRU.c (S4LRU(25:25:25:25)).

Segments S0 (probation) .. S3 (most protected), each an LRU list of int(c) // 4 bytes.

- A miss enters the MRU end of the lowest segment with room for it (S0 once the cache is warm;
  while it fills, new units land in the first segment not yet full, as libCacheSim does), or of S0
  when none has room.
- A hit in S3 moves the unit to S3's MRU end; a hit in Si (i < 3) promotes it to the MRU end of
  S(i+1). A segment over its share then cools: its LRU unit moves down to the MRU end of the segment
  below, cascading down to S1 -> S0.
- The victim is the LRU unit of the lowest non-empty segment.
- ``admit``: an object larger than a segment is not admitted (libCacheSim's ``can_insert``).

Difference from libCacheSim (documented, tested): when a cascade overflows S0, libCacheSim evicts
S0's LRU unit during the hit. A policy here cannot evict on its own (the engine, or cachesim, owns
membership), so S0 stays over its share and that unit is simply the next victim. With unit sizes and
a capacity divisible by 4 this never happens (segment shares sum to c and a cooled unit replaces the
promoted one in S0), and kvsim matches libCacheSim request by request; with variable sizes the two
agree up to the first hit at which libCacheSim evicts.

Pins: a pinned unit leaves its segment and remembers it; a hit while pinned promotes it by one
segment, applied on unpin, when it returns to the MRU end of its segment (then that segment cools
if it is over its share). Without ``set_capacity`` (the engine) c is the high-water mark of the bytes
the tier has held. O(1) per operation (4 segments), amortised over cooling moves.
"""
from __future__ import annotations

from collections import OrderedDict

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


@register("slru")
class SLRU(EvictionPolicy):
    n_seg = 4

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._segs: list[OrderedDict[int, object]] = [OrderedDict() for _ in range(self.n_seg)]
        self._bytes = [0] * self.n_seg
        self._seg: dict[int, int] = {}        # every member -> its segment
        self._size: dict[int, int] = {}       # every member -> bytes accounted
        self._pinned: set[int] = set()
        self._capacity: int | None = None
        self._hwm = 0
        self._resident = 0

    def set_capacity(self, capacity: int) -> None:
        self._capacity = int(capacity)

    def _seg_cap(self) -> int:
        c = self._capacity if self._capacity is not None else self._hwm
        return c // self.n_seg

    def admit(self, unit) -> bool:
        return unit.size <= self._seg_cap()

    # -- membership ------------------------------------------------------------------------------
    def insert(self, unit, now: float) -> None:
        key, size = unit.key, unit.size
        self._resident += size
        if self._resident > self._hwm:
            self._hwm = self._resident
        cap = self._seg_cap()
        seg = 0
        for i in range(self.n_seg):
            if self._bytes[i] + size <= cap:
                seg = i
                break
        self._seg[key] = seg
        self._size[key] = size
        if unit.pinned:
            self._pinned.add(key)
        else:
            self._segs[seg][key] = unit
            self._bytes[seg] += size

    def access(self, unit, now: float) -> None:
        key = unit.key
        seg = self._seg.get(key)
        if seg is None:
            return
        top = self.n_seg - 1
        if key in self._pinned:
            self._seg[key] = min(seg + 1, top)
            return
        if seg == top:
            self._segs[top].move_to_end(key)
            return
        size = self._size[key]
        del self._segs[seg][key]
        self._bytes[seg] -= size
        self._segs[seg + 1][key] = unit
        self._bytes[seg + 1] += size
        self._seg[key] = seg + 1
        self._cool_from(seg + 1)

    def _cool_from(self, i: int) -> None:
        """Move LRU units down while segment i (then the ones below) is over its share."""
        cap = self._seg_cap()
        segs, nbytes = self._segs, self._bytes
        while i > 0 and nbytes[i] > cap:
            key, unit = segs[i].popitem(last=False)
            size = self._size[key]
            nbytes[i] -= size
            segs[i - 1][key] = unit
            nbytes[i - 1] += size
            self._seg[key] = i - 1
            if nbytes[i - 1] > cap:
                self._cool_from(i - 1)

    def pin(self, unit) -> None:
        key = unit.key
        seg = self._seg.get(key)
        if seg is None or key in self._pinned:
            return
        del self._segs[seg][key]
        self._bytes[seg] -= self._size[key]
        self._pinned.add(key)

    def unpin(self, unit, now: float) -> None:
        key = unit.key
        if key not in self._pinned:
            self.insert(unit, now)
            return
        self._pinned.discard(key)
        size = unit.size
        self._resident += size - self._size[key]
        if self._resident > self._hwm:
            self._hwm = self._resident
        self._size[key] = size
        seg = self._seg[key]
        self._segs[seg][key] = unit
        self._bytes[seg] += size
        self._cool_from(seg)

    def remove(self, unit) -> None:
        key = unit.key
        seg = self._seg.pop(key, None)
        if seg is None:
            return
        size = self._size.pop(key)
        self._resident -= size
        if key in self._pinned:
            self._pinned.discard(key)
        else:
            del self._segs[seg][key]
            self._bytes[seg] -= size

    def _add(self, unit, now: float) -> None:
        self.insert(unit, now)

    def _discard(self, unit) -> None:
        self.remove(unit)

    def victim(self, now: float):
        for seg in self._segs:
            for unit in seg.values():
                return unit
        return None

    def segment(self, unit) -> int | None:
        """The segment (0 = probation) the unit belongs to, or None."""
        return self._seg.get(unit.key)

    def __len__(self) -> int:
        return len(self._seg) - len(self._pinned)

    def __contains__(self, unit) -> bool:
        return unit.key in self._seg and unit.key not in self._pinned
