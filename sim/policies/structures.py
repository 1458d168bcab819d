"""The structures policies share, each written once here:

- ``LazyHeap``: an ordered set with removal from the middle (keys that a policy computes);
- ``EntryOrder``: members in order of entry, pinned ones keeping their place (FIFO, CLOCK), and
  ``SizedOrder``, the same with sizes and candidate bytes (S3-FIFO's and 2Q's queues);
- ``SweepOrder``: an entry order with a visited mark per member and a hand (SIEVE);
- ``RunQueue``: a queue kept as runs of consecutive uids (LRU);
- ``GhostFIFO``: a memory of evicted keys; ``ByteBudget``: a capacity in bytes.

The orders keep a byte per entry instead of a heap, so a pin, a return or a hit is O(1) and the
next victim is a C-level scan.
"""

from __future__ import annotations

import heapq
import re
from array import array
from bisect import bisect_left, insort
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from functools import partial
from itertools import compress, islice, repeat
from operator import add, and_, countOf, is_not, ne

import numpy as np

from sim.units import UNIT_BITS, UNIT_MASK, extents_of, join_extents


def _run_within(uids: list[int], first: int, stop: int, holes: set[int] | None) -> bool:
    """Are the members of run [first, stop) less ``holes`` all in the increasing list ``uids``?"""
    i = bisect_left(uids, first)
    if not holes:  # consecutive members: a stretch of consecutive entries
        j = i + (stop - first) - 1
        return j < len(uids) and uids[i] == first and uids[j] == stop - 1
    for u in range(first, stop):
        if u not in holes:
            k = bisect_left(uids, u)
            if k == len(uids) or uids[k] != u:
                return False
    return True


def consume(it) -> None:
    """Run an iterator to its end, in C (``map`` of a method over a batch, for its effect)."""
    deque(it, maxlen=0)


def pop_oldest(od: OrderedDict, n: int) -> list:
    """Take the ``n`` oldest keys out of an ordered dict (n <= its length), oldest first."""
    if n >= len(od):
        out = list(od)
        od.clear()
        return out
    out = list(islice(od, n))
    consume(map(od.__delitem__, out))  # in C: a list's worth of popitem calls costs half again
    return out


class _LiveKeys:
    """The candidates' live keys, for the lazy structures below: an entry whose key is no longer
    its uid's live key is stale, skipped when it is read."""

    __slots__ = ("_live",)

    def __init__(self) -> None:
        self._live: dict[int, object] = {}  # uid -> key of candidates

    def discard(self, uid: int) -> bool:
        return self._live.pop(uid, None) is not None

    def discard_many(self, uids) -> None:
        """``discard`` each (those not here are ignored), in C."""
        consume(map(self._live.pop, uids, repeat(None)))

    def key(self, uid: int):
        return self._live.get(uid)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, uid: int) -> bool:
        return uid in self._live


class LazyHeap(_LiveKeys):
    """A min-heap of candidates ``uid`` ordered by a key, with O(log n) push and O(1) discard.

    ``discard`` only forgets the uid's live key; stale heap entries are skipped (and popped) when
    the minimum is read. That cleaning changes no decision, so ``min`` is a pure peek as far as the
    policy's choices go. A uid re-added with the key it had keeps its old entry (no duplicate), and
    the heap is rebuilt when stale entries outnumber live ones, so memory follows the live set.
    Keys must be totally ordered; equal keys fall back to the uid (deterministic ties).
    """

    __slots__ = ("_heap", "_heaped")

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple] = []  # (key, uid)
        self._heaped: dict[int, object] = {}  # uid -> key of its entry in the heap

    def push(self, uid: int, key) -> None:
        self._live[uid] = key
        if self._heaped.get(uid) != key:
            self._heaped[uid] = key
            heapq.heappush(self._heap, (key, uid))
            if len(self._heap) > 2 * len(self._live) + 64:
                self._compact()

    def push_many(self, items) -> None:
        """``push`` each (uid, key); a large batch is merged with one heapify (O(n), in C)."""
        items = list(items)
        if not self._heap:  # nothing heaped (so nothing live): a sorted list is a heap, in C
            fresh = dict(items)
            self._live.update(fresh)
            self._heaped.update(fresh)
            self._heap = sorted(zip(fresh.values(), fresh.keys()))
            return
        if len(items) * 8 < len(self._heap):
            for uid, key in items:
                self.push(uid, key)
            return
        live, heaped, heap = self._live, self._heaped, self._heap
        for uid, key in items:
            live[uid] = key
            if heaped.get(uid) != key:
                heaped[uid] = key
                heap.append((key, uid))
        heapq.heapify(heap)
        if len(heap) > 2 * len(live) + 64:
            self._compact()

    def min(self) -> int | None:
        """The uid with the smallest live key, or None."""
        heap, live = self._heap, self._live
        while heap:
            key, uid = heap[0]
            if live.get(uid, heap) == key:
                return uid
            heapq.heappop(heap)
            if self._heaped.get(uid) == key:
                del self._heaped[uid]
        return None

    def pop(self) -> int | None:
        uid = self.min()
        if uid is not None:
            del self._live[uid]
        return uid

    def _compact(self) -> None:
        self._heap = [(k, u) for u, k in self._live.items()]
        heapq.heapify(self._heap)
        self._heaped = dict(self._live)

    def __iter__(self):
        return iter(self._live)


def _renumbered(seq: dict[int, int], uid_at: list[int], state: bytearray):
    """An entry order without the entry numbers of members that left: (the old numbers kept, in
    order; the uid of each new number; its state byte; uid -> new number)."""
    keep = [i for i, u in enumerate(uid_at) if seq.get(u) == i]
    uids = [uid_at[i] for i in keep]
    return keep, uids, bytearray(state[i] for i in keep), {u: i for i, u in enumerate(uids)}


def _mostly_departed(entries: int, members: int) -> bool:
    """Are the entry numbers of members that left three quarters of the array (and more than a
    few thousand)? Then it is compacted, so memory follows the members."""
    return entries >= 4 * members + 4096


class SortedQueue(_LiveKeys):
    """``LazyHeap``'s calls for keys that are mostly pushed in batches and taken from the front: a
    list of (key, uid) kept sorted from a read position on, with lazy deletion. A batch pushed
    onto nothing is one sort; the minimum moves the read position past stale entries, so taking
    the candidates in order costs O(1) each where a heap pays a pop. A push into the middle is a
    list insertion (rare where it is used: a kinetic group's units share their time)."""

    __slots__ = ("_items", "_pos")

    def __init__(self) -> None:
        super().__init__()
        self._items: list[tuple] = []  # (key, uid), sorted from _pos on
        self._pos = 0

    def push(self, uid: int, key) -> None:
        self._live[uid] = key
        items = self._items
        entry = (key, uid)
        if not items or entry >= items[-1]:
            items.append(entry)
        else:
            insort(items, entry, lo=self._pos)
        self._compact_if_stale()

    def push_many(self, items) -> None:
        """``push`` each (uid, key): one sort of the batch, merged with what is here."""
        fresh = dict(items)
        self._live.update(fresh)
        batch = sorted(zip(fresh.values(), fresh.keys()))
        if self._pos >= len(self._items):
            self._items, self._pos = batch, 0
        else:  # two sorted runs: timsort merges them in one pass
            self._items = sorted(self._items[self._pos :] + batch)
            self._pos = 0
        self._compact_if_stale()

    def min(self) -> int | None:
        """The uid with the smallest live (key, uid), or None."""
        items, live, pos = self._items, self._live, self._pos
        while pos < len(items):
            key, uid = items[pos]
            if live.get(uid, items) == key:
                self._pos = pos
                return uid
            pos += 1
        self._items, self._pos = [], 0
        return None

    def _compact_if_stale(self) -> None:
        if len(self._items) - self._pos > 2 * len(self._live) + 64:
            self._items = sorted((k, u) for u, k in self._live.items())
            self._pos = 0


