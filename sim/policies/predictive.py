"""predictive: evict the unit whose session is least likely to come back.

Score of a candidate = ``P(next turn | c, e)`` from the lifetime predictor (``sim.lifetime``): the
probability that its session has another turn at all, given the turns it has completed
(c = ``SessionKV.next_turn`` when the unit became a candidate) and how long it has been idle
(e = now - last use). Lowest score first; ties (e.g. several scores that have reached 0) go to the
older last use, then to the earlier candidate (insertion order). A session mid-turn-0 (c = 0: its
units were released by a preemption) scores 1: it is certainly coming back. An object without a
session (``kvsim cachesim``) counts as a session with one completed turn, so objects rank by idle
time. The policy is online: it never reads ``SessionKV.done`` or ``view.next_access_s`` (the future).

Why this score and not "P(return within a horizon h)": for a lognormal think time the within-horizon
probability rises and then falls with idle time (a user who just got a reply rarely types within a
second), so the order of two sessions of the same bucket would change over time and no exact
sublinear structure is known for it. ``P(next turn | c, e)`` is non-increasing in e for *any* think-time
law (the predictor evaluates it with monotone float operations), so within a bucket the least likely
candidate is the one idle longest. The predictor still exposes the horizon form and expected think times.

Exact and sublinear: per bucket, a heap of *runs* keyed (last use, first insertion number). A run is
units that became candidates together with one last use and one bucket (a session's units released
at a turn's end), numbered consecutively, so the bucket's order (last use, insertion number) never
puts another run's unit inside a run; a unit that stops being a candidate is skipped lazily. ``peek``
evaluates the score of each non-empty bucket's oldest candidate and takes the minimum: O(K) score
evaluations + O(log r) heap work, K = buckets (16 by default), r = runs. A run's units score alike at
one time, so once its head is the minimum the rest of it follows: an eviction of many units takes
whole runs as slices, and a release, pin or removal of a session's units is one run, not a heap
operation a unit. The engine's runs (a session's units, released at once) are not even listed
unit by unit: a session's latest run is kept whole while its units leave only from its front (as
victims) or all together (pinned by the next turn), and is listed in a dict a unit only when a call
takes a unit out of its middle. The heads' scores are kept for the time they were taken at, so
evictions repeated at one time rescore only the buckets that changed since. A decode span's
allocations, each one's victims chosen at its step's start (``grows_by_time``), score a bucket's
head only where that choice depends on the time: a score does not rise with time, so over the
span a head's score lies between its score when last scored and its score at the span's last time,
and a head whose upper score is below every other head's lower one gives its whole run, whatever
the allocations' times.

The predictor comes from ``ctx.predictor`` (the engine fits it on the trace's training split, see
``sim.lifetime``); without one, ``LifetimePredictor.prior()``.
"""

from __future__ import annotations

from collections import deque
from heapq import heapify, heappop, heappush
from itertools import accumulate, repeat

from sim.lifetime import LifetimePredictor
from sim.policies.base import EvictionPolicy, Memoryless
from sim.policies.registry import register
from sim.units import UNIT_BITS, UnitView, extents_of, join_extents

_SLACK = 1.0 + 1e-12  # relative: far above the few ulps a float log or erfc may wobble by


class _Run:
    """Units that became candidates together: ``uids[i]`` has insertion number ``seq0 + i``; the
    live ones all lie at ``start`` or after, ``live`` of them. A *keyed* run's live units are those
    there with ``where[uid] is self``; a session's run (``sidx`` >= 0, not keyed) has no gaps: its
    live units are ``uids[start:]``, listed nowhere else."""

    __slots__ = ("b", "keyed", "live", "sidx", "start", "uids")

    def __init__(self, b: int, uids: list[int] | range, sidx: int = -1) -> None:
        self.b = b
        self.uids = uids
        self.start = 0
        self.live = len(uids)
        self.sidx = sidx
        self.keyed = sidx < 0


def _run_extents(piece: list[int] | range) -> list[tuple[int, int]]:
    """``extents_of(piece)``; a range or an increasing run of consecutive uids in C."""
    if isinstance(piece, range):
        return [(piece.start, piece.stop)]
    first, last = piece[0], piece[-1]
    if last - first == len(piece) - 1 and piece == list(range(first, last + 1)):
        return [(first, last + 1)]
    return extents_of(piece)


def _extents(pieces: list[list[int] | range]) -> list[tuple[int, int]]:
    """``extents_of`` of the victims, given as slices of runs in order, a slice at a time."""
    out: list[tuple[int, int]] = []
    for taken in pieces:
        if type(taken) is range and not out:
            out.append((taken.start, taken.stop))
            continue
        for first, stop in _run_extents(taken):
            if out and out[-1][1] == first:
                out[-1] = (out[-1][0], stop)
            else:
                out.append((first, stop))
    return out


