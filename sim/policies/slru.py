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
from sim.policies.structures import ByteBudget


@register("slru")
class SLRU(EvictionPolicy):
    n_seg = 4
    reads_last_access = False

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._segs: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(self.n_seg)]
        self._bytes = [0] * self.n_seg
        self._seg: dict[int, int] = {}  # every member -> its segment
        self._size: dict[int, int] = {}  # every member -> bytes accounted
        self._pinned: set[int] = set()
        self._budget = ByteBudget()

    def set_capacity(self, capacity: int) -> None:
        self._budget.set(capacity)

    def _seg_cap(self) -> int:
        return self._budget.c // self.n_seg

    def admit(self, uid: int) -> bool:
        return self.view.size(uid) <= self._seg_cap()

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        size = self.view.size(uid)
        self._budget.grow(size)
        cap = self._seg_cap()
        seg = 0
        for i in range(self.n_seg):
            if self._bytes[i] + size <= cap:
                seg = i
                break
        self._seg[uid] = seg
        self._size[uid] = size
        if pinned:
            self._pinned.add(uid)
        else:
            self._segs[seg][uid] = None
            self._bytes[seg] += size

    def access(self, uid: int, now: float) -> None:
        seg = self._seg.get(uid)
        if seg is None:
            return
        top = self.n_seg - 1
        if uid in self._pinned:
            self._seg[uid] = min(seg + 1, top)
            return
        if seg == top:
            self._segs[top].move_to_end(uid)
            return
        size = self._size[uid]
        del self._segs[seg][uid]
        self._bytes[seg] -= size
        self._segs[seg + 1][uid] = None
        self._bytes[seg + 1] += size
        self._seg[uid] = seg + 1
        self._cool_from(seg + 1)

    def _cool_from(self, i: int) -> None:
        """Move LRU units down while segment i (then the ones below) is over its share."""
        cap = self._seg_cap()
        segs, nbytes = self._segs, self._bytes
        while i > 0 and nbytes[i] > cap:
            uid, _ = segs[i].popitem(last=False)
            size = self._size[uid]
            nbytes[i] -= size
            segs[i - 1][uid] = None
            nbytes[i - 1] += size
            self._seg[uid] = i - 1
            if nbytes[i - 1] > cap:
                self._cool_from(i - 1)

    def pin(self, uid: int) -> None:
        seg = self._seg.get(uid)
        if seg is None or uid in self._pinned:
            return
        del self._segs[seg][uid]
        self._bytes[seg] -= self._size[uid]
        self._pinned.add(uid)

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each, in one loop."""
        segs, nbytes, seg_of, sizes, pinned = (
            self._segs,
            self._bytes,
            self._seg,
            self._size,
            self._pinned,
        )
        top = self.n_seg - 1
        for uid in uids:
            seg = seg_of.get(uid)
            if seg is None:
                continue
            if uid in pinned:
                seg_of[uid] = min(seg + 1, top)
                continue
            size = sizes[uid]
            if seg < top:  # promoted: its new segment cools with it at the MRU end
                del segs[seg][uid]
                nbytes[seg] -= size
                seg += 1
                segs[seg][uid] = None
                nbytes[seg] += size
                seg_of[uid] = seg
                self._cool_from(seg)
                seg = seg_of[uid]  # (cooling moves it down only when it alone is over a share)
            del segs[seg][uid]
            nbytes[seg] -= size
            pinned.add(uid)

    def unpin(self, uid: int, now: float) -> None:
        if uid not in self._pinned:
            self.insert(uid, now)
            return
        self._pinned.discard(uid)
        size = self.view.size(uid)  # a pinned unit may have grown
        self._budget.grow(size - self._size[uid])
        self._size[uid] = size
        seg = self._seg[uid]
        self._segs[seg][uid] = None
        self._bytes[seg] += size
        self._cool_from(seg)

    def remove(self, uid: int, pinned: bool = False) -> None:
        seg = self._seg.pop(uid, None)
        if seg is None:
            return
        size = self._size.pop(uid)
        self._budget.shrink(size)
        if uid in self._pinned:
            self._pinned.discard(uid)
        else:
            del self._segs[seg][uid]
            self._bytes[seg] -= size

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    def peek(self, now: float) -> int | None:
        for seg in self._segs:
            for uid in seg:
                return uid
        return None

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """Successive victims: the LRU units of the lowest segment, then of the next (an eviction
        makes no segment go over its share, so nothing cools in between)."""
        out: list[int] = []
        size_of, seg_of, sizes, nbytes_of = self.view.size, self._seg, self._size, self._bytes
        for i, seg in enumerate(self._segs):
            while nbytes > 0 and seg:
                uid, _ = seg.popitem(last=False)
                del seg_of[uid]
                accounted = sizes.pop(uid)
                nbytes_of[i] -= accounted
                self._budget.shrink(accounted)
                out.append(uid)
                nbytes -= size_of(uid)
            if nbytes <= 0:
                break
        return out

    def segment(self, uid: int) -> int | None:
        """The segment (0 = probation) the unit belongs to, or None."""
        return self._seg.get(uid)

    def __len__(self) -> int:
        return len(self._seg) - len(self._pinned)

    def __contains__(self, uid: int) -> bool:
        return uid in self._seg and uid not in self._pinned
