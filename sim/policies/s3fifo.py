"""S3-FIFO (Yang et al., SOSP'23), as libCacheSim's S3FIFO.c (small 10 %, main, ghost 90 %).

Three FIFO queues sized in bytes from the capacity c: a small queue S of int(0.1 c), a main queue M
of c - int(0.1 c), and a ghost G of int(0.9 c) bytes that remembers only keys and sizes.

- A miss whose key is in G leaves G and enters M; any other miss enters S (before the first eviction
  a miss enters M once S holds its share, as libCacheSim's version does).
- A hit adds one to the unit's counter (kept per unit; reinsertion caps it at 3).
- Eviction: from M if M holds more than its share or S is empty, else from S.
  From S: the oldest unit with counter >= 2 moves to M (counter 0), the first one below 2 is the
  victim and its key enters G (G drops its oldest keys to make room). One-hit wonders thus leave
  from S without ever reaching M.
  From M: the oldest unit with counter >= 1 is reinserted at M's newest end with counter
  min(counter, 3) - 1; the first with counter 0 is the victim.
- ``admit`` (cachesim): an object larger than S is not admitted, nor one of exactly S's size unless
  its key was in G. libCacheSim's ``can_insert`` refuses the former; the latter it admits, makes
  room for, then drops in ``insert``; kvsim refuses it up front, without evicting. That is the one
  documented difference (tested in tests/policies/test_differential_libcachesim.py); the engine
  never calls ``admit``.

``evict`` performs the moves (S to M, M reinsertions) that libCacheSim's eviction does on its way to
the victim, and puts an S victim's key in G; a unit the engine ``remove``s is forgotten. ``peek``
is that walk on a copy (pure, O(n): only tests and users peek; the engine evicts).

Pins: a pinned unit leaves its queue but keeps its queue, place and counter; on unpin it returns to
its place. A queue's byte count is that of its candidates. Without ``set_capacity`` (the engine),
c is the high-water mark of the bytes the tier has held.

Structures and costs: S and M are ``SizedOrder``s (entry numbers and a byte array of candidates),
G a ``GhostQueue`` (plain dicts and lists; batches of keys enter and leave in C). Where every unit
has one size, the engine's batches (a session's units entering, released, S's victims going to
G) cost O(units) in C. M's walk is a Python loop per step; S's walk, where many victims are
wanted, reads a stretch of candidates at a time (their counters, and where the walk stops: at the
k-th victim or at the first victim after the move that fills M's share, found by bisection), in
C. A decode step's single new page takes the plain ``insert``.

A decode span in one batch (``grows_in_bulk`` with ``plans_pinned``): a pinned page changes no
victim (the walks read the candidates' bytes, and the shares come from the capacity the engine
sets), but where it enters does: M before the first eviction once S holds its share, M as a ghost
hit, else S's newest end, which nothing but an insert reaches. The engine names the span's pages
and how many victims precede each (``plan_pinned``); the pages that precede every victim enter
first, then the batch's eviction runs, then the others enter S in order. Where one of those
others is a ghost (its uid was a unit once), G's trimming during the span decides whether it still
is one at its step: the batch then goes step by step, each page after its victims.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import compress, repeat
from operator import add, is_not, not_
from typing import ClassVar

from sim.policies.base import EvictionPolicy
from sim.policies.ghost_queue import GhostQueue
from sim.policies.registry import register
from sim.policies.structures import ByteBudget, SizedOrder, consume
from sim.units import Tier

SMALL, MAIN = 0, 1
FEW_VICTIMS = 8  # fewer wanted from S: its walk goes step by step
STRETCH_SLACK = 64  # candidates looked at beyond those wanted in S's first stretch


@register("s3fifo")
class S3FIFO(EvictionPolicy):
    small_size_ratio = 0.1
    ghost_size_ratio = 0.9
    move_to_main_threshold = 2
    max_freq = 3
    reads_last_access = False
    grows_in_bulk = True
    plans_pinned = True
    # The same policy on runs (``RunS3FIFO``): its module imports this one and names itself here,
    # as the registry imports it with this one (``registry._COMPANIONS``) before any is built.
    run_form: ClassVar[type[S3FIFO] | None] = None

    def __new__(cls, ctx=None, *args, **kwargs):
        # Where every unit has one size (the engine's block and layer_block units), the queues
        # are kept as runs (``RunS3FIFO``): a session's units, of every layer, are consecutive
        # uids. Not in a tier that takes demotions in (``take_in`` enters its units one at a time).
        view = getattr(ctx, "view", None)
        if (
            cls is S3FIFO
            and S3FIFO.run_form is not None
            and getattr(view, "unit_bytes", None)
            and getattr(ctx, "tier", None) != Tier.CPU
        ):
            cls = S3FIFO.run_form
        return super().__new__(cls)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._q = (SizedOrder(), SizedOrder())  # S and M; a pinned unit stays in its place
        self._ghost = GhostQueue()
        self._freq: dict[int, int] = {}
        self._queue_of: dict[int, int] = {}  # every member -> SMALL or MAIN
        self._budget = ByteBudget()
        self._sized_for = -1  # the capacity _shares was computed for
        self._shares = (0, 0, 0)
        self._has_evicted = False
        self._incoming: tuple[int, bool] | None = None  # (uid, ghost hit) from admitting
        self._plan: tuple[list[int], list[int]] | None = None  # for the next eviction
        self._planned: list[int] | None = None  # pinned uids the last eviction entered by plan

    # -- sizes -----------------------------------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        self._budget.set(capacity)

    def _sizes(self) -> tuple[int, int, int]:
        """(S, M, G) in bytes, for the capacity now (computed again only when it changed)."""
        c = self._budget.c
        if c != self._sized_for:
            small = int(c * self.small_size_ratio)
            self._shares = (small, c - small, int(c * self.ghost_size_ratio))
            self._sized_for = c
        return self._shares

    # -- cachesim hooks --------------------------------------------------------------------------
    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self._ghost.take(uid) is not None)

    def admit(self, uid: int) -> bool:
        small = self._sizes()[0]
        hit = self._incoming is not None and self._incoming[0] == uid and self._incoming[1]
        size = self.view.size(uid)
        return size < small or (hit and size <= small)

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        if uid in self._queue_of:  # (a member inserted again enters anew)
            self.remove(uid)
        size = self.view.size(uid)
        inc = self._incoming
        hit = inc[1] if inc is not None and inc[0] == uid else self._ghost.take(uid) is not None
        self._incoming = None
        self._freq[uid] = 0
        self._budget.grow(size)
        # a ghost hit enters M; so does any miss while S is full before the first eviction
        if hit or (not self._has_evicted and self._q[SMALL].nbytes >= self._sizes()[0]):
            q = MAIN
        else:
            q = SMALL
        self._queue_of[uid] = q
        self._q[q].enter(uid, size, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order; in C once something was evicted, when all have one size and
        none is a member (then each ghost enters M, each other unit S)."""
        if self._entered_by_plan(uids, pinned):
            return
        uids = list(uids)
        if len(uids) == 1:  # a decode step's new page: the plain hook costs less than a batch
            self.insert(uids[0], now, pinned)
            return
        unit = self.view.unit_bytes
        members = not self._queue_of.keys().isdisjoint(uids) or len(set(uids)) < len(uids)
        fresh = not (members or self._incoming is not None)
        if not (unit and self._has_evicted and fresh):
            super().insert_many(uids, now, pinned)
            return
        self._freq.update(dict.fromkeys(uids, 0))
        self._budget.grow(unit * len(uids))
        ghost = self._ghost
        if not ghost.holds_any(uids):
            self._queue_of.update(dict.fromkeys(uids, SMALL))
            self._enter_fresh(SMALL, uids, unit, not pinned)
            return
        # Ghost hits leave G and enter M, the others S, each queue in order.
        hit = ghost.holds(uids)
        hits = list(compress(uids, hit))
        misses = list(compress(uids, map(not_, hit)))
        consume(map(ghost.take, hits))
        self._queue_of.update(dict.fromkeys(misses, SMALL))
        self._queue_of.update(dict.fromkeys(hits, MAIN))
        self._enter_fresh(SMALL, misses, unit, not pinned)
        self._enter_fresh(MAIN, hits, unit, not pinned)

    def _entered_by_plan(self, uids, pinned: bool) -> bool:
        """Did the last eviction enter these pinned units by plan (``plan_pinned``)? A pending
        plan is dropped either way: it was for an eviction that came first."""
        planned = self._planned
        self._plan = self._planned = None
        return planned is not None and pinned and (uids is planned or list(uids) == planned)

    def plan_pinned(self, uids: list[int], before: list[int]) -> None:
        self._plan = (uids, before)
        self._planned = None

    def _evict_by_plan(self, n: int, evict_n: Callable[[int], list], now: float) -> list:
        """``evict_n(n)`` (a batch of ``n`` victims, as a list) with the pending plan's pinned units
        entering where one step at a time enters them (see the module's note); the victims, the
        lists ``evict_n`` gave joined in order."""
        assert self._plan is not None
        (uids, before), self._plan = self._plan, None
        first = bisect_right(before, 0)  # these enter before any victim
        if first:
            self.insert_many(uids[:first], now, True)
        rest = uids[first:]
        if not rest or not self._ghosts_among(rest):  # each enters S after the batch
            out = evict_n(n)
            if rest:
                self.insert_many(rest, now, True)
        else:  # a ghost may still be one at its step: step by step
            out, asked, i = [], 0, first
            while i < len(uids):
                b = min(before[i], n)
                j = bisect_right(before, before[i], i)
                if b > asked:
                    out += evict_n(b - asked)
                    asked = b
                self.insert_many(uids[i:j], now, True)
                i = j
            if n > asked:
                out += evict_n(n - asked)
        self._planned = uids  # (set last: the inserts above are not the plan's insert_many)
        return out

    def _ghosts_among(self, uids: list[int]) -> bool:
        """Is any of ``uids`` a ghost?"""
        return self._ghost.holds_any(uids)

    def _enter_fresh(self, q: int, uids: list[int], unit: int, candidate: bool) -> None:
        """``SizedOrder.enter_many`` into queue ``q`` of distinct units of one size that are in no
        queue (the caller checked): the order's arrays grow in C, without checking again."""
        if not uids:
            return
        sized = self._q[q]
        order, n = sized._order, len(uids)
        order._compact_before(n)
        first = len(order._uid_at)
        order._seq.update(zip(uids, range(first, first + n)))
        order._uid_at.extend(uids)
        order._flag.extend(b"\x01" * n if candidate else bytes(n))
        sized._size.update(dict.fromkeys(uids, unit))
        if candidate:
            order._n += n
            sized.nbytes += unit * n

    def access(self, uid: int, now: float) -> None:
        f = self._freq.get(uid)
        if f is not None:
            self._freq[uid] = f + 1
        self._incoming = None

    def pin(self, uid: int) -> None:
        q = self._queue_of.get(uid)
        if q is not None:
            self._q[q].discard(uid)

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each."""
        self._incoming = None
        uids = list(uids)
        freq, queues = self._freq, self._q
        queue = list(map(self._queue_of.get, uids))
        members = list(compress(uids, map(is_not, queue, repeat(None))))
        if len(set(members)) < len(members):  # a uid twice counts twice
            for uid in members:
                freq[uid] += 1
        else:  # in C
            freq.update(zip(members, map(add, map(freq.__getitem__, members), repeat(1))))
        for q in (SMALL, MAIN):
            queues[q].discard_many(compress(uids, map(q.__eq__, queue)))

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order."""
        uids = list(uids)
        if not self.view.unit_bytes:
            super().release(uids, now)  # one at a time: a unit may have grown while pinned
            return
        queue = list(map(self._queue_of.get, uids))
        if MAIN not in queue and None not in queue and self._back_pinned(SMALL, uids):
            return  # the usual batch: a session's units, all in S
        small = list(compress(uids, map(SMALL.__eq__, queue)))
        main = list(compress(uids, map(MAIN.__eq__, queue)))
        in_small, in_main = self._q[SMALL].pinned_entries(small), self._q[MAIN].pinned_entries(main)
        if None in queue or in_small is None or in_main is None:
            super().release(uids, now)  # one at a time: some enter anew
            return
        # Equal sizes, every unit a pinned member: each returns to its place in its queue.
        self._q[SMALL].back_entries(small, in_small)
        self._q[MAIN].back_entries(main, in_main)

    def _back_pinned(self, q: int, uids: list[int]) -> bool:
        """``SizedOrder.back_entries`` of ``uids`` (units of one size) in queue ``q`` if each is a
        pinned member of it; False, changing nothing, if not."""
        sized = self._q[q]
        seqs = sized.pinned_entries(uids)
        if seqs is None:
            return False
        sized._order.back_entries(seqs)
        sized.nbytes += self.view.unit_bytes * len(uids)
        return True

    def unpin(self, uid: int, now: float) -> None:
        q = self._queue_of.get(uid)
        if q is None or uid in self._q[q]:  # not pinned: an entry
            self.insert(uid, now)
            return
        queue = self._q[q]
        new = self.view.size(uid)  # a pinned unit may have grown
        self._budget.grow(new - queue.size_of(uid))
        queue.back(uid, new)

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._freq.pop(uid, None)
        q = self._queue_of.pop(uid, None)
        if q is not None:
            self._budget.shrink(self._q[q].size_of(uid))
            self._q[q].leave(uid)

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    # -- eviction --------------------------------------------------------------------------------
    def peek(self, now: float) -> int | None:
        return self._peek_by_dry_run(now)

    def evict(self, now: float) -> int | None:
        if self._plan is not None and self.view.unit_bytes:
            got = self.evict_bytes(self.view.unit_bytes, now)
            return got[0] if got else None
        self._has_evicted = True
        small_q, main_q = self._q
        freq, queue_of = self._freq, self._queue_of
        _, main_size, _ = self._sizes()
        while True:
            if main_q.nbytes > main_size or not small_q:
                uid = main_q.oldest()
                if uid is None:
                    if not small_q:
                        return None  # nothing to evict
                else:
                    f = freq[uid]
                    if f >= 1:  # reinsert at the newest end of M
                        freq[uid] = min(f, self.max_freq) - 1
                        main_q.move_to_end(uid)
                    else:
                        self.remove(uid)
                        return uid
                    continue
            uid = small_q.oldest()
            while uid is not None:
                if freq[uid] >= self.move_to_main_threshold:  # S -> M, counter cleared
                    freq[uid] = 0
                    size = small_q.size_of(uid)
                    small_q.leave(uid)
                    main_q.enter(uid, size)
                    queue_of[uid] = MAIN
                    uid = small_q.oldest()
                else:
                    size = small_q.size_of(uid)
                    self.remove(uid)
                    self._ghost.put(uid, size, self._sizes()[2])  # a one-hit wonder leaves S for G
                    return uid

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """``evict`` until ``nbytes`` are freed. Where every unit has one size, in one loop (the
        same moves, reinsertions and victims; nothing reads G while evicting, so S's victims
        enter it at the end, where it keeps its newest G bytes, as one by one): stretches of M
        steps and of S steps, each a scan of its queue's entries."""
        unit = self.view.unit_bytes
        if not unit:  # (the engine plans only where units have one size)
            self._plan = None
            return super().evict_bytes(nbytes, now)
        n = -(-nbytes // unit)
        if n <= 0:
            return []
        if self._plan is not None:
            return self._evict_by_plan(n, lambda k: self._evict_units(k, unit), now)
        return self._evict_units(n, unit)

    def _evict_units(self, n: int, unit: int) -> list[int]:
        """``evict_bytes`` of ``n`` units of ``unit`` bytes each (n > 0)."""
        self._has_evicted = True
        small_q, main_q = self._q
        small_order = small_q._order
        _, main_size, ghost_size = self._sizes()
        out: list[int] = []
        to_ghost: list[int] = []
        while len(out) < n:
            if main_q.nbytes > main_size or not small_order._n:
                if self._main_steps(n - len(out), unit, main_size, out):
                    continue  # M is not over its share any more (or enough victims): S next
                if not small_order._n:
                    break  # nothing to evict
            self._small_steps(n - len(out), unit, main_size, out, to_ghost)
        self._budget.shrink(unit * len(out))
        self._ghost.put_many(to_ghost, unit, ghost_size)  # (a member is never a ghost)
        return out

    def _main_steps(self, k: int, unit: int, main_size: int, out: list[int]) -> bool:
        """Evict from M (units of one size) while it is over its share or S is empty, up to ``k``
        victims: the oldest unit with a counter is reinserted at the newest end, one without is the
        victim. False when M has no candidate left."""
        small_order = self._q[SMALL]._order
        main_q = self._q[MAIN]
        order, sizes = main_q._order, main_q._size
        freq, queue_of, max_freq = self._freq, self._queue_of, self.max_freq
        flag, uid_at, seq = order._flag, order._uid_at, order._seq
        i, taken, found = order._lo, 0, True
        while taken < k and (main_q.nbytes > main_size or not small_order._n):
            i = flag.find(1, i)
            if i < 0:
                found = False
                break
            uid = uid_at[i]
            f = freq[uid]
            if f >= 1:  # reinsert at the newest end of M
                freq[uid] = min(f, max_freq) - 1
                order._lo = i
                order.move_to_end(uid)
                if order._flag is not flag:  # renumbered: scan the new arrays from the start
                    flag, uid_at, seq = order._flag, order._uid_at, order._seq
                    i = order._lo
                else:
                    i += 1
                continue
            flag[i] = 0
            del seq[uid], sizes[uid], freq[uid], queue_of[uid]
            order._n -= 1
            main_q.nbytes -= unit
            out.append(uid)
            taken += 1
            i += 1
        order._lo = len(flag) if i < 0 else i
        return found

    def _small_steps(
        self, k: int, unit: int, main_size: int, out: list[int], to_ghost: list[int]
    ) -> None:
        """Evict from S (units of one size): its oldest units with counter >= 2 move to M, the
        first below 2 is the victim; again while M is within its share and S is not empty, up to
        ``k`` victims (at least one step, as ``evict`` takes one)."""
        if k < FEW_VICTIMS:
            self._small_steps_one_by_one(k, unit, main_size, out, to_ghost)
            return
        small_q, main_q = self._q
        order = small_q._order
        flag, uid_at = order._flag, order._uid_at
        freq, threshold = self._freq, self.move_to_main_threshold
        # S's walk stops after the victim that makes k, or after the first victim that follows
        # the move taking M over its share (the move_limit-th, counting from 1).
        move_limit = (main_size - main_q.nbytes) // unit + 1
        moved: list[int] = []
        taken: list[int] = []
        i, end, width = order._lo, len(flag), k + STRETCH_SLACK
        while i < end:
            j = min(end, i + width)
            width *= 2
            window = flag[i:j]
            places = list(compress(range(i, j), window))
            if not places:
                i = j
                continue
            uids = list(compress(uid_at[i:j], window))
            promote = list(map(threshold.__le__, map(freq.__getitem__, uids)))
            victim_at = list(compress(range(len(uids)), map(not_, promote)))
            stop = self._small_stop(k - len(taken), move_limit - len(moved), promote, victim_at)
            if stop is not None:
                cut = victim_at[stop] + 1
                del uids[cut:], promote[cut:]
                j = places[cut - 1] + 1
            flag[i:j] = bytes(j - i)
            taken.extend(compress(uids, map(not_, promote)))
            moved.extend(compress(uids, promote))
            consume(map(order._seq.__delitem__, uids))
            consume(map(small_q._size.__delitem__, uids))
            i = j
            if stop is not None:
                break
        order._lo = i
        gone = len(taken) + len(moved)
        order._n -= gone
        small_q.nbytes -= unit * gone
        consume(map(freq.__delitem__, taken))
        consume(map(self._queue_of.__delitem__, taken))
        out.extend(taken)
        to_ghost.extend(taken)
        if moved:  # S -> M, counters cleared
            freq.update(dict.fromkeys(moved, 0))
            self._queue_of.update(dict.fromkeys(moved, MAIN))
            main_q.enter_many(moved, unit)

    @staticmethod
    def _small_stop(
        k: int, move_limit: int, promote: list[bool], victim_at: list[int]
    ) -> int | None:
        """Which of a stretch's victims (by index in ``victim_at``, the victims' places among its
        candidates) ends S's walk: the ``k``-th, or the first after the ``move_limit``-th move
        (counting the stretch's moves only); None if the walk goes on past the stretch."""
        stop = k - 1
        if move_limit <= 0:
            stop = 0
        else:
            moves = list(compress(range(len(promote)), promote))
            if move_limit <= len(moves):
                stop = min(stop, bisect_right(victim_at, moves[move_limit - 1]))
        return stop if stop < len(victim_at) else None

    def _small_steps_one_by_one(
        self, k: int, unit: int, main_size: int, out: list[int], to_ghost: list[int]
    ) -> None:
        """``_small_steps`` for a few victims: a loop per step costs less than a stretch's passes."""
        small_q, main_q = self._q
        order, sizes = small_q._order, small_q._size
        freq, queue_of, threshold = self._freq, self._queue_of, self.move_to_main_threshold
        flag, uid_at, seq = order._flag, order._uid_at, order._seq
        room = main_size - main_q.nbytes  # M's bytes below its share
        moved: list[int] = []
        i, taken, left = order._lo, 0, order._n
        while True:
            i = flag.find(1, i)
            if i < 0:
                break
            uid = uid_at[i]
            flag[i] = 0
            del seq[uid], sizes[uid]
            left -= 1
            i += 1
            if freq[uid] >= threshold:  # S -> M, counter cleared
                freq[uid] = 0
                queue_of[uid] = MAIN
                moved.append(uid)
                room -= unit
                continue
            del freq[uid], queue_of[uid]  # a one-hit wonder leaves S for the ghost
            out.append(uid)
            to_ghost.append(uid)
            taken += 1
            if taken >= k or room < 0 or not left:
                break
        order._lo = len(flag) if i < 0 else i
        small_q.nbytes -= unit * (order._n - left)
        order._n = left
        if moved:
            main_q.enter_many(moved, unit)

    def __len__(self) -> int:
        return len(self._q[SMALL]) + len(self._q[MAIN])

    def __contains__(self, uid: int) -> bool:
        return uid in self._q[SMALL] or uid in self._q[MAIN]
