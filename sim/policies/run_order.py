"""``RunOrder``: the members of a tier in the order they entered it, kept as runs of one
session's consecutive units, with pins kept per session.

The order of ``EntryOrder`` (``sim.policies.structures``): candidates are taken oldest entry
first, and a pinned member that is released comes back to its old place. Here an entry is a
*run*, uids ``[first, stop)`` of one session (``uid >> UNIT_BITS``) that entered together, less
the uids inside it that left (its holes). The engine pins and releases all of a session's units
in a tier at once, so which members are candidates is kept per session: none pinned, all pinned
(``ALL``), or the set of those pinned (a shared prefix pool's units, held one by one). Entering a
session's history, pinning or releasing a session, and taking the oldest candidates then cost
O(runs), not O(units). The answers are ``EntryOrder``'s, call for call.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Container, Sequence
from functools import partial
from itertools import chain, islice, starmap
from operator import lt
from typing import Any, Protocol

from sim.policies.run_lists import runs_in_order
from sim.units import UNIT_BITS, join_extents

ALL = True  # a session's pin state: every member pinned (absent: none; a set: those pinned)
COMPACT_SLACK = 4096  # entries of emptied runs kept before they may be compacted away
_NOTHING: frozenset[int] = frozenset()  # no uid marked: ``pop_runs`` takes plain runs whole


class Marked(Protocol):
    """What ``pop_unmarked`` reads of the marked uids: a set, or a policy's view of them."""

    def __len__(self) -> int: ...

    def isdisjoint(self, run: range, /) -> bool: ...


