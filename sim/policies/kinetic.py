"""A kinetic tournament: the exact minimum of time-varying values cost / (time difference).

``KineticMin`` holds candidates (uids), each with a cost and a time ``tau``, and gives the minimum
at any ``now`` under one of two orders:

``SINCE`` (Pensieve's retention value)
    value = cost / (now - tau), tau <= now (value +inf at an idle time of 0); ties by lower cost,
    then older tau, then lower uid.
``UNTIL`` (cost-belady's value)
    value = cost / (tau - now); tau = inf: value 0 (never used again); tau <= now: value +inf (its
    turn has arrived); ties by lower cost, then later tau, then lower uid.

Order is exact: u goes before v iff cost_u * d_v < cost_v * d_u in exact arithmetic on the float
inputs. Comparisons use a float filter with a proven error bound and fall back to exact rational
arithmetic (``fractions``) when it cannot decide (``certified_less``); crossing times are rounded
down (conservative), so an early wake-up only costs a re-check.

Complexity. The values are time-dependent, so no static heap works. Candidates sharing ``tau`` (all
units of a session are released together; sessions completing in the same iteration too) form a
group whose internal order is static (by cost, then uid: a sorted list read from the front, whose
members leave by position, not by a per-member dict); the groups' minima are the leaves of a
kinetic tournament (Basch-Guibas-Hershberger): each internal node holds the winner of
its two children and the time at which that comparison can next flip (two values m_1/(t - a_1),
m_2/(t - a_2) cross at most once, at t* = (m_1 a_2 - m_2 a_1)/(m_1 - m_2)), and the minimum of those
times over its subtree. ``peek(now)`` re-evaluates exactly the nodes whose certificate expired by
``now`` (bottom-up), so it is exact at every call; that catch-up changes no decision. Updates are
O(log n) (a group's queue plus one leaf-to-root path, evaluated lazily: a changed leaf's path
waits for the next read of the tree, so changes in a row pay for a shared path once); a query
costs O(1 + E log n) for the E
certificates that expired since the previous query, and never more than one evaluation per node
(O(G) for G groups: the catch-up after a long stretch without evictions). Kinetic tournaments over
lines process O(log n) amortised events per update (Basch-Guibas-Hershberger; Agarwal et al. with
insertions and deletions); measured with 100,000 units: a mean of ~3 node evaluations per decision
(``sim/policies/_bench_kv.py``). The clock of one instance must not run backwards (``peek`` raises
if it does). Many minima at one time (``pop_many``, an eviction of many units) need no tournament:
at a fixed time each group's order is a static list, so they are a merge of the groups' heads,
keyed by their float values in a C heap, with heads a rounding apart decided exactly; such a merge
reads the groups only, and leaves the tree's paths to wait. For many victims (a layer_block
eviction takes a page's layers, hundreds of units) the merge is a numpy sort of the float values
of each group's first entries, taken as it stands where no values of different groups are within
the rounding bound of each other where it matters, else left to the heap's exact merge; a group
whose next entries win at once is taken as a run.

``KineticPolicy`` is the eviction-policy shell over a ``KineticMin``: subclasses give each candidate
a cost and a time.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from fractions import Fraction
from itertools import chain, compress, repeat, starmap
from operator import attrgetter, not_

import numpy as np

from sim.policies.base import EvictionPolicy
from sim.policies.kinetic_where import GroupsByRuns, GroupsBySession, GroupsByUid
from sim.policies.structures import consume
from sim.units import UNIT_BITS, UnitView, extents_of, join_extents

INF = math.inf
_REL = 4e-16  # > 2u(1 + u): relative error of fl(m * fl(t - tau)) (u = 2^-53), with slack
_TINY = 1e-280  # below this the float filter is not trusted (subnormal products)
_CROSS_REL = 1e-15  # margin on a float crossing time (true error < 4u of the same terms)
_MERGE_REL = 1e-15  # float values further apart than this (relative) are in their exact order
_SORT_MIN = 8  # pop_many sorts the groups' values in numpy from this many victims
_SORT_MAX = 1 << 18  # ... while it reads at most this many entries (groups * prefix)
_ARRAY_MIN = 16  # a batch of this many entries onto an empty group is sorted in numpy
_WINDOW = 64  # a group's first entries read as arrays at least this many at once
_STALE_SLACK = 64  # a group keeps up to its size plus this many entries of members that left
_slot = attrgetter("slot")
_queue = attrgetter("heap")
_has_members = _queue  # a group's queue is true while it has members
# victims in uid order: disjoint [lo, hi) spans sorted, or uids as a sorted int64 array
_Ascending = list[tuple[int, int]] | np.ndarray


def _uids_of(ascending: _Ascending) -> list[int]:
    """The uids of victims in uid order, as a list."""
    if isinstance(ascending, np.ndarray):
        return ascending.tolist()
    return list(chain.from_iterable(starmap(range, ascending)))


_INT64 = range(-(1 << 63), 1 << 63)


def _int_array(uids: list[int] | range) -> np.ndarray:
    """``np.array(uids)``; a range of int64 values made by ``arange`` (not read int by int)."""
    if type(uids) is range and uids and uids.start in _INT64 and uids.stop in _INT64:
        return np.arange(uids.start, uids.stop, uids.step, dtype=np.int64)
    return np.array(uids)


class _GroupQueue:
    """A group's static order: its members' (cost, uid) entries, sorted by (cost, uid) from a read
    position on, in two parallel lists. Liveness is by position: the entries before ``_pos`` are
    gone (taken from the front, the usual way out), and a member that leaves from the middle
    (``discard``) is named in ``_gone`` until the read position passes its entry; so taking the
    minima touches no per-member dict. From ``_pos`` on a uid has at most one entry (one that
    comes back while its old entry waits there has that entry taken out first). The tournament's
    ``_where`` says which group holds a uid: a group is told only of its own live members.

    A batch onto nothing (a session's units: the usual group) is sorted in numpy, and the arrays
    are kept (``_costs``, ``_uid_arr``, entry for entry with the lists from ``_base`` on) so that
    ``pop_many``'s sort reads a group's costs as a slice; a group without them gets them for its
    first entries when the sort first reads it (a group is read by many sorts while it lasts);
    a batch onto a group with arrays to its end is merged with them in numpy (at layer units a
    group grows by thousands of units a batch); any other change to the lists drops them.

    A queue whose live entries are consecutive uids in order, none gone (``consecutive``: a
    whole session's pages released as a range, their costs rising with the page, the usual group
    at block units) gives up a prefix as a span [lo, hi) (``take_span``): a merge takes a run
    from it and tells the uid map one run, without listing the uids."""

    __slots__ = (
        "_base",
        "consecutive",
        "_costs",
        "_gone",
        "_index",
        "_keys",
        "_n",
        "_pos",
        "_uid_arr",
        "_uids",
    )

    def __init__(self) -> None:
        self._keys: list = []  # costs, entry for entry with _uids; sorted from _pos on
        self._uids: list[int] = []
        self._pos = 0
        self._n = 0  # live members: the entries from _pos on less those in _gone
        self._gone: set[int] = set()
        self._costs: np.ndarray | None = None
        self._uid_arr: np.ndarray | None = None
        self._base = 0  # the list index of the arrays' first entry
        self._index: dict[int, float] | None = None  # uid -> key from _pos on: built on demand
        # the live entries are uids[pos], uids[pos] + 1, ... in order, none gone: set where a
        # range enters in order onto nothing, kept by taking prefixes, dropped by any other change
        self.consecutive = False

    def __len__(self) -> int:
        return self._n

    def _set_sorted(self, entries: list[tuple]) -> None:
        """The live entries are these (key, uid), sorted, one per uid."""
        self._keys = [k for k, _ in entries]
        self._uids = [u for _, u in entries]
        self._pos, self._n, self._gone = 0, len(entries), set()
        self._costs = self._uid_arr = self._index = None
        self._base = 0
        self.consecutive = False

    def _live_entries(self) -> list[tuple]:
        """The live (key, uid) entries, in order."""
        pos, gone = self._pos, self._gone
        entries = zip(self._keys[pos:], self._uids[pos:], strict=True)
        return [e for e in entries if e[1] not in gone] if gone else list(entries)

    def _left(self, count: int) -> None:
        """``count`` live members left; nothing live: the lists start afresh."""
        self._n -= count
        if not self._n:
            self._set_sorted([])

    def push(self, uid: int, key) -> None:
        """A uid that is not live here enters with its key."""
        keys, uids = self._keys, self._uids
        if uid in self._gone:  # its old entry waits ahead of the read position: take it out
            i = self._find(uid)
            del keys[i], uids[i]
            self._gone.remove(uid)
        i = self._place(key, uid)
        keys.insert(i, key)
        uids.insert(i, uid)
        self._n += 1
        self._costs = self._uid_arr = None
        self.consecutive = False
        if self._index is not None:
            self._index[uid] = key

    def _place(self, key, uid: int) -> int:
        """Where (key, uid) goes among the sorted entries from the read position on."""
        keys = self._keys
        lo = bisect_left(keys, key, self._pos)
        return bisect_left(self._uids, uid, lo, bisect_right(keys, key, lo))  # equal keys: by uid

    def _find(self, uid: int) -> int:
        """The place of uid's entry from the read position on (it has one)."""
        index, uids = self._index, self._uids
        if index is not None:  # its key, where it entered: a search by (key, uid)
            i = self._place(index[uid], uid)
            if i < len(uids) and uids[i] == uid:
                return i
        return uids.index(uid, self._pos)

    def push_batch(
        self, uids: list[int] | range, costs: list | np.ndarray, distinct: bool = False
    ) -> None:
        """``push`` each (uid, cost) (a repeated uid enters with its last cost; ``distinct``: the
        caller knows there is none). Onto nothing, with float costs, one numpy sort by
        (cost, uid), the order ``sorted`` gives those tuples; costs given as a float64 array
        are sorted as they are (also with the live entries, where their arrays run to the end:
        ``_merge_arrays``)."""
        given = isinstance(costs, np.ndarray) and costs.dtype == np.float64
        if (
            self._n
            and isinstance(costs, np.ndarray)
            and given
            and distinct
            and len(uids) >= _ARRAY_MIN
            and self._merge_arrays(costs, uids)
        ):
            return
        if isinstance(costs, np.ndarray) and not (
            given and distinct and not self._n and len(uids) >= _ARRAY_MIN
        ):
            costs, given = costs.tolist(), False
        if not distinct:
            fresh: dict[int, object] = dict(zip(uids, costs, strict=True))
            if len(fresh) < len(uids):
                uids, costs = list(fresh), list(fresh.values())
        if self._n or len(uids) < _ARRAY_MIN:
            self._set_sorted(sorted(self._live_entries() + list(zip(costs, uids, strict=True))))
            return
        cost, uid = np.asarray(costs), _int_array(uids)
        if uid.dtype != np.int64 or not (
            given
            or cost.dtype == np.float64
            and all(map(float.__instancecheck__, costs))  # no int converted by numpy
        ):
            keys = cost.tolist() if given else costs
            self._set_sorted(sorted(zip(keys, uids, strict=True)))
            return
        in_order = type(uids) is range and uids.step == 1 and (cost[1:] >= cost[:-1]).all()
        if not in_order:
            order = np.lexsort((uid, cost))
            cost, uid = cost[order], uid[order]
        elif given:  # ascending uids, costs not falling (a session's pages, mostly): in order
            cost = cost.copy()  # (the caller's array is not kept: it may change it)
        self._set_sorted([])
        self._keys, self._uids, self._n = cost.tolist(), uid.tolist(), len(uids)
        self._costs, self._uid_arr, self._base = cost, uid, 0
        self.consecutive = bool(in_order)

    def _merge_arrays(self, costs: np.ndarray, uids: list[int] | range) -> bool:
        """A batch (float64 costs, distinct uids, none a member) onto live entries whose arrays
        run to the lists' end (a large group that grows by a session's units): one numpy sort
        of both, the order ``sorted`` gives; else False."""
        have_costs, have_uids, base, pos = self._costs, self._uid_arr, self._base, self._pos
        if (
            have_costs is None
            or have_uids is None
            or have_costs.dtype != np.float64
            or base + len(have_uids) != len(self._uids)
            or not all(map(float.__instancecheck__, self._keys[pos:]))  # (no int made a float)
        ):
            return False
        uid = _int_array(uids)
        if uid.dtype != np.int64:
            return False
        have_costs, have_uids = have_costs[pos - base :], have_uids[pos - base :]
        if self._gone:  # the entries of members that left go
            gone = self._gone.__contains__
            live = np.fromiter(map(not_, map(gone, self._uids[pos:])), bool, len(have_uids))
            have_costs, have_uids = have_costs[live], have_uids[live]
        cost = np.concatenate([have_costs, costs])
        uid = np.concatenate([have_uids, uid])
        order = np.lexsort((uid, cost))
        cost, uid = cost[order], uid[order]
        n = len(uid)
        self._set_sorted([])
        self._keys, self._uids, self._n = cost.tolist(), uid.tolist(), n
        self._costs, self._uid_arr = cost, uid
        return True

    def head(self) -> tuple | None:
        """The first live (key, uid), or None."""
        if not self._n:
            return None
        pos = self._skip_gone()
        return self._keys[pos], self._uids[pos]

    def _skip_gone(self) -> int:
        """Step the head past members that left; the position of the first live entry (there is
        one)."""
        uids, pos, gone = self._uids, self._pos, self._gone
        while gone and uids[pos] in gone:
            gone.remove(uids[pos])
            if self._index is not None:  # (a member that left: the index forgets it)
                self._index.pop(uids[pos], None)
            pos += 1
        self._pos = pos
        return pos

    def key(self, uid: int):
        """The key of a live member."""
        if self._index is None:  # the key of each entry from _pos on; ``push`` keeps it so
            pos = self._pos
            self._index = dict(zip(self._uids[pos:], self._keys[pos:], strict=True))
        return self._index[uid]

    def discard(self, uid: int) -> None:
        """A live member leaves."""
        self._gone.add(uid)
        self.consecutive = False
        self._after_gone(1)

    def discard_many(self, uids: list[int]) -> None:
        """Live members, each once, leave."""
        self._gone.update(uids)
        self.consecutive = False
        self._after_gone(len(uids))

    def _after_gone(self, count: int) -> None:
        self._left(count)
        # mostly stale entries: memory follows the members
        if len(self._gone) > 2 * self._n + _STALE_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Keep only the live entries, in order: a filter in C (members leave a page at a time
        from the middle of a large group, so this runs often). The live keys stay as they were,
        so the index and the arrays stay valid, filtered alike (the index may name members that
        left, which ``key`` is never asked about, while it is not much larger than the group)."""
        pos, gone = self._pos, self._gone
        uids = self._uids[pos:]
        live = list(map(not_, map(gone.__contains__, uids)))
        self._uids = list(compress(uids, live))
        self._keys = list(compress(self._keys[pos:], live))
        self._pos, self._gone = 0, set()
        costs, members, base = self._costs, self._uid_arr, self._base
        if costs is not None and members is not None and base + len(members) == pos + len(uids):
            # arrays to the lists' end: filtered alike (else dropped: a window is rebuilt)
            mask = np.array(live, dtype=bool)
            self._costs, self._uid_arr = costs[pos - base :][mask], members[pos - base :][mask]
        else:
            self._costs = self._uid_arr = None
        self._base = 0
        index = self._index
        if index is not None:  # members that left are not live (one that came back left _gone)
            consume(map(index.pop, gone, repeat(None)))
            if len(index) > 2 * self._n + _STALE_SLACK:
                self._index = None

    def take_run(
        self, scale: tuple[float | None, float], bound: float | None, need: int, out: list[int]
    ) -> None:
        """Take out the minimum, then up to ``need - 1`` more in order while each one's merge
        value v (cost / d, or the constant where d is None: ``scale``) is certainly below
        ``bound``: max(v (1 + rel), tiny) < bound, the merge's test for taking a head without an
        exact comparison (``bound`` None: nothing else left, no test); append them to ``out``."""
        keys, uids, gone, pos = self._keys, self._uids, self._gone, self._pos
        d, const = scale
        end = len(uids)
        taken = 0
        while pos < end and taken < need:
            uid = uids[pos]
            if gone and uid in gone:
                gone.remove(uid)
                if self._index is not None:  # (a member that left: the index forgets it)
                    self._index.pop(uid, None)
                pos += 1
                continue
            if taken and bound is not None:
                lim = max((const if d is None else keys[pos] / d) * (1.0 + _MERGE_REL), _TINY)
                if bound <= lim:
                    break
            out.append(uid)
            taken += 1
            pos += 1
        self._pos = pos
        self._left(taken)

    def take_head(self) -> int:
        """Take out the minimum (there is one): ``take_run`` of one entry."""
        pos = self._skip_gone()
        uid = self._uids[pos]  # before _left, which may clear the arrays
        self._pos = pos + 1
        self._left(1)
        return uid

    def first_live(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The costs and uids of the first ``k`` live entries in order (all there are if
        fewer), as arrays."""
        pos = self._pos
        stop = pos + k
        gone = self._gone
        if gone and not gone.isdisjoint(self._uids[pos:stop]):  # members that left among them
            keys, uids = self._keys, self._uids
            at = pos
            costs_: list = []
            members_: list[int] = []
            while at < len(uids) and len(members_) < k:
                if uids[at] not in gone:
                    costs_.append(keys[at])
                    members_.append(uids[at])
                at += 1
            return np.array(costs_, dtype=np.float64), np.array(members_, dtype=np.int64)
        costs, members, base = self._costs, self._uid_arr, self._base
        if (
            costs is None
            or members is None
            or stop > base + len(members)
            and base + len(members) < len(self._uids)
        ):  # the arrays of a window from the read position on, kept for the next sorts
            end = max(stop, pos + _WINDOW)
            costs = self._costs = np.array(self._keys[pos:end])
            members = self._uid_arr = np.array(self._uids[pos:end], dtype=np.int64)
            base = self._base = pos
        return costs[pos - base : stop - base], members[pos - base : stop - base]

    def take_span(self, count: int) -> tuple[int, int]:
        """Take out the first ``count`` live entries of a ``consecutive`` queue (``count`` at
        most its size): the uids [lo, lo + count)."""
        pos = self._pos
        lo = self._uids[pos]
        self._pos = pos + count
        self._left(count)
        return lo, lo + count

    def drop_prefix(self, count: int) -> None:
        """Take out the first ``count`` live entries (from ``first_live``), and the entries of
        members that left before the last of them."""
        gone = self._gone
        if gone:
            uids, index, pos = self._uids, self._index, self._pos
            taken = 0
            while taken < count:
                uid = uids[pos]
                if uid in gone:
                    gone.remove(uid)
                    if index is not None:  # (a member that left: the index forgets it)
                        index.pop(uid, None)
                else:
                    taken += 1
                pos += 1
            self._pos = pos
        else:
            self._pos += count
        self._left(count)


class _Group:
    """Candidates sharing one time ``tau``; their order is static (cost, then uid)."""

    __slots__ = ("heap", "m", "mkey", "slot", "tau")

    def __init__(self, tau: float, slot: int) -> None:
        self.tau = tau
        self.heap = _GroupQueue()  # uid by cost
        self.slot = slot
        self.m = INF  # (m, mkey): the group's minimum cost and its uid
        self.mkey = -1

    def settle(self) -> None:
        """Set (m, mkey) to the minimum live entry."""
        head = self.heap.head()
        if head is None:
            self.m, self.mkey = INF, -1
        else:
            self.m, self.mkey = head


# -- the certified comparisons ------------------------------------------------------------------
def _exact_cross(num: Fraction, den: Fraction, t: float) -> float:
    """The largest float <= num/den, but at least the float after ``t`` (num/den > t is known)."""
    s = num / den
    try:
        f = float(s)
    except OverflowError:
        return INF
    if Fraction(f) > s:
        f = math.nextafter(f, -INF)
    return max(f, math.nextafter(t, INF))


def _cross_time(m1: float, s1: float, m2: float, s2: float, t: float) -> float:
    """A time in (t, s*] with s* = (m1 s1 - m2 s2) / (m1 - m2) the crossing (m1 > m2):
    conservative. The terms come as such, not as a closure: this runs on every certificate."""
    p1, p2, den = m1 * s1, m2 * s2, m1 - m2
    s = (p1 - p2) / den
    lb = s - _CROSS_REL * (abs(s) + (abs(p1) + abs(p2)) / den)
    if lb > t:  # NaN (overflow) compares False and takes the exact path
        return lb
    fm1, fm2 = Fraction(m1), Fraction(m2)
    return _exact_cross(fm1 * Fraction(s1) - fm2 * Fraction(s2), fm1 - fm2, t)


def certified_less(m1: float, s1: float, e1: float, m2: float, s2: float, e2: float) -> bool | None:
    """x < y for two non-negative products x = m1 (s1 - e1), y = m2 (s2 - e2) (a cost times a
    time difference): decided in floats when their gap exceeds the rounding bound, else in exact
    arithmetic (the same terms as Fractions). None when they are exactly equal (the caller
    breaks the tie)."""
    x, y = m1 * (s1 - e1), m2 * (s2 - e2)
    s = x + y
    if s > _TINY:
        d = x - y
        tol = _REL * s
        if d < -tol:
            return True
        if d > tol:
            return False
    xe = Fraction(m1) * (Fraction(s1) - Fraction(e1))
    ye = Fraction(m2) * (Fraction(s2) - Fraction(e2))
    return None if xe == ye else xe < ye


# "since" mode (Pensieve): value = m / (t - tau), tau <= t; smaller value is evicted first.
def _since_before(g: _Group, h: _Group, t: float) -> bool:
    gm, hm = g.m, h.m
    less = certified_less(gm, t, h.tau, hm, t, g.tau)
    if less is not None:
        return less
    return gm < hm or (gm == hm and g.tau < h.tau)


def _since_head(g: _Group, t: float) -> tuple[float, float, float, _Group]:
    """The group's head in ``pop_many``'s merge: its float value m / (t - tau) (+inf at an idle
    time of 0), then the tie-breaks of ``_since_before``."""
    return (g.m / (t - g.tau) if t > g.tau else INF, g.m, g.tau, g)


def _since_scale(g: _Group, t: float) -> tuple[float | None, float]:
    """How the float values of g's entries follow from their costs (``_since_head``): cost / d,
    or one value for all (d None)."""
    return (t - g.tau, 0.0) if t > g.tau else (None, INF)


def _since_expiry(w: _Group, x: _Group, t: float) -> float:
    """W wins at t. W's value falls slower than X's only if m_W > m_X; then X wins from
    t* = (m_W a_X - m_X a_W) / (m_W - m_X) on (at equality the tie goes to X, the cheaper)."""
    wm, xm = w.m, x.m
    if wm <= xm:
        return INF
    return _cross_time(wm, x.tau, xm, w.tau, t)


# "until" mode (cost-belady): value = m / (tau - t); tau = inf: value 0 (never used again);
# tau <= t: value +inf (its turn has arrived: keep). Ties: lower cost, then farther tau.
def _until_tie(g: _Group, h: _Group) -> bool:
    return g.m < h.m or (g.m == h.m and g.tau > h.tau)


def _until_before(g: _Group, h: _Group, t: float) -> bool:
    gt, ht = g.tau, h.tau
    g_due, h_due = gt <= t, ht <= t
    if g_due or h_due:
        return _until_tie(g, h) if (g_due and h_due) else h_due
    if gt == INF or ht == INF:
        g0 = gt == INF or g.m == 0.0
        h0 = ht == INF or h.m == 0.0
        if g0 and h0:
            return _until_tie(g, h)
        return g0
    gm, hm = g.m, h.m
    less = certified_less(gm, ht, t, hm, gt, t)
    if less is not None:
        return less
    return _until_tie(g, h)


def _until_head(g: _Group, t: float) -> tuple[float, float, float, _Group]:
    """The group's head in ``pop_many``'s merge: its float value m / (tau - t) (+inf when its turn
    has come, 0 when never used again or free to recompute), then ``_since_head``'s fields."""
    tau = g.tau
    if tau <= t:
        value = INF
    elif tau == INF or g.m == 0.0:
        value = 0.0
    else:
        value = g.m / (tau - t)
    return (value, g.m, tau, g)


def _until_expiry(w: _Group, x: _Group, t: float) -> float:
    """W wins at t. A due W has a due X behind it (static); a never-used W stays first. A future W
    loses when it falls due (tau_W), or, against a future X with m_X > m_W, from the crossing
    t* = (m_X tau_W - m_W tau_X) / (m_X - m_W) on (at equality the tie still goes to W)."""
    wt, xt = w.tau, x.tau
    if wt <= t or wt == INF:
        return INF
    if t < xt < INF and x.m > w.m:
        return min(wt, _cross_time(x.m, wt, w.m, xt, t))
    return wt


def _until_scale(g: _Group, t: float) -> tuple[float | None, float]:
    """How the float values of g's entries follow from their costs (``_until_head``): cost / d,
    or one value for all (d None)."""
    tau = g.tau
    if tau <= t:
        return None, INF
    if tau == INF:
        return None, 0.0
    return tau - t, 0.0  # a cost of 0 gives 0 / d = 0, as the head's rule


def _since_heads(groups, t: float) -> list[tuple[float, float, float, _Group]]:
    """``_since_head`` of each group, in one comprehension (a merge reads every group's head)."""
    return [(g.m / (t - g.tau) if t > g.tau else INF, g.m, g.tau, g) for g in groups]


def _until_heads(groups, t: float) -> list[tuple[float, float, float, _Group]]:
    """``_until_head`` of each group, in one comprehension."""
    return [
        (
            INF if g.tau <= t else 0.0 if g.tau == INF or g.m == 0.0 else g.m / (g.tau - t),
            g.m,
            g.tau,
            g,
        )
        for g in groups
    ]


def _since_values(groups: list[_Group], t: float) -> list[float]:
    """The float value of each group's head (``_since_heads``' first fields), floats only."""
    return [g.m / (t - g.tau) if t > g.tau else INF for g in groups]


def _until_values(groups: list[_Group], t: float) -> list[float]:
    """The float value of each group's head (``_until_heads``' first fields), floats only."""
    return [
        INF if g.tau <= t else 0.0 if g.tau == INF or g.m == 0.0 else g.m / (g.tau - t)
        for g in groups
    ]


# a mode: (the exact order at t, when a winner's certificate expires, a head's merge key, how
# its entries' merge values follow from their costs, the merge keys of many heads, their values)
SINCE = (_since_before, _since_expiry, _since_head, _since_scale, _since_heads, _since_values)
UNTIL = (_until_before, _until_expiry, _until_head, _until_scale, _until_heads, _until_values)


def _near_across(
    value: np.ndarray, owner: np.ndarray, order: np.ndarray, n: int, o: np.ndarray
) -> bool:
    """May the float order ``order`` (a stable sort of ``value``) put the first ``n`` wrongly?
    Only where values of different owners are within the rounding bound: two neighbours among
    the first n, or the last of them and the least value after it of another owner (a value
    near an earlier one is near the last too, the neighbours between being of one owner).
    ``o``: the owners of the first n (``owner[order[:n]]``, which the caller has)."""
    v = value[order[:n]]
    lim = np.maximum(v * (1.0 + _MERGE_REL), _TINY)
    if ((o[1:] != o[:-1]) & (v[1:] <= lim[:-1])).any():
        return True
    if len(order) <= n or value[order[n]] > lim[-1]:  # (ascending: nothing after it is near)
        return False
    rest = order[n:]
    other = owner[rest] != o[-1]
    if not other.any():
        return False
    return bool(value[rest[np.argmax(other)]] <= lim[-1])


def _read_short(groups: list[_Group], reads: list[int], taken: list[int], n: int) -> list[int]:
    """The groups whose every read entry is among the first ``n`` while they have more (and
    fewer than ``n`` read): an unread entry may belong there too. Another group's unread
    entries follow one of its read ones that is not among the first n, so they are not."""
    return [
        i
        for i, (g, c, r) in enumerate(zip(groups, taken, reads, strict=True))
        if c == r < n and len(g.heap) > r
    ]


# -- the tournament ------------------------------------------------------------------------------
class KineticMin:
    """Uids with a cost, grouped by a time ``tau``; ``peek(now)`` gives the minimum under a
    time-dependent order (``SINCE``: cost / (now - tau); ``UNTIL``: cost / (tau - now)).

    Nodes live in flat lists (a segment tree over group slots): ``_win`` the winning group,
    ``_exp`` when that comparison may flip, ``_smin`` the minimum ``_exp`` in the subtree.
    """

    def __init__(
        self, mode=SINCE, capacity: int = 64, by_session: bool = False, by_runs: bool = False
    ) -> None:
        """``by_session``: the uids are the engine's (``session << UNIT_BITS | unit``), kept a
        byte a unit per session (``GroupsBySession``); ``by_runs``: the engine's, kept as runs a
        session (``GroupsByRuns``); else in a dict."""
        self._before, self._expiry, self._head, self._scale, self._heads, self._values = mode
        self._cap = 1 << max(1, (capacity - 1).bit_length())
        self._win: list[_Group | None] = [None] * (2 * self._cap)
        self._exp: list[float] = [INF] * (2 * self._cap)
        self._smin: list[float] = [INF] * (2 * self._cap)
        self._groups: dict[float, _Group] = {}
        self._free: list[int] = list(range(self._cap - 1, -1, -1))
        # uid -> its group
        self._where: GroupsBySession | GroupsByRuns | GroupsByUid = (
            GroupsBySession(_has_members)
            if by_session
            else GroupsByRuns()
            if by_runs
            else GroupsByUid()
        )
        self._t = -INF  # the latest time seen: nodes are valid from here on
        self._batch: set[int] | None = None  # leaves changed in a batch at one time (see batch)
        # Leaves changed outside a batch whose paths wait: the tree is brought up to date only
        # when it is read (``peek``, a batch), so a run of changes and of merged evictions, which
        # read the groups and not the tree, pays for each path once.
        self._stale: set[int] = set()

    # -- membership ------------------------------------------------------------------------------
    def add(self, uid: int, cost: float, tau: float, now: float) -> None:
        if not (0.0 <= cost < INF):
            raise ValueError(f"unit {uid}: cost must be finite and >= 0, got {cost!r}")
        if math.isnan(tau):
            raise ValueError(f"unit {uid}: its time (last or next access) is NaN")
        self._t = max(self._t, now)
        if uid in self._where:
            self.discard(uid)
        g = self._groups.get(tau)
        if g is None:
            if not self._free:
                self._grow()
            g = self._groups[tau] = _Group(tau, self._free.pop())
        g.heap.push(uid, cost)
        self._where.set(uid, g)
        if cost < g.m or (cost == g.m and uid < g.mkey):
            g.m, g.mkey = cost, uid
            self._set_leaf(g.slot, g)

    def add_many(
        self, uids: list[int] | range, costs: list[float] | np.ndarray, tau: float, now: float
    ) -> None:
        """``add`` each (uid, cost) with one time ``tau`` (a session's units released together):
        one group, one heap merge, one leaf-to-root update."""
        if not uids:
            return
        if len(uids) != len(costs):
            raise ValueError(f"{len(uids)} uids but {len(costs)} costs")
        low, total = (
            (costs.min(), costs.sum())
            if isinstance(costs, np.ndarray)
            else (min(costs), sum(costs))
        )
        if not (0.0 <= low and total < INF):  # in C; a NaN makes the sum NaN
            for uid, cost in zip(uids, list(costs), strict=True):
                if not (0.0 <= cost < INF):
                    raise ValueError(f"unit {uid}: cost must be finite and >= 0, got {cost!r}")
        if math.isnan(tau):
            raise ValueError(f"units {uids[0]}..: their time (last or next access) is NaN")
        self._t = max(self._t, now)
        g = self._groups.get(tau) or _Group(tau, -1)  # a new group: its slot once it joins
        distinct = self._where.join(uids, g)
        if distinct is None:  # some come back: they leave first (maybe emptying ``g``)
            self.discard_many(uids)
            g = self._groups.get(tau) or _Group(tau, -1)
            distinct = self._where.join(uids, g)
        if g.slot < 0:
            if not self._free:
                self._grow()
            g.slot = self._free.pop()
            self._groups[tau] = g
        g.heap.push_batch(uids, costs, distinct=bool(distinct))
        g.settle()
        self._set_leaf(g.slot, g)

    def pop_many(self, n: int, now: float, in_uid_order: bool = False) -> list[int]:
        """The ``n`` successive minima at ``now`` (fewer if it runs out), taken out: what ``n``
        rounds of ``peek`` and ``discard`` give (``in_uid_order``: the same victims in uid order,
        for a caller that hears no order). A merge of the groups' heads (one victim:
        ``_merge_one``; many: the numpy sort, ``_merge_sorted``, where it decides); the tree is
        not read: the leaves it touched wait (``_stale``)."""
        out: list[int] = []
        self._check_time(now)
        self._t = now
        if n >= _SORT_MIN and self._merge_sorted(n, now, out, in_uid_order):
            return out
        out = self._merge_heads(n, now)
        if in_uid_order:
            out.sort()
        return out

    def pop_extents(self, n: int, now: float) -> list[tuple[int, int]]:
        """``extents_of(pop_many(n, now, in_uid_order=True))``: where the merge takes each
        group's victims as a span (``_take_prefixes``), the spans joined, the uids never listed."""
        self._check_time(now)
        self._t = now
        taken = self._sorted_take(n, now) if n >= _SORT_MIN else None
        if taken is None:
            return extents_of(sorted(self._merge_heads(n, now)))
        ascending = taken[1]
        if isinstance(ascending, np.ndarray):
            return extents_of(ascending.tolist())
        return join_extents(ascending)

    def pop_schedule(self, schedule: list[tuple[float, int]]) -> list[int]:
        """``pop_many(n, t)``'s victims for each (t, n) in turn (times ascending), in order: the
        groups that may give one found once (``_schedule_groups``), each time's merge reading
        only those (a decode span's allocations: a page each step, at successive times)."""
        out: list[int] = []
        if not schedule:
            return out
        self._check_time(schedule[0][0])
        groups = self._schedule_groups(schedule[0][0], schedule[-1][0], sum(n for _, n in schedule))
        alive = len(self._groups)
        for t, n in schedule:
            self._check_time(t)
            self._t = t
            if len(self._groups) < alive:  # a group emptied (it left the tree): no group joins
                groups = list(filter(_has_members, groups))
                alive = len(self._groups)
            if n >= _SORT_MIN and self._merge_sorted(n, t, out, groups=groups):
                continue
            out += self._merge_heads(n, t, groups)
        return out

    def _schedule_groups(self, first: float, last: float, total: int) -> list[_Group]:
        """The groups that may give one of ``total`` successive minima taken at times from
        ``first`` to ``last``. A head's value moves one way with time (both modes), and a
        group's later heads cost no less, so over the schedule a group's values are at least
        ``low`` (its head's least value at the two ends) and an untouched head's at most
        ``high`` (its greatest). Before each of the ``total`` victims at least one of the
        ``total`` groups of least ``high`` is untouched: every minimum, and every value near it
        (``_merge``'s rounding bound), is at most that ``total``-th least ``high`` with its
        bound, and a group whose ``low`` is above that is never read (rounding is monotone)."""
        groups = list(self._groups.values())
        if len(groups) <= total:
            return groups
        if self._values is _since_values:  # values fall with time
            high, low = self._values(groups, first), self._values(groups, last)
        else:  # (``UNTIL``: they rise)
            low, high = self._values(groups, first), self._values(groups, last)
        bound = max(sorted(high)[total - 1] * (1.0 + _MERGE_REL), _TINY)
        return list(compress(groups, [v <= bound for v in low]))

    def _merge_heads(self, n: int, t: float, groups: list[_Group] | None = None) -> list[int]:
        """The ``n`` minima at ``t`` by the merge of the groups' heads (``_merge_one``,
        ``_merge``), in order; ``groups``: those that may give one, else all."""
        out: list[int] = []
        if n == 1:
            self._merge_one(t, out, groups)
        else:
            self._merge(n, t, out, groups)
        return out

    def _merge_sorted(
        self,
        n: int,
        t: float,
        out: list[int],
        in_uid_order: bool = False,
        groups: list[_Group] | None = None,
    ) -> bool:
        """``_sorted_take``'s victims onto ``out``, in order (``in_uid_order``: in uid order);
        False where it does not decide."""
        taken = self._sorted_take(n, t, groups)
        if taken is None:
            return False
        chosen, ascending = taken
        out += _uids_of(ascending) if in_uid_order else chosen.tolist()
        return True

    def _sorted_take(
        self, n: int, t: float, groups: list[_Group] | None = None
    ) -> tuple[np.ndarray, _Ascending] | None:
        """``_merge`` for many victims, in numpy: the float values of each group's first k
        entries, sorted (a group's k grows while it has all k among the first ``n`` and more
        behind: the others are not read again). That order is the exact one unless values of
        different groups are within the rounding bound where it matters (``_near_across``; a
        group's own entries are in its static order, which a stable sort of its monotone values
        keeps); then it does nothing and returns None (``_merge`` decides those exactly). Else
        the victims are taken out: their uids in order (an int64 array) and in uid order
        (``_take_prefixes``). ``groups``: those that may give one, else all."""
        groups = self._candidates(n, t, groups)
        if not groups:
            return None
        k = min(n, 2 * (n // len(groups)) + _SORT_MIN)
        # each entry's value is its cost / its group's d (one division for all), or its group's
        # constant where d is None: ``_scale``
        scales = [self._scale(g, t) for g in groups]
        divisor = np.array([1.0 if d is None else d for d, _ in scales])
        fixed = (
            np.array([d is None for d, _ in scales]) if any(d is None for d, _ in scales) else None
        )
        if len(groups) * k > _SORT_MAX:  # the entries read: the heap merge costs less
            return None
        reads = [k] * len(groups)  # how many first entries of each group are read
        runs = [g.heap.first_live(k) for g in groups]
        while True:
            uid = np.concatenate([u for _, u in runs])
            owner = np.repeat(np.arange(len(groups)), [len(u) for _, u in runs])
            value = np.concatenate([c for c, _ in runs]) / divisor[owner]
            if fixed is not None:
                at = fixed[owner]
                value[at] = np.array([c for _, c in scales])[owner[at]]
            order = np.argsort(value, kind="stable")
            head_owner = owner[order[:n]]
            taken = np.bincount(head_owner, minlength=len(groups)).tolist()
            short = _read_short(groups, reads, taken, n)
            if not short:
                break
            # only the groups read too short read more (one group gives most victims, often):
            # a group with an unread entry among the first n has all its read ones there
            for i in short:
                reads[i] = min(n, 4 * reads[i])
                runs[i] = groups[i].heap.first_live(reads[i])
            if sum(reads) > _SORT_MAX:
                return None
        if _near_across(value, owner, order, n, head_owner):
            return None
        chosen = uid[order[:n]]
        return chosen, self._take_prefixes(groups, taken, chosen)

    def _take_prefixes(
        self, groups: list[_Group], taken: list[int], chosen: np.ndarray
    ) -> _Ascending:
        """Take each group's first ``taken`` entries out (``chosen``: their uids). Where a group
        touched is ``consecutive`` (the usual group at block units: a session's leading pages)
        its victims are one span [lo, hi), the others' victims their runs: all told to the uid
        map as spans, returned sorted. Else (no such group: layer units, a dict) the uids, in
        a sorted int64 array."""
        touched = list(compress(groups, taken))
        counts = [c for c in taken if c]
        runs = [g.heap.consecutive for g in touched]
        if any(runs):
            spans = []
            loose = []  # the victims of the other groups
            for g, c, run in zip(touched, counts, runs, strict=True):
                if run:
                    spans.append(g.heap.take_span(c))
                else:
                    loose.append(g.heap.first_live(c)[1])
                    g.heap.drop_prefix(c)
            if loose:
                spans += extents_of(np.sort(np.concatenate(loose)).tolist())
            spans.sort()
            self._where.take_spans(spans)
            ascending: _Ascending = spans
        else:
            for g, c in zip(touched, counts, strict=True):
                g.heap.drop_prefix(c)
            ascending = np.sort(chosen)
            # in uid order: consecutive uids sit side by side in the dict's table (cache misses
            # dominate a large dict's deletions in eviction order), a session's units in one
            # scatter
            self._where.take_out(ascending.tolist(), ascending)
        for g in sorted(touched, key=_slot):  # a fixed order of leaf updates
            self._changed(g)
        return ascending

    def _merge_one(self, t: float, out: list[int], groups: list[_Group] | None = None) -> None:
        """``_merge`` for one victim (a decode step's page, most often): the least head's value
        and the least of the others (``min`` over the values, in C); heads within the rounding
        bound of the least (or tiny) are settled by the exact comparison among them, as
        ``_merge`` does (equal least values among them: which one ``min`` finds is no matter).
        ``groups``: the groups that may give it (``_schedule_groups``), else all."""
        if groups is None:
            groups = list(self._groups.values())
        if not groups:
            return
        values = self._values(groups, t)
        least = min(values)
        i = values.index(least)
        g = groups[i]
        lim = max(least * (1.0 + _MERGE_REL), _TINY)
        values[i] = INF  # the others' least
        if len(values) > 1 and min(values) <= lim:  # near-equal values: decide exactly
            before = self._before
            for v, other in zip(values, groups, strict=True):
                if v <= lim and other is not g and before(other, g, t):
                    g = other
        uid = g.heap.take_head()
        self._where.pop(uid)
        out.append(uid)
        self._changed(g)

    def _candidates(self, n: int, t: float, groups: list[_Group] | None = None) -> list[_Group]:
        """The groups that may give one of ``n`` victims at ``t``: those whose head's value is
        at most the (n+1)-th least. A group above it is exactly behind n other heads (rounding
        is monotone): not among the n minima, nor near the last of them. ``groups``: those
        that may give one (``_schedule_groups``), else all."""
        if groups is None:
            groups = list(self._groups.values())
        if len(groups) <= n + 1:
            return groups
        values = self._values(groups, t)
        kth = sorted(values)[n]
        return list(compress(groups, [v <= kth for v in values]))

    def _merge(self, n: int, t: float, out: list[int], groups: list[_Group] | None = None) -> None:
        """The minima at one time ``t`` as a merge of the groups' static orders: a heap of each
        group's head keyed by its float value (the mode's head: cost / (t - tau), or
        cost / (tau - t)), in C. A head whose float value is within the rounding bound of another's (or tiny) is
        settled by the exact comparison among all such heads, so the victims are the
        tournament's, in its order; the leaves of the groups touched follow once, at the end.
        ``groups``: the groups that may give one (``_schedule_groups``), else all."""
        before, where, head = self._before, self._where, self._head
        scale = self._scale
        heap = self._heads(self._groups.values() if groups is None else groups, t)
        heapq.heapify(heap)
        touched: dict[_Group, None] = {}
        while len(out) < n and heap:
            item = heapq.heappop(heap)
            if item[0] == INF and before is _until_before:  # every head left is +inf
                due = [g for *_, g in heap]
                due.append(item[3])
                if all(g.tau <= t for g in due):  # turns that have come: a static order
                    self._merge_due(due, n, t, out, touched)
                    break
            lim = max(item[0] * (1.0 + _MERGE_REL), _TINY)
            if heap and heap[0][0] <= lim:  # near-equal values: decide exactly
                near = [item]
                while heap and heap[0][0] <= lim:
                    near.append(heapq.heappop(heap))
                item = near[0]
                for other in near[1:]:
                    if before(other[3], item[3], t):
                        item = other
                for other in near:
                    if other is not item:
                        heapq.heappush(heap, other)
            g = item[3]
            # g's head is decided; its next entries follow it while each is the minimum at once
            # (the rest's least value beyond its rounding bound): a run taken from its order.
            start = len(out)
            g.heap.take_run(scale(g, t), heap[0][0] if heap else None, n - start, out)
            where.take_out(out[start:])
            touched[g] = None
            if g.heap:
                g.settle()
                heapq.heappush(heap, head(g, t))
        for g in sorted(touched, key=_slot):  # a fixed order of leaf updates
            self._changed(g)

    def _merge_due(
        self, groups: list[_Group], n: int, t: float, out: list[int], touched: dict
    ) -> None:
        """``_merge``'s minima at ``t`` among groups whose turns have all come (``UNTIL``, tau <= t:
        every value +inf, each pair within the rounding bound, so ``_merge`` would compare each
        head with all the others): their order is ``_until_tie``'s, static (lower cost, then the
        later time; no two groups share a time), so a heap keyed by (cost, -tau) gives the
        successive minima one victim at a time (a due group's value follows no cost)."""
        where = self._where
        heap = [(g.m, -g.tau, g) for g in groups]
        heapq.heapify(heap)
        while len(out) < n and heap:
            g = heap[0][2]
            start = len(out)
            g.heap.take_run((None, INF), None, 1, out)
            where.take_out(out[start:])
            touched[g] = None
            if g.heap:
                g.settle()
                heapq.heapreplace(heap, (g.m, -g.tau, g))
            else:
                heapq.heappop(heap)

    def begin_batch(self, now: float) -> None:
        """Changes at one time ``now``, many of them: until ``end_batch`` a changed leaf updates
        only the winners on its path (exact comparisons at ``now``), and the certificates of every
        changed path are computed once, at the end. The minimum stays exact throughout."""
        if self._batch is not None:
            raise AssertionError("batches do not nest")
        self.peek(now)  # every winner exact at now
        self._batch = set()

    def end_batch(self) -> None:
        dirty, self._batch = self._batch, None
        if dirty:
            self._refresh_paths(dirty, self._t)

    def _refresh_paths(self, leaves: set[int], t: float) -> None:
        """Evaluate at ``t`` every node above these leaves, each once, children before parents.
        A node beside the paths whose certificate expired keeps its mark in ``_smin``, so the
        next ``_fix`` evaluates it and, again, the paths above it."""
        nodes: set[int] = set()
        for i in leaves:
            i >>= 1
            while i and i not in nodes:
                nodes.add(i)
                i >>= 1
        for i in sorted(nodes, reverse=True):
            self._node(i, t)

    def discard_many(self, uids) -> None:
        """``discard`` each; every group touched is settled once."""
        left: dict[_Group, list[int]] = self._where.pop_many(uids)
        for g, gone in left.items():
            g.heap.discard_many(gone)
        for g in sorted(left, key=_slot):  # a fixed order of leaf updates
            self._changed(g)

    def discard(self, uid: int) -> bool:
        g = self._where.pop(uid)
        if g is None:
            return False
        g.heap.discard(uid)
        if not g.heap or uid == g.mkey:
            self._changed(g)
        return True

    def _changed(self, g: _Group) -> None:
        """``g`` lost members: free its slot when it is empty, else settle its minimum; its leaf
        follows."""
        if not g.heap:
            del self._groups[g.tau]
            self._free.append(g.slot)
            self._set_leaf(g.slot, None)
        else:
            g.settle()
            self._set_leaf(g.slot, g)

    def _check_time(self, now: float) -> None:
        if now < self._t:
            raise ValueError(
                f"time went backwards: peek(now={now!r}) after {self._t!r}; "
                "one policy instance follows one simulated clock"
            )

    def peek(self, now: float) -> int | None:
        """The minimum at ``now``; re-evaluates the waiting paths and the expired certificates
        only (no decision changes)."""
        self._check_time(now)
        if self._batch is not None:  # winners are kept exact at _t; certificates wait
            if now != self._t:
                raise ValueError(f"peek(now={now!r}) inside a batch at {self._t!r}")
        else:
            self._t = now
            if self._stale:
                self._refresh_paths(self._stale, now)
                self._stale = set()
            if self._smin[1] <= now:
                self._fix(1, now)
        g = self._win[1]
        return None if g is None else g.mkey

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, uid: int) -> bool:
        return uid in self._where

    def cost_of(self, uid: int) -> float:
        return self.group_of(uid).heap.key(uid)

    def tau_of(self, uid: int) -> float:
        return self.group_of(uid).tau

    def group_of(self, uid: int) -> _Group:
        """The group of a candidate (its ``m`` and ``tau`` are what the order reads of it)."""
        g = self._where.get(uid)
        if g is None:
            raise KeyError(uid)
        return g

    def group_of_all(self, uids: list[int]) -> _Group | None:
        """The group of all of ``uids`` (candidates, ascending) when they share one (one time),
        else None."""
        return self._where.group_of_all(uids)

    def members_in(self, lo: int, hi: int) -> list[int]:
        """The candidates in ``range(lo, hi)``, ascending (a page's units)."""
        return self._where.members_in(lo, hi)

    def uids(self) -> list[int]:
        """Every candidate."""
        return list(self._where)

    # -- the tree --------------------------------------------------------------------------------
    def _node(self, i: int, t: float) -> None:
        win, exp, smin = self._win, self._exp, self._smin
        left, right = 2 * i, 2 * i + 1
        gl, gr = win[left], win[right]
        if gl is None or gr is None:
            win[i] = gl if gr is None else gr
            e = INF
        elif self._before(gl, gr, t):
            win[i] = gl
            e = self._expiry(gl, gr, t)
        else:
            win[i] = gr
            e = self._expiry(gr, gl, t)
        exp[i] = e
        smin[i] = min(e, smin[left], smin[right])

    def _set_leaf(self, slot: int, g: _Group | None) -> None:
        i = self._cap + slot
        win = self._win
        win[i] = g
        t = self._t
        if self._batch is not None:
            self._batch.add(i)
            before = self._before
            i >>= 1
            while i:
                a, b = win[2 * i], win[2 * i + 1]
                win[i] = a if b is None else b if a is None else a if before(a, b, t) else b
                i >>= 1
            return
        self._stale.add(i)

    def _fix(self, i: int, now: float) -> None:
        """Re-evaluate, bottom-up, every node of the subtree whose certificate expired by ``now``."""
        if i < self._cap:
            smin = self._smin
            if smin[2 * i] <= now:
                self._fix(2 * i, now)
            if smin[2 * i + 1] <= now:
                self._fix(2 * i + 1, now)
            self._node(i, now)

    def _grow(self) -> None:
        if self._batch is not None:  # leaf indices move: no batch across a growth
            self._batch = None
            self._grow()
            self._batch = set()
            return
        self._stale = set()  # leaf indices move; every node is evaluated below
        old = self._cap
        cap = 2 * old
        leaves = self._win[old : 2 * old]
        self._cap = cap
        self._win = [None] * cap + leaves + [None] * old
        self._exp = [INF] * (2 * cap)
        self._smin = [INF] * (2 * cap)
        self._free.extend(range(cap - 1, old - 1, -1))
        t = self._t
        for i in range(cap - 1, 0, -1):
            self._node(i, t)


# -- the policy shell ----------------------------------------------------------------------------
def units_by_time(
    schedule: list[tuple[float, int]], unit_bytes: int
) -> Iterator[tuple[float, int]]:
    """An eviction schedule's (time, bytes) allocations as (time, units) for each time, the
    allocations of one time together: minima taken in two calls at one time are those of one."""
    i = 0
    while i < len(schedule):
        now, units = schedule[i][0], 0
        while i < len(schedule) and schedule[i][0] == now:
            units += -(-schedule[i][1] // unit_bytes)
            i += 1
        yield now, units


def _in_uid_order(uids: list[int]) -> list[int] | np.ndarray:
    """``sorted(uids)``; a long list of int64 uids in numpy."""
    if len(uids) < _SORT_MIN * 8:
        return sorted(uids)
    a = np.array(uids)
    return np.sort(a) if a.dtype == np.int64 else sorted(uids)


class KineticPolicy(EvictionPolicy):
    """A policy whose order is a ``KineticMin``: subclasses give each candidate a cost and a time."""

    mode = SINCE
    # True when ``unit_time`` depends on the unit's session alone (one answer per session).
    session_time = False
    # A pinned unit is no candidate and enters no group: a decode span's pages may be given in
    # one batch, each allocation's victims the minima at its step's start.
    grows_by_time = True
    # The engine's uids kept a byte a unit per session (batches as slices and scatters) at layer
    # units (a session's units by the thousand), as runs a session at block units (a session's
    # pages enter and leave a group as runs), not in a dict (one entry a unit): for a policy
    # whose work is mostly batches.
    uids_by_session = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        view = self.view
        engine = self.uids_by_session and isinstance(view, UnitView)
        by_runs = engine and view.layers == 1 and not view.per_session  # (a session a unit: a dict)
        self._kin = KineticMin(self.mode, by_session=engine and view.layers > 1, by_runs=by_runs)

    def unit_cost(self, uid: int) -> float:
        raise NotImplementedError

    def unit_time(self, uid: int, now: float) -> float:
        """The time ``tau`` of a unit that becomes a candidate at ``now``."""
        raise NotImplementedError

    def hit_time(self, uid: int, now: float) -> float:
        """Its time after a hit at ``now`` (cachesim hits a candidate; the engine pins right after)."""
        raise NotImplementedError

    def unit_costs(self, uids: list[int]) -> list[float] | np.ndarray:
        """``unit_cost`` of each (subclasses compute a session's units at once, maybe as a float64
        array: the same floats)."""
        return [self.unit_cost(uid) for uid in uids]

    def _add(self, uid: int, now: float) -> None:
        self._kin.add(uid, self.unit_cost(uid), self.unit_time(uid, now), now)

    def shared_time(self, uids: list[int] | range, now: float) -> float | None:
        """The ``unit_time`` all of ``uids`` share at ``now``, or None if they differ."""
        if self.session_time and uids and isinstance(self.view, UnitView):
            if type(uids) is range:  # (ascending: its ends)
                lo, hi = uids[0], uids[-1]
            else:
                lo, hi = min(uids), max(uids)
            if lo >> UNIT_BITS == hi >> UNIT_BITS:  # one session's units
                return self.unit_time(uids[0], now)
        times = {self.unit_time(uid, now) for uid in uids}
        return times.pop() if len(times) == 1 else None

    def release(self, uids, now: float) -> None:
        # A session's units share their time: one batch into one group. A whole session comes
        # as a range: the tournament takes it as one (a slice of its membership bytes).
        span = uids if type(uids) is range and uids.step == 1 else None
        uids = list(uids)
        tau = self.shared_time(uids if span is None else span, now)
        if tau is None:
            for uid in uids:
                self._add(uid, now)
            return
        self._kin.add_many(uids if span is None else span, self.unit_costs(uids), tau, now)

    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        # one time: the inserts and evictions of a demotion batch as one tournament batch
        self._kin.begin_batch(now)
        try:
            return super().take_in(uids, free_bytes, now)
        finally:
            self._kin.end_batch()

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None or type(self)._evicted is not EvictionPolicy._evicted:
            return super().evict_bytes(nbytes, now)
        return self._kin.pop_many(n, now)  # equal sizes: a count

    def evict_extents_at(self, schedule: list[tuple[float, int]]) -> list[tuple[int, int]]:
        """The successive minima at each time: one ``pop_many`` per time for its allocations
        together (minima taken in two calls at one time are the minima taken in one)."""
        unit_bytes = self.view.unit_bytes
        if (
            not unit_bytes
            or type(self).evict_bytes is not KineticPolicy.evict_bytes
            or type(self)._evicted is not EvictionPolicy._evicted
        ):
            return super().evict_extents_at(schedule)
        victims = self._kin.pop_schedule(list(units_by_time(schedule, unit_bytes)))
        return extents_of(_in_uid_order(victims) if self.drops_victims else victims)

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if (
            self.drops_victims
            and n is not None
            and type(self).evict_bytes is KineticPolicy.evict_bytes
            and type(self)._evicted is EvictionPolicy._evicted
        ):  # ``evict_bytes``'s victims, in the order they are dropped in
            return self._kin.pop_extents(n, now)
        victims = self.evict_bytes(nbytes, now)
        # nobody hears the order of victims that are dropped: a session's pages as runs
        return extents_of(_in_uid_order(victims) if self.drops_victims else victims)

    def remove_many(self, uids, pinned: bool = False) -> None:
        if not pinned:
            self._kin.discard_many(uids)

    def access(self, uid: int, now: float) -> None:
        kin = self._kin
        if uid in kin:
            kin.add(uid, kin.cost_of(uid), self.hit_time(uid, now), now)

    def _discard(self, uid: int) -> None:
        self._kin.discard(uid)

    def acquire(self, uids, now: float) -> None:
        # a hit then a pin leaves nothing behind: the units simply stop being candidates
        self._kin.discard_many(uids)

    def peek(self, now: float) -> int | None:
        return self._kin.peek(now)

    def __len__(self) -> int:
        return len(self._kin)

    def __contains__(self, uid: int) -> bool:
        return uid in self._kin
