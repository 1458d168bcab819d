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
the tier has held.

Two forms, the same decisions hook by hook. ``SLRU`` (sizes that vary: session units, cachesim):
each segment an ordered dict of uids, O(1) per unit and per cooling move. ``UniformSLRU`` (units
of one size, ``view.unit_bytes``: the engine's pages; ``SLRU(ctx)`` gives it): each segment a
``SegmentQueue``, an LRU list of runs of consecutive uids grouped by session, and the pinned units'
segments a ``HeldRuns``, extents per session. The engine acquires and releases a session's units
together and its pages are consecutive uids, so a session acquired or released, a decode step's
page, a batch of victims and a demotion batch cost O(runs), not O(units): a release pours each of
the session's extents into its segment and cools the oldest runs over a share down at once; an
acquire promotes an extent at once (only its first unit can overfill the segment above, whose one
cooled unit may be a later unit of the same session).

A decode span in one batch (``grows_in_bulk`` with ``plans_pinned``): a pinned page changes no
victim, but it enters the lowest segment with room, which reads the bytes the victims before it
freed, so pages given after all the span's victims could land in S0 where one at a time they land
higher. The engine names the span's pages and how many victims precede each (``plan_pinned``)
before the batch's eviction; the victims are the oldest units of the lowest segments, so each
page's segment follows from the fill before it (``slru_plan``), and the pinned insert that follows
enters each page there.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import chain, pairwise, starmap

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.segment_runs import HeldRuns, SegmentQueue
from sim.policies.slru_plan import PinnedPlan, planned_segments, planned_split, victim_runs
from sim.policies.structures import ByteBudget
from sim.units import UNIT_BITS, extents_of, join_extents


@register("slru")
class SLRU(EvictionPolicy):
    n_seg = 4
    reads_last_access = False
    grows_in_bulk = True
    plans_pinned = True

    def __new__(cls, ctx=None):
        """Units of one size (``view.unit_bytes``, the engine's pages) get ``UniformSLRU``, the same
        policy on runs of consecutive uids."""
        if cls is SLRU and getattr(getattr(ctx, "view", None), "unit_bytes", None):
            cls = UniformSLRU
        return super().__new__(cls)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._segs: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(self.n_seg)]
        self._bytes = [0] * self.n_seg
        self._seg: dict[int, int] = {}  # every member -> its segment
        self._size: dict[int, int] = {}  # every member -> bytes accounted
        self._pinned: set[int] = set()
        self._budget = ByteBudget()
        self._plan: PinnedPlan | None = None  # a span's pages, for the insert after its victims
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

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        plan = self._take_plan(uids, pinned)
        if plan is None:
            EvictionPolicy.insert_many(self, uids, now, pinned)
            return
        sizes = list(map(self.view.size, plan.uids))
        segs, hwm = planned_segments(plan, sizes, self._budget.capacity, self.n_seg)
        self._seg.update(zip(plan.uids, segs))
        self._size.update(zip(plan.uids, sizes))
        self._pinned.update(plan.uids)
        self._grow_to(sum(sizes), hwm)

    # -- a decode span's pinned pages, planned before its victims leave ---------------------------
    def plan_pinned(self, uids: list[int], before: list[int]) -> None:
        budget = self._budget
        victims = self._victims(before[-1] if before else 0)
        self._plan = PinnedPlan(uids, before, self._fill(), victims, budget.resident, budget.hwm)

    def _fill(self) -> list[int]:
        """Each segment's candidate bytes."""
        return list(self._bytes)

    def _victims(self, n: int) -> list[tuple[int, int, int]]:
        """The next ``n`` victims (fewer if the candidates run out) as (segment, 1, bytes)."""
        out: list[tuple[int, int, int]] = []
        for i, seg in enumerate(self._segs):
            for uid in seg:
                if len(out) == n:
                    return out
                out.append((i, 1, self._size[uid]))
        return out

    def _take_plan(self, uids, pinned: bool) -> PinnedPlan | None:
        """The pending plan, if these are its pages and the eviction since took its victims (the
        plan is used once either way)."""
        plan, self._plan = self._plan, None
        if plan is None or not pinned or not (uids is plan.uids or list(uids) == plan.uids):
            return None
        freed = sum(k * each for _, k, each in plan.victims)
        return plan if sum(self._fill()) == sum(plan.fill) - freed else None

    def _grow_to(self, nbytes: int, hwm: int) -> None:
        """The budget after the planned pages entered: ``nbytes`` more held, the mark of one
        step at a time."""
        self._budget.grow(nbytes)
        self._budget.hwm = max(self._budget.hwm, hwm)

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