class RunOrder:
    """Members in entry order as runs; candidates are the members their session has not pinned."""

    __slots__ = (
        "_first",
        "_stop",
        "_holes",
        "_bucket",
        "_flag",
        "_runs",
        "_count",
        "_pins",
        "_top",
        "_lo",
        "_n",
        "_live",
        "_replay",
    )

    def __init__(self) -> None:
        self._first: list[int] = []  # entry -> its first member (moves up as its head leaves)
        self._stop: list[int] = []  # entry -> one past its last member
        self._holes: list[set[int] | None] = []  # entry -> uids inside [first, stop) that left
        self._bucket: list[int] = []  # entry -> its session
        self._flag = bytearray()  # entry -> 1 if the run holds a candidate
        self._runs: dict[int, list[int]] = {}  # session -> its non-empty entries, oldest first
        self._count: dict[int, int] = {}  # session -> its members
        self._pins: dict[int, Any] = {}  # session -> ALL or the set of its pinned members
        self._top: dict[int, int] = {}  # session -> no member at or above this uid
        self._lo = 0  # no entry below holds a candidate
        self._n = 0  # candidates
        self._live = 0  # non-empty entries
        self._replay: OrderedDict[int, object] | None = None

    # -- looking up ------------------------------------------------------------------------------
    def _members(self, e: int):
        holes = self._holes[e]
        run = range(self._first[e], self._stop[e])
        return run if holes is None else (u for u in run if u not in holes)

    def _entry_of(self, uid: int) -> int | None:
        """The entry holding member ``uid``, or None."""
        first, stop, holes = self._first, self._stop, self._holes
        for e in self._runs.get(uid >> UNIT_BITS, ()):
            h = holes[e]
            if first[e] <= uid < stop[e] and (h is None or uid not in h):
                return e  # (a uid may lie in another run's range as a hole: it re-entered)
        return None

    def _pinned(self, b: int, uid: int) -> bool:
        st = self._pins.get(b)
        return st is not None and (st is ALL or uid in st)

    def _whole(self, uids) -> int | None:
        """The session whose members are exactly ``uids`` (a range, or an increasing list), or
        None: then the batch goes one uid at a time."""
        n = len(uids)
        if not n:
            return None
        a, last = uids[0], uids[-1]
        b = a >> UNIT_BITS
        if self._count.get(b) != n or last >> UNIT_BITS != b:
            return None
        if isinstance(uids, range):
            if uids.step != 1:
                return None
        elif not all(map(lt, uids, islice(uids, 1, None))):
            return None
        first, stop, holes = self._first, self._stop, self._holes
        if last - a + 1 == n:  # n members, all inside the n uids [a, last]: the same uids
            if a == b << UNIT_BITS and self._top[b] <= last + 1:  # (every run lies above a)
                return b
            return b if all(first[e] >= a and stop[e] <= last + 1 for e in self._runs[b]) else None
        listed = None
        for e in self._runs[b]:  # each run's members are in the list
            h = holes[e]
            if h:  # (its members are no stretch of the list)
                listed = set(uids) if listed is None else listed
                if not listed.issuperset(set(range(first[e], stop[e])).difference(h)):
                    return None
                continue
            i = bisect_left(uids, first[e])
            j = i + stop[e] - first[e] - 1
            if j >= n or uids[i] != first[e] or uids[j] != stop[e] - 1:
                return None
        return b

    # -- flags and sessions ----------------------------------------------------------------------
    def _refresh(self, e: int) -> None:
        """Set entry ``e``'s flag from its members and its session's pins."""
        st = self._pins.get(self._bucket[e])
        if self._first[e] >= self._stop[e] or st is ALL:
            self._flag[e] = 0
        elif st is None:
            self._flag[e] = 1
        else:
            self._flag[e] = any(u not in st for u in self._members(e))
        if self._flag[e] and e < self._lo:
            self._lo = e

    def _pinned_set(self, b: int) -> set[int]:
        """Session ``b``'s pins as an explicit set (a partial pin or unpin follows)."""
        st = self._pins.get(b)
        if st is ALL:
            st = self._pins[b] = set(chain.from_iterable(map(self._members, self._runs[b])))
        elif st is None:
            st = self._pins[b] = set()
        return st

    def _settle(self, b: int) -> None:
        """An explicit set of pins that is empty, or every member, becomes the plain state."""
        st = self._pins.get(b)
        if isinstance(st, set):
            if not st:
                del self._pins[b]
            elif len(st) == self._count[b]:
                self._pins[b] = ALL

    def _retire(self, e: int) -> None:
        b = self._bucket[e]
        self._flag[e] = 0
        self._first[e] = self._stop[e] = 0
        self._holes[e] = None
        self._runs[b].remove(e)
        self._live -= 1

    def _forget(self, b: int) -> None:
        """Session ``b`` has no member left."""
        del self._runs[b], self._count[b], self._top[b]
        self._pins.pop(b, None)

    # -- entering --------------------------------------------------------------------------------
    def _new_run(self, a: int, s: int, b: int, candidate: bool) -> None:
        """Uids ``a .. s-1`` of session ``b``, none of them a member, enter at the newest end."""
        had = self._count.get(b, 0)
        st = self._pins.get(b)
        if candidate:
            if st is ALL and had:
                self._pinned_set(b)
        elif not had:
            self._pins[b] = ALL
        elif st is not ALL:
            self._pinned_set(b).update(range(a, s))
        first, stop = self._first, self._stop
        e = len(first) - 1
        if e >= 0 and self._bucket[e] == b and stop[e] == a and first[e] < a:
            stop[e] = s  # the newest run goes on
        else:
            if len(first) >= 4 * self._live + COMPACT_SLACK:
                self._compact()
                first, stop = self._first, self._stop
            e = len(first)
            first.append(a)
            stop.append(s)
            self._holes.append(None)
            self._bucket.append(b)
            self._flag.append(0)
            self._live += 1
            if had:
                self._runs[b].append(e)
            else:
                self._runs[b] = [e]
        self._count[b] = had + s - a
        self._top[b] = max(self._top.get(b, 0), s)
        if candidate:
            self._n += s - a
            self._flag[e] = 1
            if e < self._lo:
                self._lo = e
        self._settle(b)

    def _disjoint(self, a: int, s: int, b: int) -> bool:
        """Is no uid of ``a .. s-1`` a member of session ``b`` (by the runs' bounds)?"""
        if self._top.get(b, 0) <= a:
            return True
        first, stop = self._first, self._stop
        return not any(first[e] < s and a < stop[e] for e in self._runs[b])

    def enter_many(self, uids, candidate: bool = True) -> None:
        """``uids`` enter in order, each at the newest end (a member moves there)."""
        if isinstance(uids, range) and uids.step == 1:
            extents = [(uids.start, uids.stop)] if len(uids) else []
        else:
            extents = runs_in_order(uids if isinstance(uids, (list, tuple)) else list(uids))
        self.enter_runs(extents, candidate)

    def enter_runs(self, runs, candidate: bool = True) -> None:
        """``enter_many`` of the uids of ``runs``, (first, stop) extents in order: a run that
        holds no member (by the bounds of its session's runs) enters in one step, inlined here
        (a decode span's pages are many short runs); one that does, a uid at a time."""
        first, stop, holes, bucket, flag = (
            self._first,
            self._stop,
            self._holes,
            self._bucket,
            self._flag,
        )
        runs_of, count, pins, top = self._runs, self._count, self._pins, self._top
        for a, s in runs:
            while a < s:
                b = a >> UNIT_BITS
                end = s if (s - 1) >> UNIT_BITS == b else (b + 1) << UNIT_BITS  # (one session)
                if top.get(b, 0) > a and not self._disjoint(a, end, b):  # some enter again
                    for u in range(a, end):
                        self.leave(u)
                        self._new_run(u, u + 1, b, candidate)
                    first, stop, holes, bucket, flag = (  # (``_new_run`` may compact)
                        self._first,
                        self._stop,
                        self._holes,
                        self._bucket,
                        self._flag,
                    )
                    a = end
                    continue
                had = count.get(b, 0)
                st = pins.get(b)
                if candidate:
                    if st is ALL and had:
                        st = self._pinned_set(b)
                elif not had:
                    st = pins[b] = ALL
                elif st is not ALL:
                    st = self._pinned_set(b)
                    st.update(range(a, end))
                e = len(first) - 1
                if e >= 0 and bucket[e] == b and stop[e] == a and first[e] < a:
                    stop[e] = end  # the newest run goes on
                else:
                    if len(first) >= 4 * self._live + COMPACT_SLACK:
                        self._compact()
                        first, stop, holes, bucket, flag = (
                            self._first,
                            self._stop,
                            self._holes,
                            self._bucket,
                            self._flag,
                        )
                    e = len(first)
                    first.append(a)
                    stop.append(end)
                    holes.append(None)
                    bucket.append(b)
                    flag.append(0)
                    self._live += 1
                    if had:
                        runs_of[b].append(e)
                    else:
                        runs_of[b] = [e]
                count[b] = had = had + end - a
                if top.get(b, 0) < end:
                    top[b] = end
                if candidate:
                    self._n += end - a
                    flag[e] = 1
                    if e < self._lo:
                        self._lo = e
                if isinstance(st, set):  # (``_settle``)
                    if not st:
                        del pins[b]
                    elif len(st) == had:
                        pins[b] = ALL
                a = end

    def enter(self, uid: int, candidate: bool = True) -> None:
        """``uid`` enters (again, if it was a member: then it moves to the newest end)."""
        self.enter_runs(((uid, uid + 1),), candidate)

    # -- leaving ---------------------------------------------------------------------------------
    def _take_out(self, e: int, uid: int) -> None:
        """Member ``uid`` of entry ``e`` is no longer in the run."""
        first, stop, holes = self._first, self._stop, self._holes
        h = holes[e]
        if uid == first[e]:
            first[e] += 1
            while h and first[e] in h:
                h.discard(first[e])
                first[e] += 1
        elif uid == stop[e] - 1:
            stop[e] -= 1
            while h and stop[e] - 1 in h:
                h.discard(stop[e] - 1)
                stop[e] -= 1
        elif h is None:
            holes[e] = {uid}
        else:
            h.add(uid)
        if first[e] >= stop[e]:
            self._retire(e)

    def leave(self, uid: int) -> bool:
        """``uid`` leaves the tier; returns whether it was a candidate."""
        e = self._entry_of(uid)
        if e is None:
            return False
        return self._leave_entry(e, uid)

    def take(self, uid: int) -> bool:
        """``leave(uid)`` where it is a member; whether it was one (one lookup of its entry)."""
        e = self._entry_of(uid)
        if e is None:
            return False
        self._leave_entry(e, uid)
        return True

    def _leave_entry(self, e: int, uid: int) -> bool:
        """Member ``uid`` of entry ``e`` leaves; whether it was a candidate."""
        b = uid >> UNIT_BITS
        was = not self._pinned(b, uid)
        st = self._pins.get(b)
        if isinstance(st, set):
            st.discard(uid)
        self._take_out(e, uid)
        self._count[b] -= 1
        if was:
            self._n -= 1
        if not self._count[b]:
            self._forget(b)
            return was
        self._settle(b)
        if self._first[e] < self._stop[e]:
            self._refresh(e)
        return was

    def leave_many(self, uids) -> None:
        """``leave`` each: all of a session's members at once where they are the batch."""
        b = self._whole(uids)
        if b is None:
            for uid in uids:
                self.leave(uid)
            return
        st = self._pins.get(b)
        held = self._count[b]
        self._n -= 0 if st is ALL else held - (len(st) if st else 0)
        for e in list(self._runs[b]):
            self._retire(e)
        self._forget(b)

    # -- pins ------------------------------------------------------------------------------------
    def discard(self, uid: int) -> bool:
        """``uid`` is no longer a candidate (pinned); it stays a member. False if it was not one."""
        e = self._entry_of(uid)
        b = uid >> UNIT_BITS
        if e is None or self._pinned(b, uid):
            return False
        self._pinned_set(b).add(uid)
        self._n -= 1
        self._settle(b)
        self._refresh(e)
        return True

    def discard_many(self, uids) -> list[int]:
        """``discard`` each; returns those that were candidates, in order."""
        b = self._whole(uids)
        if b is None:
            return [uid for uid in uids if self.discard(uid)]
        st = self._pins.get(b)
        if st is ALL:
            return []
        if st:
            return [uid for uid in uids if self.discard(uid)]
        self._pins[b] = ALL
        self._n -= self._count[b]
        flag = self._flag
        for e in self._runs[b]:
            flag[e] = 0
        return list(uids)

    def discard_all(self, uids) -> None:
        """``discard_many`` without its answer, one uid at a time where the batch is not a whole
        session but each entry's flag read once, after all its members' pins (O(uids x the
        session's runs + the runs' members), not O(uids x members))."""
        if self._whole(uids) is not None:
            self.discard_many(uids)
            return
        touched: dict[int, int] = {}  # entry -> its session
        for uid in uids:
            e = self._entry_of(uid)
            b = uid >> UNIT_BITS
            if e is None or self._pinned(b, uid):
                continue
            self._pinned_set(b).add(uid)
            self._n -= 1
            touched[e] = b
        for b in set(touched.values()):
            self._settle(b)
        for e in touched:
            self._refresh(e)

    def back(self, uid: int) -> None:
        """A pinned member is a candidate again, in its old place (a non-member enters)."""
        e = self._entry_of(uid)
        if e is None:
            self.enter(uid)
            return
        b = uid >> UNIT_BITS
        if not self._pinned(b, uid):
            return
        self._pinned_set(b).discard(uid)
        self._settle(b)
        self._n += 1
        self._flag[e] = 1
        if e < self._lo:
            self._lo = e

    def held_within(self, a: int, s: int) -> int | None:
        """How many members the session of ``[a, s)`` (one session) holds where all of them lie
        in ``[a, s)`` (0 where it holds none); None where some lie outside."""
        b = a >> UNIT_BITS
        held = self._count.get(b)
        if held is None:
            return 0
        if self._top[b] > s:
            return None
        if a == b << UNIT_BITS:  # (every uid of the session lies at or above a)
            return held
        first = self._first
        return held if all(first[e] >= a for e in self._runs[b]) else None

    def pins_all(self, b: int) -> bool:
        """Does session ``b`` hold members, every one of them pinned?"""
        return self._pins.get(b) is ALL

    def back_session(self, b: int) -> bool:
        """Session ``b``'s members, all pinned, are candidates again, each in its place (``back``
        of each); False, changing nothing, where some are not pinned."""
        if self._pins.get(b) is not ALL:
            return False
        del self._pins[b]
        self._n += self._count[b]
        runs, flag = self._runs[b], self._flag
        for e in runs:
            flag[e] = 1
        self._lo = min(self._lo, runs[0])
        return True

    def back_whole(self, uids) -> bool:
        """``back_many(uids)`` where they are every member of a session and all are pinned (a
        turn's end); False, changing nothing, where not."""
        b = self._whole(uids)
        return b is not None and self.back_session(b)

    def back_many(self, uids) -> None:
        """``back`` each, in order (non-members enter after the others' return: the same order)."""
        if self.back_whole(uids):
            return
        new = []
        for uid in uids:
            if self._entry_of(uid) is None:
                new.append(uid)
            else:
                self.back(uid)
        if new:
            self.enter_many(new)

    # -- taking the oldest -----------------------------------------------------------------------
    def pop_runs(self, k: int) -> list[tuple[int, int]]:
        """Take out the ``k`` oldest candidates (fewer if there are fewer), as (first, stop)
        extents of consecutive uids, oldest first: plain runs by ``pop_unmarked``, a run that
        holes or pins break up one member at a time."""
        out: list[tuple[int, int]] = []
        while k > 0:
            k -= self.pop_unmarked(k, _NOTHING, out)
            if k <= 0:
                break
            flag = self._flag
            e = flag.find(1, self._lo)
            if e < 0:
                self._lo = len(flag)
                break
            self._lo = e
            b = self._bucket[e]
            st = self._pins.get(b)
            chosen = [u for u in self._members(e) if st is None or u not in st]
            chosen = chosen[:k]
            taken = len(chosen)
            for u in chosen:
                self._take_out(e, u)
            out.extend((u, u + 1) for u in chosen)
            if self._first[e] < self._stop[e]:
                self._refresh(e)
            self._n -= taken
            k -= taken
            self._count[b] -= taken
            if not self._count[b]:
                self._forget(b)
            else:
                self._settle(b)
        return join_extents(out)

    def pop_many(self, k: int) -> list[int]:
        """The ``k`` oldest candidates, taken out, oldest first."""
        return list(chain.from_iterable(starmap(range, self.pop_runs(k))))

    def pop_first(self) -> int | None:
        """Take out the oldest candidate (it leaves the tier) and return it, or None."""
        got = self.pop_runs(1)
        return got[0][0] if got else None

    def head_run(self) -> tuple[int, int] | None:
        """The oldest candidates that are consecutive uids of one run, as (first, stop), or None:
        ``pop_runs`` of any number up to ``stop - first`` takes the first of them. The whole run
        where its session pins none of it and none of it left; else up to its first hole, or the
        first candidate alone where some of the session is pinned."""
        e = self._flag.find(1, self._lo)
        if e < 0:
            return None
        self._lo = e
        st = self._pins.get(self._bucket[e])
        f, holes = self._first[e], self._holes[e]
        if st is None:
            return f, min(holes) if holes else self._stop[e]  # (first is never a hole)
        u = next(u for u in self._members(e) if u not in st)
        return u, u + 1

    def drop_head(self, n: int) -> None:
        """Take out the first ``n`` of the stretch ``head_run`` just named (``n`` at most its
        length): ``pop_runs(n)`` without listing them, in O(1) where the run is plain."""
        e = self._lo
        b = self._bucket[e]
        if b in self._pins or self._holes[e]:
            self.pop_runs(n)
            return
        first = self._first
        first[e] += n
        if first[e] >= self._stop[e]:
            self._retire(e)
        self._n -= n
        left = self._count[b] - n
        if left:
            self._count[b] = left
        else:
            self._forget(b)

    def pop_unmarked(
        self,
        k: int,
        marked: Marked,
        out: list[tuple[int, int]],
        marked_in: Container[int] | None = None,
    ) -> int:
        """Take out up to ``k`` of the oldest candidates while none of them is in ``marked``,
        appending them to ``out`` as extents in order; returns how many. Stops before a plain
        run whose first ``k`` candidates hold a marked uid, and at a run that holes or its
        session's pins break up (``head_run`` names its stretch): ``pop_runs`` of those taken,
        a run at a time without a call per run. ``marked_in``, where given, holds every session
        with a marked uid: a run of another session is taken without looking its uids up.
        ``marked`` is asked only whether it is empty and, for a run of one session, whether it
        holds none of its uids (``isdisjoint``)."""
        first, stop, holes, flag, bucket = (
            self._first,
            self._stop,
            self._holes,
            self._flag,
            self._bucket,
        )
        pins, count, runs_of = self._pins, self._count, self._runs
        lo, want, retired, top = self._lo, k, 0, self._top
        every, sessions = marked_in is None, marked_in if marked_in is not None else ()
        check = bool(marked)  # (asked once: nothing here marks or unmarks a uid)
        while k > 0:
            e = flag.find(1, lo)
            if e < 0:
                break
            lo = e
            b = bucket[e]
            if b in pins or holes[e]:
                break
            f, s = first[e], stop[e]
            n = s - f if s - f < k else k
            if check and (every or b in sessions) and not marked.isdisjoint(range(f, f + n)):
                break
            out.append((f, f + n))
            k -= n
            left = count[b] - n
            if f + n < s:
                first[e] = f + n
            else:  # (``_retire``; the session's oldest run: it has no pin)
                flag[e] = 0
                first[e] = stop[e] = 0
                holes[e] = None
                retired += 1
                if left:
                    runs_of[b].remove(e)
            if left:
                count[b] = left
            else:  # (``_forget``: no pin to drop)
                del runs_of[b], count[b], top[b]
        self._lo = lo
        self._n -= want - k
        self._live -= retired
        return want - k

    def members_among(self, uids) -> list[int]:
        """Those of ``uids`` that are members, in order (all of them, at once, where they are all
        of a session's members)."""
        if self._whole(uids) is not None:
            return list(uids)
        return [u for u in uids if self._entry_of(u) is not None]

    def session_members_among(self, uids) -> Sequence[int]:
        """``members_among(uids)`` for increasing uids of one session, from the session's runs in
        C (O(its runs + members)), not one uid at a time: at layer_block a session's units lie in
        two orders (S3-FIFO's S and M), and a batch that is not all of one's members of the
        session would otherwise look each uid up. A range where the batch is a stretch of uids
        all of them members (the batch hooks then take it without listing it)."""
        runs = self._runs.get(uids[0] >> UNIT_BITS)
        if runs is None:
            return []
        first, stop, holes = self._first, self._stop, self._holes
        a, s = uids[0], uids[-1] + 1
        pieces: list[range | set[int]] = []
        for e in runs:
            lo, hi = max(first[e], a), min(stop[e], s)
            if lo < hi:
                h = holes[e]
                pieces.append(range(lo, hi) if h is None else set(range(lo, hi)).difference(h))
        whole = isinstance(uids, range) or len(uids) == s - a  # the batch is every uid of [a, s)
        if whole and sum(map(len, pieces)) == s - a:
            return range(a, s)
        members = sorted(chain.from_iterable(pieces))  # (a hole may lie in another run's range)
        if whole:
            return members
        return sorted(set(members).intersection(uids))

    def session_member_runs(
        self, b: int, runs: list[tuple[int, int]]
    ) -> list[tuple[int, int]] | None:
        """The members of session ``b`` among the uids of ``runs`` (increasing extents inside
        session ``b``), as extents in uid order, read from the session's runs (O(its runs x
        ``runs``), nothing a uid); None where a run of the session with holes meets their span
        (then ``session_members_among`` answers)."""
        entries = self._runs.get(b)
        if not entries:
            return []
        first, stop, holes = self._first, self._stop, self._holes
        lo_all, hi_all = runs[0][0], runs[-1][1]
        out: list[tuple[int, int]] = []
        for e in entries:
            f, t = first[e], stop[e]
            if t <= lo_all or f >= hi_all:
                continue
            if holes[e]:
                return None
            for a, s in runs:
                lo, hi = max(f, a), min(t, s)
                if lo < hi:
                    out.append((lo, hi))
        out.sort()
        return out

    def session_count(self, b: int) -> int:
        """How many members session ``b`` holds."""
        return self._count.get(b, 0)

    def pins_all_or_none(self, b: int) -> bool:
        """Are all of session ``b``'s members pinned, or none?"""
        st = self._pins.get(b)
        return st is ALL or not st

    def pin_session(self, b: int) -> None:
        """``discard_many`` of every member of session ``b``, where all or none are pinned."""
        st = self._pins.get(b)
        if st is ALL:
            return
        if st:
            raise ValueError(f"session {b} is pinned in part")
        self._pins[b] = ALL
        self._n -= self._count[b]
        flag = self._flag
        for e in self._runs[b]:
            flag[e] = 0

    def may_hold(self, a: int, s: int) -> bool:
        """Might a uid of ``a .. s-1`` be a member? False only where none is (by the runs'
        bounds: a hole inside a run's bounds counts as a member here)."""
        while a < s:
            b = a >> UNIT_BITS
            end = min(s, (b + 1) << UNIT_BITS)
            if not self._disjoint(a, end, b):
                return True
            a = end
        return False

    def may_hold_any(self, runs) -> bool:
        """``may_hold`` of any of ``runs``, (first, stop) extents each inside one session."""
        top = self._top
        for a, s in runs:
            b = a >> UNIT_BITS
            if top.get(b, 0) > a and not self._disjoint(a, s, b):
                return True
        return False

    def min(self) -> int | None:
        """The oldest candidate, or None."""
        for uid in self.candidates():
            return uid
        return None

    def candidates(self):
        """The candidates, oldest first (a scan: for peeks, not for the engine's hot path)."""
        flag, e = self._flag, self._lo
        while (e := flag.find(1, e)) >= 0:
            st = self._pins.get(self._bucket[e])
            for u in self._members(e):
                if st is None or u not in st:
                    yield u
            e += 1

    def is_member(self, uid: int) -> bool:
        """Is ``uid`` in the tier (a candidate or pinned)?"""
        return self._entry_of(uid) is not None

    def _compact(self) -> None:
        """Drop the entries of runs that emptied (most of the arrays by now)."""
        keep = [e for e in range(len(self._first)) if self._first[e] < self._stop[e]]
        new = {e: i for i, e in enumerate(keep)}
        self._first = [self._first[e] for e in keep]
        self._stop = [self._stop[e] for e in keep]
        self._holes = [self._holes[e] for e in keep]
        self._bucket = [self._bucket[e] for e in keep]
        self._flag = bytearray(self._flag[e] for e in keep)
        for b, runs in self._runs.items():
            self._runs[b] = [new[e] for e in runs]
        self._lo = 0

    def replay_view(self):
        """(members, push, pop-oldest) as C-level calls, for a replay without pins onto an empty
        order (``kvsim cachesim``), as ``EntryOrder.replay_view``."""
        if self._count or self._replay is not None:
            raise ValueError("replay_view needs an empty order")
        fresh = self._replay = OrderedDict()
        return fresh, fresh.setdefault, partial(fresh.popitem, last=False)

    def __len__(self) -> int:
        return self._n if self._replay is None else len(self._replay)

    def __contains__(self, uid: int) -> bool:
        """Is ``uid`` a candidate?"""
        if self._replay is not None:
            return uid in self._replay
        return self._entry_of(uid) is not None and not self._pinned(uid >> UNIT_BITS, uid)