class EntryOrder:
    """The members of a tier in the order they entered it; the candidates among them (members not
    pinned) are taken oldest first, and a member that was pinned comes back to its old place.

    Each member has an entry number: its index in ``_uid_at`` and in ``_flag``, a byte array whose
    1s mark the candidates. The oldest candidate is the first 1 at or after ``_lo`` (below it
    there is none), found by ``bytearray.find`` in C; entering, pinning and coming back are O(1)
    with no heap. Entry numbers of members that left are compacted away once they are most of the
    array (three quarters), so memory follows the members.
    """

    __slots__ = ("_seq", "_uid_at", "_flag", "_lo", "_n", "_replay")

    def __init__(self) -> None:
        self._seq: dict[int, int] = {}  # uid -> entry number, for every member
        self._uid_at: list[int] = []  # entry number -> uid (stale where the member left)
        self._flag = bytearray()  # entry number -> 1 for a candidate
        self._lo = 0  # no candidate has a smaller entry number
        self._n = 0  # candidates
        self._replay: OrderedDict[int, object] | None = None

    def enter(self, uid: int, candidate: bool = True) -> None:
        """``uid`` enters (again, if it was a member: then it moves to the newest end)."""
        if uid in self._seq:
            self.leave(uid)
        self._compact_before(1)
        self._seq[uid] = len(self._uid_at)
        self._uid_at.append(uid)
        self._flag.append(candidate)
        self._n += candidate

    def move_to_end(self, uid: int) -> None:
        """A member enters again at the newest end, a candidate or not as it was (a reinsertion)."""
        self._compact_before(1)
        seq, flag = self._seq, self._flag
        s = seq[uid]
        seq[uid] = len(self._uid_at)
        self._uid_at.append(uid)
        flag.append(flag[s])
        flag[s] = 0

    def enter_many(self, uids, candidate: bool = True) -> None:
        """``enter`` each, in order."""
        uids = list(uids)
        seq = self._seq
        if not seq.keys().isdisjoint(uids) or len(set(uids)) != len(uids):
            for uid in uids:  # some enter again: one at a time
                self.enter(uid, candidate)
            return
        self._compact_before(len(uids))
        first = len(self._uid_at)
        self._seq.update(zip(uids, range(first, first + len(uids))))
        self._uid_at.extend(uids)
        self._flag.extend(b"\x01" * len(uids) if candidate else bytes(len(uids)))
        self._n += len(uids) if candidate else 0

    def back(self, uid: int) -> None:
        """A pinned member is a candidate again, in its old place (a non-member enters)."""
        s = self._seq.get(uid)
        if s is None:
            self.enter(uid)
        elif not self._flag[s]:
            self._flag[s] = 1
            self._n += 1
            if s < self._lo:
                self._lo = s

    def back_many(self, uids) -> None:
        """``back`` each, in order."""
        uids = list(uids)
        seqs = self.pinned_entries(uids)
        if seqs is not None:  # the usual batch: a turn's pinned members return, in C
            self.back_entries(seqs)
            return
        seq, flag, lo, n = self._seq, self._flag, self._lo, 0
        new = []  # non-members enter after the others' return: the same order
        for uid in uids:
            s = seq.get(uid)
            if s is None:
                new.append(uid)
            elif not flag[s]:
                flag[s] = 1
                n += 1
                if s < lo:
                    lo = s
        self._lo, self._n = lo, self._n + n
        if new:
            self.enter_many(new)

    def discard_many(self, uids) -> list[int]:
        """``discard`` each; returns those that were candidates, in order."""
        uids = list(uids)
        seq, flag = self._seq, self._flag
        seqs: list = list(map(seq.get, uids))
        if None in seqs:  # non-members are not candidates
            members = list(map(is_not, seqs, repeat(None)))
            uids, seqs = list(compress(uids, members)), list(compress(seqs, members))
        if len(set(seqs)) < len(seqs):  # a uid twice: the second finds it discarded
            was = []
            for uid, s in zip(uids, seqs, strict=True):
                if flag[s]:
                    flag[s] = 0
                    was.append(uid)
        else:  # in C
            was = list(compress(uids, map(flag.__getitem__, seqs)))
            consume(map(flag.__setitem__, seqs, repeat(0)))
        self._n -= len(was)
        return was

    def pinned_entries(self, uids) -> list[int] | None:
        """The entry numbers of ``uids`` if they are distinct members, none of them a candidate
        (all pinned), else None: what ``back_entries`` takes."""
        seqs: list = list(map(self._seq.get, uids))
        if None in seqs or any(map(self._flag.__getitem__, seqs)) or len(set(seqs)) < len(seqs):
            return None
        return seqs

    def back_entries(self, seqs: list[int]) -> None:
        """``back`` the pinned members at these entry numbers (``pinned_entries``), in C."""
        if seqs:
            consume(map(self._flag.__setitem__, seqs, repeat(1)))
            self._n += len(seqs)
            self._lo = min(self._lo, min(seqs))

    def is_member(self, uid: int) -> bool:
        """Is ``uid`` in the tier (a candidate or pinned)?"""
        return uid in self._seq

    def candidates(self):
        """The candidates, oldest first (a scan: for peeks, not for the engine's hot path)."""
        flag, uid_at, i = self._flag, self._uid_at, self._lo
        while (i := flag.find(1, i)) >= 0:
            yield uid_at[i]
            i += 1

    def discard(self, uid: int) -> bool:
        """``uid`` is no longer a candidate (pinned); it stays a member. False if it was not one."""
        s = self._seq.get(uid)
        if s is None or not self._flag[s]:
            return False
        self._flag[s] = 0
        self._n -= 1
        return True

    def leave(self, uid: int) -> bool:
        """``uid`` leaves the tier; returns whether it was a candidate."""
        was = self.discard(uid)
        self._seq.pop(uid, None)
        return was

    def _first_index(self) -> int:
        i = self._flag.find(1, self._lo)
        self._lo = len(self._flag) if i < 0 else i
        return i

    def min(self) -> int | None:
        """The oldest candidate, or None."""
        i = self._first_index()
        return None if i < 0 else self._uid_at[i]

    def pop_first(self) -> int | None:
        """Take out the oldest candidate (it leaves the tier) and return it, or None."""
        i = self._first_index()
        if i < 0:
            return None
        self._flag[i] = 0
        self._lo = i + 1
        self._n -= 1
        uid = self._uid_at[i]
        del self._seq[uid]
        return uid

    def pop_many(self, k: int) -> list[int]:
        """``pop_first`` up to ``k`` times: the oldest candidates, oldest first."""
        flag, uid_at, seq, find = self._flag, self._uid_at, self._seq, self._flag.find
        out: list[int] = []
        i = self._lo
        for _ in range(min(k, self._n)):
            i = find(1, i)
            flag[i] = 0
            uid = uid_at[i]
            del seq[uid]
            out.append(uid)
            i += 1
        self._lo = i
        self._n -= len(out)
        return out

    def _compact_before(self, n: int) -> None:
        """Drop the entry numbers of members that left, if with ``n`` more entries they would be
        three quarters of the array."""
        if _mostly_departed(len(self._uid_at) + n, len(self._seq) + n):
            self._compact()

    def _compact(self) -> None:
        _, self._uid_at, self._flag, self._seq = _renumbered(self._seq, self._uid_at, self._flag)
        self._lo = 0

    def replay_view(self):
        """(members, push, pop-oldest) as C-level calls, for a replay without pins onto an empty
        order (``kvsim cachesim``): an ordered dict of the members in entry order is then the
        whole queue. pop-oldest returns (uid, anything) and raises KeyError when empty. The order
        is in that form for good (only these calls, ``len`` and ``in`` apply afterwards)."""
        if self._seq or self._replay is not None:
            raise ValueError("replay_view needs an empty order")
        fresh = self._replay = OrderedDict()
        return fresh, fresh.setdefault, partial(fresh.popitem, last=False)

    def __len__(self) -> int:
        return self._n if self._replay is None else len(self._replay)

    def __contains__(self, uid: int) -> bool:
        """Is ``uid`` a candidate?"""
        if self._replay is not None:
            return uid in self._replay
        s = self._seq.get(uid)
        return s is not None and self._flag[s] == 1


