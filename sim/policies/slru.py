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
if it is over its share). Without ``set_capacity`` (an unbounded tier) c is the high-water mark of the bytes
the tier has held. O(1) per operation (4 segments), amortised over cooling moves.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import chain, groupby, islice
from operator import itemgetter

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import ByteBudget, consume


def _take_oldest(od: OrderedDict[int, None], k: int) -> list[int]:
    """Take the ``k`` oldest keys (k <= len) out of an ordered dict, oldest first, in C."""
    if k >= len(od):
        out = list(od)
        od.clear()
        return out
    out = list(islice(od, k))
    consume(map(od.__delitem__, out))
    return out


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
        # Victims that are dropped (no tier below hears their order) may leave as increasing runs.

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
        top, cap = self.n_seg - 1, self._seg_cap()
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
                if nbytes[seg] > cap:
                    self._cool_from(seg)
                    seg = seg_of[uid]  # (cooling moves it down only when it alone is over a share)
            del segs[seg][uid]
            nbytes[seg] -= size
            pinned.add(uid)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each; where all have one size and are pinned new members, at once: a pinned
        insert adds no candidate bytes, so with c fixed over the batch all land in one segment."""
        unit = self.view.unit_bytes
        if not isinstance(uids, range):
            uids = list(uids)
        n, budget = len(uids), self._budget
        if (
            not (unit and pinned and n)
            or not self._seg.keys().isdisjoint(uids)
            or (not isinstance(uids, range) and len(set(uids)) < n)
            or (budget.capacity is None and budget.hwm < budget.resident + n * unit)
        ):
            super().insert_many(uids, now, pinned)
            return
        budget.grow(n * unit)
        cap, nbytes = self._seg_cap(), self._bytes
        seg = next((i for i in range(self.n_seg) if nbytes[i] + unit <= cap), 0)
        self._seg.update(dict.fromkeys(uids, seg))
        self._size.update(dict.fromkeys(uids, unit))
        self._pinned.update(uids)

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order. Where all have one size and are pinned members, by runs
        of one segment: a run enters its segment's MRU end, and the segment's oldest units over its
        share go down to the next, a run cascading as its units would one by one."""
        unit = self.view.unit_bytes
        if not isinstance(uids, range):
            uids = list(uids)
        pinned, n = self._pinned, len(uids)
        if (
            not unit
            or n < 2
            or not pinned.issuperset(uids)
            or (not isinstance(uids, range) and len(set(uids)) < n)
        ):
            super().release(uids, now)
            return
        pinned.difference_update(uids)
        segs = list(map(self._seg.__getitem__, uids))
        cap = self._seg_cap()
        if segs.count(segs[0]) == n:
            self._pour(segs[0], uids, unit, cap)
            return
        for seg, run in groupby(zip(segs, uids, strict=True), key=itemgetter(0)):
            self._pour(seg, list(map(itemgetter(1), run)), unit, cap)

    def _pour(self, i: int, uids, unit: int, cap: int) -> None:
        """Units of one size (already in segment i by ``_seg``) enter segment i's MRU end in order;
        segment i, then the ones below, cool as they would after each unit."""
        segs, nbytes, seg_of = self._segs, self._bytes, self._seg
        while True:
            seg = segs[i]
            seg.update(dict.fromkeys(uids))
            nbytes[i] += unit * len(uids)
            if i == 0 or nbytes[i] <= cap:
                return
            k = -(-(nbytes[i] - cap) // unit)  # the oldest units over its share go down
            uids = _take_oldest(seg, k)
            nbytes[i] -= k * unit
            i -= 1
            seg_of.update(dict.fromkeys(uids, i))

    def remove_many(self, uids, pinned: bool = False) -> None:
        """``remove`` each; pinned members of one size at once."""
        unit = self.view.unit_bytes
        if not isinstance(uids, range):
            uids = list(uids)
        n = len(uids)
        if (
            not unit
            or not n
            or not self._pinned.issuperset(uids)
            or (not isinstance(uids, range) and len(set(uids)) < n)
        ):
            super().remove_many(uids, pinned)
            return
        consume(map(self._seg.__delitem__, uids))
        consume(map(self._size.__delitem__, uids))
        self._pinned.difference_update(uids)
        self._budget.shrink(n * unit)

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
        n = self._units_in(nbytes)
        if n is not None:  # equal sizes: each segment's share of the victims at once
            return list(chain.from_iterable(self._take(n)))
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

    def _take(self, n: int) -> list[list[int]]:
        """Evict ``n`` units of one size (fewer when the candidates run out): the oldest of each
        segment, lowest first, as one list per segment."""
        unit = self.view.unit_bytes
        seg_of, sizes, nbytes_of = self._seg, self._size, self._bytes
        out: list[list[int]] = []
        for i, seg in enumerate(self._segs):
            if n <= 0:
                break
            k = min(n, len(seg))
            if not k:
                continue
            taken = _take_oldest(seg, k)
            consume(map(seg_of.__delitem__, taken))
            consume(map(sizes.__delitem__, taken))
            nbytes_of[i] -= k * unit
            self._budget.shrink(k * unit)
            out.append(taken)
            n -= k
        return out

    def segment(self, uid: int) -> int | None:
        """The segment (0 = probation) the unit belongs to, or None."""
        return self._seg.get(uid)

    def __len__(self) -> int:
        return len(self._seg) - len(self._pinned)

    def __contains__(self, uid: int) -> bool:
        return uid in self._seg and uid not in self._pinned
