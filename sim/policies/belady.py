"""Belady's MIN (offline): evict the candidate whose next use is farthest in the future.

The key is ``view.next_access_s(uid)``, read when the unit becomes a candidate and on every hit:

- in ``kvsim cachesim`` it is the index of the object's next request in the stream (``inf`` when
  there is none), precomputed from the whole stream (``offline = True`` asks cachesim for it);
- in the engine it is the arrival of the session's next turn *under the current schedule*: the
  scheduler sets it on the session when a turn completes (``inf`` after the last
  turn), just before it unpins them. It is an oracle of the trace, not of the contention: a later
  turn's arrival can still move (closed-loop replay: it depends on when this turn completes), and a
  session's units all share one value.

Ties (never in cachesim for finite values, whose next requests are distinct indices; in the engine,
all units of a session) go to the larger uid first, so a session loses its last pages before its
first (its prefix stays), and between sessions the later one in the trace goes first. Units with no
next use (``inf``) go first. Among those, libCacheSim breaks ties by its binary heap's layout; which
dead object goes first never changes a hit (dead objects are always evicted before any live one, so
the bytes left for live objects are the same), so the hit sequence equals libCacheSim's request by
request, unit and variable sizes (tested).

Structure: the order is (-next use, -uid). Candidates that share a next use and a session bucket
(``uid >> UNIT_BITS``) form a *group*: their uids, ascending, the next victim last, kept as maximal
extents (``_Runs``: a session's release is one extent, whatever the units a page). Two
groups with one next use are ordered by bucket, larger first, because a bucket's uids all lie above
a smaller bucket's; so the order is (-next use, -bucket) between groups and -uid inside one, and a
heap of the groups (an emptied group's entry skipped when it surfaces) gives it. The engine releases, pins and evicts a session's units together,
and they share a next use: one group, so each of those is a list operation, not a heap operation a
unit. (cachesim's objects have distinct next uses: a group each.) Pins: a pinned unit is no
candidate; it rejoins with its next_access_s as it is at unpin. Which group holds a candidate is
kept per session for the engine's uids (a byte a unit and the session's groups: a release, a pin
or a batch of victims is a slice) and per uid for any other view's.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import heapify, heappop, heappush
from itertools import chain

from sim.policies.base import Memoryless
from sim.policies.registry import register
from sim.policies.run_lists import runs_less
from sim.policies.structures import UnitSet, consume
from sim.units import UNIT_BITS, UnitView, extents_of, join_extents

Group = tuple[float, int]  # (-next use, -bucket): the group's place in the order, smallest first


def _extents(uids) -> list[tuple[int, int]]:
    """The extents of ``uids`` (ascending): one for a range, without listing it."""
    if type(uids) is range and uids.step == 1:
        return [(uids.start, uids.stop)] if len(uids) else []
    return extents_of(uids)


class _Runs:
    """A group's uids, ascending, as maximal extents ``[first, stop)`` (no two adjacent): a
    session's release is one extent, its victims a slice of the last ones, whatever the units
    per page (at layer_block a page is 32 units)."""

    __slots__ = ("_a", "_s", "n")

    def __init__(self, extents: list[tuple[int, int]]) -> None:
        self._a = [a for a, _ in extents]
        self._s = [s for _, s in extents]
        self.n = sum(s - a for a, s in extents)

    def extents(self) -> list[tuple[int, int]]:
        return list(zip(self._a, self._s, strict=True))

    def last(self) -> int:
        return self._s[-1] - 1

    def __len__(self) -> int:
        return self.n

    def __contains__(self, uid: int) -> bool:
        i = bisect_right(self._a, uid) - 1
        return i >= 0 and uid < self._s[i]

    def add(self, extents: list[tuple[int, int]]) -> None:
        """The uids of ``extents`` (maximal, ascending, none a member) join."""
        if not extents:
            return
        self.n += sum(s - a for a, s in extents)
        if extents[0][0] >= self._s[-1]:  # all above: appended (the first may go on the last)
            it = iter(extents)
            if extents[0][0] == self._s[-1]:
                self._s[-1] = next(it)[1]
            for a, s in it:
                self._a.append(a)
                self._s.append(s)
            return
        joined = join_extents(sorted(chain(zip(self._a, self._s), extents)))
        self._a = [a for a, _ in joined]
        self._s = [s for _, s in joined]

    def pop(self) -> int:
        """Take out the last uid."""
        uid = self._s[-1] - 1
        self._s[-1] = uid
        if self._a[-1] == uid:
            del self._a[-1], self._s[-1]
        self.n -= 1
        return uid

    def take_last(self, k: int) -> list[tuple[int, int]]:
        """Take out the ``k`` largest uids (fewer than all): their extents, ascending."""
        a, s = self._a, self._s
        out: list[tuple[int, int]] = []
        left = k
        while left:
            x, y = a[-1], s[-1]
            if y - x > left:
                s[-1] = y - left
                out.append((y - left, y))
                break
            out.append((x, y))
            del a[-1], s[-1]
            left -= y - x
        self.n -= k
        out.reverse()
        return out

    def remove(self, extents: list[tuple[int, int]]) -> None:
        """The uids of ``extents`` (ascending, all members, fewer than all) leave."""
        if len(extents) == 1:
            x, y = extents[0]
            i = bisect_right(self._a, x) - 1
            a, s = self._a[i], self._s[i]
            if y < s and x > a:  # a hole inside one extent
                self._s[i] = x
                self._a.insert(i + 1, y)
                self._s.insert(i + 1, s)
            elif y < s:
                self._a[i] = y
            elif x > a:
                self._s[i] = x
            else:
                del self._a[i], self._s[i]
            self.n -= y - x
            return
        left = runs_less(self.extents(), extents)
        self._a = [a for a, _ in left]
        self._s = [s for _, s in left]
        self.n -= sum(s - a for a, s in extents)


class _UidGroups:
    """Each candidate's group, a uid at a time: for any uids (cachesim's objects, a group each)."""

    __slots__ = ("_of",)

    def __init__(self) -> None:
        self._of: dict[int, Group] = {}

    def group_of(self, uid: int) -> Group | None:
        return self._of.get(uid)

    def group_of_all(self, uids) -> Group | None:
        """The group of all of ``uids`` if they are all candidates of one group, else None."""
        groups = list(map(self._of.get, uids))
        g = groups[0]
        return g if g is not None and groups.count(g) == len(groups) else None

    def none_held(self, uids) -> bool:
        return self._of.keys().isdisjoint(uids)

    def add(self, g: Group, uids) -> None:
        self._of.update(dict.fromkeys(uids, g))

    def remove(self, g: Group, uids) -> None:
        consume(map(self._of.__delitem__, uids))

    def gone(self, g: Group) -> None:
        """Group ``g`` has no candidates left."""

    def __len__(self) -> int:
        return len(self._of)

    def __contains__(self, uid: int) -> bool:
        return uid in self._of


class _SessionGroups:
    """The engine's candidates as a ``UnitSet`` (a byte a unit, per session) and, per session,
    the groups holding them (a group is one session's: its key holds the bucket), so a session's
    units that join or leave together are slices, not a dict entry a unit. A session's
    candidates are nearly always one group (one release, one next use); with several, a uid's
    group is found by a binary search of each group's sorted uids."""

    __slots__ = ("_held", "_in", "_groups")

    def __init__(self, groups: dict[Group, _Runs]) -> None:
        self._held = UnitSet()
        self._in: dict[int, list[Group]] = {}  # bucket -> its groups with candidates
        self._groups = groups  # the policy's: group -> its uids, ascending

    def group_of(self, uid: int) -> Group | None:
        if uid not in self._held:
            return None
        gs = self._in[uid >> UNIT_BITS]
        if len(gs) == 1:
            return gs[0]
        for g in gs:
            if uid in self._groups[g]:
                return g
        raise AssertionError(f"candidate {uid} is in none of its session's groups")

    def group_of_all(self, uids) -> Group | None:
        """The group of all of ``uids`` if they are all candidates of one group, else None."""
        gs = self._in.get(uids[0] >> UNIT_BITS)
        if gs is None or len(gs) != 1 or self._held.count_in(uids, True) != len(uids):
            return None
        return gs[0]  # (all in the bucket's one group, so all of one session)

    def none_held(self, uids) -> bool:
        """(``uids`` ascending, as every batch here but ``group_of_all``'s.)"""
        return self._held.count_in(uids, ascending=True) == 0

    def add(self, g: Group, uids) -> None:
        self._held.add_many(uids, ascending=True)
        gs = self._in.setdefault(-g[1], [])
        if g not in gs:
            gs.append(g)

    def remove(self, g: Group, uids) -> None:
        self._held.discard_many(uids, ascending=True)

    def gone(self, g: Group) -> None:
        """Group ``g`` has no candidates left."""
        gs = self._in[-g[1]]
        gs.remove(g)
        if not gs:
            del self._in[-g[1]]

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, uid: int) -> bool:
        return uid in self._held