# SweepOrder's state bytes: MEMBER | CAND | MARK; 0 is an entry whose member left.
_MEMBER, _CAND, _MARK = 4, 1, 2
_UNMARKED, _MARKED = _MEMBER | _CAND, _MEMBER | _CAND | _MARK  # the candidates' two states
_UNMARKED_BYTE = bytes((_UNMARKED,))
_UNMARKED_RUN = re.compile(re.escape(_UNMARKED_BYTE) + b"+")  # a stretch of unmarked candidates


def _table(pairs: dict[int, int]) -> bytes:
    """A ``translate`` table mapping each state byte as ``pairs`` says, the others to themselves."""
    return bytes(pairs.get(b, b) for b in range(256))


_PASS = _table({_MARKED: _UNMARKED})  # the hand passes a marked candidate: its mark is cleared
_SWEPT = _table({_MARKED: _UNMARKED, _UNMARKED: 0})  # ... and takes the unmarked ones out
_BACK = _table({_MEMBER: _UNMARKED, _MEMBER | _MARK: _MARKED})  # pinned -> candidate, same mark
_PIN = _table({_UNMARKED: _MEMBER, _MARKED: _MEMBER | _MARK})  # candidate -> pinned, same mark
_PIN_MARKED = _table({s: _MEMBER | _MARK for s in range(_MEMBER, _MARKED + 1)})  # a hit, then pin
_IS_CAND = _table({s: 1 if s & _CAND else 0 for s in range(256)})  # 1 for a candidate, else 0
_IS_PINNED = _table({s: 1 if s & (_MEMBER | _CAND) == _MEMBER else 0 for s in range(256)})

_IS_MEMBER = _table({s: 1 if s else 0 for s in range(256)})  # 1 for a member's entry, else 0
_IS_PINNED_NP = np.frombuffer(_IS_PINNED, dtype=np.uint8).astype(np.bool_)  # the same tables
_BACK_NP = np.frombuffer(_BACK, dtype=np.uint8)


def _arange(start: int, k: int) -> array:
    """``array("q", range(start, start + k))``, through numpy when it is long."""
    if k < 64:
        return array("q", range(start, start + k))
    out = array("q")
    out.frombytes(np.arange(start, start + k, dtype=np.int64).tobytes())
    return out


class SweepStates:
    """The state-byte work of SIEVE's queue that does not depend on how a uid finds its entry
    number (``_entry``): ``SweepOrder`` keeps that per unit, ``sim.policies.sieve.RunSweepOrder``
    per run."""

    _state: bytearray
    _members: int
    _n: int  # candidates
    hand: int
    ahead: int
    _entry: Callable[[int], int]
    enter: Callable[[int], None]

    def mark(self, uid: int) -> None:
        s = self._entry(uid)
        if self._state[s]:
            self._state[s] |= _MARK

    def marked(self, uid: int) -> bool:
        return bool(self._state[self._entry(uid)] & _MARK)

    def _back_each(self, uids) -> None:
        state, entry = self._state, self._entry
        n, ahead, hand = self._n, self.ahead, self.hand
        new = []
        for uid in uids:
            s = entry(uid)
            if state[s] & (_MEMBER | _CAND) != _MEMBER:  # not a pinned member
                new.append(uid)
                continue
            state[s] |= _CAND
            n += 1
            ahead += s > hand
        self._n, self.ahead = n, ahead
        for uid in new:  # after the others' return: entering is the only order-giving act
            self.enter(uid)

    def leave(self, uid: int) -> bool:
        """``uid`` leaves the tier; returns whether it was a candidate. When it was the candidate
        the hand points at (the first after it), the hand stays where it was."""
        state = self._state
        s = self._entry(uid)
        v = state[s]
        if not v:
            return False
        state[s] = 0
        self._members -= 1
        if not v & _CAND:
            return False
        self._n -= 1
        if s > self.hand:
            start = self.hand + 1
            if state.find(_UNMARKED, start, s) < 0 and state.find(_MARKED, start, s) < 0:
                self.hand = s
            self.ahead -= 1
            self._wrap_if_done()
        return True

    def _lap(self, k: int) -> tuple[list[tuple[int, int]], int]:
        """Up to ``k`` victims from the hand on, before it wraps: their entry numbers as runs,
        and how many (they keep their uids until the next compaction)."""
        state, start = self._state, self.hand + 1
        runs, got = self._unmarked_runs(start, min(k, self.ahead))
        wraps = got < k  # no k-th victim ahead: the hand passes all and wraps
        stop = len(state) if wraps else runs[-1][1]
        stretch = state[start:stop]
        passed = stretch.count(_MARKED)
        state[start:stop] = stretch.translate(_SWEPT)
        self._members -= got
        self._n -= got
        self.ahead -= got + passed
        if wraps or not self.ahead:
            self.hand, self.ahead = 0, self._n
        else:
            self.hand = stop - 1
        return runs, got

    def _unmarked_runs(self, start: int, k: int) -> tuple[list[tuple[int, int]], int]:
        """The first ``k`` unmarked candidates from entry ``start`` on (fewer if there are fewer),
        as runs of consecutive entry numbers (first, stop), and their count: the victims lie in
        runs (a session's units entered together), so each run is one ``find`` and one match
        of unmarked bytes, no longer than the victims still wanted."""
        state, runs, got = self._state, [], 0
        find, match, i = state.find, _UNMARKED_RUN.match, start
        while got < k:
            i = find(_UNMARKED, i)
            if i < 0:
                break
            m = match(state, i, i + k - got)
            assert m is not None  # (state[i] is unmarked)
            run = m.end() - i
            runs.append((i, i + run))
            got += run
            i += run
        return runs, got

    def _wrap_if_done(self) -> None:
        if not self.ahead:
            self.hand, self.ahead = 0, self._n

    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: int) -> bool:
        """Is ``uid`` a candidate?"""
        return self._state[self._entry(uid)] & _CAND == _CAND


