"""``RunS3FIFO``: S3-FIFO where every unit has one size (``view.unit_bytes``: the engine), its
queues kept as runs of a session's consecutive units.

S and M are ``RunOrder``s (entry order, a pinned unit keeps its place, pins per session), the ghost
G a ``RunList`` of at most ``int(0.9 c) // unit`` keys, and the counters a byte per unit number
for each session with a member whose counter is not 0 (a unit enters with 0, and most units of a
trace are never hit while they are in the tier; a non-member's byte is 0). A counter saturates at
``MAX_COUNT``: the walks read only ``min(counter, 3)``, which saturation keeps. A session's history
entering, its pin and release, and a stretch of victims leaving then cost O(runs), not O(units):
a turn's hit on a session's units, a walk's reinsertions (``min(f, 3) - 1``, a byte translation)
and S's leavers are byte slices in C (at layer_block, 32 units a page, the per-unit dict work this
replaced was most of the policy's time); the walks read the counters of a run's stretch as one
slice and take the units between two counted ones at once. The decisions are ``S3FIFO``'s, unit
for unit: ``S3FIFO`` builds one of these wherever its view has a unit size.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import chain, compress, islice, starmap
from operator import eq, itemgetter, lt

from sim.policies.base import EvictionPolicy
from sim.policies.ghost_runs import GhostRuns
from sim.policies.run_lists import distinct_runs, runs_in_order, runs_less, split_at_sessions
from sim.policies.run_order import RunOrder
from sim.policies.s3fifo import S3FIFO
from sim.policies.short_runs import split_short, uids_apart
from sim.policies.structures import ByteBudget, consume
from sim.units import UNIT_BITS, UNIT_MASK, join_extents

LOOP_HOT = 64  # a walk passes fewer counted units in a plain loop, more by bisection
FIRST_LOOK = 64  # units of a run whose counters a walk reads first (it doubles while short)
MAX_COUNT = 255  # a counter saturates here (a byte); only min(counter, 3) is ever read
_INC = bytes(min(v + 1, MAX_COUNT) for v in range(256))  # a hit, on a byte string of counters


class _Marked:
    """The members with a counter, for ``RunOrder.pop_unmarked``: ``isdisjoint`` of a run of one
    session reads its counters' bytes in C."""

    __slots__ = ("_of",)

    def __init__(self, of: dict[int, bytearray]) -> None:
        self._of = of

    def __len__(self) -> int:
        return len(self._of)

    def isdisjoint(self, run: range) -> bool:
        counts = self._of.get(run.start >> UNIT_BITS)
        if counts is None:
            return True
        x = run.start & UNIT_MASK
        y = min(x + len(run), len(counts))
        return x >= y or counts.count(0, x, y) == y - x


def _sequence(uids):
    """``uids`` as a range or a list (the orders' batch paths index them)."""
    return uids if isinstance(uids, (range, list)) else list(uids)


def _one_session_increasing(uids) -> bool:
    """Are ``uids`` (a range or a list) increasing uids of one session?"""
    if isinstance(uids, range):
        return uids.step == 1 and uids[0] >> UNIT_BITS == uids[-1] >> UNIT_BITS
    return uids[0] >> UNIT_BITS == uids[-1] >> UNIT_BITS and all(
        map(lt, uids, islice(uids, 1, None))
    )


def _apart(runs: list[tuple[int, int]]) -> bool:
    """Do no two of ``runs`` (non-empty extents) share a uid?"""
    if len(runs) < 2:
        return True
    ordered = sorted(runs)
    return not any(s > a for (_, s), (a, _) in zip(ordered, ordered[1:], strict=False))


