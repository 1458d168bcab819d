"""LFU: evict the unit used least often; ties go to the least recently used (libCacheSim's LFU.c).

A unit's count is 1 when it enters the tier and grows by one per hit (``access``); it is forgotten
when the unit leaves the tier, so a unit that comes back starts again at 1 ("counts reset on
eviction"; in the engine each tier's instance counts its own residency: a unit demoted to CPU
starts at 1 there).

Structure: one ordered dict per count (a frequency bucket), units in the order they reached that
count, i.e. in order of their last use, so the first unit of the lowest non-empty bucket is the
victim: least frequent, then least recent. A hit moves a unit to the end of the next bucket, O(1).
The lowest count in use comes from a heap of counts with lazy deletion (O(log F), F distinct counts;
a heap rather than a linked list of buckets because a unit rejoining after a pin may bring back a
count lower than every bucket in use).

libCacheSim's LFU.c breaks ties the same way (it evicts the head of the lowest frequency's list,
the unit that reached that count first), so the two agree request by request (tested).

Pins: a pinned unit leaves its bucket but keeps its count (and hits while pinned still count); on
unpin it rejoins its count's bucket at the most recent end, its release being its last use.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from itertools import compress, repeat
from operator import eq

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import consume, pop_oldest


@register("lfu")
class LFU(EvictionPolicy):
    reads_last_access = False
    # A pinned unit is in no bucket, time plays no part, and evicting many is taking the heads of
    # the lowest buckets in turn: a decode span's pages can be given, and their victims chosen, at
    # once (demotions into a CPU tier still enter it one at a time: ``take_in`` is not batched).
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._count: dict[int, int] = {}  # every member, pinned or not
        self._buckets: dict[int, OrderedDict[int, None]] = {}  # count -> candidates
        self._heap: list[int] = []  # counts that may have a bucket
        self._in_heap: set[int] = set()
        self._n = 0

    def _bucket_add(self, uid: int, count: int) -> None:
        b = self._buckets.get(count)
        if b is None:
            b = self._buckets[count] = OrderedDict()
            if count not in self._in_heap:
                self._in_heap.add(count)
                heapq.heappush(self._heap, count)
        b[uid] = None

    def _bucket_del(self, uid: int, count: int) -> bool:
        b = self._buckets.get(count)
        if b is None or uid not in b:
            return False
        del b[uid]
        if not b:
            del self._buckets[count]
        return True

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._count[uid] = 1
        if not pinned:
            self._bucket_add(uid, 1)
            self._n += 1

    def access(self, uid: int, now: float) -> None:
        c = self._count.get(uid)
        if c is None:
            return
        self._count[uid] = c + 1
        if self._bucket_del(uid, c):
            self._bucket_add(uid, c + 1)

    def pin(self, uid: int) -> None:
        c = self._count.get(uid)
        if c is not None and self._bucket_del(uid, c):
            self._n -= 1

    def unpin(self, uid: int, now: float) -> None:
        c = self._count.get(uid)
        if c is None:
            self.insert(uid, now)
            return
        self._bucket_add(uid, c)
        self._n += 1

    # -- batches: the units grouped by count (a session's pages, which enter and are used together,
    # mostly share one), one C-level update of each count's bucket; else one call per unit
    def _counts(self, uids) -> list[int | None] | None:
        """Each of ``uids``'s count (None for a non-member), if they are distinct; else None."""
        if not isinstance(uids, range) and len(set(uids)) < len(uids):  # (a range has no repeat)
            return None
        return list(map(self._count.get, uids))

    @staticmethod
    def _by_count(uids, counts: list[int | None]) -> list[tuple[int | None, list[int]]]:
        """``uids`` split by count, each part in the batch's order."""
        distinct = set(counts)
        if len(distinct) == 1:
            return [(counts[0], list(uids))]
        return [(c, list(compress(uids, map(eq, counts, repeat(c))))) for c in distinct]

    def acquire(self, uids, now: float) -> None:
        uids = uids if isinstance(uids, range) else list(uids)
        counts = self._counts(uids)
        if counts is None:
            return super().acquire(uids, now)
        for c, members in self._by_count(uids, counts):
            if c is not None:  # (a hit on a non-member is nothing)
                self._use_and_pin(members, c)

    def _use_and_pin(self, uids: list[int], c: int) -> None:
        """``access`` then ``pin`` each of ``uids``, members with count ``c``: each is used (its
        count grows) and pinned (it leaves its bucket), so the next count's bucket it passes
        through is left as it was, bar the heap's lazy entry."""
        self._count.update(zip(uids, repeat(c + 1)))
        b = self._buckets.get(c)
        if b is not None:
            held = len(b)
            consume(map(b.pop, uids, repeat(None)))
            self._n -= held - len(b)
            if not b:
                del self._buckets[c]
            if c + 1 not in self._in_heap and held > len(b):
                self._in_heap.add(c + 1)
                heapq.heappush(self._heap, c + 1)

    def release(self, uids, now: float) -> None:
        uids = uids if isinstance(uids, range) else list(uids)
        counts = self._counts(uids)
        if counts is None:
            return super().release(uids, now)
        if None in counts:  # a non-member enters at 1, as ``unpin`` inserts it, in its turn
            fresh = [u for u, c in zip(uids, counts, strict=True) if c is None]
            self._count.update(zip(fresh, repeat(1)))
            counts = [1 if c is None else c for c in counts]
        for c, members in self._by_count(uids, counts):
            assert c is not None
            self._bucket_add(members[0], c)  # the bucket (and its heap entry), then the rest
            self._buckets[c].update(zip(members, repeat(None)))
            self._n += len(members)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        uids = list(uids)
        if not uids:
            return
        self._count.update(zip(uids, repeat(1)))
        if not pinned:
            self._bucket_add(uids[0], 1)
            self._buckets[1].update(zip(uids, repeat(None)))
            self._n += len(uids)

    def remove(self, uid: int, pinned: bool = False) -> None:
        c = self._count.pop(uid, None)
        if c is not None and self._bucket_del(uid, c):
            self._n -= 1

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    def _evicted(self, uid: int) -> None:
        self.remove(uid)  # counts reset on eviction

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """The heads of the lowest buckets, in turn: what ``evict`` one at a time takes."""
        k = self._units_in(nbytes)
        if k is None:
            return super().evict_bytes(nbytes, now)
        heap, buckets, count = self._heap, self._buckets, self._count
        out: list[int] = []
        while k > 0 and heap:
            c = heap[0]
            b = buckets.get(c)
            if not b:
                self._in_heap.discard(heapq.heappop(heap))
                continue
            taken = pop_oldest(b, min(k, len(b)))
            consume(map(count.__delitem__, taken))  # counts reset on eviction
            out += taken
            k -= len(taken)
            if not b:
                del buckets[c]
        self._n -= len(out)
        return out

    def peek(self, now: float) -> int | None:
        """The first unit of the lowest non-empty count (the heap's empty counts are dropped on
        the way: cleaning, not a decision)."""
        heap, buckets = self._heap, self._buckets
        while heap:
            b = buckets.get(heap[0])
            if b:
                return next(iter(b))
            self._in_heap.discard(heapq.heappop(heap))
        return None

    def count(self, uid: int) -> int:
        """The unit's current use count in this tier (0 if it is not a member)."""
        return self._count.get(uid, 0)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: int) -> bool:
        c = self._count.get(uid)
        b = self._buckets.get(c) if c is not None else None
        return b is not None and uid in b