class SweepOrder(SweepStates):
    """Members of a tier in the order they entered, each with a mark (a hit's visited bit), and a
    hand that sweeps them from the oldest to the newest: SIEVE's queue, which never reorders.

    One state byte per entry number: ``MEMBER`` (4) while its uid is a member there, ``CAND`` (1)
    while that member is a candidate (not pinned), ``MARK`` (2) while it is marked; a pinned member
    keeps its place and its mark, and an entry whose member left is 0. So the first unmarked
    candidate at or after entry i is ``state.find(5, i)`` (memchr, in C), passing a stretch of
    marked candidates (clearing their marks) is one ``translate``, and dropping the entries of
    members that left is one numpy gather of the members' bytes. ``hand`` is the entry number the
    hand last stopped at (0 before a sweep: entry 0 holds no one), ``ahead`` the candidates after
    it. When none is left ahead the hand wraps to the start at once, so a unit that enters later is
    swept after the older ones. Entry numbers of members that left are compacted away once they are
    seven eighths of the array (the hand keeps its place among the members; a compaction also
    renumbers every page list, which at layer units outnumber the members many times).

    Each session's units are found by page: a list per session, page -> the entry number the
    unit last had (0: none). An entry number is never given twice between compactions, so a uid is
    a member exactly when its entry's state is not 0, and a unit that leaves needs no bookkeeping
    there. A batch of one session's units (the engine's: a range, or a list of its pages) looks up
    or assigns its entry numbers as a slice of that list, in C; a batch across sessions (a decode
    step's new pages) goes unit by unit.

    Costs: the batches (``enter_many``, ``pin_many``, ``back_many``, ``sweep_many``) run their
    per-unit work in C (list slices, ``map`` of a byte array's methods, ``translate``), with a
    Python step per run of victims (one ``find`` and one ``lstrip``) and per run of consecutive
    uids of a batch across sessions; a batch that is not the plain case (a uid listed twice, or
    entering while a member) goes one unit at a time. ``mark``, ``leave`` and ``sweep`` are
    O(1) plus a C-level scan; a compaction is C-level, O(entries + the pages of the sessions).
    """

    __slots__ = ("_entry_of", "_uid_at", "_state", "_brk", "_members", "_n", "hand", "ahead")
    compact_slack = 4096  # entry numbers of members that left kept before a compaction may run

    def __init__(self) -> None:
        self._entry_of: dict[int, array] = {}  # session -> page -> its last entry number
        # entry number -> uid (stale where the state is 0); longer than the entry numbers (those
        # of ``_state``): it grows by doubling, where an array's own growth (a sixteenth) would
        # copy it again every few batches
        self._uid_at = array("q", (-1,))
        self._state = bytearray(1)  # entry number -> MEMBER | CAND | MARK bits
        # entry number -> 1 where its uid does not follow the one before's by one: a sweep's
        # victims (runs of entry numbers) give their extents by ``find`` over it, unlisted
        self._brk = bytearray(b"\x01")
        self._members = 0
        self._n = 0  # candidates
        self.hand = 0
        self.ahead = 0

    def _extend_breaks(self, first: int, k: int) -> None:
        """``_brk`` over the ``k`` entry numbers from ``first`` (their uids written)."""
        if k < 64:
            u = self._uid_at[first - 1 : first + k]
            self._brk += bytes(map(ne, islice(u, 1, None), map(add, u, repeat(1))))
            return
        at = np.frombuffer(self._uid_at, dtype=np.int64)[first - 1 : first + k]
        self._brk += (at[1:] - at[:-1] != 1).tobytes()
        del at  # (the array may grow again only once no view holds it)

    def _reserve(self, k: int) -> int:
        """Make room in ``_uid_at`` for ``k`` more entry numbers; returns the first of them."""
        first, uid_at = len(self._state), self._uid_at
        if first + k > len(uid_at):
            uid_at.frombytes(bytes(8 * max(first + k - len(uid_at), len(uid_at))))
        return first

    # -- entry numbers by uid --------------------------------------------------------------------
    def _entry(self, uid: int) -> int:
        """The entry number ``uid`` had last (0 if none): a member's if its state is not 0."""
        pages = self._entry_of.get(uid >> UNIT_BITS)
        page = uid & UNIT_MASK
        return pages[page] if pages is not None and page < len(pages) else 0

    def _set_entry(self, uid: int, e: int) -> None:
        pages = self._entry_of.get(uid >> UNIT_BITS)
        if pages is None:
            pages = self._entry_of[uid >> UNIT_BITS] = array("q")
        page = uid & UNIT_MASK
        if page >= len(pages):
            pages.frombytes(bytes(8 * (page + 1 - len(pages))))
        pages[page] = e

    def _pages_of(self, uids) -> tuple[array, int, int] | None:
        """(the page list of the session of ``uids``, grown to hold them, its first page, one past
        its last) when they are a non-empty batch of one session, else None."""
        if not uids:
            return None
        if type(uids) is range and uids.step == 1:
            lo, hi = uids.start, uids.stop - 1
        else:
            lo, hi = min(uids), max(uids)
        session = lo >> UNIT_BITS
        if hi >> UNIT_BITS != session:
            return None
        pages = self._entry_of.get(session)
        if pages is None:
            pages = self._entry_of[session] = array("q")
        stop = (hi & UNIT_MASK) + 1
        if stop > len(pages):
            pages.frombytes(bytes(8 * (stop - len(pages))))
        return pages, lo & UNIT_MASK, stop

    def _entries(self, uids) -> Sequence[int]:
        """The entry numbers ``uids`` had last (0 if none), in order."""
        one = self._pages_of(uids)
        if one is None:
            return list(map(self._entry, uids))
        pages, first, stop = one
        if type(uids) is range:
            return pages[first:stop]
        if len(uids) >= 64:  # a long list (a session's pages, a unit each): one numpy gather
            at = np.asarray(uids, dtype=np.int64) & UNIT_MASK
            out = array("q")
            out.frombytes(np.frombuffer(pages, dtype=np.int64)[at].view(np.uint8))
            return out
        return list(map(pages.__getitem__, map(and_, uids, repeat(UNIT_MASK))))

    def _set_entries(self, uids, first_entry: int) -> None:
        """``uids`` take the entry numbers from ``first_entry`` on, in order."""
        entries = range(first_entry, first_entry + len(uids))
        one = self._pages_of(uids)
        if one is None:
            consume(map(self._set_entry, uids, entries))
        elif type(uids) is range:
            one[0][one[1] : one[2]] = _arange(first_entry, len(uids))
        elif len(uids) >= 64:  # a long list: one numpy scatter
            at = np.asarray(uids, dtype=np.int64) & UNIT_MASK
            np.frombuffer(one[0], dtype=np.int64)[at] = np.arange(
                first_entry, first_entry + len(uids), dtype=np.int64
            )
        else:
            consume(map(one[0].__setitem__, map(and_, uids, repeat(UNIT_MASK)), entries))

    def _runs(self, uids, a: np.ndarray | None = None) -> list | None:
        """``uids`` as batches that each look up their entry numbers at once: itself when it is
        one session's, else its runs of consecutive uids (ranges, each within a session) when
        they are two units long or more on average (a page's layers; at a unit a page, itself,
        unit by unit); None when a uid is listed twice. ``a``: ``uids`` as numpy's, if made."""
        if type(uids) is not range and len(uids) >= 64 and uids[1] == uids[0] + 1:
            runs = self._long_runs(uids, a)  # (a run at the start: most likely runs throughout)
            if runs is not None:
                return runs if runs else None
        if not self._distinct(uids):
            return None
        if type(uids) is range or not uids or min(uids) >> UNIT_BITS == max(uids) >> UNIT_BITS:
            return [uids]
        if uids[1] != uids[0] + 1:  # no run at the start: a page a unit, most likely
            return [uids]
        runs = [range(a, b) for a, b in extents_of(uids)]
        if 2 * len(runs) > len(uids) or any((run[-1] ^ run[0]) >> UNIT_BITS for run in runs):
            return [uids]  # runs too short to pay, or a run across two sessions: unit by unit
        return runs

    @staticmethod
    def _long_runs(uids, a: np.ndarray | None = None) -> list | None:
        """``_runs`` of a long list whose runs of consecutive uids are long, found with numpy (a
        decode step's new pages at layer units: a page's layers a run): [] when a uid is listed
        twice (runs overlap); None when the runs are too short to pay (``_runs`` decides)."""
        if a is None:
            a = np.asarray(uids, dtype=np.int64)
        breaks = np.flatnonzero(a[1:] - a[:-1] != 1) + 1
        if 2 * (len(breaks) + 1) > len(a):
            return None
        starts = a[np.concatenate(([0], breaks))].tolist()
        stops = (a[np.concatenate((breaks - 1, [len(a) - 1]))] + 1).tolist()
        spans = sorted(zip(starts, stops, strict=True))
        if any(s0 > a1 for (_, s0), (a1, _) in zip(spans, spans[1:], strict=False)):
            return []  # two runs share a uid
        if spans[0][0] >> UNIT_BITS == (spans[-1][1] - 1) >> UNIT_BITS:
            return [uids]  # one session's
        if any((b - 1 ^ f) >> UNIT_BITS for f, b in spans):
            return [uids]  # a run across two sessions: unit by unit
        return list(map(range, starts, stops))

    @staticmethod
    def _distinct(uids) -> bool:
        return type(uids) is range or len(set(uids)) == len(uids)

    @staticmethod
    def _as_range(uids):
        """``uids`` as a range when they are one (a session's history, listed), else as given:
        a range's entry numbers are a slice."""
        if type(uids) is list and uids:
            first = uids[0]
            if uids[-1] - first == len(uids) - 1 and uids == list(range(first, first + len(uids))):
                return range(first, first + len(uids))
        return uids

    # -- entering --------------------------------------------------------------------------------
    def enter(self, uid: int, candidate: bool = True) -> None:
        """``uid`` enters at the newest end, unmarked (after the hand: this sweep reaches it)."""
        self.leave(uid)
        self._make_room_for(1)
        e = self._reserve(1)
        self._set_entry(uid, e)
        self._uid_at[e] = uid
        self._brk.append(self._uid_at[e - 1] + 1 != uid)
        self._state.append(_UNMARKED if candidate else _MEMBER)
        self._members += 1
        self._n += candidate
        self.ahead += candidate

    def enter_many(self, uids, candidate: bool = True) -> None:
        """``enter`` each of ``uids``, in order: when none is a member (and none is listed twice),
        they take the next entry numbers in one step. A batch across sessions (a decode step's
        new pages, a page's layers each a unit) goes as its runs of consecutive uids, each a
        slice of its session's page list."""
        uids = self._as_range(uids)
        k = len(uids)
        if type(uids) is range and k >= 64 and self._enter_new_range(uids, candidate):
            return
        a = None  # a long list with runs: its numpy form, made once for the runs and the append
        if type(uids) is list and k >= 64 and uids[1] == uids[0] + 1:
            a = np.asarray(uids, dtype=np.int64)
        runs = self._runs(uids, a)
        if runs is not None and len(runs) > 1:
            self._make_room_for(k)  # (a compaction changes no membership: checked after it)
            spans = self._unheld_spans(runs)
            if spans is not None:
                entries, at = _arange(len(self._state), k), 0  # each run's a slice of them
                for pages, lo, hi in spans:
                    pages[lo:hi] = entries[at : at + hi - lo]
                    at += hi - lo
                self._append(uids, candidate, a)
                return
        elif runs is not None and not self._any_member(self._entries(uids)):
            self._make_room_for(k)
            self._set_entries(uids, len(self._state))
            self._append(uids, candidate, a)
            return
        for uid in uids:
            self.enter(uid, candidate)

    def _enter_new_range(self, uids: range, candidate: bool) -> bool:
        """``enter_many`` of a long range of one session's uids none of which is a member (a
        session's history coming in): their entry numbers and uids are aranges written with
        numpy, with no copy through bytes. False (nothing entered) when it is not that case."""
        if uids.step != 1 or uids.start >> UNIT_BITS != (uids.stop - 1) >> UNIT_BITS:
            return False
        k = len(uids)
        self._make_room_for(k)  # (first: a compaction may forget the session's page list)
        one = self._pages_of(uids)
        assert one is not None
        pages, lo, stop = one
        held = np.frombuffer(pages, dtype=np.int64)[lo:stop]  # (a view: no resize while held)
        if held.any() and np.frombuffer(self._state, dtype=np.uint8)[held].any():
            return False  # a member among them: ``enter_many``'s other forms
        first = len(self._state)  # (the next entry numbers)
        held[:] = np.arange(first, first + k, dtype=np.int64)
        del held
        self._append(uids, candidate)
        return True

    def _unheld_spans(self, runs: list[range]) -> list[tuple[array, int, int]] | None:
        """Each run's (page list, first page, stop), or None if a uid of a run is a member."""
        spans, state = [], self._state
        for run in runs:
            one = self._pages_of(run)
            assert one is not None  # (a run is non-empty and within one session)
            entries = one[0][one[1] : one[2]]
            if entries.count(0) != len(entries) and any(map(state.__getitem__, entries)):
                return None
            spans.append(one)
        return spans

    def _append(self, uids, candidate: bool, a: np.ndarray | None = None) -> None:
        """``uids`` (their entry numbers set) take the next entry numbers; ``a``: ``uids`` as
        numpy's, if made (copied as bytes, not converted uid by uid)."""
        k = len(uids)
        first = self._reserve(k)
        if type(uids) is range and k:  # (each uid follows the one before: no break to find)
            if k >= 64:  # written with numpy, with no copy through bytes
                at = np.frombuffer(self._uid_at, dtype=np.int64)
                at[first : first + k] = np.arange(uids.start, uids.start + k, dtype=np.int64)
                del at  # (the array may grow again only once no view holds it)
            else:
                self._uid_at[first : first + k] = _arange(uids.start, k)
            self._brk.append(self._uid_at[first - 1] + 1 != uids.start)
            self._brk += bytes(k - 1)
        else:
            if a is not None:
                np.frombuffer(self._uid_at, dtype=np.int64)[first : first + k] = a
            else:
                self._uid_at[first : first + k] = array("q", uids)
            self._extend_breaks(first, k)
        self._state.extend(bytes((_UNMARKED if candidate else _MEMBER,)) * k)
        self._members += k
        if candidate:
            self._n += k
            self.ahead += k

    def _any_member(self, entries: Sequence[int]) -> bool:
        """Is any of these entry numbers a member's? (Never-entered pages are 0: one compare.)"""
        if type(entries) is array and entries.tobytes() == bytes(8 * len(entries)):
            return False
        if type(entries) is array and len(entries) >= 64:  # units that left and come back
            at = np.frombuffer(entries, dtype=np.int64)
            return bool(np.frombuffer(self._state, dtype=np.uint8)[at].any())
        return any(map(self._state.__getitem__, entries))

    def _make_room_for(self, k: int) -> None:
        """Compact before ``k`` members enter if the members that left would then hold seven
        eighths of the entry numbers (and more than a few thousand)."""
        if len(self._state) - 1 + k >= 8 * (self._members + k) + self.compact_slack:
            self._compact()

    # -- marks and pins --------------------------------------------------------------------------
    def pin_many(self, uids, mark: bool) -> None:
        """Each member of ``uids`` (marked first, if ``mark``) is no longer a candidate.

        The outcome does not depend on the order of the members: candidates after the hand leave
        ``ahead``, and if they were all of it the hand wraps (the later ones are then ahead of it,
        so ``ahead`` is the candidates left)."""
        uids = self._as_range(uids)
        if not self._distinct(uids):
            for uid in uids:
                self.pin_many((uid,), mark)
            return
        state, hand, entries = self._state, self.hand, self._entries(uids)
        table, k = _PIN_MARKED if mark else _PIN, len(entries)
        first = entries[0] if k else 0
        if type(entries) is array and entries[-1] - first == k - 1 and entries == _arange(first, k):
            before = state[first : first + k]  # consecutive entry numbers: a slice
            state[first : first + k] = before.translate(table)
            pinned = before.translate(_IS_CAND).count(1)
            passed = before[max(0, hand + 1 - first) :].translate(_IS_CAND).count(1)
        elif k >= 64:  # many, scattered: numpy's fixed cost pays
            at = np.asarray(entries, dtype=np.int64)
            states = np.frombuffer(state, dtype=np.uint8)
            was = states[at]  # 0 where none is a member: kept 0
            states[at] = np.frombuffer(table, dtype=np.uint8)[was]
            cand = (was & _CAND).astype(np.bool_)
            pinned = int(np.count_nonzero(cand))
            passed = int(np.count_nonzero(cand & (at > hand)))
            del states  # (the array may grow again only once no view holds it)
        else:
            old = bytes(map(state.__getitem__, entries))  # 0 where none is a member: kept 0
            consume(map(state.__setitem__, entries, old.translate(table)))
            cands = list(compress(entries, old.translate(_IS_CAND)))  # those that were ones
            pinned, passed = len(cands), countOf(map(hand.__lt__, cands), True)  # after the hand
        self._n -= pinned
        self.ahead -= passed
        if passed and not self.ahead:
            self.hand, self.ahead = 0, self._n

    def back_many(self, uids) -> None:
        """Each pinned member is a candidate again in its old place (ahead of the hand if the hand
        has not passed it); a non-member, or a member that was no pinned one, enters anew."""
        uids = self._as_range(uids)
        if not self._distinct(uids) or not self._back_in_place(self._entries(uids)):
            self._back_each(uids)

    def _back_in_place(self, entries: Sequence[int]) -> bool:
        """Make the members at ``entries`` candidates again, if they are all pinned members;
        returns whether they were (else nothing changed)."""
        state, k = self._state, len(entries)
        first = entries[0] if k else 0
        if type(entries) is array and entries[-1] - first == k - 1 and entries == _arange(first, k):
            before = state[first : first + k]  # consecutive entry numbers: a slice
            if before.translate(_IS_PINNED).count(1) < k:
                return False
            state[first : first + k] = before.translate(_BACK)
            self.ahead += max(0, first + k - max(self.hand + 1, first))
        elif type(entries) is array and k >= 64:  # many, scattered: numpy's fixed cost pays
            at = np.frombuffer(entries, dtype=np.int64)
            states = np.frombuffer(state, dtype=np.uint8)
            was = states[at]
            if not _IS_PINNED_NP[was].all():
                return False
            states[at] = _BACK_NP[was]
            self.ahead += int(np.count_nonzero(at > self.hand))
        else:
            pinned = bytes(map(state.__getitem__, entries))
            if pinned.translate(_IS_PINNED).count(1) < k:
                return False
            consume(map(state.__setitem__, entries, pinned.translate(_BACK)))
            self.ahead += countOf(map(self.hand.__lt__, entries), True)
        self._n += k
        return True

    # -- leaving ---------------------------------------------------------------------------------
    def sweep(self) -> int | None:
        """Move the hand to the first unmarked candidate, clearing the marks it passes, and take
        that candidate out (it leaves the tier); None when there is no candidate."""
        got = self.sweep_many(1)
        return got[0] if got else None

    def sweep_many(self, k: int) -> list[int]:
        """``sweep`` up to ``k`` times: the victims in order (fewer only when the candidates run
        out). Each lap takes the unmarked candidates ahead of the hand, up to the k-th, and clears
        the marks it passes on the way; a lap that reaches the end wraps the hand."""
        return self._sweep(k).tolist()

    def sweep_extents(self, k: int, increasing: bool) -> list[tuple[int, int]]:
        """``sweep_many(k)``'s victims as extents (first, stop) of consecutive uids, in that order
        or, when ``increasing``, sorted first; the victims are never listed one by one: each run
        of their entry numbers splits where ``_brk`` says a uid does not follow the one before."""
        uid_at, find = self._uid_at, self._brk.find
        out = []
        for a, b in self._sweep_runs(k):
            j = find(1, a + 1, b)
            while j >= 0:
                out.append((uid_at[a], uid_at[j - 1] + 1))
                a, j = j, find(1, j + 1, b)
            out.append((uid_at[a], uid_at[b - 1] + 1))
        if len(out) < 2:
            return out
        # the victims are distinct: sorting their extents, not them, and joining those that touch
        # gives the extents of the sorted victims
        return join_extents(sorted(out) if increasing else out)

    def _sweep(self, k: int) -> array:
        uid_at, out = self._uid_at, array("q")
        for a, b in self._sweep_runs(k):
            out += uid_at[a:b]
        return out

    def _sweep_runs(self, k: int) -> list[tuple[int, int]]:
        """Sweep up to ``k`` victims: their entry numbers as runs (first, stop), in order."""
        runs: list[tuple[int, int]] = []
        got = 0
        while got < k and self._n:
            lap, n = self._lap(k - got)
            runs += lap
            got += n
        return runs

    def _compact(self) -> None:
        """Drop the entry numbers of members that left (state 0) and renumber the rest in order;
        the hand keeps its place among the members (after those that were at or before it)."""
        state = self._state
        kept = state.translate(_IS_MEMBER)
        at = np.flatnonzero(np.frombuffer(kept, dtype=np.bool_))  # the members' entries
        renumber = np.zeros(len(state), dtype=np.int64)  # each entry's new number (0: it left)
        renumber[at] = np.arange(1, len(at) + 1, dtype=np.int64)  # (a scatter of the members,
        self.hand = int(np.searchsorted(at, self.hand, side="right"))  # not a sum over entries)
        uids = np.frombuffer(self._uid_at, dtype=np.int64)[at]
        # the members' uids move down in place: the array keeps its length, room for the entries
        # to come (built anew, it would grow by doublings again after each compaction)
        np.frombuffer(self._uid_at, dtype=np.int64)[1 : 1 + len(at)] = uids
        # (a gather of the members' bytes: ``replace`` of the zeros copies byte by byte)
        self._state = bytearray(1) + np.frombuffer(state, dtype=np.uint8)[at].tobytes()
        self._brk = bytearray(b"\x01") + (np.diff(uids, prepend=-1) != 1).tobytes()
        for session, pages in list(self._entry_of.items()):
            entries = np.frombuffer(pages, dtype=np.int64)
            entries[:] = renumber[entries]
            if not entries.any():  # none of its units is a member: forget the session
                del self._entry_of[session]


