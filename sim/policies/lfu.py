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

import numpy as np

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import RunQueue, consume, pop_oldest
from sim.units import UNIT_BITS, UNIT_MASK, UnitView, extents_of, join_extents


@register("lfu")
class LFU(EvictionPolicy):
    reads_last_access = False
    # A pinned unit is in no bucket, time plays no part, and evicting many is taking the heads of
    # the lowest buckets in turn: a decode span's pages can be given, and their victims chosen, at
    # once (demotions into a CPU tier still enter it one at a time: ``take_in`` is not batched).
    grows_in_bulk = True

    def __new__(cls, ctx=None):
        """The engine's units of one size (``view.unit_bytes``) get ``RunLFU``, the same policy
        on runs of consecutive uids and per-session count arrays."""
        view = getattr(ctx, "view", None)
        if cls is LFU and isinstance(view, UnitView) and view.unit_bytes:
            cls = RunLFU
        return super().__new__(cls)

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


class RunLFU(LFU):
    """LFU for the engine's units of one size: each count's bucket a ``RunQueue`` (runs of a
    session's consecutive uids, in the order they reached the count) and the counts in one array
    per session, indexed by unit. A session's units, released, used or evicted together, are a few
    runs and a few array slices, so a ``layer_block`` batch of hundreds of page-layer units costs
    O(runs) in Python. The same victims as ``LFU`` (tested against it)."""

    def __init__(self, ctx) -> None:
        EvictionPolicy.__init__(self, ctx)
        self._arrays: dict[int, np.ndarray] = {}  # session -> count of each unit (0: not a member)
        self._members: dict[int, int] = {}  # session -> its members (counts above 0)
        self._cands: dict[int, int] = {}  # session -> its units in the buckets
        self._queues: dict[int, RunQueue] = {}  # count -> its candidates
        self._heap: list[int] = []  # counts that may have a bucket
        self._in_heap: set[int] = set()
        self._n = 0

    # -- the counts ------------------------------------------------------------------------------
    def _array(self, s: int, size: int) -> np.ndarray:
        """Session ``s``'s counts, with room for ``size`` units."""
        arr = self._arrays.get(s)
        if arr is None or len(arr) < size:
            grown = np.zeros(max(size, 2 * len(arr) if arr is not None else size), dtype=np.int32)
            if arr is not None:
                grown[: len(arr)] = arr
            arr = self._arrays[s] = grown
        return arr

    def count(self, uid: int) -> int:
        arr = self._arrays.get(uid >> UNIT_BITS)
        i = uid & UNIT_MASK
        return int(arr[i]) if arr is not None and i < len(arr) else 0

    def _set_count(self, uid: int, c: int) -> None:
        s, i = uid >> UNIT_BITS, uid & UNIT_MASK
        arr = self._array(s, i + 1)
        was = arr[i]
        arr[i] = c
        self._member_change(s, int(c > 0) - int(was > 0))

    def _member_change(self, s: int, d: int) -> None:
        if d:
            m = self._members.get(s, 0) + d
            if m:
                self._members[s] = m
            else:  # the session has no member left: its array goes
                del self._members[s]
                del self._arrays[s]

    # -- the buckets -----------------------------------------------------------------------------
    def _queue(self, c: int) -> RunQueue:
        q = self._queues.get(c)
        if q is None:
            q = self._queues[c] = RunQueue()
            if c not in self._in_heap:
                self._in_heap.add(c)
                heapq.heappush(self._heap, c)
        return q

    def _cands_change(self, s: int, d: int) -> None:
        m = self._cands.get(s, 0) + d
        if m:
            self._cands[s] = m
        else:
            del self._cands[s]

    def _bucket_add(self, uid: int, count: int) -> None:
        q = self._queue(count)
        if uid not in q:  # (an ordered dict keeps a key's place when set again)
            q.append(uid)
            self._cands_change(uid >> UNIT_BITS, 1)

    def _bucket_del(self, uid: int, count: int) -> bool:
        q = self._queues.get(count)
        if q is None or not q.discard(uid):
            return False
        if not len(q):
            del self._queues[count]
        self._cands_change(uid >> UNIT_BITS, -1)
        return True

    # -- one unit --------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._set_count(uid, 1)
        if not pinned:
            self._bucket_add(uid, 1)
            self._n += 1

    def access(self, uid: int, now: float) -> None:
        c = self.count(uid)
        if not c:
            return
        self._set_count(uid, c + 1)
        if self._bucket_del(uid, c):
            self._bucket_add(uid, c + 1)

    def pin(self, uid: int) -> None:
        c = self.count(uid)
        if c and self._bucket_del(uid, c):
            self._n -= 1

    def unpin(self, uid: int, now: float) -> None:
        c = self.count(uid)
        if not c:
            self.insert(uid, now)
            return
        self._bucket_add(uid, c)
        self._n += 1

    def remove(self, uid: int, pinned: bool = False) -> None:
        c = self.count(uid)
        if c:
            self._set_count(uid, 0)
            if self._bucket_del(uid, c):
                self._n -= 1

    # -- batches: one session's units as array slices and runs ---------------------------------
    def _session_units(self, uids) -> tuple[int, np.ndarray | slice] | None:
        """(session, its unit indices: a slice for a range) of a batch of one session's distinct
        uids, else None (then one call per unit)."""
        if isinstance(uids, range):
            if not uids or uids.step != 1 or (uids[-1] >> UNIT_BITS) != (uids[0] >> UNIT_BITS):
                return None
            return uids[0] >> UNIT_BITS, slice(uids[0] & UNIT_MASK, (uids[-1] & UNIT_MASK) + 1)
        if not uids:
            return None
        a = np.asarray(uids, dtype=np.int64)
        s = int(a[0]) >> UNIT_BITS
        idx = a & UNIT_MASK
        if (a >> UNIT_BITS != s).any():
            return None
        if not (idx[1:] > idx[:-1]).all() and len(np.unique(idx)) != len(idx):  # a repeat
            return None
        return s, idx

    @staticmethod
    def _stop(idx: np.ndarray | slice) -> int:
        return idx.stop if isinstance(idx, slice) else int(idx.max()) + 1

    def acquire(self, uids, now: float) -> None:
        got = self._session_units(uids)
        if got is None or self._cands.get(got[0], 0) != self._candidates_in(got):
            return EvictionPolicy.acquire(self, uids, now)  # (not all of its session's candidates)
        s, idx = got
        if s not in self._arrays:
            return  # no member: nothing to use
        arr = self._array(s, self._stop(idx))
        cs = arr[idx]
        for c in np.unique(cs[cs > 0]).tolist():  # every candidate of the session leaves
            q = self._queues.get(c)
            if q is not None and q.holds_bucket(s):
                gone = q.discard_bucket(s)
                self._n -= gone
                self._cands_change(s, -gone)
                if not len(q):
                    del self._queues[c]
                if c + 1 not in self._in_heap:  # (the count it passed through, as access does)
                    self._in_heap.add(c + 1)
                    heapq.heappush(self._heap, c + 1)
        arr[idx] = np.where(cs > 0, cs + 1, 0)

    def _candidates_in(self, got) -> int:
        """How many of the batch's units are candidates, where that is all its session's (else
        -1): then they all leave in whole-session steps."""
        s, idx = got
        if s not in self._arrays or self._cands.get(s, 0) == 0:
            return 0
        if np.count_nonzero(self._array(s, self._stop(idx))[idx]) != self._members.get(s, 0):
            return -1  # some members are not in the batch
        return self._cands[s]

    def release(self, uids, now: float) -> None:
        got = self._session_units(uids)
        if got is None or got[0] in self._cands:  # (some of its units are candidates already)
            return EvictionPolicy.release(self, uids, now)
        s, idx = got
        arr = self._array(s, self._stop(idx))
        cs = arr[idx]
        fresh = len(cs) - int(np.count_nonzero(cs))
        if fresh:  # a non-member enters at 1, as ``unpin`` inserts it
            cs = np.where(cs == 0, 1, cs)
            arr[idx] = cs
            self._member_change(s, fresh)
        self._push_runs(s, idx, cs)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        if pinned:  # (a decode step's page, a span's pages of many sessions, a swap-in)
            return self._insert_pinned(uids)
        got = self._session_units(uids)
        if got is None or got[0] in self._cands:
            return EvictionPolicy.insert_many(self, uids, now, pinned)
        s, idx = got
        arr = self._array(s, self._stop(idx))
        was = int(np.count_nonzero(arr[idx]))
        arr[idx] = 1
        n = len(arr[idx])
        self._member_change(s, n - was)
        self._push_runs(s, idx, np.ones(n, dtype=np.int32))

    def _insert_pinned(self, uids) -> None:
        """Units enter pinned: each count is 1 (in no bucket, so their order is nobody's). A
        stretch of consecutive uids (a page's units) is one slice of its session's counts, a lone
        uid (a page of one unit) one element: a span's few pages per session cost no numpy call
        per session."""
        arrays = self._arrays
        if type(uids) is range and uids.step == 1:
            extents = [(uids.start, uids.stop)] if uids else []
        else:
            extents = extents_of(uids if isinstance(uids, (list, np.ndarray)) else list(uids))
        for a, b in extents:
            s, i, n = a >> UNIT_BITS, a & UNIT_MASK, b - a
            if (b - 1) >> UNIT_BITS != s:  # (a stretch across sessions' ends: a uid at a time)
                for uid in range(a, b):
                    self._insert_pinned([uid])
                continue
            arr = arrays.get(s)
            if arr is None or len(arr) < i + n:
                arr = self._array(s, i + n)
            if n == 1:
                was = arr[i]
                arr[i] = 1
                if not was:
                    self._member_change(s, 1)
            else:
                part = arr[i : i + n]
                was = np.count_nonzero(part)
                part[:] = 1
                self._member_change(s, n - int(was))

    def remove_many(self, uids, pinned: bool = False) -> None:
        got = self._session_units(uids)
        if got is None or got[0] in self._cands:
            return EvictionPolicy.remove_many(self, uids, pinned)
        s, idx = got
        arr = self._arrays.get(s)
        if arr is None:
            return
        stop = self._stop(idx)
        if stop > len(arr):  # (units past the array's end are not members)
            idx = idx[idx < len(arr)] if isinstance(idx, np.ndarray) else slice(idx.start, len(arr))
        gone = int(np.count_nonzero(arr[idx]))
        arr[idx] = 0
        self._member_change(s, -gone)

    def _push_runs(self, s: int, idx: np.ndarray | slice, cs: np.ndarray) -> None:
        """The batch's units (``idx`` of session ``s``, in order, with counts ``cs``) join the
        ends of their counts' buckets: a stretch of consecutive units of one count is one run."""
        base = s << UNIT_BITS
        if isinstance(idx, slice):  # (lists of positions: numpy's r_ costs more than the rest)
            ends = (np.flatnonzero(cs[1:] != cs[:-1]) + 1).tolist()
            firsts = [0, *ends]
            starts = [idx.start + i for i in firsts]
            stops = [idx.start + i for i in ends]
            stops.append(idx.start + len(cs))
        else:
            ends = (np.flatnonzero((cs[1:] != cs[:-1]) | (idx[1:] != idx[:-1] + 1)) + 1).tolist()
            firsts = [0, *ends]
            starts = idx[firsts].tolist()
            stops = (idx[[i - 1 for i in ends] + [len(idx) - 1]] + 1).tolist()
        counts = cs[firsts].tolist()
        for a, b, c in zip(starts, stops, counts, strict=True):
            self._queue(c).push_run(base + a, base + b)
        self._n += len(cs)
        self._cands_change(s, len(cs))

    # -- the choice ------------------------------------------------------------------------------
    def _pop_runs(self, k: int) -> list[tuple[int, int]]:
        """The heads of the lowest buckets, in turn, as runs; their counts reset."""
        heap, queues = self._heap, self._queues
        out: list[tuple[int, int]] = []
        while k > 0 and heap:
            c = heap[0]
            q = queues.get(c)
            if q is None:
                self._in_heap.discard(heapq.heappop(heap))
                continue
            taken = min(k, len(q))
            runs = q.pop_runs(taken)
            for a, b in runs:  # counts reset on eviction
                s = a >> UNIT_BITS
                self._arrays[s][a & UNIT_MASK : (b - 1 & UNIT_MASK) + 1] = 0
                self._cands_change(s, a - b)
                self._member_change(s, a - b)
            out += runs
            k -= taken
            self._n -= taken
            if not len(q):
                del queues[c]
        return out

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        k = self._units_in(nbytes)
        if k is None:
            return EvictionPolicy.evict_bytes(self, nbytes, now)
        return [uid for a, b in self._pop_runs(k) for uid in range(a, b)]

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        k = self._units_in(nbytes)
        if k is None:
            return EvictionPolicy.evict_extents(self, nbytes, now)
        runs = self._pop_runs(k)
        return join_extents(sorted(runs) if self.drops_victims else runs)

    def take_in_extents(self, extents, free_bytes: int, now: float) -> list[tuple[int, int]]:
        """``take_in``'s insert-and-evict, a stretch at a time: a new unit enters count 1, the
        least there is, so once bucket 1 holds a unit it is the lowest and turns (each new unit
        at its end, its head out): the whole stretch appended, then as many heads popped."""
        unit_bytes = self.view.unit_bytes
        if not unit_bytes or not self._fresh(extents):
            return EvictionPolicy.take_in_extents(self, extents, free_bytes, now)
        free = free_bytes // unit_bytes  # (each victim frees one unit's room)
        out: list[tuple[int, int]] = []
        for a, b in extents:
            while a < b:
                if free:
                    n = min(free, b - a)
                    free -= n
                    self._enter(a, a + n)
                elif 1 in self._queues:
                    n = b - a
                    self._enter(a, b)
                    out += self._pop_runs(n)
                elif self.peek(now) is None:
                    raise AssertionError(f"{type(self).__name__}: no victim to make room for {a}")
                else:  # one victim of a higher count; then bucket 1 is the lowest
                    n = 1
                    out += self._pop_runs(1)
                    self._enter(a, a + 1)
                a += n
        return join_extents(out)

    def _fresh(self, extents) -> bool:
        """Are the extents' uids distinct, each extent of one session, none of them a member?"""
        last = -1
        for a, b in sorted(extents):
            s = a >> UNIT_BITS
            if a < last or (b - 1) >> UNIT_BITS != s:
                return False
            arr = self._arrays.get(s)
            if arr is not None and np.count_nonzero(arr[a & UNIT_MASK : (b - 1 & UNIT_MASK) + 1]):
                return False
            last = b
        return True

    def _enter(self, a: int, b: int) -> None:
        """Uids ``a .. b-1`` (of one session, none a member) enter bucket 1, in order."""
        s, i = a >> UNIT_BITS, a & UNIT_MASK
        self._array(s, i + b - a)[i : i + b - a] = 1
        self._member_change(s, b - a)
        self._queue(1).push_run(a, b)
        self._n += b - a
        self._cands_change(s, b - a)

    def peek(self, now: float) -> int | None:
        heap, queues = self._heap, self._queues
        while heap:
            q = queues.get(heap[0])
            if q is not None:
                return q.first()
            self._in_heap.discard(heapq.heappop(heap))
        return None

    def __contains__(self, uid: int) -> bool:
        q = self._queues.get(self.count(uid))
        return q is not None and uid in q