@register("predictive")
class Predictive(Memoryless):
    needs_predictor = True
    # A pinned unit is nothing to it and a choice reads only its runs and the clock (a unit's
    # session and last use are read when it becomes a candidate): a decode span's pages may be
    # given in one batch, each allocation's victims chosen at its step's start.
    grows_by_time = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        pred = getattr(ctx, "predictor", None)
        self.predictor: LifetimePredictor = pred if pred is not None else LifetimePredictor.prior()
        k = self.predictor.num_buckets
        # bucket b's score of an idle time (b stands for completed = b: 0 -> mid-turn-0; K pools
        # c >= K, same law)
        self._score = [self.predictor.return_score(b) for b in range(k + 1)]
        # bucket -> heap of (last use a, seq0, run); seq0 is unique, so a run is never compared
        self._heaps: list[list[tuple[float, int, _Run]]] = [[] for _ in range(k + 1)]
        self._runs = [0] * (k + 1)  # bucket -> runs in its heap with a live unit
        self._where: dict[int, _Run] = {}  # candidate uid of a keyed run -> its run
        self._sess: dict[int, _Run] = {}  # session index -> its (unkeyed) run, if any
        self._count = 0  # candidates
        self._seq = 0
        self._engine_uids = isinstance(self.view, UnitView)  # uids carry their session
        # The heads of the non-empty buckets at time ``_now`` (repeated evictions at one time
        # rescore only the buckets that changed since: those in ``_dirty``).
        self._heads_at: dict[int, tuple[tuple[float, float, int], _Run]] = {}
        self._now = -float("inf")
        self._dirty: set[int] = set()
        # no per-victim hook to call: victims leave in batches
        self._batches = type(self)._evicted is EvictionPolicy._evicted

    # -- runs ------------------------------------------------------------------------------------
    def _push(self, b: int, a: float, uids: list[int] | range, sidx: int = -1) -> None:
        """``uids`` (distinct, none a candidate) become candidates of bucket b with last use a;
        ``sidx`` >= 0: they are all of session ``sidx``'s candidates, kept as its run."""
        run = _Run(b, uids, sidx)
        seq0 = self._seq + 1
        self._seq += len(uids)
        self._count += len(uids)
        if sidx >= 0:
            self._sess[sidx] = run
        elif len(uids) == 1:
            self._where[uids[0]] = run
        else:
            self._where.update(dict.fromkeys(uids, run))
        heap = self._heaps[b]
        heappush(heap, (a, seq0, run))
        self._dirty.add(b)
        self._runs[b] += 1
        if len(heap) > 2 * self._runs[b] + 64:  # dead runs outnumber live ones: drop them
            heap[:] = [entry for entry in heap if entry[2].live]
            heapify(heap)

    def _lost(self, run: _Run, k: int) -> None:
        """``k`` of ``run``'s units stopped being candidates (``where`` already without them)."""
        run.live -= k
        self._count -= k
        self._dirty.add(run.b)
        if not run.live:
            self._runs[run.b] -= 1
            run.uids = range(0)  # its heap entry is skipped when it comes up
            if not run.keyed:
                del self._sess[run.sidx]

    def _key(self, run: _Run) -> None:
        """List a session's run in ``where`` (a unit is about to leave from its middle)."""
        del self._sess[run.sidx]
        run.keyed = True
        self._where.update(dict.fromkeys(run.uids[run.start :], run))

    def _key_session_of(self, uid: int) -> None:
        """Key the run of ``uid``'s session, if it has one."""
        if self._sess:
            run = self._sess.get(uid >> UNIT_BITS)
            if run is not None:
                self._key(run)

    def _bucket_of(self, uid: int) -> int:
        sess = self.view.session(uid)
        c = sess.next_turn if sess is not None else 1  # a cachesim object: used once
        return self.predictor.bucket_index(c)

    # -- one unit --------------------------------------------------------------------------------
    def _put(self, uid: int, a: float) -> None:
        self._push(self._bucket_of(uid), a, [uid])

    def _add(self, uid: int, now: float) -> None:
        self._discard(uid)
        a = self.view.last_access_s(uid)
        self._put(uid, min(now, a))

    def access(self, uid: int, now: float) -> None:
        if uid in self:  # a hit on a candidate (cachesim): used now
            self._discard(uid)
            self._put(uid, now)

    def _discard(self, uid: int) -> None:
        if self._engine_uids:
            self._key_session_of(uid)
        run = self._where.pop(uid, None)
        if run is not None:
            self._lost(run, 1)

    # -- batches: a session's units at once ------------------------------------------------------
    def release(self, uids, now: float) -> None:
        if not isinstance(uids, range) or uids.step != 1:  # a range: distinct, consecutive
            uids = list(uids)
        if not uids:
            return
        if isinstance(uids, range):  # min and max without a pass
            lo, hi = uids[0], uids[-1]
        else:
            lo, hi = min(uids), max(uids)
        one_session = self._engine_uids and lo >> UNIT_BITS == hi >> UNIT_BITS
        if not one_session or (not isinstance(uids, range) and len(set(uids)) != len(uids)):
            for uid in uids:
                self._add(uid, now)
            return
        # One session's units (the engine's view): one last use, one bucket, consecutive numbers.
        first = uids[0]
        self._key_session_of(first)  # the session's older run, if any, is keyed from now on
        if self._where and not self._where.keys().isdisjoint(uids):
            self._forget(uids)  # a candidate released again is numbered anew
        b = self._bucket_of(first)
        self._push(b, min(now, self.view.last_access_s(first)), uids, first >> UNIT_BITS)

    def _forget(self, uids) -> None:
        if not isinstance(uids, list | range):
            uids = list(uids)
        if not uids:
            return
        if self._sess and self._engine_uids:
            sidx = uids[0] >> UNIT_BITS
            if min(uids) >> UNIT_BITS != max(uids) >> UNIT_BITS:  # several sessions' units
                for run in [self._sess.get(i) for i in {uid >> UNIT_BITS for uid in uids}]:
                    if run is not None:
                        self._key(run)
            elif (run := self._sess.get(sidx)) is not None:
                rest = run.uids[run.start :]
                if len(uids) == len(rest) and (
                    uids == rest
                    or (type(rest) is range and uids == list(rest))
                    or (type(uids) is range and list(uids) == rest)
                ):  # all of the session's candidates (in their order: the engine's case)
                    self._lost(run, run.live)
                    return
                self._key(run)
        runs = list(map(self._where.pop, uids, repeat(None)))
        first = runs[0]
        if first is not None and runs.count(first) == len(runs):  # one run's units
            self._lost(first, len(runs))
            return
        for run in runs:
            if run is not None:
                self._lost(run, 1)

    # -- the choice ------------------------------------------------------------------------------
    def _head(self, b: int, now: float) -> tuple[tuple[float, float, int], _Run] | None:
        """(score key, run) of bucket b's oldest candidate, the run's ``start`` moved onto it;
        None when the bucket has no candidate."""
        heap, where = self._heaps[b], self._where
        while heap:
            a, seq0, run = heap[0]
            if not run.live:
                heappop(heap)
                continue
            i = run.start
            if run.keyed:
                uids = run.uids
                while where.get(uids[i]) is not run:
                    i += 1
                run.start = i
            return (self._score[b](now - a), a, seq0 + i), run
        return None

    def _heads(self, now: float) -> dict[int, tuple[tuple[float, float, int], _Run]]:
        """The heads of the non-empty buckets at ``now`` (the cached dict, kept up to date)."""
        heads = self._heads_at
        if now != self._now:
            self._now = now
            heads.clear()
            todo: set[int] | list[int] = [b for b, heap in enumerate(self._heaps) if heap]
        else:
            todo = self._dirty
        for b in todo:
            head = self._head(b, now)
            if head is not None:
                heads[b] = head
            else:
                heads.pop(b, None)
        self._dirty = set()
        return heads

    def peek(self, now: float) -> int | None:
        heads = self._heads(now)
        if not heads:
            return None
        run = min(heads.values())[1]  # keys are unique (seq)
        return run.uids[run.start]

    def _slice(self, run: _Run, k: int) -> list[int] | range:
        """Take out the first ``k`` live units of ``run`` (k <= its live count), in order."""
        where = self._where
        uids, s = run.uids, run.start
        if run.live == len(uids) - s:  # no gaps: a slice
            taken = uids[s : s + k]
            run.start = s + k
        else:
            taken = []
            i = s
            while len(taken) < k:
                uid = uids[i]
                i += 1
                if where.get(uid) is run:
                    taken.append(uid)
            run.start = i
        if run.keyed:
            deque(map(where.__delitem__, taken), maxlen=0)
        self._lost(run, k)
        return taken

    def _take(self, n: int, now: float) -> list[list[int] | range]:
        """The victims of ``n`` successive ``evict`` calls at one time (fewer when the candidates
        run out), as slices of runs in eviction order. Only the bucket a victim left has a new
        head; a run's units share its score and follow each other in its bucket, so once its head
        is the minimum of the heads, its units are the next victims until it is used up."""
        heaps = self._heaps
        heads = self._heads(now)
        out: list[list[int] | range] = []
        while n > 0 and heads:
            b = min(heads, key=heads.__getitem__)
            run = heads[b][1]
            k = min(n, run.live)
            out.append(self._slice(run, k))  # b is dirty: its head is rescored at the next call
            n -= k
            if n > 0:  # the run is used up
                heappop(heaps[b])
                head = self._head(b, now)
                if head is None:
                    del heads[b]
                else:
                    heads[b] = head
                self._dirty.discard(b)  # scored after its last change
        return out

    def _take_at(self, plan: list[tuple[float, int]]) -> list[list[int] | range]:
        """``_take(n, now)`` for each (now, n) of ``plan`` in turn (increasing times), all the
        victims as slices of runs in eviction order. A head's score does not rise with time, so
        while it heads its bucket its score lies between its score at the plan's last time
        (``lower``) and its score at any earlier time (``upper``, kept with the rest of its key):
        the bucket of the least upper key holds the minimum at every time of the plan unless
        another bucket's lower score reaches that key's score (a slack covers a wobble of a few
        ulps in the float log and erfc). Then its run's units are the next victims, whatever
        their times, until it is used up; else those buckets are scored at the time of the next
        victim, and its run gives that time's victims. Within a span's milliseconds the scores
        barely move, so most runs are taken whole, scoring nothing."""
        heaps, score = self._heaps, self._score
        times = [now for now, _ in plan]
        ends = list(accumulate(n for _, n in plan))  # victims taken by the end of each time
        last, total = times[-1], ends[-1]
        heads = self._heads(times[0])
        upper = {b: key for b, (key, _) in heads.items()}
        lower = {b: score[b](last - key[1]) for b, key in upper.items()}
        runs = {b: run for b, (_, run) in heads.items()}
        self._now = -float("inf")  # the cached heads go stale here: the next call scores anew
        out: list[list[int] | range] = []
        done = j = 0  # victims so far; the plan's time of the next one
        while done < total and upper:
            while ends[j] <= done:
                j += 1
            b = min(upper, key=upper.__getitem__)
            bound = upper[b][0] * _SLACK
            rivals = [c for c, lo in lower.items() if lo <= bound]
            if rivals == [b]:  # least at every time left
                stop = total
            else:  # which is least depends on the time: score them at the next victim's
                now = times[j]
                if b not in rivals:
                    rivals.append(b)
                for c in rivals:
                    _, a, seq = upper[c]
                    upper[c] = (score[c](now - a), a, seq)
                b = min(rivals, key=upper.__getitem__)
                stop = ends[j]
            run = runs[b]
            k = min(stop - done, run.live)
            out.append(self._slice(run, k))
            done += k
            if not run.live:
                while j < len(ends) - 1 and ends[j] <= done:
                    j += 1
                heappop(heaps[b])
                head = self._head(b, times[j])
                if head is None:
                    del upper[b], lower[b], runs[b]
                else:
                    key, runs[b] = head
                    upper[b] = key
                    lower[b] = score[b](last - key[1])
        return out

    def evict(self, now: float) -> int | None:
        if not self._batches:
            return super().evict(now)
        taken = self._take(1, now)  # the victim ``peek`` names, its run left as it was
        return taken[0][0] if taken else None

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None or not self._batches:
            return super().evict_bytes(nbytes, now)
        out: list[int] = []
        for taken in self._take(n, now):
            out.extend(taken)
        return out

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes or not self._batches:
            return super().evict_extents(nbytes, now)
        return _extents(self._take(-(-nbytes // unit_bytes), now))

    def evict_extents_at(self, schedule: list[tuple[float, int]]) -> list[tuple[int, int]]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes or not self._batches or not schedule:
            return super().evict_extents_at(schedule)
        plan: list[tuple[float, int]] = []  # units a time: calls at one time are one batch
        for now, nbytes in schedule:
            n = -(-nbytes // unit_bytes)
            if plan and plan[-1][0] == now:
                plan[-1] = (now, plan[-1][1] + n)
            else:
                plan.append((now, n))
        taken = self._take(plan[0][1], plan[0][0]) if len(plan) == 1 else self._take_at(plan)
        out = _extents(taken)
        return join_extents(sorted(out)) if self.drops_victims else out

    def __len__(self) -> int:
        return self._count

    def __contains__(self, uid: int) -> bool:
        if uid in self._where:
            return True
        run = self._sess.get(uid >> UNIT_BITS) if self._sess and self._engine_uids else None
        return run is not None and uid in run.uids[run.start :]
