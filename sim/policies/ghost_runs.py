"""``GhostRuns``: a bounded FIFO of ghost keys (uids of evicted units) kept as runs of
consecutive uids, for 2Q's A1out and ARC's B1 and B2.

A ghost list takes a batch of victims at its newest end and forgets as many of its oldest keys:
with a session's pages evicted together, both are a few runs. ``RunList`` keeps runs too, but
keys each run in an ordered dict, may index a bucket's uids, and builds the runs it pops; a ghost
list is asked about one uid rarely (a single miss) and never says what it forgot, so here a uid
is found by a scan of its session's runs, and forgetting drops runs without listing them:
pushing and forgetting cost a few list and dict operations per run, none per uid.

An entry is ``[first, stop, holes, bucket]``: uids ``[first, stop)`` of one bucket (``uid >>
UNIT_BITS``, the session) less ``holes``, the uids taken out of its middle (ghost hits); an entry
emptied out of the middle of the queue stays, dead (``first == stop``), until it is the oldest
(or until the dead ones are most of the queue: then they are swept out). Each bucket lists its
entries oldest first, so the oldest entry is always its bucket's first.
"""

from __future__ import annotations

from collections import deque

from sim.policies.run_lists import trim_holes
from sim.units import UNIT_BITS, join_extents

DEAD_SLACK = 64  # dead entries kept, at least, before a sweep