def strip_hole_ends(run: list) -> None:
    """A run ``[first, stop, holes, ...]`` whose ``holes`` lie inside it, after an end moved: move
    each end off holes, forgetting them."""
    holes = run[2]
    while holes and run[0] in holes:
        holes.discard(run[0])
        run[0] += 1
    while holes and run[1] - 1 in holes:
        holes.discard(run[1] - 1)
        run[1] -= 1


class RunQueue:
    """A queue of uids kept as runs (extents) of consecutive uids, oldest first: a session's pages
    that leave or return together are one entry, not one per page.

    A run is ``[first, stop)`` less a set of holes (uids taken out of its middle); taking a uid off
    either end moves ``first`` or ``stop``. Runs are keyed by the uid they started at (a fresh
    negative key if that uid starts another run already), and grouped by ``bucket(uid)`` so the
    runs holding a uid are found without a scan of the queue (the engine's buckets are sessions:
    ``uid >> 24``); a run never spans two buckets. Appending a run, popping n uids from the head
    and dropping a bucket are O(runs touched); taking one uid out is O(runs of its bucket).
    """

    __slots__ = ("_runs", "_in", "_long", "_n", "_spare")

    def __init__(self) -> None:
        self._runs: OrderedDict[int, list] = OrderedDict()  # key -> [first, stop, holes, bucket]
        self._in: dict[int, set[int]] = {}  # bucket -> keys of its runs
        self._long: dict[int, set[int]] = {}  # bucket -> keys of runs that may
        #                                                       hold a uid other than their key
        self._n = 0  # uids in the queue
        self._spare = 0  # last negative key handed out

    @staticmethod
    def bucket(uid: int) -> int:
        return uid >> 24

    # -- adding ----------------------------------------------------------------------------------
    def push_run(self, start: int, stop: int) -> None:
        """Append uids ``start .. stop-1`` (none of them in the queue) at the newest end."""
        while start < stop:
            b = start >> 24
            end = min(stop, (b + 1) << 24)
            key = start
            if key in self._runs:  # that run moved on from start: a fresh key
                self._spare -= 1
                key = self._spare
            self._runs[key] = [start, end, None, b]
            keys = self._in.get(b)
            if keys is None:
                self._in[b] = {key}
            else:
                keys.add(key)
            if end - start > 1 or key != start:
                longs = self._long.get(b)
                if longs is None:
                    self._long[b] = {key}
                else:
                    longs.add(key)
            self._n += end - start
            start = end

    def push(self, uid: int) -> None:
        self.push_run(uid, uid + 1)

    def append(self, uid: int) -> None:
        """``push``, joining the newest run where ``uid`` follows it: a stretch that returns one
        uid at a time stays one run, so finding one of its uids stays cheap."""
        runs = self._runs
        if runs:
            key = next(reversed(runs))
            run = runs[key]
            b = uid >> 24
            if run[1] == uid and run[3] == b:
                run[1] = uid + 1
                longs = self._long.get(b)
                if longs is None:
                    self._long[b] = {key}
                else:
                    longs.add(key)
                self._n += 1
                return
        self.push_run(uid, uid + 1)

    def extend(self, uids) -> None:
        """Append uids in order; consecutive ones become one run (a ``range`` is one run)."""
        if isinstance(uids, range) and uids.step == 1:
            if len(uids):
                self.push_run(uids.start, uids.stop)
            return
        if isinstance(uids, list) and len(uids) > 2048:  # a long list: its runs found in C
            for first, end in extents_of(uids):
                self.push_run(first, end)
            return
        start: int | None = None
        prev = 0  # read only once start is set
        for uid in uids:
            if start is not None and uid == prev + 1:
                prev = uid
                continue
            if start is not None:
                self.push_run(start, prev + 1)
            start = prev = uid
        if start is not None:
            self.push_run(start, prev + 1)

    # -- finding and taking out ------------------------------------------------------------------
    def _run_of(self, uid: int) -> int | None:
        """The key of the run holding ``uid`` (not as a hole), or None."""
        runs = self._runs
        run = runs.get(uid)
        if run is not None:
            first, stop, holes, _ = run
            if first <= uid < stop and (holes is None or uid not in holes):
                return uid
        keys = self._long.get(uid >> 24)
        if not keys:
            return None
        for key in keys:
            first, stop, holes, _ = runs[key]
            if first <= uid < stop and (holes is None or uid not in holes):
                return key
        return None

    def __contains__(self, uid: int) -> bool:
        return self._run_of(uid) is not None

    def discard(self, uid: int) -> bool:
        key = self._run_of(uid)
        if key is None:
            return False
        run = self._runs[key]
        self._n -= 1
        if uid == run[0] or uid == run[1] - 1:  # off an end
            if uid == run[0]:
                run[0] += 1
            else:
                run[1] -= 1
            if run[2]:
                strip_hole_ends(run)
            if run[0] >= run[1]:
                self._drop(key)
            return True
        if run[2] is None:
            run[2] = set()
        run[2].add(uid)
        return True

    def holds_exactly(self, uids) -> bool:
        """Are the queue's uids of ``uids``'s bucket exactly ``uids`` (a range, or an increasing
        list; then ``discard_bucket`` is the removal of ``uids``)? O(runs of the bucket), times
        log(len(uids)) for a list."""
        if not len(uids):
            return False
        lo, hi = uids[0], uids[-1]
        b = lo >> 24
        if hi >> 24 != b:
            return False
        keys = self._in.get(b)
        if not keys:
            return False
        ranged = isinstance(uids, range)
        count = 0
        for key in keys:
            first, stop, holes, _ = self._runs[key]
            if first < lo or stop > hi + 1:
                return False
            count += stop - first - (len(holes) if holes else 0)
            if not ranged and not _run_within(uids, first, stop, holes):
                return False
        return count == len(uids)

    def holds_bucket(self, bucket: int) -> bool:
        """Does the queue hold any uid of ``bucket``?"""
        return bucket in self._in

    def discard_bucket(self, bucket: int) -> int:
        """Take out every run of one bucket (a whole session); returns how many uids left."""
        keys = self._in.pop(bucket, None)
        self._long.pop(bucket, None)
        if not keys:
            return 0
        gone = 0
        runs = self._runs
        for key in keys:
            first, stop, holes, _ = runs.pop(key)
            gone += stop - first - (len(holes) if holes else 0)
        self._n -= gone
        return gone

    def _drop(self, key: int) -> None:
        b = self._runs.pop(key)[3]
        keys = self._in[b]
        keys.discard(key)
        if not keys:
            del self._in[b]
        longs = self._long.get(b)
        if longs is not None:
            longs.discard(key)
            if not longs:
                del self._long[b]

    def first(self) -> int | None:
        """The oldest uid, or None (runs never start or end on a hole)."""
        for first, _, _, _ in self._runs.values():
            return first
        return None

    def pop(self, n: int) -> list[int]:
        """Take out the ``n`` oldest uids (fewer if the queue is shorter), oldest first."""
        out: list[int] = []
        for a, b in self.pop_runs(n):
            out.extend(range(a, b))
        return out

    def pop_runs(self, n: int) -> list[tuple[int, int]]:
        """``pop(n)`` as extents: (first, stop) ranges of consecutive uids, oldest first."""
        out: list[tuple[int, int]] = []
        runs = self._runs
        while n > 0 and runs:
            key, run = next(iter(runs.items()))
            first, stop, holes, _ = run
            if holes is None:
                end = min(stop, first + n)
                out.append((first, end))
                n -= end - first
                self._n -= end - first
            else:
                end = a = first
                while end < stop and n > 0:
                    if end in holes:  # a hole ends the current extent
                        holes.discard(end)
                        if a < end:
                            out.append((a, end))
                        a = end + 1
                    else:
                        n -= 1
                        self._n -= 1
                    end += 1
                if a < end:
                    out.append((a, end))
                while holes and end in holes:
                    holes.discard(end)
                    end += 1
            if end >= stop:
                self._drop(key)
            else:
                run[0] = end  # the rest stays at the head
        return out

    def replay_view(self):
        """(members, move-to-newest, push, pop-oldest) as C-level calls, for a replay that only
        ever pushes single uids onto an empty queue (``kvsim cachesim``): each uid is then its own
        run, so the run table alone is the queue. pop-oldest returns (uid, run) and raises
        KeyError when empty. The queue is in that form for good: only the four calls apply
        afterwards (the bucket look-ups raise)."""
        if self._runs:
            raise ValueError("replay_view needs an empty queue")
        runs = self._runs
        self._in = self._long = None
        return runs, runs.move_to_end, runs.setdefault, partial(runs.popitem, last=False)

    def __len__(self) -> int:
        return self._n

    def __iter__(self):
        for first, stop, holes, _ in list(self._runs.values()):
            for uid in range(first, stop):
                if holes is None or uid not in holes:
                    yield uid