class UniformSLRU(SLRU):
    """SLRU for units of one size, on runs: each segment is a ``SegmentQueue`` (an LRU list of runs
    of consecutive uids) and pinned units remember their segment in a ``HeldRuns`` (extents per
    session). A segment's bytes are its length times the unit, over its share when longer than
    ``m = (c // 4) // unit`` units. The engine's batches, a whole session acquired or released, a
    span of new pages, victims many at a time, then cost O(runs), not O(units); one-uid hooks work
    on the same runs. Same decisions as ``SLRU``, hook by hook."""

    def __init__(self, ctx) -> None:
        EvictionPolicy.__init__(self, ctx)
        self._unit: int = ctx.view.unit_bytes
        self._q = [SegmentQueue() for _ in range(self.n_seg)]
        self._held = HeldRuns()
        self._budget = ByteBudget()
        self._plan: PinnedPlan | None = None

    def _share(self) -> int:
        """Units a segment holds before it is over its share (``_seg_cap() // unit``)."""
        budget = self._budget
        c = budget.hwm if budget.capacity is None else budget.capacity
        return c // self.n_seg // self._unit

    def _room_seg(self) -> int:
        """The lowest segment with room for one more unit, else S0 (where a miss enters)."""
        m = self._share()
        for i, q in enumerate(self._q):
            if len(q) < m:
                return i
        return 0

    def _fill(self) -> list[int]:
        return [len(q) * self._unit for q in self._q]

    def _victims(self, n: int) -> list[tuple[int, int, int]]:
        return victim_runs(list(map(len, self._q)), n, self._unit)

    def _seg_of(self, uid: int) -> int | None:
        """The segment holding ``uid`` as a candidate, or None."""
        return next((i for i, q in enumerate(self._q) if uid in q), None)

    def _cool_from(self, i: int) -> None:
        """Move LRU units down while segment i (then the ones below) is over its share."""
        q, m = self._q, self._share()
        while i > 0 and len(q[i]) > m:
            q[i - 1].extend(q[i].pop(1))
            if len(q[i - 1]) > m:
                self._cool_from(i - 1)

    # -- one unit --------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._budget.grow(self._unit)
        seg = self._room_seg()
        if pinned:
            self._held.add(uid, uid + 1, seg)
        else:
            self._q[seg].push(uid)

    def access(self, uid: int, now: float) -> None:
        top = self.n_seg - 1
        held = self._held.segment(uid)
        if held is not None:
            self._held.set_segment(uid, min(held + 1, top))
            return
        seg = self._seg_of(uid)
        if seg is None:
            return
        self._q[seg].discard(uid)
        self._q[min(seg + 1, top)].push(uid)  # S3: to its MRU end
        if seg < top:
            self._cool_from(seg + 1)

    def pin(self, uid: int) -> None:
        seg = self._seg_of(uid)
        if seg is None:
            return
        self._q[seg].discard(uid)
        self._held.add(uid, uid + 1, seg)

    def unpin(self, uid: int, now: float) -> None:
        seg = self._held.take(uid)
        if seg is None:
            self.insert(uid, now)
            return
        self._q[seg].push(uid)
        self._cool_from(seg)

    def remove(self, uid: int, pinned: bool = False) -> None:
        if self._held.take(uid) is None:
            seg = self._seg_of(uid)
            if seg is None:
                return
            self._q[seg].discard(uid)
        self._budget.shrink(self._unit)

    # -- a session at a time ---------------------------------------------------------------------
    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each; pinned new members at once, by extents: a pinned insert adds no
        candidate, so with c fixed over the batch all land in one segment. A decode span's
        pages planned before its victims left (``plan_pinned``) enter their planned segments."""
        plan = self._take_plan(uids, pinned)
        if plan is not None:
            self._enter_planned(plan)
            return
        budget = self._budget
        if pinned and type(uids) is range and budget.capacity is not None:  # a decode step's pages
            a, b = uids.start, uids.stop
            if uids.step == 1 and a < b and a >> UNIT_BITS == (b - 1) >> UNIT_BITS:
                if not self._holds_any(a, b):
                    budget.grow((b - a) * self._unit)
                    self._held.add(a, b, self._room_seg())
                    return
        if not isinstance(uids, range):
            uids = list(uids)
        extents = _increasing_extents(uids)
        if not extents and pinned and len(uids) > 1 and len(set(uids)) == len(uids):
            # a span's pages of many sessions, in step order: where they enter is one segment
            extents = _bucket_extents(sorted(uids))
        n = len(uids)
        if (
            not (pinned and extents)
            or (budget.capacity is None and budget.hwm < budget.resident + n * self._unit)
            or any(self._holds_any(a, b) for a, b in extents)
        ):
            EvictionPolicy.insert_many(self, uids, now, pinned)
            return
        budget.grow(n * self._unit)
        seg = self._room_seg()
        for a, b in extents:
            self._held.add(a, b, seg)

    def _enter_planned(self, plan: PinnedPlan) -> None:
        """The plan's units enter pinned, each remembering its planned segment; a session's
        consecutive units of one segment are one extent. With a capacity the units fall in two
        parts, those before S0 has room and those after (``planned_split``)."""
        unit, uids, capacity = self._unit, plan.uids, self._budget.capacity
        if capacity is None:
            segs, hwm = planned_segments(plan, [unit] * len(uids), None, self.n_seg)
            parts = [([u for u, g in zip(uids, segs) if g == seg], seg) for seg in set(segs)]
        else:
            seg, k = planned_split(plan, unit, capacity, self.n_seg)
            parts = [(uids[:k], seg), (uids[k:], 0)]
            hwm = 0  # (the mark is read only where no capacity is set)
        for part, seg in parts:
            for a, b in _bucket_extents(sorted(part)):
                self._held.add(a, b, seg)
        self._grow_to(len(uids) * unit, hwm)

    def _holds_any(self, a: int, b: int) -> bool:
        """Is any of ``a .. b-1`` (one bucket) a member, pinned or not?"""
        if self._held.count_in(a, b):
            return True
        for q in self._q:
            if q.holds_any(a, b):
                return True
        return False

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each, in page order. For a whole session of candidates, by
        extents of one segment: in a segment below S3, the first unit's promotion fills the segment
        above past its share when it was full, so that segment's LRU unit cools down into this
        one; each later unit goes up and is pinned at once, leaving the one above as it was."""
        plan = self._acquire_plan(uids)
        if plan is None:
            EvictionPolicy.acquire(self, uids, now)
            return
        q, held, top, m = self._q, self._held, self.n_seg - 1, self._share()
        bucket = uids[0] >> UNIT_BITS
        k = 0
        while k < len(plan):
            a, b, seg = plan[k]
            k += 1
            q[seg].discard_extent(a, b)
            if seg == top:
                held.add(a, b, top)
                continue
            held.add(a, b, seg + 1)
            if len(q[seg + 1]) >= m:
                cooled = q[seg + 1].pop(1)[0]
                q[seg].push(cooled)
                if cooled >> UNIT_BITS == bucket:  # one of this session's later units
                    _move_to_segment(plan, k, cooled, seg)

    def _acquire_plan(self, uids) -> list[list[int]] | None:
        """The session's candidates as sorted extents ``[first, stop, segment]`` when ``uids`` are
        exactly they, none of its units is pinned, and every segment above S0 is within its share
        (so a cooled unit never cascades); else None."""
        if len(uids) < 2:
            return None
        bucket = uids[0] >> UNIT_BITS
        m = self._share()
        if (
            uids[-1] >> UNIT_BITS != bucket
            or self._held.holds_bucket(bucket)
            or m < 1
            or any(len(q) > m for q in self._q[1:])
        ):
            return None
        plan = sorted([a, b, seg] for seg, q in enumerate(self._q) for a, b in q.extents_in(bucket))
        if sum(b - a for a, b, _ in plan) != len(uids):
            return None
        if isinstance(uids, range):
            exact = uids.step == 1 and plan[0][0] >= uids.start and plan[-1][1] <= uids.stop
        else:
            exact = list(chain.from_iterable(range(a, b) for a, b, _ in plan)) == list(uids)
        return plan if exact else None

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order. For a whole pinned session, by extents: each enters its
        segment's MRU end, and the segment's oldest units over its share go down to the next, a
        run cascading as its units would one by one."""
        ext = self._held.bucket(uids[0] >> UNIT_BITS) if len(uids) > 1 else []
        if not ext or not _covers_exactly(ext, uids):
            EvictionPolicy.release(self, uids, now)
            return
        self._held.pop_bucket(uids[0] >> UNIT_BITS)
        for a, b, seg in ext:
            self._pour_run(seg, a, b)

    def _pour_run(self, i: int, a: int, b: int) -> None:
        """Units ``a .. b-1`` enter segment i's MRU end in order; segment i, then the ones below,
        cool as they would after each unit."""
        q, m = self._q, self._share()
        q[i].push_run(a, b)
        while i > 0 and len(q[i]) > m:
            runs = q[i].pop_runs(len(q[i]) - m)  # the oldest units over its share go down
            i -= 1
            for first, stop in runs:
                q[i].push_run(first, stop)

    def remove_many(self, uids, pinned: bool = False) -> None:
        """``remove`` each; pinned members at once, by extents."""
        if not isinstance(uids, range):
            uids = list(uids)
        extents = _increasing_extents(uids)
        held = self._held
        if not extents or any(held.count_in(a, b) != b - a for a, b in extents):
            EvictionPolicy.remove_many(self, uids, pinned)
            return
        for a, b in extents:
            held.cut(a, b)
        self._budget.shrink(len(uids) * self._unit)

    # -- a demotion batch -------------------------------------------------------------------------
    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        if self._budget.capacity is None:  # c would move with every unit: one at a time
            return EvictionPolicy.take_in(self, uids, free_bytes, now)
        victims = self.take_in_extents(extents_of(list(uids)), free_bytes, now)
        return list(chain.from_iterable(starmap(range, victims)))

    def take_in_extents(
        self, extents: list[tuple[int, int]], free_bytes: int, now: float
    ) -> list[tuple[int, int]]:
        """``take_in`` by stretches: the first ``free_bytes // unit`` units enter without a victim,
        each later one after the LRU unit of the lowest segment leaves. Units enter the lowest
        segment with room (S0 if none), so a stretch goes in at once while neither its segment nor
        the victims' segment changes."""
        if self._budget.capacity is None:
            uids = list(chain.from_iterable(starmap(range, extents)))
            return extents_of(EvictionPolicy.take_in(self, uids, free_bytes, now))
        free = max(0, free_bytes // self._unit)
        victims: list[tuple[int, int]] = []
        for a, b in extents:
            while a < b:
                k = self._enter_free(a, b, free) if free else self._enter_evicting(a, b, victims)
                free = max(0, free - k)
                a += k
        return join_extents(victims)

    def _enter_free(self, a: int, b: int, free: int) -> int:
        """Units from ``a`` (before ``b``) enter without a victim, while they fit in ``free`` units
        and the segment they enter keeps room (or none has room); how many entered."""
        q, m = self._q, self._share()
        seg = self._room_seg()
        k = min(b - a, free, m - len(q[seg]) if len(q[seg]) < m else b - a)
        q[seg].push_run(a, a + k)
        self._budget.grow(k * self._unit)
        return k

    def _enter_evicting(self, a: int, b: int, victims: list[tuple[int, int]]) -> int:
        """Units from ``a`` (before ``b``) enter, each after one victim leaves; the victims are added
        to ``victims``. How many entered."""
        q, m = self._q, self._share()
        low = next((i for i, s in enumerate(q) if len(s)), None)
        if low is None:
            raise AssertionError(f"{type(self).__name__}: no victim to make room for {a}")
        if low == 0 and (len(q[0]) <= m or m < 1):
            # the unit enters S0, where the victims leave: S0 turns over as a queue
            q[0].push_run(a, b)
            victims += q[0].pop_runs(b - a)
            return b - a
        if low == 0:  # S0 over its share: the units go up to the lowest segment with room
            up = next(i for i in range(1, self.n_seg) if len(q[i]) < m or i == self.n_seg - 1)
            if len(q[up]) < m:
                k = min(b - a, len(q[0]) - m, m - len(q[up]))
                victims += q[0].pop_runs(k)
                q[up].push_run(a, a + k)
                return k
        # one unit: its victim empties a segment or leaves room below the lowest non-empty one
        victims += q[low].pop_runs(1)
        q[self._room_seg()].push(a)
        return 1

    # -- the choice ------------------------------------------------------------------------------
    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    def peek(self, now: float) -> int | None:
        return next((q.first() for q in self._q if len(q)), None)

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """Successive victims: the LRU units of the lowest segment, then of the next (an eviction
        makes no segment go over its share, so nothing cools in between)."""
        return list(chain.from_iterable(starmap(range, self._take_runs(nbytes))))

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        runs = self._take_runs(nbytes)
        return join_extents(sorted(runs) if self.drops_victims else runs)

    def _take_runs(self, nbytes: int) -> list[tuple[int, int]]:
        """Evict the units ``nbytes`` need (fewer when the candidates run out), the oldest of each
        segment, lowest first, as runs."""
        n = -(-nbytes // self._unit)
        out: list[tuple[int, int]] = []
        taken = 0
        for q in self._q:
            if taken >= n:
                break
            held = len(q)
            out += q.pop_runs(n - taken)
            taken += held - len(q)
        self._budget.shrink(taken * self._unit)
        return out

    def segment(self, uid: int) -> int | None:
        """The segment (0 = probation) the unit belongs to, or None."""
        seg = self._seg_of(uid)
        return self._held.segment(uid) if seg is None else seg

    def __len__(self) -> int:
        return sum(map(len, self._q))

    def __contains__(self, uid: int) -> bool:
        return self._seg_of(uid) is not None


def _increasing_extents(uids) -> list[tuple[int, int]]:
    """``uids`` as extents (first, stop), each within one bucket, when they increase strictly;
    else (or when empty) an empty list."""
    if isinstance(uids, range):
        if uids.step != 1 or not uids or uids[0] >> UNIT_BITS != uids[-1] >> UNIT_BITS:
            return []
        return [(uids.start, uids.stop)]
    extents = extents_of(uids)
    for (_, stop), (first, _) in pairwise(extents):
        if first < stop:
            return []
    if any(a >> UNIT_BITS != (b - 1) >> UNIT_BITS for a, b in extents):
        return []
    return extents


def _bucket_extents(uids: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct ``uids`` as extents of consecutive uids, none across a bucket's end."""
    out: list[tuple[int, int]] = []
    for a, b in extents_of(uids):
        while a >> UNIT_BITS != (b - 1) >> UNIT_BITS:
            stop = ((a >> UNIT_BITS) + 1) << UNIT_BITS
            out.append((a, stop))
            a = stop
        out.append((a, b))
    return out


def _covers_exactly(extents: list[list[int]], uids) -> bool:
    """Are ``uids`` (in page order) exactly the uids of the sorted ``extents``?"""
    if sum(b - a for a, b, _ in extents) != len(uids):
        return False
    if isinstance(uids, range):
        return uids.step == 1 and extents[0][0] >= uids.start and extents[-1][1] <= uids.stop
    return list(chain.from_iterable(range(a, b) for a, b, _ in extents)) == list(uids)


def _move_to_segment(plan: list[list[int]], k: int, uid: int, seg: int) -> None:
    """In the sorted extents ``plan[k:]``, ``uid`` is now in ``seg``: its extent is split."""
    j = next(j for j in range(k, len(plan)) if plan[j][0] <= uid < plan[j][1])
    a, b, old = plan[j]
    pieces = [[a, uid, old], [uid, uid + 1, seg], [uid + 1, b, old]]
    plan[j : j + 1] = [p for p in pieces if p[0] < p[1]]
