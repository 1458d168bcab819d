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

Order: ``RunOrder`` (the entry order as runs of a session's consecutive units, pins per session,
as ``fifo``) and ``ReferenceBits`` (a byte per unit of each session with a bit set). The hand
moves a run at a time: it takes the oldest stretch of consecutive candidates and reads their bits
as runs of set bytes (``find``), so a stretch with no bit set gives its victims at once and one
with every bit set goes back to the newest end as one run. A session's history entering, its pin
and release, and its removal cost O(runs) plus C-level slices of its bits. ``peek`` scans the candidates
oldest first (only tests and users peek). Matches libCacheSim's Clock (``init_freq=0,
n_bit_counter=1``) request by request.

A decode span in one batch (``grows_in_bulk`` with ``plans_pinned``): a pinned page changes no
victim, but a second chance taken after a step's page entered goes behind that page. The engine
names the span's pages and how many victims precede each (``plan_pinned``); the batch's eviction
then enters each page between the victims where its step would, and the pinned insert that
follows adds nothing.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain, starmap
from operator import sub

import numpy as np

from sim.policies.base import EvictionPolicy
from sim.policies.reference_bits import ReferenceBits
from sim.policies.registry import register
from sim.policies.run_order import RunOrder
from sim.units import extents_of, join_extents

FIRST_LOOK = 64  # units of a stretch whose bits the hand reads first (it doubles while short)


def _sequence(uids):
    """``uids`` as a range or a list (the structure's batch paths index them)."""
    return uids if isinstance(uids, (range, list)) else list(uids)


def _as_range(uids):
    """``uids`` (a range or a list) as a range when they are one (a session's units, listed):
    the order then reads them by their bounds, not uid by uid."""
    if type(uids) is list and uids:
        first, n = uids[0], len(uids)
        if uids[-1] - first == n - 1 and uids == list(range(first, first + n)):
            return range(first, first + n)
    return uids


def _run_starts(uids: list[int]) -> list[int] | None:
    """The indices where ``uids``' runs of consecutive uids start (0 first), when the runs are
    long (a decode span's pages at layer units: a page's layers a run), else None. Found once with
    numpy, they make each slice of ``uids`` a few extents with no pass over its uids."""
    if len(uids) < 64 or uids[1] != uids[0] + 1:  # (a page a unit: runs of one)
        return None
    a = np.asarray(uids, dtype=np.int64)
    starts = np.flatnonzero(a[1:] - a[:-1] != 1) + 1
    return [0, *starts.tolist()] if 4 * (len(starts) + 1) <= len(a) else None


def _slice_runs(uids: list[int], starts: list[int], i: int, stop: int) -> list[tuple[int, int]]:
    """``uids[i:stop]`` as extents in order, ``starts`` being where ``uids``' runs start."""
    out = []
    j, n = bisect_right(starts, i), len(uids)
    while i < stop:
        end = min(starts[j] if j < len(starts) else n, stop)
        out.append((uids[i], uids[i] + end - i))
        i, j = end, j + 1
    return out