class SizedOrder:
    """An ``EntryOrder`` whose members have sizes, with the bytes of its candidates (``nbytes``):
    the FIFO queues of S3-FIFO and 2Q, sized in bytes. A pinned member keeps its place; entering
    again (a reinsertion) moves a member to the newest end."""

    __slots__ = ("_order", "_size", "nbytes")

    def __init__(self) -> None:
        self._order = EntryOrder()
        self._size: dict[int, int] = {}  # every member -> bytes
        self.nbytes = 0

    def enter(self, uid: int, size: int, candidate: bool = True) -> None:
        if uid in self._size:
            self.leave(uid)
        self._order.enter(uid, candidate)
        self._size[uid] = size
        if candidate:
            self.nbytes += size

    def discard(self, uid: int) -> bool:
        """A member is no longer a candidate (pinned); False if it was not one."""
        if self._order.discard(uid):
            self.nbytes -= self._size[uid]
            return True
        return False

    def back(self, uid: int, size: int) -> None:
        """A pinned member is a candidate again, in its old place, with its size now (it may have
        grown while pinned)."""
        if not self._order.is_member(uid):
            self.enter(uid, size)
            return
        was = uid in self._order
        self._order.back(uid)
        self.nbytes += size - (self._size[uid] if was else 0)
        self._size[uid] = size

    def leave(self, uid: int) -> bool:
        """``uid`` leaves the queue; returns whether it was a candidate."""
        was = self.discard(uid)
        self._order.leave(uid)
        self._size.pop(uid, None)
        return was

    def enter_many(self, uids: list[int], size: int, candidate: bool = True) -> None:
        """``enter`` each of ``uids`` (distinct, none a member) with one ``size``, in order."""
        self._order.enter_many(uids, candidate)
        self._size.update(dict.fromkeys(uids, size))
        if candidate:
            self.nbytes += size * len(uids)

    def discard_many(self, uids) -> list[int]:
        """``discard`` each; returns those that were candidates, in order."""
        was = self._order.discard_many(uids)
        self.nbytes -= sum(map(self._size.__getitem__, was))
        return was

    def pinned_entries(self, uids) -> list[int] | None:
        """As ``EntryOrder.pinned_entries``."""
        return self._order.pinned_entries(uids)

    def back_entries(self, uids, seqs: list[int]) -> None:
        """``back`` each of ``uids`` (pinned members at entry numbers ``seqs``) with the size it
        had: a unit that cannot grow while pinned."""
        self._order.back_entries(seqs)
        self.nbytes += sum(map(self._size.__getitem__, uids))

    def oldest(self) -> int | None:
        return self._order.min()

    def pop_many(self, k: int) -> list[int]:
        """Up to ``k`` of the oldest candidates leave the queue, oldest first."""
        out = self._order.pop_many(k)
        self.nbytes -= sum(map(self._size.pop, out))
        return out

    def move_to_end(self, uid: int) -> None:
        """A member enters again at the newest end (a reinsertion), keeping its size."""
        self._order.move_to_end(uid)

    def size_of(self, uid: int) -> int:
        return self._size[uid]

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, uid: int) -> bool:
        """Is ``uid`` a candidate?"""
        return uid in self._order


