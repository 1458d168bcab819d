"""``RunList``: an ordered list of uids kept as runs of consecutive uids, with range removal.

ARC's four lists (T1, T2 and their ghosts B1, B2) and its pinned units, and 2Q's Am,
where a session's pages move between lists together: a whole session leaving T1 for the pinned set, coming back to T2,
or a batch of victims entering a ghost list, is O(runs), not O(pages).

A run is ``[first, stop)`` less a set of holes (uids taken out of its middle); taking uids off
either end moves ``first`` or ``stop``. Runs are kept oldest first, keyed by the uid they started
at (a fresh negative key if that uid starts another run already), and grouped by bucket
(``uid >> 24``, the session) so the runs holding a uid or a range are found without a scan of the
list; a run never spans two buckets.

Costs: appending a run O(1); popping n uids from the oldest end O(runs popped); finding, counting
or taking out the members of a range of one bucket O(runs of the bucket), plus the uids taken out
of the middle of a run (they become holes). Finding one uid scans its bucket's runs while they are
few; a bucket found to hold many gets its short runs' uids indexed from then on (O(1) finds). The
engine hands over a session's units in batches, so its buckets are seldom indexed and a run costs
nothing per uid there; a cache asked one uid at a time is indexed as its buckets fill. The
functions at the end do the arithmetic on runs (first, stop) that the policies on these lists
share.
"""

from __future__ import annotations

from collections import OrderedDict

from sim.policies.structures import strip_hole_ends
from sim.units import UNIT_BITS, extents_of, join_extents

BUCKET_BITS = UNIT_BITS  # a bucket is a session
SHORT_RUN = 64  # in an indexed bucket, runs this long or shorter have their uids indexed
INDEX_AT = 16  # a bucket with more runs than this gets indexed when one uid is looked up


