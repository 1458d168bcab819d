"""Runs of consecutive uids for SLRU's segments and for the segments its pinned units remember.

``SegmentQueue`` is a ``RunQueue`` (an LRU list of runs, grouped by bucket: the engine's buckets
are sessions) that also lists a bucket's members as extents and takes a stretch of one run out at
once: a session's units found in a segment, and taken out together, cost O(runs of the session).

``HeldRuns`` keeps, for units out of every segment (pinned), the segment each returns to: per
bucket, a sorted list of disjoint extents ``[first, stop, segment]``. A session's pages pinned
together are one extent per segment they came from, so holding, releasing and removing a session
cost O(extents); one uid is found by bisection, O(log extents).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import itemgetter

from sim.policies.structures import RunQueue
from sim.units import UNIT_BITS

_first = itemgetter(0)


class SegmentQueue(RunQueue):
    """A ``RunQueue`` that lists a bucket's members as extents and takes out a stretch of them."""

    __slots__ = ()

    def extents_in(self, bucket: int) -> list[tuple[int, int]]:
        """The bucket's members as (first, stop) stretches without holes, in no set order."""
        keys = self._in.get(bucket)
        if not keys:
            return []
        out: list[tuple[int, int]] = []
        runs = self._runs
        for key in keys:
            first, stop, holes, _ = runs[key]
            if not holes:
                out.append((first, stop))
                continue
            a = first
            for hole in sorted(holes):  # holes lie strictly inside a run
                if a < hole:
                    out.append((a, hole))
                a = hole + 1
            out.append((a, stop))
        return out

    def discard_extent(self, a: int, b: int) -> None:
        """Take out uids ``a .. b-1``: members all, in one run (a stretch ``extents_in`` gave)."""
        key = self._run_of(a)
        if key is None:
            raise KeyError(a)
        run = self._runs[key]
        self._n -= b - a
        first, stop, holes, _ = run
        if a == first and b == stop:
            self._drop(key)
        elif a == first:
            run[0] = b
            while holes and run[0] in holes:  # a run never starts on a hole
                holes.discard(run[0])
                run[0] += 1
        elif b == stop:
            run[1] = a
            while holes and run[1] - 1 in holes:
                holes.discard(run[1] - 1)
                run[1] -= 1
        else:
            if holes is None:
                run[2] = holes = set()
            holes.update(range(a, b))

    def holds_any(self, a: int, b: int) -> bool:
        """Is any uid of ``a .. b-1`` (one bucket) a member?"""
        keys = self._in.get(a >> UNIT_BITS)
        if not keys:
            return False
        runs = self._runs
        for key in keys:
            first, stop, holes, _ = runs[key]
            lo, hi = max(a, first), min(b, stop)
            if lo < hi and (not holes or any(u not in holes for u in range(lo, hi))):
                return True
        return False


class HeldRuns:
    """Units out of the order (pinned), each with a segment, kept per bucket as sorted disjoint
    extents ``[first, stop, segment]``."""

    __slots__ = ("_by_bucket", "_n")

    def __init__(self) -> None:
        self._by_bucket: dict[int, list[list[int]]] = {}
        self._n = 0

    def add(self, a: int, b: int, seg: int) -> None:
        """Hold ``a .. b-1`` (one bucket, none held) with segment ``seg``."""
        ext = self._by_bucket.setdefault(a >> UNIT_BITS, [])
        self._n += b - a
        if not ext or ext[-1][1] <= a:  # the common case: after every extent held
            last = ext[-1] if ext else None
            if last is not None and last[1] == a and last[2] == seg:
                last[1] = b
            else:
                ext.append([a, b, seg])
            return
        ext.insert(bisect_left(ext, a, key=_first), [a, b, seg])

    def _split_at(self, ext: list[list[int]], x: int) -> int:
        """Make an extent start at ``x`` if one holds it; the index of the first extent that
        starts at ``x`` or later."""
        i = bisect_right(ext, x, key=_first) - 1
        if i < 0:
            return 0
        a, b, seg = ext[i]
        if a == x:
            return i
        if x < b:
            ext[i][1] = x
            ext.insert(i + 1, [x, b, seg])
        return i + 1

    def _slice(self, a: int, b: int) -> tuple[list[list[int]], int, int] | None:
        """The bucket's extents cut at ``a`` and ``b``, and the index range of those inside."""
        ext = self._by_bucket.get(a >> UNIT_BITS)
        if not ext:
            return None
        lo = self._split_at(ext, a)
        hi = self._split_at(ext, b)
        return ext, lo, hi

    def count_in(self, a: int, b: int) -> int:
        """How many of ``a .. b-1`` (one bucket) are held."""
        ext = self._by_bucket.get(a >> UNIT_BITS)
        if not ext or ext[-1][1] <= a or b <= ext[0][0]:  # (a new page: after every extent)
            return 0
        n = 0
        for first, stop, _ in ext[max(0, bisect_right(ext, a, key=_first) - 1) :]:
            if first >= b:
                break
            n += max(0, min(b, stop) - max(a, first))
        return n

    def cut(self, a: int, b: int) -> int:
        """Stop holding every held uid of ``a .. b-1`` (one bucket); how many were held."""
        got = self._slice(a, b)
        if got is None:
            return 0
        ext, lo, hi = got
        n = sum(stop - first for first, stop, _ in ext[lo:hi])
        del ext[lo:hi]
        self._forget_if_empty(a >> UNIT_BITS, ext)
        self._n -= n
        return n

    def _forget_if_empty(self, bucket: int, ext: list[list[int]]) -> None:
        if not ext:
            del self._by_bucket[bucket]

    def segment(self, uid: int) -> int | None:
        """The segment a held uid remembers, or None if it is not held."""
        ext = self._by_bucket.get(uid >> UNIT_BITS)
        if not ext:
            return None
        i = bisect_right(ext, uid, key=_first) - 1
        if i >= 0 and uid < ext[i][1]:
            return ext[i][2]
        return None

    def take(self, uid: int) -> int | None:
        """Stop holding ``uid``; the segment it remembered, or None if it was not held."""
        seg = self.segment(uid)
        if seg is not None:
            self.cut(uid, uid + 1)
        return seg

    def set_segment(self, uid: int, seg: int) -> None:
        """A held uid now remembers ``seg``."""
        got = self._slice(uid, uid + 1)
        if got is not None:
            ext, lo, hi = got
            for e in ext[lo:hi]:
                e[2] = seg

    def bucket(self, bucket: int) -> list[list[int]]:
        """The bucket's extents, in order (not to be changed by the caller)."""
        return self._by_bucket.get(bucket, [])

    def pop_bucket(self, bucket: int) -> list[list[int]]:
        """Stop holding the bucket's units; their extents, in order."""
        ext = self._by_bucket.pop(bucket, [])
        self._n -= sum(stop - first for first, stop, _ in ext)
        return ext

    def holds_bucket(self, bucket: int) -> bool:
        return bucket in self._by_bucket

    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: int) -> bool:
        return self.segment(uid) is not None