class GhostFIFO:
    """Keys (and sizes) of evicted units, oldest first, with their total bytes."""

    __slots__ = ("_q", "bytes")

    def __init__(self) -> None:
        self._q: OrderedDict[int, int] = OrderedDict()
        self.bytes = 0

    def add(self, uid: int, size: int) -> None:
        if uid in self._q:
            self.bytes -= self._q.pop(uid)
        self._q[uid] = size
        self.bytes += size

    def put(self, uid: int, size: int, max_bytes: float) -> None:
        """Remember an evicted unit, keeping at most ``max_bytes`` (the oldest go first); one
        remembered already keeps its place, one larger than ``max_bytes`` is not remembered."""
        if uid in self._q or size > max_bytes:
            return
        self.trim(max_bytes - size)
        self.add(uid, size)

    def put_many(self, uids: Sequence[int], size: int, max_bytes: float) -> None:
        """``put`` of each of ``uids`` (all of ``size``) in turn, at once: trimming after the last
        forgets the same oldest keys as trimming before each."""
        if size > max_bytes or not uids:
            return
        q = self._q
        for uid in uids:
            if uid not in q:
                q[uid] = size
                self.bytes += size
        self.trim(max_bytes)

    def take(self, uid: int) -> int | None:
        """Forget ``uid`` (a ghost hit); its size, or None if it was not remembered."""
        size = self._q.pop(uid, None)
        if size is not None:
            self.bytes -= size
        return size

    def pop_oldest(self) -> tuple[int, int]:
        uid, size = self._q.popitem(last=False)
        self.bytes -= size
        return uid, size

    def trim(self, max_bytes: float) -> None:
        """Forget the oldest keys until at most ``max_bytes`` are remembered."""
        while self.bytes > max_bytes and self._q:
            self.pop_oldest()

    def __len__(self) -> int:
        return len(self._q)

    def __contains__(self, uid: int) -> bool:
        return uid in self._q

    def holds_any(self, uids) -> bool:
        """Is any of ``uids`` remembered (a batch's ghost hits, in C)?"""
        return not self._q.keys().isdisjoint(uids)

    def ghosts(self) -> OrderedDict[int, int]:
        """The keys and sizes, oldest first, for a caller that keeps ``bytes`` itself (a batch)."""
        return self._q

    def __iter__(self):
        return iter(self._q)  # oldest first

    def __bool__(self) -> bool:
        return bool(self._q)


