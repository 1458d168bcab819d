"""2Q (Johnson & Shasha, VLDB'94, full version), as libCacheSim's TwoQ.c.

Three queues sized in bytes from the capacity c: A1in, a FIFO of new units with a share
Kin = int(0.25 c); A1out, a ghost FIFO of int(0.5 c) bytes of keys evicted from A1in; Am, an LRU of
units seen again after leaving A1in.

- A miss whose key is in A1out leaves A1out and enters Am's MRU end; any other miss enters A1in.
- A hit in Am moves the unit to Am's MRU end; a hit in A1in changes nothing (correlated references).
- The victim: A1in's oldest unit while A1in holds more than Kin bytes (its key then enters A1out,
  which drops its oldest keys to make room), else Am's LRU unit.
- ``admit``: an object larger than Kin is not admitted (libCacheSim's ``can_insert``).

Difference from libCacheSim (documented, tested): libCacheSim inserts an A1out hit into Am with
Am's own LRU ``get``, which evicts Am's LRU units while Am would exceed c - Kin bytes even when the
cache as a whole has room. kvsim cannot evict during an insert (the caller owns membership), so Am
may exceed c - Kin until the next miss. With unit sizes this never happens (once A1out has a key,
A1in holds >= Kin units for good, so Am < c - Kin whenever there is room) and kvsim matches
libCacheSim request by request; with variable sizes the two agree up to the first such eviction.

An A1in unit that ``evict`` chooses leaves its key in A1out; a unit the engine ``remove``s is
forgotten. Pins: a pinned unit leaves its queue; an A1in unit returns to its place in A1in, an Am
unit to Am's MRU end. Without ``set_capacity`` (the engine) c is the high-water mark of the bytes
the tier has held.

Where every unit has one size (``view.unit_bytes``: the engine), ``TwoQ`` builds a ``RunTwoQ``:
A1in a ``RunOrder``, Am and its pinned units ``RunList``s, A1out a ``GhostRuns``, so a session's
pages entering, pinned, released or evicted together cost O(runs), not O(pages); the decisions are the same, call
for call. Elsewhere (``kvsim cachesim``, variable sizes) A1in is a ``SizedOrder``, Am an ordered
dict and A1out a ``GhostFIFO``: O(1) per unit.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import chain, compress, filterfalse, starmap

from sim.policies.base import EvictionPolicy
from sim.policies.ghost_runs import GhostRuns
from sim.policies.registry import register
from sim.policies.run_lists import (
    RunList,
    StretchTakeIn,
    increasing_runs,
    runs_less,
    split_at_sessions,
)
from sim.policies.run_order import RunOrder
from sim.policies.short_runs import distinct_short_runs, split_short
from sim.policies.structures import ByteBudget, GhostFIFO, SizedOrder, consume
from sim.units import UNIT_BITS, extents_of, join_extents

A1IN, AM = 0, 1


@register("twoq")
class TwoQ(EvictionPolicy):
    a_in_size_ratio = 0.25
    a_out_size_ratio = 0.5
    reads_last_access = False
    # A pinned insert changes no victim: A1in's byte count is its candidates', it joins A1in's
    # newest end, which evictions never append to, and a new decode page cannot be in A1out (see
    # ARC's note); the capacity is fixed (the engine sets it).
    grows_in_bulk = True

    def __new__(cls, ctx=None, *args, **kwargs):
        # Where every unit has one size (the engine), the queues are kept as runs (``RunTwoQ``).
        if cls is TwoQ and getattr(getattr(ctx, "view", None), "unit_bytes", None):
            cls = RunTwoQ
        return super().__new__(cls)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._ain = SizedOrder()  # a pinned unit keeps its place
        self._am: OrderedDict[int, None] = OrderedDict()  # uid, LRU first
        self._am_bytes = 0
        self._aout = GhostFIFO()
        self._size: dict[int, int] = {}
        self._pinned: dict[int, int] = {}  # uid -> its queue
        self._budget = ByteBudget()
        self._incoming: tuple[int, bool] | None = None

    # -- sizes and the incoming request ----------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        self._budget.set(capacity)

    def _sizes(self) -> tuple[int, int]:
        c = self._budget.c
        return int(c * self.a_in_size_ratio), int(c * self.a_out_size_ratio)

    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self._aout.take(uid) is not None)

    def admit(self, uid: int) -> bool:
        return self.view.size(uid) <= self._sizes()[0]

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        if uid in self._size:  # (a member inserted again enters anew)
            self.remove(uid)
        size = self.view.size(uid)
        inc = self._incoming
        hit = inc[1] if inc is not None and inc[0] == uid else self._aout.take(uid) is not None
        self._incoming = None
        self._size[uid] = size
        self._budget.grow(size)
        q = AM if hit else A1IN
        if pinned:
            self._pinned[uid] = q
        if q == AM:
            if not pinned:
                self._am[uid] = None
                self._am_bytes += size
        else:
            self._ain.enter(uid, size, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order; in C when all have one size and none is a member or in
        A1out (then each enters A1in)."""
        uids = list(uids)
        unit = self.view.unit_bytes
        members = not self._size.keys().isdisjoint(uids) or len(set(uids)) < len(uids)
        if not unit or members or self._aout.holds_any(uids) or self._incoming is not None:
            super().insert_many(uids, now, pinned)
            return
        self._size.update(dict.fromkeys(uids, unit))
        self._budget.grow(unit * len(uids))
        if pinned:
            self._pinned.update(dict.fromkeys(uids, A1IN))
        self._ain.enter_many(uids, unit, candidate=not pinned)

    def access(self, uid: int, now: float) -> None:
        self._incoming = None
        if uid in self._am:
            self._am.move_to_end(uid)

    def pin(self, uid: int) -> None:
        if uid in self._am:
            del self._am[uid]
            self._am_bytes -= self._size[uid]
            self._pinned[uid] = AM
        elif self._ain.discard(uid):
            self._pinned[uid] = A1IN

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each: set operations and C-level maps (no order to keep)."""
        self._incoming = None
        uids = list(uids)
        am = self._am
        in_am = am.keys() & uids
        consume(map(am.__delitem__, in_am))
        self._am_bytes -= sum(map(self._size.__getitem__, in_am))
        self._pinned.update(dict.fromkeys(in_am, AM))
        was = self._ain.discard_many(filterfalse(in_am.__contains__, uids))
        self._pinned.update(dict.fromkeys(was, A1IN))

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order."""
        uids = list(uids)
        if not self.view.unit_bytes:
            super().release(uids, now)  # one at a time: a unit may have grown while pinned
            return
        queue = list(map(self._pinned.get, uids))
        to_am = list(compress(uids, map(AM.__eq__, queue)))
        to_ain = list(compress(uids, map(A1IN.__eq__, queue)))
        entries = self._ain.pinned_entries(to_ain)
        distinct = len(set(uids)) == len(uids)
        if not distinct or None in queue or entries is None:
            super().release(uids, now)  # one at a time: some enter anew
            return
        # Equal sizes, every unit pinned here once: Am takes its units at its MRU end in page
        # order, A1in's return to their places.
        consume(map(self._pinned.__delitem__, uids))
        self._am.update(dict.fromkeys(to_am))
        self._am_bytes += sum(map(self._size.__getitem__, to_am))
        self._ain.back_entries(to_ain, entries)

    def unpin(self, uid: int, now: float) -> None:
        q = self._pinned.pop(uid, None)
        if q is None:
            self.insert(uid, now)
            return
        size = self.view.size(uid)  # a pinned unit may have grown
        self._budget.grow(size - self._size[uid])
        self._size[uid] = size
        if q == AM:
            self._am[uid] = None
            self._am_bytes += size
        else:
            self._ain.back(uid, size)

    def remove(self, uid: int, pinned: bool = False) -> None:
        size = self._size.pop(uid, None)
        if size is None:
            return
        self._budget.shrink(size)
        self._pinned.pop(uid, None)
        if uid in self._am:
            del self._am[uid]
            self._am_bytes -= size
            return
        self._ain.leave(uid)

    def _evicted(self, uid: int) -> None:
        from_ain = uid in self._ain
        size = self._size[uid]
        self.remove(uid)
        if from_ain:
            self._aout.put(uid, size, self._sizes()[1])

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """``evict`` until ``nbytes`` are freed. Where every unit has one size and no request is
        incoming (the engine's case), in three runs, the order ``peek`` gives (Kin does not change
        while evicting): A1in's oldest while it holds more than Kin bytes, then Am's LRU, then,
        once Am is empty, A1in's oldest again; A1in's victims enter A1out in that order."""
        unit = self.view.unit_bytes
        if not unit or self._incoming is not None:
            return super().evict_bytes(nbytes, now)
        n = -(-nbytes // unit)
        if n <= 0:
            return []
        ain, am = self._ain, self._am
        kin, kout = self._sizes()
        over = -(-(ain.nbytes - kin) // unit) if ain.nbytes > kin else 0
        out = ain.pop_many(min(n, over))
        from_ain = out[:]
        if len(out) < n and am:
            take = min(n - len(out), len(am))
            out += [am.popitem(last=False)[0] for _ in range(take)]
            self._am_bytes -= take * unit
        if len(out) < n and not am:
            more = ain.pop_many(n - len(out))
            out += more
            from_ain += more
        consume(map(self._size.__delitem__, out))
        self._budget.shrink(unit * len(out))
        self._aout.put_many(from_ain, unit, kout)  # A1out keeps its newest kout bytes
        return out

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    def peek(self, now: float) -> int | None:
        kin = self._sizes()[0]
        if self._ain.nbytes > kin or not self._am:
            uid = self._ain.oldest()
            if uid is not None:
                return uid
        return next(iter(self._am), None)

    def __len__(self) -> int:
        return len(self._ain) + len(self._am)

    def __contains__(self, uid: int) -> bool:
        return uid in self._am or uid in self._ain


class RunTwoQ(StretchTakeIn, TwoQ):
    """2Q where every unit has one size (``view.unit_bytes``): A1in is a ``RunOrder`` (entry
    order; a pinned unit keeps its place), Am a ``RunList`` (LRU first), its pinned units another
    (order unused), and A1out a ``GhostRuns`` holding at most ``kout // unit`` keys, so a
    session's pages moving together cost O(runs); the sizes are counts times the unit. ``TwoQ``
    builds one of these whenever its view has a unit size; the decisions are TwoQ's, unit for
    unit. A member is never a ghost (entering takes its key out of A1out), so a victim's key
    always enters A1out."""

    _ain: RunOrder  # type: ignore[assignment]
    _am: RunList  # type: ignore[assignment]
    _aout: GhostRuns  # type: ignore[assignment]

    def __init__(self, ctx) -> None:
        EvictionPolicy.__init__(self, ctx)
        self._unit: int = ctx.view.unit_bytes
        self._ain = RunOrder()  # candidates and pinned units, in entry order
        self._am = RunList()  # LRU first
        self._hm = RunList()  # pinned, returning to Am's MRU end (order unused)
        self._aout = GhostRuns()  # ghosts, oldest first
        self._budget = ByteBudget()
        self._incoming = None

    # -- the incoming request --------------------------------------------------------------------
    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self._aout.discard(uid))

    def admit(self, uid: int) -> bool:
        return self._unit <= self._sizes()[0]

    # -- membership ------------------------------------------------------------------------------
    def _is_member(self, uid: int) -> bool:
        return uid in self._am or uid in self._hm or self._ain.is_member(uid)

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        if self._is_member(uid):  # (a member inserted again enters anew)
            self.remove(uid)
        inc = self._incoming
        hit = inc[1] if inc is not None and inc[0] == uid else self._aout.discard(uid)
        self._incoming = None
        self._budget.grow(self._unit)
        if hit:
            (self._hm if pinned else self._am).push(uid)
        else:
            self._ain.enter(uid, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order, as runs (a batch may list sessions in any order) when none
        is a member: ghosts leave A1out by run and join Am, the rest join A1in, each queue taking
        its units in the batch's order."""
        ain, aout, am, hm = self._ain, self._aout, self._am, self._hm
        if len(uids) == 1 and self._incoming is None:  # a decode step's page: no runs to find
            u = int(uids[0])
            s = u + 1
            if not (ain.may_hold(u, s) or am.meets(u, s) or hm.meets(u, s) or aout.meets(u, s)):
                ain.enter_runs(((u, s),), not pinned)
                self._budget.grow(self._unit)
                return
        runs = distinct_short_runs(uids) if self._incoming is None else None
        if runs is None:
            EvictionPolicy.insert_many(self, uids, now, pinned)
            return
        sessions = split_short(uids, runs)
        buckets = {a >> UNIT_BITS for a, _ in sessions}
        # (a dict view's isdisjoint walks the smaller side; a set's walks its argument)
        seen = not (am.buckets().isdisjoint(buckets) and hm.buckets().isdisjoint(buckets))
        if ain.may_hold_any(sessions) or (
            seen and any(am.meets(a, s) or hm.meets(a, s) for a, s in sessions)
        ):
            EvictionPolicy.insert_many(self, uids, now, pinned)  # a member enters again
            return
        candidate = not pinned
        if aout.buckets().isdisjoint(buckets):  # the common case: no ghost among them
            ain.enter_runs(sessions, candidate)  # (in the batch's order)
            self._budget.grow(self._unit * len(uids))  # (distinct: runs were found)
            return
        # (the pinned set's order is unused: a run there joins the one it continues)
        seen_before = hm.add_runs if pinned else am.push_runs
        count = 0
        to_ain: list[tuple[int, int]] = []  # (A1in and Am are apart: A1in's runs enter at once)
        for a, s in sessions:
            count += s - a
            if aout.meets(a, s):
                ghosts = aout.take_range(a, s)
                seen_before(ghosts)
                to_ain += runs_less([(a, s)], ghosts)
            else:
                to_ain.append((a, s))
        ain.enter_runs(to_ain, candidate)
        self._budget.grow(self._unit * count)

    def access(self, uid: int, now: float) -> None:
        self._incoming = None
        if self._am.discard(uid):
            self._am.push(uid)

    def pin(self, uid: int) -> None:
        if self._am.discard(uid):
            self._hm.push(uid)
        else:
            self._ain.discard(uid)

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each: Am's members leave it for the pinned set, A1in's stay in
        their places, pinned."""
        self._incoming = None
        runs = increasing_runs(uids)
        if runs is None:
            EvictionPolicy.acquire(self, uids, now)
            return
        in_am: list[tuple[int, int]] = []
        for a, s in split_at_sessions(runs):
            in_am += self._am.take_range(a, s)
        self._hm.add_runs(join_extents(sorted(in_am)))
        rest = runs_less(runs, join_extents(sorted(in_am))) if in_am else runs
        self._ain.discard_all(_uids_of(rest))

    def unpin(self, uid: int, now: float) -> None:
        if self._hm.discard(uid):
            self._am.push(uid)
        elif self._ain.is_member(uid) and uid not in self._ain:
            self._ain.back(uid)
        else:
            self.insert(uid, now)

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order: Am takes its units at its MRU end in page order, A1in's
        return to their places; one at a time unless every unit is pinned here."""
        runs = increasing_runs(uids)
        if runs is None:
            EvictionPolicy.release(self, uids, now)
            return
        to_am: list[tuple[int, int]] = []
        sessions = split_at_sessions(runs)
        if not self._hm.buckets().isdisjoint({a >> UNIT_BITS for a, _ in sessions}):
            for a, s in sessions:
                to_am += self._hm.take_range(a, s)
            to_am = join_extents(sorted(to_am))
        rest = _uids_of(runs_less(runs, to_am) if to_am else runs)
        if self._ain.back_whole(rest):  # the usual batch: A1in's members of a session, pinned
            self._am.push_runs(to_am)
            return
        if not self._all_pinned_in_ain(rest):
            self._hm.add_runs(to_am)  # back as they were (the pinned set's order is unused)
            EvictionPolicy.release(self, uids, now)
            return
        self._am.push_runs(to_am)
        self._ain.back_many(rest)

    def _all_pinned_in_ain(self, uids: list[int]) -> bool:
        """Is each of ``uids`` a pinned member of A1in? (Pins any that were candidates, then
        puts them back: the state is as it was.)"""
        if len(self._ain.members_among(uids)) != len(uids):
            return False
        were = self._ain.discard_many(uids)
        if were:
            self._ain.back_many(were)
        return not were

    def remove(self, uid: int, pinned: bool = False) -> None:
        if self._am.discard(uid) or self._hm.discard(uid):
            self._budget.shrink(self._unit)
        elif self._ain.is_member(uid):
            self._ain.leave(uid)
            self._budget.shrink(self._unit)

    def remove_many(self, uids, pinned: bool = False) -> None:
        if not len(uids):  # (the memory tells the CPU tier's policy of empty batches too)
            return
        runs = increasing_runs(uids)
        if runs is None:
            EvictionPolicy.remove_many(self, uids, pinned)
            return
        gone: list[tuple[int, int]] = []
        for a, s in split_at_sessions(runs):
            gone += self._am.take_range(a, s) + self._hm.take_range(a, s)
        gone = join_extents(sorted(gone))
        rest = self._ain.members_among(_uids_of(runs_less(runs, gone) if gone else runs))
        self._ain.leave_many(rest)
        self._budget.shrink(self._unit * (sum(s - a for a, s in gone) + len(rest)))

    # -- eviction --------------------------------------------------------------------------------
    def _remember(self, runs: list[tuple[int, int]]) -> None:
        """A1in's victims enter A1out, which keeps its newest ``kout`` bytes (``GhostFIFO.put``:
        trimming after the last forgets the same oldest keys as before each)."""
        kout = int(self._budget.c * self.a_out_size_ratio)  # (``_sizes``)
        if runs and self._unit <= kout:
            self._aout.push_runs(runs, kout // self._unit)

    def peek(self, now: float) -> int | None:
        if len(self._ain) * self._unit > self._sizes()[0] or not self._am:
            uid = self._ain.min()
            if uid is not None:
                return uid
        return self._am.first()

    def evict(self, now: float) -> int | None:
        if self._incoming is not None:
            return super().evict(now)
        runs = self._evict_runs(1)
        return runs[0][0] if runs else None

    def _evicted(self, uid: int) -> None:
        from_ain = uid in self._ain
        self.remove(uid)
        if from_ain:
            self._remember([(uid, uid + 1)])

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        if self._incoming is not None:
            return EvictionPolicy.evict_bytes(self, nbytes, now)
        return list(chain.from_iterable(starmap(range, self._evict_runs(-(-nbytes // self._unit)))))

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        if self._incoming is not None:
            return EvictionPolicy.evict_extents(self, nbytes, now)
        runs = self._evict_runs(-(-nbytes // self._unit))  # (joined)
        return join_extents(sorted(runs)) if self.drops_victims else runs

    def _evict_runs(self, n: int) -> list[tuple[int, int]]:
        """``n`` victims as runs in eviction order, in three stretches (``TwoQ.evict_bytes``):
        A1in's oldest while it holds more than Kin bytes, then Am's LRU, then, once Am is empty,
        A1in's oldest again; A1in's victims enter A1out in that order."""
        if n <= 0:
            return []
        u, ain, am = self._unit, self._ain, self._am
        kin = int(self._budget.c * self.a_in_size_ratio)
        held = len(ain) * u
        over = -(-(held - kin) // u) if held > kin else 0
        if over >= n:  # the common case: A1in gives all (it holds over >= n candidates)
            out = ain.pop_runs(n)
            self._budget.shrink(u * n)
            self._remember(out)
            return out
        out = ain.pop_runs(over)
        from_ain = out[:]
        got = sum(s - a for a, s in out)
        if got < n and am:
            take = am.pop_runs(min(n - got, len(am)))
            out += take
            got += sum(s - a for a, s in take)
        if got < n and not am:
            more = ain.pop_runs(n - got)
            out += more
            from_ain += more
            got += sum(s - a for a, s in more)
        self._budget.shrink(u * got)
        self._remember(join_extents(from_ain))
        return join_extents(out)

    # -- a demotion batch ------------------------------------------------------------------------
    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        if self._incoming is not None or free_bytes < 0:
            return EvictionPolicy.take_in(self, uids, free_bytes, now)
        return list(
            chain.from_iterable(
                starmap(range, self._take_in_runs(extents_of(uids), free_bytes, now))
            )
        )

    def take_in_extents(
        self, extents: list[tuple[int, int]], free_bytes: int, now: float
    ) -> list[tuple[int, int]]:
        if self._incoming is not None or free_bytes < 0:
            return EvictionPolicy.take_in_extents(self, extents, free_bytes, now)
        return join_extents(self._take_in_runs(extents, free_bytes, now))

    def _stretch_end(self, a: int, s: int) -> int:
        """Where the stretch of ``[a, s)`` that ``_evict_then_insert`` may take ends (``a``: none):
        A1in gives each victim (it holds a candidate and more than Kin bytes, or Am is empty) and
        none of the stretch's uids is a ghost or a member."""
        ain = self._ain
        if not len(ain) or (len(ain) * self._unit <= self._sizes()[0] and self._am):
            return a
        end = s
        for b, e in split_at_sessions([(a, s)]):
            g = self._aout.first_in(b, e)
            if g is not None:
                end = min(end, g)
            if self._am.count_in(b, e) or self._hm.count_in(b, e):
                return a
            if ain.may_hold(b, e) and ain.members_among(range(b, e)):
                return a
            if end < e:
                break
        return end

    def _evict_then_insert(self, a: int, s: int) -> list[tuple[int, int]]:
        """``evict`` then ``insert`` for each of ``a .. s-1`` where A1in gives every victim
        (``_stretch_end``): A1in is then a queue that takes as many as it gives, so entering all
        then taking as many oldest is the alternation; the victims' keys enter A1out."""
        k = s - a
        self._ain.enter_many(range(a, s))
        victims = join_extents(self._ain.pop_runs(k))
        self._remember(victims)  # each victim leaves before its unit comes: the bytes held stay
        return victims

    def __len__(self) -> int:
        return len(self._ain) + len(self._am)

    def __contains__(self, uid: int) -> bool:
        return uid in self._am or uid in self._ain


def _uids_of(runs: list[tuple[int, int]]):
    """The uids of increasing ``runs``: a range where they are one run (``RunOrder`` checks a
    range against a session's runs without listing it), else a list."""
    if len(runs) == 1:
        return range(*runs[0])
    return list(chain.from_iterable(starmap(range, runs)))