def _joined(extents: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``join_extents(extents)``, the list itself where no extent starts where the one before
    stops (found in C)."""
    if len(extents) <= 16:  # (a short list costs less in the plain loop)
        return join_extents(extents)
    stops, starts = map(itemgetter(1), extents), map(itemgetter(0), islice(extents, 1, None))
    return join_extents(extents) if any(map(eq, stops, starts)) else extents


def _walk_past(
    a: int, end: int, hot: Sequence[int], want: int, out: list[tuple[int, int]]
) -> tuple[int, int]:
    """A walk over ``[a, end)`` that passes the ``hot`` uids (increasing, in that range) and takes
    the others as victims until it has ``want``: appends them to ``out`` as extents, in order,
    and returns (where it stopped, how many hot it passed)."""
    if len(hot) < LOOP_HOT:
        pos, got, passed = a, 0, 0
        for h in hot:
            if h > pos:
                n = min(h - pos, want - got)
                out.append((pos, pos + n))
                got += n
                pos += n
                if got == want:
                    return pos, passed
            passed += 1
            pos = h + 1
        if got < want and end > pos:
            n = min(end - pos, want - got)
            out.append((pos, pos + n))
            pos += n
        return pos, passed

    # ``hot[i] - a - i`` victims precede ``hot[i]``, a count that never decreases along
    # ``hot``: the walk passes the hot uids it reaches with fewer than ``want``, and the gaps
    # between stretches of consecutive hot uids are found by bisection too, not a step each.
    def before(i: int) -> int:
        return hot[i] - a - i

    every = range(len(hot))
    passed = bisect_left(every, want, key=before)
    stop = end if end - a - len(hot) < want else a + want + passed
    pos, i = a, 0
    while i < passed:
        if hot[i] > pos:
            out.append((pos, hot[i]))
        i = bisect_right(every, before(i), i, passed, key=before)  # past hot[i]'s stretch
        pos = hot[i - 1] + 1
    if stop > pos:
        out.append((pos, stop))
    return stop, passed


class RunS3FIFO(S3FIFO):
    """S3-FIFO on runs (see the module's note); ``S3FIFO``'s answers, call for call."""

    _ghost: GhostRuns  # type: ignore[assignment]

    def __init__(self, ctx) -> None:
        EvictionPolicy.__init__(self, ctx)
        self._unit: int = ctx.view.unit_bytes
        self._s = RunOrder()  # S: candidates and pinned units, in entry order
        self._m = RunOrder()  # M: likewise
        self._ghost = GhostRuns()  # G's keys, oldest first
        # session -> its members' counters, a byte by unit number (0 for every uid that is no
        # member), for the sessions with a member whose counter is not 0: a turn's hit on a
        # session's units, a walk's reinsertions and its victims leaving are slices in C
        self._counts: dict[int, bytearray] = {}
        # session -> how many of its members have a counter that is not 0 (the sessions of
        # ``_counts``): the walks take the runs of a session without one as a whole
        self._marks: dict[int, int] = {}
        self._marked_view = _Marked(self._counts)
        self._lower = bytes(max(min(v, self.max_freq) - 1, 0) for v in range(256))
        self._at_least = bytes(v >= self.move_to_main_threshold for v in range(256))
        self._budget = ByteBudget()
        self._sized_for = -1
        self._shares = (0, 0, 0)
        self._has_evicted = False
        self._incoming: tuple[int, bool] | None = None
        self._plan: tuple[list[int], list[int]] | None = None
        self._planned: list[int] | None = None
        # a plan's units, their runs, and whether they enter S as those runs (see _ghosts_among)
        self._split: tuple[list[int], list[tuple[int, int]], bool] | None = None

    # -- cachesim hooks --------------------------------------------------------------------------
    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self._ghost.discard(uid))

    def admit(self, uid: int) -> bool:
        small = self._sizes()[0]
        inc = self._incoming
        hit = inc is not None and inc[0] == uid and inc[1]
        return self._unit < small or (hit and self._unit <= small)

    # -- membership ------------------------------------------------------------------------------
    def _queue(self, uid: int) -> RunOrder | None:
        """The queue ``uid`` is a member of (a candidate or pinned), or None."""
        if self._s.is_member(uid):
            return self._s
        if self._m.is_member(uid):
            return self._m
        return None

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        if self._may_hold((uid, uid + 1)) and self._queue(uid) is not None:
            self.remove(uid)  # (a member inserted again enters anew)
        inc = self._incoming
        hit = inc[1] if inc is not None and inc[0] == uid else self._ghost.discard(uid)
        self._incoming = None
        self._budget.grow(self._unit)
        # a ghost hit enters M; so does any miss while S is full before the first eviction
        if hit or (not self._has_evicted and len(self._s) * self._unit >= self._sizes()[0]):
            self._m.enter(uid, candidate=not pinned)
        else:
            self._s.enter(uid, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order, as runs once something was evicted and none is a member:
        each session's ghosts leave G and enter M, its other units S, each queue taking its units
        in the batch's order."""
        if self._entered_by_plan(uids, pinned):
            return
        uids = _sequence(uids)
        split, self._split = self._split, None
        if (
            split is not None
            and split[2]
            and split[0] is uids
            and self._incoming is None
            and self._has_evicted
        ):  # the plan's check found them fresh, none a ghost: all enter S
            self._s.enter_runs(split[1], not pinned)
            self._budget.grow(self._unit * len(uids))
            return
        if len(uids) == 1:  # a decode step's new page: the plain hook costs less than a batch
            self.insert(uids[0], now, pinned)
            return
        if split is not None and split[0] is uids:  # the plan's ghost check found them
            runs: list[tuple[int, int]] | None = split[1] if _apart(split[1]) else None
        else:
            runs = distinct_runs(uids)
        sessions = split_at_sessions(runs) if runs is not None else []
        if (
            runs is None
            or self._incoming is not None
            or not (self._has_evicted or self._shares_fixed())
            or self._s.may_hold_any(sessions)
            or self._m.may_hold_any(sessions)
        ):
            EvictionPolicy.insert_many(self, uids, now, pinned)
            return
        ghost, count, candidate = self._ghost, 0, not pinned
        if not self._has_evicted:
            self._enter_before_eviction(sessions, len(uids), candidate)
            return
        if ghost.buckets().isdisjoint({a >> UNIT_BITS for a, _ in sessions}):  # no ghost: all S
            self._s.enter_runs(sessions, candidate)
            self._budget.grow(self._unit * len(uids))  # (distinct: runs were found)
            return
        to_s: list[tuple[int, int]] = []  # (S and M are apart: S's runs enter at once)
        for a, s in sessions:
            count += s - a
            hits = ghost.take_range(a, s) if ghost.meets(a, s) else []
            if hits:
                self._m.enter_runs(hits, candidate)
                to_s += runs_less([(a, s)], hits)
            else:
                to_s.append((a, s))
        self._s.enter_runs(to_s, candidate)
        self._budget.grow(self._unit * count)

    def _shares_fixed(self) -> bool:
        """Before the first eviction: do the queues' shares stay put while a batch enters (a
        capacity was set), with no ghost to hit (G takes only victims)?"""
        return self._budget.capacity is not None and not self._ghost

    def _enter_before_eviction(
        self, runs: list[tuple[int, int]], count: int, candidate: bool
    ) -> None:
        """``insert`` of the ``count`` uids of ``runs`` (none a member, G empty, the shares
        fixed), in order, before the first eviction: each enters S while S's candidates are
        below its share, else M; a pinned unit adds no candidate, so they all enter one queue."""
        unit = self._unit
        self._budget.grow(unit * count)
        held, small = len(self._s) * unit, self._sizes()[0]
        if held >= small:
            to_s = 0
        else:
            to_s = min(count, -(-(small - held) // unit)) if candidate else count
        if to_s == count:
            self._s.enter_runs(runs, candidate)
            return
        if not to_s:
            self._m.enter_runs(runs, candidate)
            return
        first: list[tuple[int, int]] = []  # the first ``to_s`` uids, for S; the others M's
        rest: list[tuple[int, int]] = []
        for a, s in runs:
            if to_s >= s - a:
                first.append((a, s))
                to_s -= s - a
            elif to_s:
                first.append((a, a + to_s))
                rest.append((a + to_s, s))
                to_s = 0
            else:
                rest.append((a, s))
        self._s.enter_runs(first, candidate)
        self._m.enter_runs(rest, candidate)

    def _may_hold(self, run: tuple[int, int]) -> bool:
        """Might a uid of ``run`` (one session) be a member?"""
        return self._s.may_hold(*run) or self._m.may_hold(*run)

    def access(self, uid: int, now: float) -> None:
        if self._queue(uid) is not None:
            self._bump(uid)
        self._incoming = None

    def count_of(self, uid: int) -> int:
        """``uid``'s counter (0 where it has none), saturated at ``MAX_COUNT``."""
        counts = self._counts.get(uid >> UNIT_BITS)
        i = uid & UNIT_MASK
        return counts[i] if counts is not None and i < len(counts) else 0

    def counters(self) -> dict[int, int]:
        """Every counter that is not 0, by uid (for tests)."""
        return {
            b << UNIT_BITS | i: v
            for b, counts in self._counts.items()
            for i, v in enumerate(counts)
            if v
        }

    def _array(self, b: int, stop: int) -> bytearray:
        """Session ``b``'s counters, long enough for unit numbers below ``stop``."""
        counts = self._counts.get(b)
        if counts is None:
            counts = self._counts[b] = bytearray(stop)
        elif len(counts) < stop:
            counts.extend(bytes(stop - len(counts)))
        return counts

    def _settle(self, b: int, more: int) -> None:
        """Session ``b`` has ``more`` members with a counter than before (may be negative); one
        left with none leaves ``_counts`` and ``_marks``."""
        if more:
            left = self._marks.get(b, 0) + more
            if left:
                self._marks[b] = left
            else:
                del self._marks[b], self._counts[b]

    def _bump(self, uid: int) -> None:
        """A hit on member ``uid``: its counter goes up by one."""
        b, i = uid >> UNIT_BITS, uid & UNIT_MASK
        counts = self._array(b, i + 1)
        v = counts[i]
        if v < MAX_COUNT:
            counts[i] = v + 1
        if not v:
            self._settle(b, 1)

    def _map_runs(self, runs, table: bytes | None) -> None:
        """Each counter of the uids of ``runs`` (extents, each inside one session) goes through
        ``table`` (a byte translation), or to 0 where ``table`` is None."""
        for a, s in runs:
            b = a >> UNIT_BITS
            x, y = a & UNIT_MASK, ((s - 1) & UNIT_MASK) + 1
            if table is None:
                counts = self._counts.get(b)
                if counts is None:
                    continue
                y = min(y, len(counts))
                if x >= y:
                    continue
                zeros = counts.count(0, x, y)
                counts[x:y] = bytes(y - x)
                self._settle(b, zeros - (y - x))
            else:
                if b not in self._counts and not table[0]:
                    continue  # (no counter in the session, and 0 stays 0)
                counts = self._array(b, y)
                zeros = counts.count(0, x, y)
                counts[x:y] = counts[x:y].translate(table)
                self._settle(b, zeros - counts.count(0, x, y))

    def pin(self, uid: int) -> None:
        q = self._queue(uid)
        if q is not None:
            q.discard(uid)

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each: the members' counters go up, each stays in its place."""
        self._incoming = None
        uids = _sequence(uids)
        if self._acquire_runs(uids):
            return
        in_s, in_m, distinct = self._members(uids)
        members = in_s if not in_m else in_m if not in_s else [*in_s, *in_m]
        if not distinct and len(set(members)) < len(members):  # a uid twice counts twice
            consume(map(self._bump, members))
        elif members:  # each queue's members as runs: their counters' bytes in C
            for part in (in_s, in_m):
                if part:
                    runs = (
                        [(part[0], part[-1] + 1)]
                        if isinstance(part, range)
                        else split_at_sessions(runs_in_order(list(part)))
                    )
                    self._map_runs(runs, _INC)
        if in_s:
            self._s.discard_all(in_s)
        if in_m:
            self._m.discard_all(in_m)

    def _acquire_runs(self, uids) -> bool:
        """``acquire`` of increasing uids of one session (the engine's batch: a session's units
        in a tier), each queue's members among them found as runs of its entries, where in each
        queue they are none or every member of the session, and the session's pins in it are none
        or all: their counters go up as slices, each queue pins the session whole. False, changing
        nothing, otherwise (a run with holes, a part of a session's members, a partial pin)."""
        if isinstance(uids, range):
            if uids.step != 1 or not len(uids):
                return False
            runs = [(uids.start, uids.stop)]
        else:
            if not uids:
                return False
            runs = runs_in_order(uids)
            if len(runs) > 1 and any(
                s >= a for (_, s), (a, _) in zip(runs, runs[1:], strict=False)
            ):
                return False  # (not increasing)
        b = runs[0][0] >> UNIT_BITS
        if (runs[-1][1] - 1) >> UNIT_BITS != b:
            return False
        found = []
        for q in (self._s, self._m):
            got = q.session_member_runs(b, runs)
            if got is None:
                return False
            if got:
                if sum(s - a for a, s in got) != q.session_count(b) or not q.pins_all_or_none(b):
                    return False
                found.append((q, got))
        for _, got in found:
            self._map_runs(got, _INC)
        for q, _ in found:
            q.pin_session(b)
        return True

    def _members(self, uids) -> tuple[Sequence[int], Sequence[int], bool]:
        """Those of ``uids`` that are members of S, and of M, in order; and whether ``uids`` are
        known to be distinct (else they may be or not)."""
        if not len(uids):
            return [], [], True
        if _one_session_increasing(uids):  # the engine's batches: by each queue's runs
            return self._s.session_members_among(uids), self._m.session_members_among(uids), True
        in_s = self._s.members_among(uids)
        if len(in_s) == len(uids):
            return in_s, [], False
        if not len(in_s):
            return [], self._m.members_among(uids), False
        return in_s, self._m.members_among(uids), False

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order: where each is a pinned member (once), it returns to its
        place in its queue; else one at a time."""
        uids = _sequence(uids)
        if self._s.back_whole(uids) or self._m.back_whole(uids):
            return  # the usual batch: a session's members, all in one queue and pinned
        if self._back_split_session(uids):
            return
        in_s, in_m, distinct = self._members(uids)
        if len(in_s) + len(in_m) != len(uids) or not distinct and len(set(uids)) < len(uids):
            EvictionPolicy.release(self, uids, now)
            return
        were_s = self._s.discard_many(in_s) if in_s else []
        were_m = self._m.discard_many(in_m) if in_m else []
        if were_s or were_m:  # a candidate among them enters anew: one at a time
            self._s.back_many(were_s)
            self._m.back_many(were_m)
            EvictionPolicy.release(self, uids, now)
            return
        if in_s:
            self._s.back_many(in_s)
        if in_m:
            self._m.back_many(in_m)

    def _back_split_session(self, uids) -> bool:
        """``release`` of a stretch of uids that are every member of their session, some in S and
        the others in M (layer_block), all pinned: each queue's part returns to its places at
        once, without listing either part. False, changing nothing, where they are not."""
        if not (isinstance(uids, range) and uids.step == 1 and len(uids)):
            return False
        a, s = uids.start, uids.stop
        b = a >> UNIT_BITS
        if (s - 1) >> UNIT_BITS != b:
            return False
        in_s, in_m = self._s.held_within(a, s), self._m.held_within(a, s)
        if in_s is None or in_m is None or in_s + in_m != s - a:
            return False
        if not (in_s == 0 or self._s.pins_all(b)) or not (in_m == 0 or self._m.pins_all(b)):
            return False
        if in_s:
            self._s.back_session(b)
        if in_m:
            self._m.back_session(b)
        return True

    def unpin(self, uid: int, now: float) -> None:
        q = self._queue(uid)
        if q is None or uid in q:  # not pinned: it enters anew
            self.insert(uid, now)
        else:
            q.back(uid)

    def remove(self, uid: int, pinned: bool = False) -> None:
        b = uid >> UNIT_BITS
        if b in self._counts:
            counts, i = self._counts[b], uid & UNIT_MASK
            if i < len(counts) and counts[i]:
                counts[i] = 0
                self._settle(b, -1)
        if self._s.take(uid) or self._m.take(uid):  # (a member of one queue at most)
            self._budget.shrink(self._unit)

    def remove_many(self, uids, pinned: bool = False) -> None:
        uids = _sequence(uids)
        if len(set(uids)) < len(uids):
            EvictionPolicy.remove_many(self, uids, pinned)
            return
        in_s, in_m, _ = self._members(uids)
        if self._counts and len(uids):  # (a uid that is no member has no counter)
            runs = (
                [(uids[0], uids[-1] + 1)]
                if isinstance(uids, range)
                else split_at_sessions(runs_in_order(list(uids)))
            )
            self._map_runs(runs, None)
        if in_s:
            self._s.leave_many(in_s)
        if in_m:
            self._m.leave_many(in_m)
        self._budget.shrink(self._unit * (len(in_s) + len(in_m)))

    # -- eviction --------------------------------------------------------------------------------
    def _counted(
        self, a: int, s: int, want: int, least: int
    ) -> tuple[int, Sequence[int], Sequence[int]]:
        """The members of ``[a, s)`` (the head run of a queue) with a counter of at least
        ``least``, increasing, read far enough that ``want`` units below it lie before the end
        of the reading: (that end, those uids, every uid read with a counter, increasing; a
        range where every uid read has one, a list otherwise)."""
        look = max(FIRST_LOOK, 2 * want)
        counts = self._counts.get(a >> UNIT_BITS)
        if counts is None:  # no counter in the session: none is read
            return min(s, a + look), [], []
        at_least = None if least <= 1 else self._at_least_table(least)
        x = a & UNIT_MASK
        while True:
            stop = min(s, a + look)
            window = counts[x : x + stop - a]  # (shorter where the counters end: 0 beyond)
            if len(window) == stop - a and not window.count(0):  # every uid read has one
                marked: Sequence[int] = range(a, stop)
            else:
                marked = list(compress(range(a, stop), window))
            hot = marked
            if at_least is not None:
                hot = list(compress(range(a, stop), window.translate(at_least)))
            if stop == s or stop - a - len(hot) >= want:
                return stop, hot, marked
            look *= 2

    def _at_least_table(self, least: int) -> bytes:
        """A byte translation: 1 for a counter of at least ``least``, else 0."""
        if least == self.move_to_main_threshold:
            return self._at_least
        return bytes(v >= least for v in range(256))

    def _main_walk(self, k: int, main_size: int, out: list[tuple[int, int]]) -> int | None:
        """Evict from M while it is over its share or S is empty, up to ``k`` victims (appended
        to ``out`` as extents): the oldest unit with a counter goes to M's newest end with
        ``min(counter, 3) - 1``, the oldest without one is the victim. How many victims; None
        when M has no candidate."""
        m, s_order = self._m, self._s
        cap = main_size // self._unit  # M is over its share when it holds more candidates
        taken = 0
        while taken < k:
            s_empty = not len(s_order)
            if not (s_empty or len(m) > cap):
                break
            want = k - taken if s_empty else min(k - taken, len(m) - cap)
            # The oldest runs without a counter are victims and nothing is reinserted: taken a
            # run at a time (a run with a counter, a hole or a pin is read below).
            got = m.pop_unmarked(want, self._marked_view, out, self._counts)
            if got:
                taken += got
                continue
            head = m.head_run()
            if head is None:
                return taken or None
            a, s = head
            end, hot, _ = self._counted(a, s, want, 1)
            pos, passed = _walk_past(a, end, hot, want, out)
            got = pos - a - passed
            again = hot[:passed]
            m.drop_head(pos - a)
            if again:  # reinserted at M's newest end, counter min(f, 3) - 1
                # (the victims of [a, pos) have none: the table keeps 0 at 0)
                self._map_runs(((a, pos),), self._lower)
                m.enter_many(again)
            taken += got
        return taken

    def _small_walk(
        self, k: int, main_size: int, out: list[tuple[int, int]], to_ghost: list[tuple[int, int]]
    ) -> int:
        """Evict from S: its oldest units with counter >= 2 move to M (counter 0), the oldest
        below 2 is the victim (its key for G, in ``to_ghost``); again while M is within its share
        and S is not empty, up to ``k`` victims (at least one step, as ``evict`` takes one). How
        many victims."""
        s_order, m, threshold = self._s, self._m, self.move_to_main_threshold
        room = main_size // self._unit - len(m)  # moves M takes before it is over its share
        taken = 0
        plain: list[tuple[int, int]] = []
        while taken < k:
            # The oldest runs without a counter are victims and nothing moves: taken a run at a
            # time (a run with a counter, a hole or a pin is read below).
            got = s_order.pop_unmarked(k - taken, self._marked_view, plain, self._counts)
            if got:
                out += plain
                to_ghost += plain
                plain.clear()
                taken += got
                if taken >= k:
                    break
            head = s_order.head_run()
            if head is None:
                break
            a, s = head
            want = k - taken
            end, hot, marked = self._counted(a, s, want, threshold)
            over = max(room, 0)  # the move that takes M over its share: the next victim ends
            if over < len(hot) and hot[over] - a - over + 1 < want:  # (victims before it, + 1)
                want = hot[over] - a - over + 1
                k = taken + want
            gone_to = len(out)
            pos, passed = _walk_past(a, end, hot, want, out)
            to_ghost += out[gone_to:]
            got = pos - a - passed
            room -= passed
            hot = hot[:passed]
            s_order.drop_head(pos - a)
            if marked:  # those that left S leave their counters (moved ones restart at 0)
                self._map_runs(((a, pos),), None)
            if hot:
                m.enter_many(hot)
            taken += got
        return taken

    def _ghosts_among(self, uids: list[int]) -> bool:
        """Is any of ``uids`` (the units a plan enters after the batch's eviction) a ghost? Where
        none is, also whether they are distinct and none is a member: the eviction between this
        and their ``insert_many`` makes none a member (it takes members out) nor a ghost (G
        takes only victims), so that ``insert_many`` enters them into S as the runs found here,
        checking nothing again."""
        ghost = self._ghost
        sessions = split_short(uids, runs_in_order(uids))
        if (
            ghost
            and not ghost.buckets().isdisjoint([a >> UNIT_BITS for a, _ in sessions])
            and any(ghost.first_in(a, s) is not None for a, s in sessions if ghost.meets(a, s))
        ):
            self._split = (uids, sessions, False)
            return True
        fresh = (
            uids_apart(uids, sessions)
            and not self._s.may_hold_any(sessions)
            and not self._m.may_hold_any(sessions)
        )
        self._split = (uids, sessions, fresh)  # (for the batch's ``insert_many``, next)
        return False

    def _evict_runs(self, n: int, now: float) -> list[tuple[int, int]]:
        """``evict`` ``n`` times: the victims as extents in eviction order (a pending plan's pinned
        units entering among them)."""
        if self._plan is not None:
            return _joined(self._evict_by_plan(n, self._evict_batch, now))
        return self._evict_batch(n)

    def _evict_batch(self, n: int) -> list[tuple[int, int]]:
        """``evict`` ``n`` times: the victims as extents in eviction order; S's victims' keys
        enter G at the end, where it keeps its newest keys, as one by one (nothing reads G while
        evicting)."""
        self._has_evicted = True
        _, main_size, ghost_size = self._sizes()
        unit = self._unit
        if n == 1 and len(self._m) * unit <= main_size:  # a decode step's victim, at S's head
            head = self._s.head_run()
            counts = None if head is None else self._counts.get(head[0] >> UNIT_BITS)
            if head is not None and (  # counter 0: it leaves for G
                counts is None
                or (head[0] & UNIT_MASK) >= len(counts)
                or not counts[head[0] & UNIT_MASK]
            ):
                victim = (head[0], head[0] + 1)
                self._s.drop_head(1)
                self._budget.shrink(unit)
                if unit <= ghost_size:
                    self._ghost.push_runs((victim,), ghost_size // unit)
                return [victim]
        out: list[tuple[int, int]] = []
        to_ghost: list[tuple[int, int]] = []
        s_order, m, cap = self._s, self._m, main_size // self._unit
        left = n
        while left > 0:
            if len(m) > cap or not len(s_order):
                got = self._main_walk(left, main_size, out)
                if got is not None:
                    left -= got
                    if left <= 0 or len(m) > cap or not len(s_order):
                        continue
                elif not len(s_order):
                    break  # nothing to evict
            left -= self._small_walk(left, main_size, out, to_ghost)
        self._budget.shrink(self._unit * (n - left))
        if to_ghost and self._unit <= ghost_size:
            self._ghost.push_runs(join_extents(to_ghost), ghost_size // self._unit)
        return join_extents(out)

    def evict(self, now: float) -> int | None:
        got = self._evict_runs(1, now)
        return got[0][0] if got else None

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = -(-nbytes // self._unit)
        if n <= 0:
            return []
        return list(chain.from_iterable(starmap(range, self._evict_runs(n, now))))

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = -(-nbytes // self._unit)
        if n <= 0:
            return []
        runs = self._evict_runs(n, now)
        return join_extents(sorted(runs)) if self.drops_victims and len(runs) > 1 else runs

    def __len__(self) -> int:
        return len(self._s) + len(self._m)

    def __contains__(self, uid: int) -> bool:
        return uid in self._s or uid in self._m


S3FIFO.run_form = RunS3FIFO