class RunList:
    __slots__ = ("_runs", "_in", "_long", "_indexed", "_where", "_n", "_spare")

    def __init__(self) -> None:
        # key -> [first, stop, holes, bucket, short]
        self._runs: OrderedDict[int, list] = OrderedDict()
        self._in: dict[int, set[int]] = {}  # bucket -> keys of its runs
        self._long: dict[int, set[int]] = {}  # bucket -> keys of its long runs
        self._indexed: set[int] = set()  # buckets whose short runs' members are in _where
        self._where: dict[int, int] = {}  # uid -> key, for the members of those short runs
        self._n = 0  # uids in the list
        self._spare = 0  # last negative key handed out

    # -- adding ----------------------------------------------------------------------------------
    def push_run(self, start: int, stop: int) -> None:
        """Append uids ``start .. stop-1`` (none of them in the list) at the newest end."""
        while start < stop:
            b = start >> BUCKET_BITS
            end = min(stop, (b + 1) << BUCKET_BITS)
            key = start
            if key in self._runs:  # that run moved on from start: a fresh key
                self._spare -= 1
                key = self._spare
            short = end - start <= SHORT_RUN
            self._runs[key] = [start, end, None, b, short]
            keys = self._in.get(b)
            if keys is None:
                self._in[b] = {key}
            else:
                keys.add(key)
            if short:
                if b in self._indexed:
                    self._where.update(dict.fromkeys(range(start, end), key))
            else:
                longs = self._long.get(b)
                if longs is None:
                    self._long[b] = {key}
                else:
                    longs.add(key)
            self._n += end - start
            start = end

    def push_runs(self, runs) -> None:
        """Append each ``(first, stop)`` of ``runs`` in turn."""
        for a, s in runs:
            self.push_run(a, s)

    def push(self, uid: int) -> None:
        self.push_run(uid, uid + 1)

    def add_runs(self, runs) -> None:
        """``push_runs`` for a list whose order is unused (a pinned set): a run that starts where
        one of its bucket's runs stops extends that run instead, so that a session's pages added
        a few at a time stay one run (taking the session out is then O(1) runs)."""
        for a, s in runs:
            if a >= s:
                continue
            b = a >> BUCKET_BITS
            key = self._key_of(a - 1) if (a - 1) >> BUCKET_BITS == b else None
            if key is not None and (s - 1) >> BUCKET_BITS == b:
                run = self._runs[key]
                if run[1] == a:
                    self._extend(key, run, s)
                    continue
            self.push_run(a, s)

    def _extend(self, key: int, run: list, stop: int) -> None:
        """Run ``key`` takes the uids from its stop to ``stop`` (none of them in the list)."""
        first, old_stop, _, b, short = run
        run[1] = stop
        self._n += stop - old_stop
        if not short:
            return
        indexed = b in self._indexed
        if stop - first > SHORT_RUN:  # long now: scanned, not indexed
            if indexed:
                self._unindex(key, first, old_stop)
            run[4] = False
            longs = self._long.get(b)
            if longs is None:
                self._long[b] = {key}
            else:
                longs.add(key)
        elif indexed:
            self._where.update(dict.fromkeys(range(old_stop, stop), key))

    # -- finding ---------------------------------------------------------------------------------
    def _key_of(self, uid: int) -> int | None:
        """The key of the run holding ``uid`` (not as a hole), or None."""
        b = uid >> BUCKET_BITS
        if b in self._indexed:
            key = self._where.get(uid)
            if key is not None:
                return key
            keys = self._long.get(b)
        else:
            keys = self._in.get(b)
            if keys is not None and len(keys) > INDEX_AT:
                self._index(b)
                return self._key_of(uid)
        if not keys:
            return None
        runs = self._runs
        for key in keys:
            first, stop, holes, _, _ = runs[key]
            if first <= uid < stop and (holes is None or uid not in holes):
                return key
        return None

    def _index(self, b: int) -> None:
        """Index the members of bucket ``b``'s short runs: finds in it are O(1) from now on."""
        self._indexed.add(b)
        where, runs = self._where, self._runs
        for key in self._in[b]:
            first, stop, holes, _, short = runs[key]
            if short:
                members = range(first, stop)
                where.update(dict.fromkeys(members if holes is None else set(members) - holes, key))

    def __contains__(self, uid: int) -> bool:
        return self._key_of(uid) is not None

    def _overlaps(self, start: int, stop: int):
        """(key, run, lo, hi) for each run of ``start``'s bucket that meets ``[start, stop)``
        (which lies in one bucket), ``[lo, hi)`` being the part in the range."""
        keys = self._in.get(start >> BUCKET_BITS)
        if not keys:
            return []
        out = []
        runs = self._runs
        for key in keys:
            run = runs[key]
            lo, hi = max(run[0], start), min(run[1], stop)
            if lo < hi:
                out.append((key, run, lo, hi))
        return out

    def count_in(self, start: int, stop: int) -> int:
        """How many members lie in ``[start, stop)`` (one bucket)."""
        n = 0
        for _, run, lo, hi in self._overlaps(start, stop):
            holes = run[2]
            n += hi - lo - (sum(1 for h in holes if lo <= h < hi) if holes else 0)
        return n

    def buckets(self):
        """The buckets (sessions) that hold a member, as a live view (set operations in C)."""
        return self._in.keys()

    def meets(self, start: int, stop: int) -> bool:
        """Might a member lie in ``[start, stop)`` (one bucket)? False only where none does (by
        the runs' bounds: a hole counts as a member here); one dict lookup where the bucket has
        no run."""
        keys = self._in.get(start >> BUCKET_BITS)
        if not keys:
            return False
        runs = self._runs
        return any(runs[k][0] < stop and start < runs[k][1] for k in keys)

    def first_in(self, start: int, stop: int) -> int | None:
        """The smallest member in ``[start, stop)`` (one bucket), or None."""
        best = None
        for _, run, lo, hi in self._overlaps(start, stop):
            holes = run[2]
            while holes and lo < hi and lo in holes:
                lo += 1
            if lo < hi and (best is None or lo < best):
                best = lo
        return best

    # -- taking out ------------------------------------------------------------------------------
    def discard(self, uid: int) -> bool:
        """Take ``uid`` out; False if it was not a member."""
        key = self._key_of(uid)
        if key is None:
            return False
        self._cut(key, self._runs[key], uid, uid + 1)
        self._n -= 1
        return True

    def take_range(self, start: int, stop: int) -> list[tuple[int, int]]:
        """Take out the members of ``[start, stop)``; returns them as increasing runs, consecutive
        uids joined."""
        out: list[tuple[int, int]] = []
        while start < stop:
            end = min(stop, ((start >> BUCKET_BITS) + 1) << BUCKET_BITS)
            out += self._take_in_bucket(start, end)
            start = end
        return join_extents(out)

    def _take_in_bucket(self, start: int, stop: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for key, run, lo, hi in self._overlaps(start, stop):
            holes = run[2]
            if holes:
                inner = sorted(h for h in holes if lo <= h < hi)
                a = lo
                for h in inner:
                    if a < h:
                        out.append((a, h))
                    a = h + 1
                if a < hi:
                    out.append((a, hi))
                self._n -= hi - lo - len(inner)
            else:
                out.append((lo, hi))
                self._n -= hi - lo
            self._cut(key, run, lo, hi)
        out.sort()
        return out

    def _cut(self, key: int, run: list, lo: int, hi: int) -> None:
        """Remove ``[lo, hi)`` (inside the run) from the run; the count is the caller's."""
        first, stop = run[0], run[1]
        if run[4] and run[3] in self._indexed:
            self._unindex(key, lo, hi)
        if lo == first and hi == stop:
            self._drop(key)
            return
        if lo == first:
            run[0] = hi
        elif hi == stop:
            run[1] = lo
        else:  # out of the middle: holes
            if run[2] is None:
                run[2] = set()
            run[2].update(range(lo, hi))
            return
        self._tidy(key, run)

    def _tidy(self, key: int, run: list) -> None:
        """After an end moved: forget holes outside the run, and move ends off holes."""
        trim_holes(run)
        if run[0] >= run[1]:
            self._drop(key)

    def _unindex(self, key: int, lo: int, hi: int) -> None:
        """``[lo, hi)`` of short run ``key`` of an indexed bucket leave the index (a uid there may
        be another run's)."""
        where = self._where
        for uid in range(lo, hi):
            if where.get(uid) == key:
                del where[uid]

    def _drop(self, key: int) -> None:
        first, stop, _, b, short = self._runs.pop(key)
        if short and b in self._indexed:
            self._unindex(key, first, stop)
        keys = self._in[b]
        keys.discard(key)
        if not keys:
            del self._in[b]
            self._indexed.discard(b)
        if not short:
            longs = self._long[b]
            longs.discard(key)
            if not longs:
                del self._long[b]

    # -- the oldest end --------------------------------------------------------------------------
    def first(self) -> int | None:
        """The oldest uid, or None (runs never start on a hole)."""
        for run in self._runs.values():
            return run[0]
        return None

    def pop_runs(self, n: int) -> list[tuple[int, int]]:
        """Take out the ``n`` oldest uids (fewer if the list is shorter), as (first, stop) runs of
        consecutive uids, oldest first."""
        out: list[tuple[int, int]] = []
        runs = self._runs
        while n > 0 and runs:
            key, run = next(iter(runs.items()))
            first, stop, holes, _, short = run
            if holes is None:
                end = min(stop, first + n)
                out.append((first, end))
                n -= end - first
                self._n -= end - first
            else:
                end = a = first
                while end < stop and n > 0:
                    if end in holes:  # a hole ends the current extent
                        if a < end:
                            out.append((a, end))
                        a = end + 1
                    else:
                        n -= 1
                        self._n -= 1
                    end += 1
                if a < end:
                    out.append((a, end))
            if end >= stop:
                self._drop(key)
            else:
                if short and run[3] in self._indexed:
                    self._unindex(key, first, end)
                run[0] = end
                self._tidy(key, run)
        return out

    def __len__(self) -> int:
        return self._n

    def __iter__(self):
        """The members, oldest first."""
        for first, stop, holes, _, _ in list(self._runs.values()):
            for uid in range(first, stop):
                if holes is None or uid not in holes:
                    yield uid


class StretchTakeIn:
    """``take_in`` of a batch of units of one size taken a stretch at a time where the policy can
    say how far its evict-then-insert alternation leaves its lists' sizes alone
    (``_stretch_end``) and take that stretch at once (``_evict_then_insert``); elsewhere one unit
    at a time. The units that fit come in first; each of the rest needs one victim before it."""

    _unit: int

    def _take_in_runs(self, runs, free_bytes: int, now: float) -> list[tuple[int, int]]:
        """``take_in`` of the uids of ``runs`` (in that order), its victims as runs in eviction
        order."""
        fits = max(0, free_bytes // self._unit)
        out: list[tuple[int, int]] = []
        for a, s in runs:
            if fits > 0:  # no victim needed
                end = min(s, a + fits)
                self.insert_many(range(a, end), now)  # type: ignore[attr-defined]
                fits -= end - a
                a = end
            while a < s:
                end = self._stretch_end(a, s)
                if end > a:
                    out += self._evict_then_insert(a, end)
                    a = end
                    continue
                victim = self.evict(now)  # type: ignore[attr-defined]
                if victim is None:
                    raise AssertionError(f"{type(self).__name__}: no victim to make room for {a}")
                out.append((victim, victim + 1))
                self.insert(a, now)  # type: ignore[attr-defined]
                a += 1
        return out

    def _stretch_end(self, a: int, s: int) -> int:
        """Where the stretch of ``[a, s)`` that ``_evict_then_insert`` may take ends (``a``: none)."""
        raise NotImplementedError

    def _evict_then_insert(self, a: int, s: int) -> list[tuple[int, int]]:
        """Each of ``[a, s)`` enters after one victim leaves; the victims as runs."""
        raise NotImplementedError


# -- arithmetic on runs (first, stop) of uids, for the policies that keep them -------------------


def runs_in_order(uids) -> list[tuple[int, int]]:
    """``extents_of(uids)``; a list of consecutive uids (a session's pages) checked in C."""
    if type(uids) is list and uids:
        first, last = uids[0], uids[-1]
        if last - first == len(uids) - 1 and uids == list(range(first, last + 1)):
            return [(first, last + 1)]
    return extents_of(uids)


def distinct_runs(uids) -> list[tuple[int, int]] | None:
    """``uids`` as runs of consecutive uids in their order, or None when a uid repeats."""
    if isinstance(uids, range):
        return [(uids.start, uids.stop)] if uids.step == 1 else None
    runs = runs_in_order(uids)
    if len(runs) < 2:
        return runs
    ordered = sorted(runs)
    if any(s > a for (_, s), (a, _) in zip(ordered, ordered[1:], strict=False)):
        return None
    return runs


def increasing_runs(uids) -> list[tuple[int, int]] | None:
    """``uids`` as increasing runs, or None when they do not increase strictly."""
    if isinstance(uids, range):
        return [(uids.start, uids.stop)] if uids.step == 1 and len(uids) else None
    runs = runs_in_order(uids)
    if any(a >= b for (_, a), (b, _) in zip(runs, runs[1:], strict=False)):
        return None
    return runs


def split_at_sessions(runs) -> list[tuple[int, int]]:
    """``runs`` split where they cross a bucket (session) boundary, empty ones left out: the
    list itself where none needs it (a run is a session's pages: the common case)."""
    if type(runs) is not list:
        runs = list(runs)
    if all(a < s and a >> UNIT_BITS == (s - 1) >> UNIT_BITS for a, s in runs):
        return runs
    out: list[tuple[int, int]] = []
    for a, s in runs:
        while a < s:
            end = min(s, ((a >> UNIT_BITS) + 1) << UNIT_BITS)
            out.append((a, end))
            a = end
    return out


def runs_less(runs: list[tuple[int, int]], taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The increasing runs ``runs`` less ``taken`` (increasing runs inside them)."""
    out: list[tuple[int, int]] = []
    i = 0
    for a, s in runs:
        while i < len(taken) and taken[i][1] <= a:
            i += 1
        while i < len(taken) and taken[i][0] < s:
            x, y = taken[i]
            if a < x:
                out.append((a, x))
            a = max(a, y)
            if y > s:
                break
            i += 1
        if a < s:
            out.append((a, s))
    return out


def trim_holes(run: list) -> None:
    """A run ``[first, stop, holes, ...]`` after an end moved: forget the holes outside
    ``[first, stop)`` and move each end off holes (``holes`` None once none is left)."""
    holes = run[2]
    if holes:
        first, stop = run[0], run[1]
        holes.difference_update([h for h in holes if not first <= h < stop])
        strip_hole_ends(run)
        if not holes:
            run[2] = None
