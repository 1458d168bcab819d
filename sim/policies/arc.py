"""ARC (Megiddo & Modha, FAST'03) in the byte-aware form of libCacheSim's ARC.c.

Four LRU lists, sized in bytes: T1 (seen once recently) and T2 (seen at least twice) hold units;
the ghosts B1 and B2 hold only the keys and sizes of units evicted from T1 and T2. A target p for
T1's bytes adapts: a miss found in B1 raises p by max(|B2|/|B1|, 1), one found in B2 lowers it by
max(|B1|/|B2|, 1) (bytes, float division, p kept in [0, c]; libCacheSim's float form).

- A hit moves the unit to the MRU end of T2 (from T1 or T2).
- A miss found in a ghost leaves the ghost and enters T2; any other miss enters T1.
- Victims (the REPLACE of the paper): the LRU of T1 if T1 is non-empty and holds more than p bytes
  (or exactly p when the incoming key was found in B2), or if T2 is empty; else the LRU of T2.
  Its key enters B1 or B2 (MRU end).
- On a miss found in no list (case IV), before REPLACE: if T1 + B1 + incoming size > c, the LRU of
  B1 is dropped, or, with B1 empty, the LRU of T1 is evicted without a ghost; otherwise, if the
  four lists together hold >= 2c bytes, the LRU of B2 is dropped (when B2 is non-empty).

The incoming key and size come from the ``admitting`` hook (cachesim, as libCacheSim's ``find``);
the engine does not call it, so there ghost lookups happen at ``insert`` and the victim choice sees
an incoming size of 0. ``evict`` applies the choice's ghost updates; a unit the engine ``remove``s
is forgotten without a ghost entry. c is the capacity given to ``set_capacity``, or else the
high-water mark of the bytes the tier has held (the engine fills a tier before it evicts).

Pins: a pinned unit leaves T1/T2 and remembers which; a hit while pinned marks it for T2. On unpin
it returns to the MRU end of T2 if it was in T2 or was accessed, else of T1 (the engine calls
``access`` before ``pin``, so a unit a turn used returns to T2). A unit inserted pinned (a miss,
placed for a running turn) joins T1, or T2 if its key was in a ghost, when it is released.

Where every unit has one size (``view.unit_bytes``: the engine), ``ARC`` builds a ``RunARC``: T1,
T2 and the pinned units are ``RunList``s (``sim.policies.run_lists``) and the ghosts B1 and B2
``GhostRuns`` (``sim.policies.ghost_runs``: a FIFO that forgets its oldest runs without listing
them), so a session's pages entering, moving between lists, leaving a ghost list or being evicted
together cost O(runs), not O(pages). Its eviction takes victims a stretch at a time, a stretch being as many victims as keep
the same trim (B1's LRU, B2's LRU or none) and the same list giving them, and a demotion batch
(``take_in``) alternates evict/insert a stretch at a time where that leaves every list's size as it
was. The cachesim's objects have sizes, so it keeps the dict form; the two are checked against each
other call by call (tests/policies/test_run_arc.py).

Differences from libCacheSim: none on cachesim streams with positive sizes (tested request by
request, unit and variable sizes). libCacheSim keeps ghost entries in its hash table; here they live
in B1/B2 only.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from itertools import chain, compress, starmap

import numpy as np

from sim.policies.base import EvictionPolicy
from sim.policies.ghost_runs import GhostRuns
from sim.policies.registry import register
from sim.policies.run_lists import (
    RunList,
    StretchTakeIn,
    distinct_runs,
    increasing_runs,
    runs_less,
    split_at_sessions,
)
from sim.policies.structures import ByteBudget, GhostFIFO, consume
from sim.units import UNIT_BITS, extents_of, join_extents


@register("arc")
class ARC(EvictionPolicy):
    reads_last_access = False
    # A pinned insert changes no victim: its size counts only on release, the capacity is fixed
    # (the engine sets it), and a new decode page cannot be in a ghost list (a ghost holds only
    # uids evicted from this tier; a page index a token budget pruned was on the GPU when it went,
    # so its ghost entry, if any, was taken when it came back).
    grows_in_bulk = True

    def __new__(cls, ctx=None, *args, **kwargs):
        # Where every unit has one size (the engine), the lists are kept as runs (``RunARC``).
        if cls is ARC and getattr(getattr(ctx, "view", None), "unit_bytes", None):
            cls = RunARC
        return super().__new__(cls)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._t1: OrderedDict[int, None] = OrderedDict()  # uid, LRU first
        self._t2: OrderedDict[int, None] = OrderedDict()
        self._b1 = GhostFIFO()  # ghosts: entries leave by a hit or
        self._b2 = GhostFIFO()  # from the old end, so FIFO = LRU
        self._t1b = self._t2b = 0
        self._size: dict[int, int] = {}  # bytes of every member (T1, T2 and pinned)
        self._home: dict[int, int] = {}  # pinned member -> 1 or 2
        self.p = 0.0
        self._budget = ByteBudget()
        self._incoming: tuple[int, int, int] | None = None  # (uid, size, ghost list 0/1/2)

    # -- capacity and the incoming request -------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        self._budget.set(capacity)

    def _c(self) -> int:
        return self._budget.c

    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self.view.size(uid), self._ghost_hit(uid))

    def _ghost_hit(self, uid: int) -> int:
        """Cases II and III of the paper: adapt p and take the key out of its ghost."""
        if uid in self._b1:
            delta = max(self._b2.bytes / self._b1.bytes, 1) if self._b1.bytes > 0 else 1
            self.p = min(self.p + delta, self._c())
            self._b1.take(uid)
            return 1
        if uid in self._b2:
            delta = max(self._b1.bytes / self._b2.bytes, 1) if self._b2.bytes > 0 else 1
            self.p = max(self.p - delta, 0)
            self._b2.take(uid)
            return 2
        return 0

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        size = self.view.size(uid)
        inc = self._incoming
        ghost = inc[2] if inc is not None and inc[0] == uid else self._ghost_hit(uid)
        self._incoming = None
        lst = 2 if ghost else 1
        self._budget.grow(size)
        self._size[uid] = size
        if pinned:
            self._home[uid] = lst
        else:
            self._link(uid, lst, size)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order; in C when all have one size and none is a ghost (then each
        joins T1, or will on release)."""
        uids = list(uids)
        unit = self.view.unit_bytes
        ghosts = self._b1.holds_any(uids) or self._b2.holds_any(uids)
        if not unit or ghosts or self._incoming is not None or len(set(uids)) < len(uids):
            super().insert_many(uids, now, pinned)
            return
        self._budget.grow(unit * len(uids))
        self._size.update(dict.fromkeys(uids, unit))
        if pinned:
            self._home.update(dict.fromkeys(uids, 1))
        else:
            self._t1.update(dict.fromkeys(uids))
            self._t1b += unit * len(uids)

    def _link(self, uid: int, lst: int, size: int) -> None:
        if lst == 1:
            self._t1[uid] = None
            self._t1b += size
        else:
            self._t2[uid] = None
            self._t2b += size

    def _unlink(self, uid: int) -> int:
        """Take a candidate out of T1/T2; returns the list it was in (0: not a candidate)."""
        if uid in self._t1:
            del self._t1[uid]
            self._t1b -= self._size[uid]
            return 1
        if uid in self._t2:
            del self._t2[uid]
            self._t2b -= self._size[uid]
            return 2
        return 0

    def access(self, uid: int, now: float) -> None:
        self._incoming = None
        if uid in self._t2:
            self._t2.move_to_end(uid)
        elif uid in self._t1:
            del self._t1[uid]
            size = self._size[uid]
            self._t1b -= size
            self._t2[uid] = None
            self._t2b += size
        elif uid in self._home:
            self._home[uid] = 2

    def pin(self, uid: int) -> None:
        lst = self._unlink(uid)
        if lst:
            self._home[uid] = lst

    def unpin(self, uid: int, now: float) -> None:
        lst = self._home.pop(uid, None)
        if lst is None:
            self.insert(uid, now)
            return
        size = self.view.size(uid)  # a pinned unit may have grown
        self._budget.grow(size - self._size[uid])
        self._size[uid] = size
        self._link(uid, lst, size)

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each: a member leaves T1/T2 for good and returns to T2."""
        self._incoming = None
        unit = self.view.unit_bytes
        if not unit:
            self._acquire_each(uids)
            return
        # Equal sizes: set operations and C-level maps over the batch (no order to keep).
        t1, t2, home = self._t1, self._t2, self._home
        uids = list(uids)
        in1, in2 = t1.keys() & uids, t2.keys() & uids
        consume(map(t1.__delitem__, in1))
        consume(map(t2.__delitem__, in2))
        self._t1b -= len(in1) * unit
        self._t2b -= len(in2) * unit
        home.update(dict.fromkeys(in1 | in2 | (home.keys() & uids), 2))

    def _acquire_each(self, uids) -> None:
        t1, t2, home, size = self._t1, self._t2, self._home, self._size
        t1b = t2b = 0
        for uid in uids:
            if uid in t2:
                del t2[uid]
                t2b += size[uid]
            elif uid in t1:
                del t1[uid]
                t1b += size[uid]
            elif uid not in home:
                continue  # not a member: a hit on it is none
            home[uid] = 2
        self._t1b -= t1b
        self._t2b -= t2b

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order."""
        uids = list(uids)
        unit = self.view.unit_bytes
        lists = list(map(self._home.get, uids))
        if not unit or None in lists or len(set(uids)) < len(uids):
            self._release_each(uids, now)
            return
        # Equal sizes (none grows) and every unit pinned here: each list takes its units in
        # page order, appended at its MRU end as one ``update``.
        consume(map(self._home.__delitem__, uids))
        to_t1 = list(compress(uids, map((1).__eq__, lists)))
        if to_t1:
            self._t1.update(dict.fromkeys(to_t1))
            self._t1b += len(to_t1) * unit
        if len(to_t1) < len(uids):
            to_t2 = list(compress(uids, map((2).__eq__, lists)))
            self._t2.update(dict.fromkeys(to_t2))
            self._t2b += len(to_t2) * unit

    def _release_each(self, uids, now: float) -> None:
        home, sizes, size_of = self._home, self._size, self.view.size
        for uid in uids:
            lst = home.pop(uid, None)
            if lst is None:
                self.insert(uid, now)
                continue
            size = size_of(uid)  # a pinned unit may have grown
            grown = size - sizes[uid]
            if grown:
                self._budget.grow(grown)
                sizes[uid] = size
            self._link(uid, lst, size)

    def remove(self, uid: int, pinned: bool = False) -> None:
        if self._home.pop(uid, None) is None and not self._unlink(uid):
            return  # not a member
        self._budget.shrink(self._size.pop(uid))

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    # -- eviction --------------------------------------------------------------------------------
    def _replace_list(self, ghost: int) -> int:
        """REPLACE: which data list gives the victim (1: T1, 2: T2, 0: both empty)."""
        t1b = self._t1b
        use_t1 = (t1b > 0 and (t1b > self.p or (t1b == self.p and ghost == 2))) or self._t2b == 0
        if not self._t1:
            return 2 if self._t2 else 0
        if not self._t2:
            return 1
        return 1 if use_t1 else 2

    def _plan(self):
        """(victim, its list, drop B1's LRU, drop B2's LRU, victim's key to a ghost) or None."""
        inc = self._incoming
        size, ghost = (inc[1], inc[2]) if inc is not None else (0, 0)
        c = self._c()
        trim_b1 = trim_b2 = False
        if not ghost:  # case IV
            if self._t1b + self._b1.bytes + size > c:
                if self._b1.bytes > 0:
                    trim_b1 = True
                elif self._t1:  # T1 >= c: evict from T1, no ghost
                    return (next(iter(self._t1)), 1, False, False, False)
            elif (
                self._t1b + self._b1.bytes + self._t2b + self._b2.bytes >= 2 * c
            ) and self._b2.bytes > 0:
                trim_b2 = True
        lst = self._replace_list(ghost)
        if lst == 0:
            return None
        uid = next(iter(self._t1 if lst == 1 else self._t2))
        return (uid, lst, trim_b1, trim_b2, True)

    def peek(self, now: float) -> int | None:
        plan = self._plan()
        return plan[0] if plan is not None else None

    def evict(self, now: float) -> int | None:
        plan = self._plan()
        if plan is None:
            return None
        uid, lst, trim_b1, trim_b2, ghost = plan
        if trim_b1:
            self._b1.pop_oldest()
        if trim_b2:
            self._b2.pop_oldest()
        size = self._size[uid]
        self.remove(uid)
        if ghost:
            (self._b1 if lst == 1 else self._b2).add(uid, size)
        return uid

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """``evict`` until ``nbytes`` are freed. Where every unit has one size and no request is
        incoming (the engine's case), in one loop over local copies of the list sizes: the same
        victims, trims and ghosts as victim by victim (p and c do not change while evicting)."""
        unit = self.view.unit_bytes
        if not unit or self._incoming is not None:
            return super().evict_bytes(nbytes, now)
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        b1q, b2q = b1.ghosts(), b2.ghosts()
        t1b, t2b, b1b, b2b = self._t1b, self._t2b, b1.bytes, b2.bytes
        p, c = self.p, self._c()
        out: list[int] = []
        for _ in range(-(-nbytes // unit)):
            lst = 0
            if t1b + b1b > c:  # case IV, incoming size 0
                if b1b > 0:
                    b1b -= b1q.popitem(last=False)[1]
                elif t1:  # T1 >= c: evict from T1, no ghost
                    lst = -1
            elif t1b + b1b + t2b + b2b >= 2 * c and b2b > 0:
                b2b -= b2q.popitem(last=False)[1]
            if lst == 0:  # REPLACE
                if not t1:
                    lst = 2 if t2 else 0
                elif not t2:
                    lst = 1
                else:
                    lst = 1 if (t1b > 0 and t1b > p) or t2b == 0 else 2
                if lst == 0:
                    break
            if lst == 2:
                uid = t2.popitem(last=False)[0]
                t2b -= unit
                ghosts = b2q
                b2b += unit
            else:
                uid = t1.popitem(last=False)[0]
                t1b -= unit
                if lst == 1:
                    ghosts = b1q
                    b1b += unit
            if lst > 0:
                old = ghosts.pop(uid, None)  # (a member is never a ghost: kept as add does)
                if old is not None:
                    if lst == 1:
                        b1b -= old
                    else:
                        b2b -= old
                ghosts[uid] = unit
            out.append(uid)
        self._t1b, self._t2b, b1.bytes, b2.bytes = t1b, t2b, b1b, b2b
        consume(map(self._size.__delitem__, out))
        self._budget.shrink(unit * len(out))
        return out

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, uid: int) -> bool:
        return uid in self._t1 or uid in self._t2


VECTOR_HITS = 32  # a run of this many ghost hits or more adapts p in numpy, a shorter one in Python


def adapted_p(p, c: int, u: int, b1b: int, b2b: int, hits: list[tuple[int, int, int]]):
    """p after ``_ghost_hit``'s change for each hit of ``hits`` in turn (runs ``(first, stop, 1
    or 2)`` of B1's or B2's keys of ``u`` bytes each), B1 and B2 holding ``b1b`` and ``b2b`` bytes
    before the first (the hits included). A long run of one list's hits is one numpy pass
    (``_p_after_run``) with the same float operations in the same order."""
    for a, s, ghost in hits:
        k = s - a
        if k >= VECTOR_HITS:
            if ghost == 1:
                p = _p_after_run(p, b1b, b2b, k, u, c)  # up, to at most c
                b1b -= k * u
            else:
                p = _p_after_run(p, b2b, b1b, k, u, None)  # down, to at least 0
                b2b -= k * u
            continue
        for _ in range(k):
            if ghost == 1:
                p = min(p + (max(b2b / b1b, 1) if b1b > 0 else 1), c)
                b1b -= u
            else:
                p = max(p - (max(b1b / b2b, 1) if b2b > 0 else 1), 0)
                b2b -= u
    return p


def _p_after_run(p, own: int, other: int, k: int, u: int, c: int | None):
    """p after ``k`` hits in one ghost list holding ``own`` bytes (the other ``other``): each moves
    p by ``max(other / own, 1)`` (1 once ``own`` is 0), own losing ``u`` a hit; up, and at most
    ``c``, for B1, down, and at least 0, for B2 (``c`` None). Each step moves p the same way, so
    once p reaches its bound it stays: the last of the unbounded running sums (``add.accumulate``
    adds in order, as the loop does), held to the bound, is p."""
    owns = own - u * np.arange(k, dtype=np.int64)  # exact: bytes stay far below 2**53
    steps = np.ones(k)
    np.divide(float(other), owns, out=steps, where=owns > 0)  # (int / int rounds as this does)
    np.maximum(steps, 1.0, out=steps)
    path = np.empty(k + 1)
    path[0] = p
    path[1:] = -steps if c is None else steps
    last = float(np.add.accumulate(path)[-1])
    if c is None:
        return 0 if last <= 0 else last
    return c if last >= c else last


def _steps_above(top: int, floor, unit: int) -> int:
    """How many of ``top``, ``top - unit``, ``top - 2 unit`` ... are > ``floor`` (an int or a
    float, compared exactly), i.e. how many steps of ``unit`` keep a value above a bound."""
    if top <= floor:
        return 0
    if isinstance(floor, int):
        return (top - floor + unit - 1) // unit
    k = math.ceil((top - floor) / unit)  # in floats: then made exact
    while k > 1 and top - (k - 1) * unit <= floor:
        k -= 1
    while top - k * unit > floor:
        k += 1
    return k


def _steps_at_least(top: int, floor: int, unit: int) -> int:
    """How many of ``top``, ``top - unit`` ... are >= ``floor``."""
    return (top - floor) // unit + 1 if top >= floor else 0


class RunARC(StretchTakeIn, ARC):
    """ARC where every unit has one size (``view.unit_bytes``): T1, T2 and the pinned units (by
    the list they return to) are ``RunList``s, B1 and B2 ``GhostRuns``, so a session's pages moving
    together cost O(runs), and the sizes are counts times the unit. ``ARC`` builds one of these whenever its view
    has a unit size; the decisions are ARC's, unit for unit."""

    # The same names as ARC's lists (the hand tests read them), here as runs.
    _t1: RunList  # type: ignore[assignment]
    _t2: RunList  # type: ignore[assignment]
    _b1: GhostRuns  # type: ignore[assignment]
    _b2: GhostRuns  # type: ignore[assignment]

    def __init__(self, ctx) -> None:
        EvictionPolicy.__init__(self, ctx)
        self._unit: int = ctx.view.unit_bytes
        self._t1 = RunList()  # LRU first
        self._t2 = RunList()
        self._b1 = GhostRuns()  # ghosts: entries leave by a hit or
        self._b2 = GhostRuns()  # from the old end, so FIFO = LRU
        self._h1 = RunList()  # pinned, returning to T1 (order unused)
        self._h2 = RunList()  # pinned, returning to T2
        self.p = 0.0
        self._budget = ByteBudget()
        self._incoming = None

    def _bytes(self) -> tuple[int, int, int, int]:
        u = self._unit
        return len(self._t1) * u, len(self._t2) * u, len(self._b1) * u, len(self._b2) * u

    # -- the incoming request --------------------------------------------------------------------
    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self._unit, self._ghost_hit(uid))

    def _ghost_hit(self, uid: int) -> int:
        """Cases II and III of the paper: adapt p and take the key out of its ghost."""
        _, _, b1b, b2b = self._bytes()
        if self._b1.discard(uid):
            delta = max(b2b / b1b, 1) if b1b > 0 else 1
            self.p = min(self.p + delta, self._c())
            return 1
        if self._b2.discard(uid):
            delta = max(b1b / b2b, 1) if b2b > 0 else 1
            self.p = max(self.p - delta, 0)
            return 2
        return 0

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        inc = self._incoming
        ghost = inc[2] if inc is not None and inc[0] == uid else self._ghost_hit(uid)
        self._incoming = None
        self._budget.grow(self._unit)
        if pinned:
            (self._h2 if ghost else self._h1).push(uid)
        else:
            (self._t2 if ghost else self._t1).push(uid)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order, as runs (a batch may list sessions in any order): the ghosts
        among them are taken out of B1/B2 by run, p adapts hit by hit in the batch's order, and
        each list takes its units in that order."""
        runs = distinct_runs(uids) if self._incoming is None else None
        if runs is None:
            EvictionPolicy.insert_many(self, uids, now, pinned)
            return
        if pinned and self._pin_new(runs):
            return
        hits: list[tuple[int, int, int]] = []  # (first, stop, ghost list), in the batch's order
        once: list[tuple[int, int]] = []
        count = 0
        for a, s in split_at_sessions(runs):
            count += s - a
            in_b1, in_b2 = self._b1.take_range(a, s), self._b2.take_range(a, s)
            if not in_b1 and not in_b2:
                once.append((a, s))
                continue
            hits += sorted([(x, y, 1) for x, y in in_b1] + [(x, y, 2) for x, y in in_b2])
            once += runs_less([(a, s)], join_extents(sorted(in_b1 + in_b2)))
        # (the pinned sets' order is unused: a run there joins the one it continues)
        h1, h2, t1, t2 = self._h1, self._h2, self._t1, self._t2
        seen_once, seen_before = (
            (h1.add_runs, h2.add_runs) if pinned else (t1.push_runs, t2.push_runs)
        )
        if hits:
            self._adapt_p(hits)
            seen_before(join_extents((a, s) for a, s, _ in hits))
        self._budget.grow(self._unit * count)
        seen_once(join_extents(once))

    def _pin_new(self, runs: list[tuple[int, int]]) -> bool:
        """Units inserted pinned, none of them a ghost (a decode span's new pages, listed step by
        step across sessions): they join the pinned set as joined runs (its order is unused).
        False, and nothing done, if one is a ghost."""
        ordered = join_extents(sorted(runs)) if len(runs) > 1 else runs
        b1, b2 = self._b1, self._b2
        sessions = split_at_sessions(ordered)
        buckets = {a >> UNIT_BITS for a, _ in sessions}
        # (a dict view's isdisjoint walks the smaller side: the sessions here)
        if not (b1.buckets().isdisjoint(buckets) and b2.buckets().isdisjoint(buckets)):
            for a, s in sessions:
                if b1.first_in(a, s) is not None or b2.first_in(a, s) is not None:
                    return False
        self._budget.grow(self._unit * sum(s - a for a, s in ordered))
        self._h1.add_runs(ordered)
        return True

    def _adapt_p(self, hits: list[tuple[int, int, int]]) -> None:
        """``_ghost_hit``'s changes to p for a batch's ghost hits, in the batch's order: runs
        ``(first, stop, 1 or 2)`` of B1's or B2's keys, already taken out of their lists."""
        u = self._unit
        b1b = (len(self._b1) + sum(s - a for a, s, g in hits if g == 1)) * u
        b2b = (len(self._b2) + sum(s - a for a, s, g in hits if g == 2)) * u
        self.p = adapted_p(self.p, self._c(), u, b1b, b2b, hits)

    def access(self, uid: int, now: float) -> None:
        self._incoming = None
        if self._t2.discard(uid) or self._t1.discard(uid):
            self._t2.push(uid)
        elif self._h1.discard(uid):
            self._h2.push(uid)

    def pin(self, uid: int) -> None:
        if self._t1.discard(uid):
            self._h1.push(uid)
        elif self._t2.discard(uid):
            self._h2.push(uid)

    def unpin(self, uid: int, now: float) -> None:
        if self._h1.discard(uid):
            self._t1.push(uid)
        elif self._h2.discard(uid):
            self._t2.push(uid)
        else:
            self.insert(uid, now)

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each: a member leaves T1/T2 for good and returns to T2."""
        self._incoming = None
        runs = increasing_runs(uids)
        if runs is None:
            EvictionPolicy.acquire(self, uids, now)
            return
        held: list[tuple[int, int]] = []
        for a, s in split_at_sessions(runs):
            for lst in (self._t1, self._t2, self._h1):
                held += lst.take_range(a, s)
        self._h2.add_runs(join_extents(sorted(held)))

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order: each list takes its units as runs, in page order."""
        runs = increasing_runs(uids)
        if runs is None:
            EvictionPolicy.release(self, uids, now)
            return
        h1, h2 = self._h1, self._h2
        to_t1: list[tuple[int, int]] = []
        to_t2: list[tuple[int, int]] = []
        for a, s in split_at_sessions(runs):
            to_t1 += h1.take_range(a, s)
            to_t2 += h2.take_range(a, s)
        if sum(s - a for a, s in chain(to_t1, to_t2)) < sum(s - a for a, s in runs):
            h1.add_runs(to_t1)  # some are not pinned here: back as they were (the pinned
            h2.add_runs(to_t2)  # units' order is unused), and one unit at a time
            EvictionPolicy.release(self, uids, now)
            return
        self._t1.push_runs(join_extents(to_t1))
        self._t2.push_runs(join_extents(to_t2))

    def remove(self, uid: int, pinned: bool = False) -> None:
        for lst in (self._h1, self._h2, self._t1, self._t2):
            if lst.discard(uid):
                self._budget.shrink(self._unit)
                return

    def remove_many(self, uids, pinned: bool = False) -> None:
        runs = increasing_runs(uids)
        if runs is None:
            EvictionPolicy.remove_many(self, uids, pinned)
            return
        gone = 0
        for a, s in split_at_sessions(runs):
            for lst in (self._h1, self._h2, self._t1, self._t2):
                gone += sum(y - x for x, y in lst.take_range(a, s))
        self._budget.shrink(self._unit * gone)

    # -- eviction --------------------------------------------------------------------------------
    def _plan(self):
        inc = self._incoming
        size, ghost = (inc[1], inc[2]) if inc is not None else (0, 0)
        c = self._c()
        t1b, t2b, b1b, b2b = self._bytes()
        trim_b1 = trim_b2 = False
        if not ghost:  # case IV
            if t1b + b1b + size > c:
                if b1b > 0:
                    trim_b1 = True
                elif t1b:  # T1 >= c: evict from T1, no ghost
                    return (self._t1.first(), 1, False, False, False)
            elif t1b + b1b + t2b + b2b >= 2 * c and b2b > 0:
                trim_b2 = True
        if not t1b:
            lst = 2 if t2b else 0
        elif not t2b:
            lst = 1
        else:
            lst = 1 if t1b > self.p or (t1b == self.p and ghost == 2) else 2
        if lst == 0:
            return None
        uid = (self._t1 if lst == 1 else self._t2).first()
        return (uid, lst, trim_b1, trim_b2, True)

    def evict(self, now: float) -> int | None:
        plan = self._plan()
        if plan is None:
            return None
        uid, lst, trim_b1, trim_b2, ghost = plan
        if trim_b1:
            self._b1.forget(1)
        if trim_b2:
            self._b2.forget(1)
        (self._t1 if lst == 1 else self._t2).pop_runs(1)
        self._budget.shrink(self._unit)
        if ghost:
            (self._b1 if lst == 1 else self._b2).push_runs([(uid, uid + 1)])
        return uid

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        if self._incoming is not None:
            return super().evict_bytes(nbytes, now)
        return list(chain.from_iterable(starmap(range, self._evict_runs(nbytes))))

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        if self._incoming is not None:
            return super().evict_extents(nbytes, now)
        runs = self._evict_runs(nbytes)
        return join_extents(sorted(runs) if self.drops_victims else runs)

    def _evict_runs(self, nbytes: int) -> list[tuple[int, int]]:
        """The victims of ``nbytes`` (no request incoming) as runs, in eviction order: the same
        victims, trims and ghosts as victim by victim, taken a stretch at a time. Within a stretch
        the trim (B1's LRU, B2's LRU or none) and the list giving victims stay the same, and so
        each list's changes are one batch (p and c do not change while evicting)."""
        u, c, p = self._unit, self._c(), self.p
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        out: list[tuple[int, int]] = []
        left = -(-nbytes // u)
        while left > 0:
            n1, n2, g1, g2 = len(t1), len(t2), len(b1), len(b2)
            t1b, t2b, b1b, b2b = n1 * u, n2 * u, g1 * u, g2 * u
            total = t1b + t2b + b1b + b2b
            k = left
            trim = 0
            if t1b + b1b > c:  # case IV, incoming size 0
                if b1b > 0:
                    trim = 1  # each victim leaves T1 + B1 one unit smaller
                    k = min(k, (t1b + b1b - c + u - 1) // u)  # (_steps_above, c an int)
                elif t1b:  # T1 >= c: T1's LRU goes, no ghost, while T1 > c
                    k = min(k, (t1b - c + u - 1) // u)
                    out += join_extents(t1.pop_runs(k))
                    self._budget.shrink(k * u)
                    left -= k
                    continue
                else:
                    k = 1
            elif total >= 2 * c:
                if b2b > 0:
                    trim = 2  # each victim leaves the four lists one unit smaller
                    k = min(k, _steps_at_least(total, 2 * c, u))
                else:
                    trim = -1  # no trim until a victim enters B2
            if not t1b:
                lst = 2 if t2b else 0
            elif not t2b:
                lst = 1
            else:
                lst = 1 if t1b > p else 2
            if lst == 0:
                break
            if lst == 1:
                k = min(k, n1)
                if t2b:  # T1 stays above p
                    k = min(k, _steps_above(t1b, p, u))
                if trim == 2:  # B2 runs out
                    k = min(k, g2)
            else:
                k = min(k, n2)
                if trim == 1:  # B1 runs out
                    k = min(k, g1)
                elif trim == -1:  # the first ghost in B2 starts its trims
                    k = 1
            victims = join_extents((t1 if lst == 1 else t2).pop_runs(k))
            ghosts = b1 if lst == 1 else b2
            trimmed = b1 if trim == 1 else b2 if trim == 2 else None
            if trimmed is ghosts:  # a pop then a push, k times, keeps its length: FIFO
                ghosts.push_runs(victims, g1 if lst == 1 else g2)
            else:
                if trimmed is not None:
                    trimmed.forget(k)
                ghosts.push_runs(victims)
            self._budget.shrink(k * u)
            out += victims
            left -= k
        return out

    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        if self._incoming is not None or free_bytes < 0:
            return EvictionPolicy.take_in(self, uids, free_bytes, now)
        victims = self._take_in_runs(extents_of(uids), free_bytes, now)
        return list(chain.from_iterable(starmap(range, victims)))

    def take_in_extents(
        self, extents: list[tuple[int, int]], free_bytes: int, now: float
    ) -> list[tuple[int, int]]:
        if self._incoming is not None or free_bytes < 0:
            return EvictionPolicy.take_in_extents(self, extents, free_bytes, now)
        return join_extents(self._take_in_runs(extents, free_bytes, now))

    def _steady_t1(self) -> bool:
        """Does each victim come from T1's LRU and leave T1, B1 (and B2, T2) as long as they were
        once a non-ghost unit joins T1? Case IV with B1 trimmed and T1 giving the victim, or with B1
        empty and T1 over c."""
        t1b, t2b, b1b, _ = self._bytes()
        if not t1b or t1b + b1b <= self._c():
            return False
        return not b1b or not t2b or t1b > self.p

    def _stretch_end(self, a: int, s: int) -> int:
        """Where the stretch of ``[a, s)`` that ``_evict_then_insert`` may take ends (``a``: none):
        the state is steady and none of its uids is a ghost."""
        if not self._steady_t1():
            return a
        end = s
        for b, e in split_at_sessions([(a, s)]):
            for ghosts in (self._b1, self._b2):
                g = ghosts.first_in(b, e)
                if g is not None:
                    end = min(end, g)
            if end < e:
                break
        return end

    def _evict_then_insert(self, a: int, s: int) -> list[tuple[int, int]]:
        """``evict`` then ``insert`` for each of ``a .. s-1`` in a steady state (``_steady_t1``):
        T1 (and B1, with a victim in and its oldest out) is a queue that takes as many as it gives,
        so pushing all then popping as many is the alternation."""
        k = s - a
        self._t1.push_run(a, s)
        victims = join_extents(self._t1.pop_runs(k))
        if self._b1:
            self._b1.push_runs(victims, len(self._b1))
        self._budget.shrink(k * self._unit)  # each victim leaves before its unit comes
        self._budget.grow(k * self._unit)
        return victims

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, uid: int) -> bool:
        return uid in self._t1 or uid in self._t2