class GhostRuns:
    """Ghost keys, oldest first, as runs; at most ``limit`` keys where ``push_runs`` is told one."""

    __slots__ = ("_q", "_in", "_n", "_dead")

    def __init__(self) -> None:
        self._q: deque[list] = deque()  # entries, oldest first (dead ones included)
        self._in: dict[int, list[list]] = {}  # bucket -> its entries, oldest first
        self._n = 0  # live keys
        self._dead = 0  # dead entries in the queue

    # -- adding and forgetting -------------------------------------------------------------------
    def push_runs(self, runs, limit: int | None = None) -> None:
        """Append the uids of each ``(first, stop)`` of ``runs`` (none of them a ghost) at the
        newest end, then forget the oldest keys past ``limit`` (forgetting after the last push
        forgets the same keys as after each)."""
        q, index = self._q, self._in
        n = self._n
        newest = q[-1] if q else None
        for a, s in runs:
            while a < s:
                b = a >> UNIT_BITS
                end = s if (s - 1) >> UNIT_BITS == b else (b + 1) << UNIT_BITS  # one bucket each
                if newest is not None and newest[1] == a and newest[3] == b and newest[0] < a:
                    newest[1] = end  # the newest entry goes on (a session's pages, in turn)
                    n += end - a
                    a = end
                    continue
                entry = newest = [a, end, None, b]
                q.append(entry)
                entries = index.get(b)
                if entries is None:
                    index[b] = [entry]
                else:
                    entries.append(entry)
                n += end - a
                a = end
        self._n = n
        if limit is not None and n > limit:
            self.forget(n - limit)

    def forget(self, k: int) -> None:
        """Forget the ``k`` oldest keys (all, if there are fewer)."""
        q, index = self._q, self._in
        self._n -= min(k, self._n)
        while k > 0 and q:
            entry = q[0]
            first, stop, holes, b = entry
            live = stop - first - (len(holes) if holes else 0)
            if live <= k:  # the whole entry goes (a dead one costs nothing)
                q.popleft()
                if not live:
                    self._dead -= 1
                entries = index[b]
                del entries[0]
                if not entries:
                    del index[b]
                k -= live
            elif holes is None:
                entry[0] = first + k
                k = 0
            else:  # step over the holes among the first k keys
                while k:
                    if first in holes:
                        holes.discard(first)
                    else:
                        k -= 1
                    first += 1
                entry[0] = first
                _settle(entry)  # (it keeps a live key: live > k)

    # -- finding and taking out ------------------------------------------------------------------
    def discard(self, uid: int) -> bool:
        """Take ``uid`` out; False if it was not a ghost."""
        for entry in self._in.get(uid >> UNIT_BITS, ()):
            first, stop, holes, _ = entry
            if first <= uid < stop and (holes is None or uid not in holes):
                self._n -= 1
                self._cut(entry, uid, uid + 1)
                return True
        return False

    def __contains__(self, uid: int) -> bool:
        for first, stop, holes, _ in self._in.get(uid >> UNIT_BITS, ()):
            if first <= uid < stop and (holes is None or uid not in holes):
                return True
        return False

    def buckets(self):
        """The buckets (sessions) that may hold a ghost, as a live view (set operations in C)."""
        return self._in.keys()

    def meets(self, start: int, stop: int) -> bool:
        """Might a ghost lie in ``[start, stop)`` (one bucket)? False only where none does; a
        cheap first look (one dict lookup where the bucket has none)."""
        entries = self._in.get(start >> UNIT_BITS)
        if entries is None:
            return False
        return any(e[0] < stop and start < e[1] for e in entries)

    def first_in(self, start: int, stop: int) -> int | None:
        """The smallest ghost in ``[start, stop)`` (one bucket), or None."""
        best = None
        for first, end, holes, _ in self._in.get(start >> UNIT_BITS, ()):
            lo, hi = max(first, start), min(end, stop)
            while holes and lo < hi and lo in holes:
                lo += 1
            if lo < hi and (best is None or lo < best):
                best = lo
        return best

    def take_range(self, start: int, stop: int) -> list[tuple[int, int]]:
        """Take out the ghosts of ``[start, stop)``; returns them as increasing runs, consecutive
        uids joined."""
        out: list[tuple[int, int]] = []
        while start < stop:
            end = min(stop, ((start >> UNIT_BITS) + 1) << UNIT_BITS)
            for entry in self._in.get(start >> UNIT_BITS, ()):
                first, last, holes, _ = entry
                lo, hi = max(first, start), min(last, end)
                if lo >= hi:
                    continue
                if holes:
                    a = lo
                    for h in sorted(h for h in holes if lo <= h < hi):
                        if a < h:
                            out.append((a, h))
                            self._n -= h - a
                        a = h + 1
                    if a < hi:
                        out.append((a, hi))
                        self._n -= hi - a
                else:
                    out.append((lo, hi))
                    self._n -= hi - lo
                self._cut(entry, lo, hi)
            start = end
        out.sort()
        return join_extents(out)

    def _cut(self, entry: list, lo: int, hi: int) -> None:
        """Take ``[lo, hi)`` (inside ``entry``'s bounds) out of the entry (the count is the
        caller's)."""
        first, stop = entry[0], entry[1]
        if lo == first and hi == stop:
            entry[1] = first
            entry[2] = None
        elif lo == first:
            entry[0] = hi
            _settle(entry)
        elif hi == stop:
            entry[1] = lo
            _settle(entry)
        else:  # out of the middle: holes
            if entry[2] is None:
                entry[2] = set()
            entry[2].update(range(lo, hi))
            return
        if entry[0] == entry[1]:  # dead: it leaves the queue once it is the oldest
            self._dead += 1
            if self._dead > DEAD_SLACK and 2 * self._dead > len(self._q):
                self._sweep()

    def _sweep(self) -> None:
        """Drop the dead entries (most of the queue by now)."""
        self._q = deque(e for e in self._q if e[0] < e[1])
        index: dict[int, list[list]] = {}
        for e in self._q:
            index.setdefault(e[3], []).append(e)
        self._in = index
        self._dead = 0

    # -- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self):
        """The ghosts, oldest first."""
        for first, stop, holes, _ in list(self._q):
            for uid in range(first, stop):
                if holes is None or uid not in holes:
                    yield uid


def _settle(entry: list) -> None:
    """After an end moved: forget holes outside the bounds and move the ends off holes (an empty
    entry is dead)."""
    trim_holes(entry)
    if entry[0] >= entry[1]:
        entry[0] = entry[1] = min(entry[0], entry[1])
        entry[2] = None