@register("clock")
class Clock(EvictionPolicy):
    reads_last_access = False
    grows_in_bulk = True
    plans_pinned = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._order = RunOrder()
        self._referenced = ReferenceBits()  # members (pinned or not) whose bit is set
        self._plan: tuple[list[int], list[int]] | None = None  # for the next eviction
        self._planned: list[int] | None = None  # pinned uids the last eviction entered by plan

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._referenced.discard(uid)
        self._order.enter(uid, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        planned = self._planned
        self._plan = self._planned = None
        if planned is not None and pinned and (uids is planned or list(uids) == planned):
            return  # the planned eviction entered them, each in its place
        uids = _sequence(uids)
        starts = _run_starts(uids) if type(uids) is list else None
        if starts is not None:
            runs = _slice_runs(uids, starts, 0, len(uids))
        elif type(uids) is range and uids.step == 1:
            runs = [(uids.start, uids.stop)]
        else:
            runs = None
        if self._referenced:  # (a run's bits clear as a slice)
            if runs is None:
                self._referenced.difference_update(uids)
            else:
                self._referenced.clear_runs(runs)
        if runs is None:
            self._order.enter_many(uids, candidate=not pinned)
        else:
            self._order.enter_runs(runs, candidate=not pinned)

    def plan_pinned(self, uids: list[int], before: list[int]) -> None:
        self._plan = (uids, before)
        self._planned = None

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
        uids = _as_range(_sequence(uids))
        members = self._order.members_among(uids)
        if type(uids) is range and len(members) == len(uids):  # a stretch of members: a slice
            self._referenced.set_run(uids.start, uids.stop)
        else:
            self._referenced.update(members)
        self._order.discard_all(uids)

    def release(self, uids, now: float) -> None:
        self._order.back_many(_sequence(uids))

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._order.leave(uid)
        self._referenced.discard(uid)

    def remove_many(self, uids, pinned: bool = False) -> None:
        uids = _sequence(uids)
        self._order.leave_many(uids)
        if self._referenced:
            self._referenced.difference_update(uids)

    def _add(self, uid: int, now: float) -> None:  # not used: insert/unpin are overridden
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    # -- the hand --------------------------------------------------------------------------------
    def _bits_ahead(self, a: int, s: int, k: int) -> tuple[int, list[tuple[int, int]]]:
        """The referenced uids of ``a .. s-1``, read far enough for ``k`` victims: (how far they
        were read, those uids as extents in order)."""
        referenced, look = self._referenced, max(FIRST_LOOK, 2 * k)
        while True:
            stop = min(s, a + look)
            if stop == s or stop - a - referenced.count_in(a, stop) >= k:
                return stop, referenced.runs_in(a, stop)
            look *= 2

    def _turn(
        self,
        k: int,
        out: list[tuple[int, int]],
        lone: bool = False,
        held: list[tuple[int, list[tuple[int, int]]]] | None = None,
    ) -> int | None:
        """Move the hand over the oldest stretch of consecutive candidates until ``k`` victims
        leave or the stretch ends: a unit with its bit set goes to the newest end with the bit
        cleared, one with a clear bit leaves. ``lone``: stop before the first second chance that
        follows a victim (``take_in``'s new units enter between them). ``held``: the second
        chances do not enter yet; (the stretch's first uid, those units) is appended to it, their
        bits cleared (as extents). Appends the victims to
        ``out`` as extents in order and returns how many (0 when every unit had its bit set), or
        None when there is no candidate."""
        order = self._order
        head = order.head_run()
        if head is None:
            return None
        a, s = head
        referenced = self._referenced
        if not referenced or referenced.isdisjoint(range(a, min(s, a + k))):
            n = min(k, s - a)
            order.drop_head(n)
            out.append((a, a + n))
            return n
        limit, hits = self._bits_ahead(a, s, k)
        again: list[tuple[int, int]] = []  # the second chances, as extents
        pos, want = a, k
        for h, r in hits:  # (a run of units with the bit set: one second chance after another)
            if h > pos:
                if lone or h - pos >= k:
                    limit = h
                    break
                out.append((pos, h))
                k -= h - pos
            again.append((h, r))
            pos = r
        end = min(limit, pos + k)
        if end > pos:
            out.append((pos, end))
            k -= end - pos
        order.drop_head(end - a)
        if not again:
            pass
        else:
            for h, r in again:
                self._referenced.clear_run(h, r)
            if held is None:
                self._order.enter_runs(again)
            else:
                held.append((a, again))
        return want - k

    def _hand_into(self, k: int, out: list[tuple[int, int]]) -> int:
        """Append the next ``k`` victims (fewer if the candidates run out) to ``out`` as extents
        in order; returns how many."""
        want, order, referenced = k, self._order, self._referenced
        while k > 0:
            # no bit to read (no bit of the run's session set): runs go at once
            k -= order.pop_unmarked(k, referenced, out, referenced.sessions)
            if not k:
                break
            got = self._turn(k, out)
            if got is None:
                break
            k -= got
        return want - k

    def _hand(self, k: int) -> list[tuple[int, int]]:
        """The next ``k`` victims (fewer if the candidates run out), as extents in order."""
        out: list[tuple[int, int]] = []
        self._hand_into(k, out)
        return join_extents(out) if len(out) > 1 else out

    def _victims(self, k: int) -> list[tuple[int, int]]:
        """An eviction's ``k`` victims, as extents in order; a pending plan's pinned units enter
        among them (``plan_pinned``). The hand goes on as one batch with its second chances held
        back, tagged with the victims before each; they and the plan's units then enter in the
        order of one step at a time (at the end, or where the hand finds no candidate: it would
        meet the second chances next)."""
        if self._plan is None:
            return self._hand(k)
        (uids, before), self._plan = self._plan, None
        self._planned = uids
        out: list[tuple[int, int]] = []
        # the held second chances in the hand's order, and the victims before each (never fewer
        # than before the one ahead: a bisection finds where the plan's units go among them)
        chances: list[int] = []
        before_chance: list[int] = []
        taken = entered = 0  # victims; plan units entered
        while taken < k:
            taken += self._order.pop_unmarked(
                k - taken, self._referenced, out, self._referenced.sessions
            )
            if taken == k:
                break
            held: list[tuple[int, list[tuple[int, int]]]] = []
            got = self._turn(k - taken, out, held=held)
            if got is None:
                if not chances:
                    break
                entered = self._enter_planned(uids, before, entered, chances, before_chance, taken)
                chances, before_chance = [], []
                continue
            for a, again in held:  # (the i-th unit sent round, h, follows h - a - i victims)
                units = list(chain.from_iterable(starmap(range, again)))
                before_chance += map(sub, units, range(a - taken, a - taken + len(units)))
                chances += units
            taken += got
        last = max(k, before[-1]) if before else k  # (every plan unit enters by the end)
        self._enter_planned(uids, before, entered, chances, before_chance, last)
        return join_extents(out) if len(out) > 1 else out

    def _enter_planned(
        self,
        uids: list[int],
        before: list[int],
        i: int,
        chances: list[int],
        before_chance: list[int],
        taken: int,
    ) -> int:
        """Enter the held second ``chances`` (``before_chance`` victims before each) and the
        plan's units from ``i`` on that follow at most ``taken`` victims, as one step at a time
        orders them: a unit sent round after ``v`` victims comes after the plan's units with
        ``before <= v`` and before the others. Returns the index of the first plan unit not
        entered."""
        order, referenced = self._order, self._referenced
        n, j, m = len(uids), 0, len(chances)
        starts = _run_starts(uids)
        while True:
            v = before_chance[j] if j < m else taken
            stop = bisect_right(before, v, i)
            if stop > i:
                if starts is None:
                    group = uids[i:stop]
                    if referenced:
                        referenced.difference_update(group)
                    order.enter_many(group, candidate=False)
                else:  # (only members have a bit set: new pages need no look-up)
                    runs = _slice_runs(uids, starts, i, stop)
                    if referenced:
                        referenced.clear_runs(runs)
                    order.enter_runs(runs, candidate=False)
                i = stop
            if j == m:
                return i
            nxt = before[i] if i < n else taken + 1
            back, j = j, bisect_left(before_chance, nxt, j)
            order.enter_many(chances[back:j])

    def evict(self, now: float) -> int | None:
        got = self._victims(1)
        return got[0][0] if got else None

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_bytes(nbytes, now)
        return list(chain.from_iterable(starmap(range, self._victims(n))))

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_extents(nbytes, now)
        extents = self._victims(n)
        return join_extents(sorted(extents)) if self.drops_victims and len(extents) > 1 else extents

    # -- demotions into a full tier --------------------------------------------------------------
    def _fresh(self, extents: list[tuple[int, int]]) -> bool:
        """Are these extents' uids distinct and none of them a member? (then ``take_in`` may
        enter them a stretch at a time)"""
        spans = sorted(extents)
        if any(s0 > a1 for (_, s0), (a1, _) in zip(spans, spans[1:], strict=False)):
            return False
        return not any(self._order.may_hold(a, s) for a, s in spans)

    def _take_in_runs(self, extents: list[tuple[int, int]], room: int) -> list[tuple[int, int]]:
        """``take_in`` of new uids with room for ``room`` units: each unit past the room follows
        one victim. A stretch of victims with no second chance between them, then as many new
        units, is that interleaving; the victims as extents in order."""
        pending = [range(a, s) for a, s in extents if s > a][::-1]  # the next at the end

        def enter(n: int) -> None:
            while n > 0:
                run = pending.pop()
                if len(run) > n:
                    pending.append(run[n:])
                    run = run[:n]
                self._order.enter_many(run)
                n -= len(run)

        total = sum(s - a for a, s in extents)
        if not total:
            return []  # (no unit asks for room)
        out: list[tuple[int, int]] = []
        if room < 0:  # (less than no room: the first unit follows 1 - room victims)
            out = self._hand(-room)
            room = 0
        enter(min(room, total))
        need = total - room
        while need > 0:
            n = self._turn(need, out, lone=True)
            if n is None:
                raise AssertionError(f"{type(self).__name__}: no victim to make room")
            enter(n)
            need -= n
        return join_extents(out)

    def take_in_extents(
        self, extents: list[tuple[int, int]], free_bytes: int, now: float
    ) -> list[tuple[int, int]]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes or not self._fresh(extents):
            return super().take_in_extents(extents, free_bytes, now)
        return self._take_in_runs(extents, free_bytes // unit_bytes)

    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        unit_bytes = self.view.unit_bytes
        uids = _sequence(uids)
        extents = extents_of(uids)
        if not unit_bytes or not self._fresh(extents):
            return super().take_in(uids, free_bytes, now)
        victims = self._take_in_runs(extents, free_bytes // unit_bytes)
        return list(chain.from_iterable(starmap(range, victims)))

    # -- looking -------------------------------------------------------------------------------
    def peek(self, now: float) -> int | None:
        referenced = self._referenced
        for uid in self._order.candidates():
            if uid not in referenced:
                return uid
        return self._order.min()  # every bit set: a full turn clears them, the oldest goes

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, uid: int) -> bool:
        return uid in self._order
