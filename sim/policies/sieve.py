"""SIEVE (Zhang et al., NSDI'24), as libCacheSim's Sieve.c.

Units sit in FIFO order of entry and never move. A hit sets the unit's visited bit. A hand sweeps
from the oldest unit towards the newest: a visited unit has its bit cleared and is passed over, the
first unvisited unit is the victim, and the hand stays where the victim was (the next sweep resumes
at the next newer unit). Past the newest unit the hand wraps to the oldest. New units enter at the
newest end with the bit clear, so the hand reaches them in this sweep if it has not finished it.

Implementation: ``SweepOrder``, one state byte per entry (member, candidate, visited) and the hand
as an entry number, so finding the next unvisited candidate and clearing the bits the hand passes
are C-level scans of a byte array; a session's units are found by page in a per-session list, so
a session's pins, returns and entries are slices, and a lap's victims leave with one
translation. At ``layer_block`` units, ``RunSweepOrder``: the same state bytes and hand, the
uids of the entries and the entries of each session's uids kept by run (a page's layers enter
together), where ``SweepOrder`` keeps them per unit. ``peek`` is the sweep on a copy (pure,
O(n): only tests and users peek).

Pins: a pinned unit leaves the sweep but keeps its place and its bit; on unpin it returns to its
place: ahead of the hand if the hand has not passed that place in this sweep, behind it otherwise.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import islice

import numpy as np

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import (
    _BACK,
    _MARK,
    _MARKED,
    _MEMBER,
    _PIN,
    _PIN_MARKED,
    _UNMARKED,
    SweepOrder,
    SweepStates,
)
from sim.units import UNIT_BITS, UNIT_MASK, join_extents


@register("sieve")
class Sieve(EvictionPolicy):
    reads_last_access = False
    # pins keep their entry number; evictions assign none: a batch of pages equals them one by one
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # at layer units (a page's layers consecutive uids) the queue's uids are kept by run
        layers = getattr(getattr(ctx, "view", None), "layers", 1)
        self._order: SweepOrder | RunSweepOrder = (
            RunSweepOrder(run_hint=layers) if layers > 1 else SweepOrder()
        )

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._order.enter(uid, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        self._order.enter_many(uids, candidate=not pinned)

    def access(self, uid: int, now: float) -> None:
        self._order.mark(uid)

    def visited(self, uid: int) -> bool:
        """The visited bit of a member (pinned or not)."""
        return self._order.marked(uid)

    def pin(self, uid: int) -> None:
        self._order.pin_many((uid,), mark=False)

    def unpin(self, uid: int, now: float) -> None:
        self._order.back_many((uid,))

    def acquire(self, uids, now: float) -> None:
        self._order.pin_many(uids, mark=True)  # access (the bit) then pin, each

    def release(self, uids, now: float) -> None:
        self._order.back_many(uids)

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._order.leave(uid)

    def _add(self, uid: int, now: float) -> None:
        self._order.enter(uid)

    def _discard(self, uid: int) -> None:
        self._order.leave(uid)

    def peek(self, now: float) -> int | None:
        return self._peek_by_dry_run(now)

    def evict(self, now: float) -> int | None:
        return self._order.sweep()

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_bytes(nbytes, now)
        return self._order.sweep_many(n)

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_extents(nbytes, now)
        return self._order.sweep_extents(n, increasing=self.drops_victims)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, uid: int) -> bool:
        return uid in self._order


# -- the queue with its uids kept by run (layer units) ---------------------------------------------

_PINNED_MARKED = _MEMBER | _MARK
_UNMARKED_BYTES = {True: bytes((_UNMARKED,)), False: bytes((_MEMBER,))}


class RunSweepOrder(SweepStates):
    """``SweepOrder``'s queue, hand and state bytes, with its uids kept by run, not by unit.

    At ``layer_block`` a page's units are consecutive uids that enter together (a session's
    history comes in as one range, a decode step's new pages as runs of a page's layers), so the
    uid of each entry number and the entry number of each uid are runs too. The state byte per
    entry number (``MEMBER | CAND | MARK``) stays, so the hand's scans, the marks it clears and a
    pin's or a return's change of state are the same C-level byte work as ``SweepOrder``'s; what
    ``SweepOrder`` keeps per unit besides (an 8-byte uid per entry number, a break byte, an 8-byte
    entry number per page of each session, written and read at every batch) is kept per run:

    - ``_rec_e`` / ``_rec_u``: the records, increasing first entry numbers and each one's first
      uid; entry ``e`` of record ``i`` (``_rec_e[i] <= e`` < the next one's) holds the uid
      ``_rec_u[i] + e - _rec_e[i]`` (a run that continues the last record's uids extends it);
    - ``_maps``: per session, its uids' latest entry numbers as sorted, disjoint segments
      (first uids, stop uids, the first's entry number): a run that enters overwrites its uids'
      segments, so a uid's entry is the one it had last (0 if none), and it is a member exactly
      when that entry's state is not 0, as in ``SweepOrder``.

    A batch (a range, or a list split into its runs of consecutive uids) reads or writes each of
    its runs' entry numbers a segment at a time: a Python step per segment, a C step per unit.
    Where a page is one unit the runs are short and a session's pages many segments: on the
    bench's 1,000-session block run this form was no faster than ``SweepOrder``, at session
    units slower, so SIEVE builds it only where a page has several units. The victims, marks,
    candidates and hand are ``SweepOrder``'s at every step, the entry numbers too (twin tests);
    a compaction (by ``SweepOrder``'s rule) rebuilds the records and segments from the members.
    """

    __slots__ = (
        "_state",
        "_rec_e",
        "_rec_u",
        "_maps",
        "_members",
        "_n",
        "hand",
        "ahead",
        "run_hint",
    )
    compact_slack = 4096  # entry numbers of members that left kept before a compaction may run

    def __init__(self, run_hint: int = 1) -> None:
        """``run_hint``: the length of a run a list of uids most likely holds (a page's layers)."""
        self.run_hint = run_hint
        self._state = bytearray(1)  # entry number -> MEMBER | CAND | MARK bits (entry 0: none)
        self._rec_e: list[int] = [0]  # records: first entry numbers (increasing) ...
        self._rec_u: list[int] = [-1]  # ... and their first uids
        # session -> [first uids, stop uids, entry numbers of the first uids]: sorted, disjoint
        self._maps: dict[int, tuple[list[int], list[int], list[int]]] = {}
        self._members = 0
        self._n = 0  # candidates
        self.hand = 0
        self.ahead = 0

    # -- uids as runs ----------------------------------------------------------------------------
    def _runs_of(self, uids) -> list[tuple[int, int]]:
        """``uids`` as runs (first, stop) of consecutive uids within a session, in their order
        (a uid listed twice is in two runs)."""
        if type(uids) is range:
            if uids.step != 1:
                uids = list(uids)
            elif not uids:
                return []
            else:
                a, s = uids.start, uids.stop
                if (s - 1) >> UNIT_BITS == a >> UNIT_BITS:
                    return [(a, s)]
                return [
                    (max(a, b << UNIT_BITS), min(s, (b + 1) << UNIT_BITS))
                    for b in range(a >> UNIT_BITS, ((s - 1) >> UNIT_BITS) + 1)
                ]
        elif not isinstance(uids, list):
            uids = list(uids)
        k = len(uids)
        if not k:
            return []
        first = uids[0]
        if (
            uids[-1] - first == k - 1
            and first >> UNIT_BITS == uids[-1] >> UNIT_BITS
            and (k == 1 or uids == list(range(first, first + k)))
        ):
            return [(first, first + k)]  # one run (a session's pages, listed)
        runs: list[tuple[int, int]] = []
        append, top_uid = runs.append, UNIT_MASK + 1
        i, g = 0, self.run_hint  # g: the guess of a run's length (the last one's)
        while i < k:
            a = uids[i]
            j, b = i + g, a + g
            if (  # the guess holds: the run's last uid, the one after it, one C compare
                j <= k
                and uids[j - 1] == b - 1
                and (j == k or uids[j] != b)
                and (a & UNIT_MASK) + g <= top_uid
                and uids[i:j] == list(range(a, b))
            ):
                append((a, b))
                i = j
                continue
            top = min(k - i, top_uid - (a & UNIT_MASK))  # (a run stays in its session)
            n = step = 1
            while n < top and uids[i + n] == a + n:  # by galloping steps, each one C compare
                m = n + step if n + step < top else top
                if uids[i + m - 1] - a == m - 1 and uids[i + n : i + m] == list(
                    range(a + n, a + m)
                ):
                    n = m
                    step += step
                else:
                    step = (step >> 1) or 1
            append((a, a + n))
            i += n
            g = n
        return runs

    @staticmethod
    def _distinct(runs: list[tuple[int, int]]) -> bool:
        """No two of ``runs`` share a uid."""
        if len(runs) < 2:
            return True
        spans = sorted(runs)
        return all(
            s0 <= a1 for (_, s0), (a1, _) in zip(spans, islice(spans, 1, None), strict=False)
        )

    def _pieces(self, a: int, s: int) -> list[tuple[int, int, int]]:
        """The segments of ``a .. s-1`` (one session's) that have an entry number: (first uid,
        stop uid, first entry number), in uid order; the other uids never entered."""
        m = self._maps.get(a >> UNIT_BITS)
        if m is None:
            return []
        los, his, ats = m
        i = bisect_right(his, a)
        out = []
        while i < len(los) and los[i] < s:
            lo = los[i]
            u = a if a > lo else lo
            v = his[i] if his[i] < s else s
            out.append((u, v, ats[i] + u - lo))
            i += 1
        return out

    def _entry(self, uid: int) -> int:
        """The entry number ``uid`` had last (0 if none): a member's if its state is not 0."""
        m = self._maps.get(uid >> UNIT_BITS)
        if m is None:
            return 0
        los, his, ats = m
        i = bisect_right(los, uid) - 1
        return ats[i] + uid - los[i] if i >= 0 and uid < his[i] else 0

    def _assign(self, a: int, s: int, e: int) -> None:
        """Uids ``a .. s-1`` (one session's) take the entry numbers from ``e`` on."""
        b = a >> UNIT_BITS
        m = self._maps.get(b)
        if m is None:
            self._maps[b] = ([a], [s], [e])
            return
        los, his, ats = m
        if a >= his[-1]:  # past the session's uids so far (a new page): appended
            if a == his[-1] and ats[-1] + a - los[-1] == e:
                his[-1] = s  # (and its entry numbers follow the last segment's: joined)
            else:
                los.append(a)
                his.append(s)
                ats.append(e)
            return
        i = bisect_right(his, a)  # the first segment that stops after a
        j = bisect_left(los, s)  # the first that starts at s or later
        lo, hi, at = [a], [s], [e]
        if i < j:
            if los[i] < a:  # the part of the first overlapped segment before a stays
                lo.insert(0, los[i])
                hi.insert(0, a)
                at.insert(0, ats[i])
            if his[j - 1] > s:  # ... and the part of the last after s
                lo.append(s)
                hi.append(his[j - 1])
                at.append(ats[j - 1] + s - los[j - 1])
        los[i:j], his[i:j], ats[i:j] = lo, hi, at

    def _uid_extents(self, ea: int, eb: int, out: list[tuple[int, int]]) -> None:
        """The uids of entry numbers ``ea .. eb-1`` as extents, appended to ``out``."""
        rec_e, rec_u = self._rec_e, self._rec_u
        i = bisect_right(rec_e, ea) - 1
        last = len(rec_e) - 1
        while ea < eb:
            stop = eb if i == last or rec_e[i + 1] >= eb else rec_e[i + 1]
            base = rec_u[i] - rec_e[i]
            out.append((base + ea, base + stop))
            ea = stop
            i += 1

    # -- entering --------------------------------------------------------------------------------
    def _append_runs(self, runs: list[tuple[int, int]], candidate: bool) -> int:
        """``runs`` take the next entry numbers, in order, up to the first that holds a member
        (or a uid of a run before it): returns how many entered."""
        state, rec_e, rec_u, maps = self._state, self._rec_e, self._rec_u, self._maps
        fill = _UNMARKED_BYTES[candidate]
        e = e0 = len(state)
        done = 0
        for a, s in runs:
            m = maps.get(a >> UNIT_BITS)
            if m is None:
                maps[a >> UNIT_BITS] = ([a], [s], [e])
            elif a >= m[1][-1]:  # past the session's uids so far (a new page): appended
                los, his, ats = m
                if a == his[-1] and ats[-1] + a - los[-1] == e:
                    his[-1] = s  # (its entry numbers follow the last segment's: joined)
                else:
                    los.append(a)
                    his.append(s)
                    ats.append(e)
            else:
                state += fill * (e - len(state))  # (the runs before it, in place to be read)
                if self._any_member(a, s):
                    break
                self._assign(a, s, e)
            if rec_u[-1] + e - rec_e[-1] != a:
                rec_e.append(e)
                rec_u.append(a)
            e += s - a
            done += 1
        state += fill * (e - len(state))
        k = e - e0
        self._members += k
        if candidate:
            self._n += k
            self.ahead += k
        return done

    def _any_member(self, a: int, s: int) -> bool:
        state = self._state
        for u, v, e in self._pieces(a, s):
            if state.count(0, e, e + v - u) != v - u:
                return True
        return False

    def enter(self, uid: int, candidate: bool = True) -> None:
        """``uid`` enters at the newest end, unmarked (after the hand: this sweep reaches it)."""
        self.leave(uid)
        self._make_room_for(1)
        self._append_runs([(uid, uid + 1)], candidate)

    def enter_many(self, uids, candidate: bool = True) -> None:
        """``enter`` each of ``uids``, in order: their runs take the next entry numbers, a run at
        a time, up to one that holds a member (or a uid listed before it); from there on, one
        unit at a time."""
        runs = self._runs_of(uids)
        self._make_room_for(sum(s - a for a, s in runs))  # (before: it renumbers the entries)
        done = self._append_runs(runs, candidate)
        for a, s in islice(runs, done, None):
            for uid in range(a, s):
                self.enter(uid, candidate)

    def _make_room_for(self, k: int) -> None:
        """Compact before ``k`` members enter if the members that left would then hold seven
        eighths of the entry numbers (and more than ``compact_slack``)."""
        if len(self._state) - 1 + k >= 8 * (self._members + k) + self.compact_slack:
            self._compact()

    # -- marks and pins --------------------------------------------------------------------------
    def pin_many(self, uids, mark: bool) -> None:
        """Each member of ``uids`` (marked first, if ``mark``) is no longer a candidate (as
        ``SweepOrder.pin_many``: the outcome does not depend on the members' order)."""
        runs = self._runs_of(uids)  # (a uid listed twice is pinned the first time)
        state, start = self._state, self.hand + 1
        table = _PIN_MARKED if mark else _PIN
        pinned = passed = 0
        for a, s in runs:
            for u, v, e in self._pieces(a, s):
                f = e + v - u
                before = state[e:f]
                state[e:f] = before.translate(table)
                cands = before.count(_UNMARKED) + before.count(_MARKED)
                pinned += cands
                if f > start:
                    o = start - e
                    passed += (
                        cands if o <= 0 else before.count(_UNMARKED, o) + before.count(_MARKED, o)
                    )
        self._n -= pinned
        self.ahead -= passed
        if passed and not self.ahead:
            self.hand, self.ahead = 0, self._n

    def back_many(self, uids) -> None:
        """Each pinned member is a candidate again in its old place (ahead of the hand if the hand
        has not passed it); a non-member, or a member that was no pinned one, enters anew."""
        runs = self._runs_of(uids)
        if self._distinct(runs):
            pieces = [p for a, s in runs for p in self._pieces(a, s)]
            k = sum(s - a for a, s in runs)
            state = self._state
            if sum(v - u for u, v, _ in pieces) == k and all(
                state.count(_MEMBER, e, e + v - u) + state.count(_PINNED_MARKED, e, e + v - u)
                == v - u
                for u, v, e in pieces
            ):
                start, ahead = self.hand + 1, 0
                for u, v, e in pieces:
                    f = e + v - u
                    state[e:f] = state[e:f].translate(_BACK)
                    if f > start:
                        ahead += f - max(e, start)
                self._n += k
                self.ahead += ahead
                return
        self._back_each(list(uids))

    # -- leaving ---------------------------------------------------------------------------------
    def sweep(self) -> int | None:
        got = self.sweep_many(1)
        return got[0] if got else None

    def sweep_many(self, k: int) -> list[int]:
        """``SweepOrder.sweep_many``: the victims in order."""
        out: list[int] = []
        for a, s in self._victims(k):
            out += range(a, s)
        return out

    def sweep_extents(self, k: int, increasing: bool) -> list[tuple[int, int]]:
        """``SweepOrder.sweep_extents``: the victims as extents of consecutive uids, in order or
        (``increasing``) sorted."""
        out = self._victims(k)
        return join_extents(sorted(out) if increasing else out)

    def _victims(self, k: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        got = 0
        while got < k and self._n:
            runs, n = self._lap(k - got)
            for a, b in runs:
                self._uid_extents(a, b, out)
            got += n
        return out

    def _compact(self) -> None:
        """Drop the entry numbers of members that left (state 0) and renumber the rest in order
        (the hand keeps its place among the members); the records and segments are rebuilt from
        the members' runs."""
        state = self._state
        at = np.flatnonzero(np.frombuffer(state, dtype=np.uint8))  # the members' entries
        self.hand = int(np.searchsorted(at, self.hand, side="right"))
        self._state = bytearray(1) + np.frombuffer(state, dtype=np.uint8)[at].tobytes()
        self._maps = {}
        if not len(at):
            self._rec_e, self._rec_u = [0], [-1]
            return
        rec_e = np.array(self._rec_e, dtype=np.int64)
        i = np.searchsorted(rec_e, at, side="right") - 1
        uids = np.array(self._rec_u, dtype=np.int64)[i] + (at - rec_e[i])
        cut = np.flatnonzero((uids[1:] != uids[:-1] + 1) | ((uids[1:] & UNIT_MASK) == 0)) + 1
        first = np.concatenate(([0], cut))
        stop = np.concatenate((cut, [len(uids)]))
        los = uids[first]
        self._rec_e = [0, *(first + 1).tolist()]
        self._rec_u = [-1, *los.tolist()]
        order = np.argsort(los, kind="stable")
        los_s, his_s = los[order], (los + (stop - first))[order]
        ats_s = (first + 1)[order]
        sessions = los_s >> UNIT_BITS
        bounds = [0, *(np.flatnonzero(sessions[1:] != sessions[:-1]) + 1).tolist(), len(los_s)]
        lo_l, hi_l, at_l = los_s.tolist(), his_s.tolist(), ats_s.tolist()
        for p, q in zip(bounds, bounds[1:], strict=False):
            self._maps[lo_l[p] >> UNIT_BITS] = (lo_l[p:q], hi_l[p:q], at_l[p:q])