class ByteBudget:
    """A tier's capacity in bytes: the one given to ``set_capacity``, or else the high-water mark
    of the bytes held (the engine fills a tier before it evicts, so the mark reaches the capacity
    by the first eviction)."""

    __slots__ = ("capacity", "hwm", "resident")

    def __init__(self) -> None:
        self.capacity: int | None = None
        self.hwm = 0
        self.resident = 0

    def set(self, capacity: int) -> None:
        self.capacity = int(capacity)

    def grow(self, nbytes: int) -> None:
        self.resident += nbytes
        self.hwm = max(self.hwm, self.resident)

    def shrink(self, nbytes: int) -> None:
        self.resident -= nbytes

    @property
    def c(self) -> int:
        return self.capacity if self.capacity is not None else self.hwm


class UnitSet:
    """A set of the engine's uids kept as a byte per unit: per session (``uid >> UNIT_BITS``) a
    byte array by unit number, 1 for a member. A session's units that join or leave together
    (a turn's release, a pin, a batch of victims) are one slice when consecutive, a numpy
    scatter when scattered: no Python step a unit. A session's array goes with its last member.

    The batch calls state what holds: ``add_many`` adds only non-members, ``discard_many`` takes
    only members; ``count_in`` says which case a batch is. A batch said to be ``ascending`` (a
    sorted list) finds its ends at its ends, not by a scan."""

    __slots__ = ("_flags", "_count", "_n")

    def __init__(self) -> None:
        self._flags: dict[int, bytearray] = {}  # session -> unit number -> 1 for a member
        self._count: dict[int, int] = {}  # session -> its members
        self._n = 0

    @staticmethod
    def _span(uids, ascending: bool = False) -> tuple[int, int, int, bool] | None:
        """(session, first unit number, stop, consecutive) of a non-empty batch of one session's
        uids, else None."""
        if type(uids) is range and uids.step == 1:
            lo, hi = uids.start, uids.stop - 1
        elif ascending:
            lo, hi = uids[0], uids[-1]
        else:
            lo, hi = min(uids), max(uids)
        if lo >> UNIT_BITS != hi >> UNIT_BITS:
            return None
        consecutive = hi - lo == len(uids) - 1  # (distinct uids: lo..hi, each once)
        return lo >> UNIT_BITS, lo & UNIT_MASK, (hi & UNIT_MASK) + 1, consecutive

    def count_in(self, uids, ascending: bool = False) -> int:
        """How many of ``uids`` (distinct) are members."""
        if not uids:
            return 0
        span = self._span(uids, ascending)
        if span is None:
            return sum(map(self.__contains__, uids))
        session, lo, stop, consecutive = span
        flags = self._flags.get(session)
        if flags is None:
            return 0
        if consecutive:
            return flags.count(1, lo, stop)
        if len(flags) < stop:
            return sum(map(self.__contains__, uids))
        at = np.asarray(uids, dtype=np.int64) & UNIT_MASK
        return int(np.frombuffer(flags, dtype=np.uint8)[at].sum())

    def discard_one(self, uid: int) -> None:
        """``discard_many((uid,))`` of a member: its byte, with no batch's span to find."""
        session = uid >> UNIT_BITS
        self._flags[session][uid & UNIT_MASK] = 0
        self._n -= 1
        left = self._count[session] - 1
        if left:
            self._count[session] = left
        else:
            del self._count[session], self._flags[session]

    def count_at(self, session: int, units: np.ndarray) -> int:
        """How many of session ``session``'s unit numbers ``units`` (distinct) are members."""
        flags = self._flags.get(session)
        if flags is None:
            return 0
        units = units[units < len(flags)]
        return int(np.frombuffer(flags, dtype=np.uint8)[units].sum())

    def session_count(self, session: int) -> int:
        """How many members session ``session`` holds."""
        return self._count.get(session, 0)

    def drop_session(self, session: int) -> None:
        """Every member of session ``session`` stops being one (``discard_many`` of them all)."""
        self._n -= self._count.pop(session, 0)
        self._flags.pop(session, None)

    def add_many(self, uids, ascending: bool = False) -> None:
        """``uids`` (distinct, none a member) become members."""
        self._set(uids, 1, ascending)

    def discard_many(self, uids, ascending: bool = False) -> None:
        """``uids`` (distinct, all members) stop being members."""
        self._set(uids, 0, ascending)

    def _set(self, uids, value: int, ascending: bool = False) -> None:
        if not uids:
            return
        span = self._span(uids, ascending)
        if span is None:
            for uid in uids:
                self._set((uid,), value)
            return
        session, lo, stop, consecutive = span
        flags = self._flags.get(session)
        if flags is None:
            flags = self._flags[session] = bytearray(stop)
        elif len(flags) < stop:
            flags.extend(bytes(stop - len(flags)))
        k = len(uids)
        if consecutive:
            flags[lo:stop] = bytes((value,)) * k
        elif k >= 64:
            view = np.frombuffer(flags, dtype=np.uint8)
            view[np.asarray(uids, dtype=np.int64) & UNIT_MASK] = value
            del view  # (the array may grow again only once no view holds it)
        else:
            consume(map(flags.__setitem__, map(and_, uids, repeat(UNIT_MASK)), repeat(value, k)))
        change = k if value else -k
        self._n += change
        left = self._count.get(session, 0) + change
        if left:
            self._count[session] = left
        else:
            del self._count[session], self._flags[session]

    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: int) -> bool:
        flags = self._flags.get(uid >> UNIT_BITS)
        unit = uid & UNIT_MASK
        return flags is not None and unit < len(flags) and flags[unit] == 1