@register("belady")
class Belady(Memoryless):
    offline = True  # reads view.next_access_s (cachesim fills it from the stream)
    reads_last_access = False
    grows_in_bulk = True  # keys are read when a unit becomes a candidate, never at eviction

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._groups: dict[Group, _Runs] = {}  # group -> its uids, ascending (victim last)
        # candidate -> its group: the engine's uids by session, other uids one by one
        self._where: _UidGroups | _SessionGroups = (
            _SessionGroups(self._groups) if isinstance(self.view, UnitView) else _UidGroups()
        )
        self._heap: list[Group] = []  # the groups (and groups since emptied), a heap

    def _group(self, uid: int) -> Group:
        return (-self.view.next_access_s(uid), -(uid >> UNIT_BITS))

    # -- becoming a candidate --------------------------------------------------------------------
    def _add(self, uid: int, now: float) -> None:
        if uid in self._where:
            self._discard(uid)
        g = self._group(uid)
        self._where.add(g, (uid,))
        members = self._groups.get(g)
        if members is None:  # (cachesim's objects: a new group each)
            self._new_group(g, [(uid, uid + 1)])
        else:
            members.add([(uid, uid + 1)])

    def _join(self, g: Group, uids) -> None:
        """``uids`` (ascending, none a candidate) become candidates of group ``g``."""
        self._where.add(g, uids)
        members = self._groups.get(g)
        if members is None:
            self._new_group(g, _extents(uids))
        else:
            members.add(_extents(uids))

    def _new_group(self, g: Group, extents: list[tuple[int, int]]) -> None:
        self._groups[g] = _Runs(extents)
        heappush(self._heap, g)  # (a twin left by an emptied group of this key is harmless)
        if len(self._heap) > 2 * len(self._groups) + 64:  # emptied groups' entries: drop them
            self._heap = list(self._groups)
            heapify(self._heap)

    def _drop_group(self, g: Group) -> None:
        del self._groups[g]
        self._where.gone(g)

    def access(self, uid: int, now: float) -> None:
        if uid in self._where:  # a hit on a candidate (cachesim): its next use moved
            self._add(uid, now)

    def release(self, uids, now: float) -> None:
        if not isinstance(uids, range):
            uids = sorted(uids)
        if not uids:
            return
        g = self._group(uids[0])
        if (
            uids[0] >> UNIT_BITS != uids[-1] >> UNIT_BITS
            or self._group(uids[-1]) != g
            or not self._where.none_held(uids)
        ):
            for uid in uids:
                self._add(uid, now)
            return
        self._join(g, uids)  # a session's units: one next use, one group

    # -- no longer a candidate -------------------------------------------------------------------
    def _forget(self, uids) -> None:
        if not isinstance(uids, range):
            uids = sorted(uids)  # (the engine's are: one pass)
        if not uids:
            return
        where = self._where
        g = where.group_of_all(uids)
        if g is not None:
            where.remove(g, uids)
            self._leave(g, uids)
            return
        for uid in uids:  # not all of one group's
            self._discard(uid)

    def _discard(self, uid: int) -> None:
        g = self._where.group_of(uid)
        if g is not None:
            self._where.remove(g, (uid,))
            members = self._groups[g]
            if len(members) == 1:
                self._drop_group(g)
            else:
                members.remove([(uid, uid + 1)])

    def _leave(self, g: Group, uids) -> None:
        """``uids`` (ascending members of group ``g``, already out of ``_where``) leave it."""
        members = self._groups[g]
        if len(uids) == len(members):
            self._drop_group(g)
            return
        members.remove(_extents(uids))

    # -- the choice ------------------------------------------------------------------------------
    def _top(self) -> Group | None:
        """The first non-empty group, or None."""
        heap, groups = self._heap, self._groups
        while heap and heap[0] not in groups:
            heappop(heap)
        return heap[0] if heap else None

    def peek(self, now: float) -> int | None:
        g = self._top()
        return None if g is None else self._groups[g].last()

    def _take(self, n: int) -> list[list[tuple[int, int]]]:
        """Evict ``n`` units (fewer when the candidates run out): each group's share as its
        extents, ascending (the victims went from its end, so in eviction order each share is
        reversed)."""
        out = []
        groups, where = self._groups, self._where
        while n > 0:
            g = self._top()
            if g is None:
                break
            members = groups[g]
            k = min(n, len(members))
            if k == len(members):
                taken = members.extents()
                self._drop_group(g)
            else:
                taken = members.take_last(k)
            for a, s in taken:
                where.remove(g, range(a, s))
            out.append(taken)
            n -= k
        return out

    def evict(self, now: float) -> int | None:
        g = self._top()
        if g is None:
            return None
        members = self._groups[g]
        uid = members.pop()
        self._where.remove(g, (uid,))
        if not members:
            self._drop_group(g)
        return uid

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_bytes(nbytes, now)
        return [
            uid
            for taken in self._take(n)
            for a, s in reversed(taken)
            for uid in range(s - 1, a - 1, -1)
        ]

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if n is None or not self.drops_victims:
            return super().evict_extents(nbytes, now)
        out: list[tuple[int, int]] = []
        for taken in self._take(n):  # dropped: their order is nobody's, so increasing runs
            out += taken
        return out

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, uid: int) -> bool:
        return uid in self._where
