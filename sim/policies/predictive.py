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

Exact and sublinear: one ``LazyHeap`` per bucket keyed by (last use, insertion order); ``peek``
evaluates the score of each non-empty bucket's oldest candidate and takes the minimum: O(K) score
evaluations + O(log n) heap work, K = buckets (16 by default).

The predictor comes from ``ctx.predictor`` (the engine fits it on the trace's training split, see
``sim.lifetime``); without one, ``LifetimePredictor.prior()``.
"""

from __future__ import annotations

from sim.lifetime import LifetimePredictor
from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import LazyHeap


@register("predictive")
class Predictive(EvictionPolicy):
    needs_predictor = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        pred = getattr(ctx, "predictor", None)
        self.predictor: LifetimePredictor = pred if pred is not None else LifetimePredictor.prior()
        k = self.predictor.num_buckets
        self._heaps = [LazyHeap() for _ in range(k + 1)]  # bucket -> uid keyed (a, seq)
        self._bucket: dict[int, int] = {}  # candidate uid -> its bucket
        self._seq = 0

    def _put(self, uid: int, a: float) -> None:
        sess = self.view.session(uid)
        c = sess.next_turn if sess is not None else 1  # a cachesim object: used once
        b = self.predictor.bucket_index(c)
        self._seq += 1
        self._bucket[uid] = b
        self._heaps[b].push(uid, (a, self._seq))

    def _add(self, uid: int, now: float) -> None:
        self._discard(uid)
        a = self.view.last_access_s(uid)
        self._put(uid, min(now, a))

    def access(self, uid: int, now: float) -> None:
        if uid in self._bucket:  # a hit on a candidate (cachesim): used now
            self._discard(uid)
            self._put(uid, now)

    def _discard(self, uid: int) -> None:
        b = self._bucket.pop(uid, None)
        if b is not None:
            self._heaps[b].discard(uid)

    def _head(self, b: int, now: float) -> tuple[tuple[float, float, int], int]:
        """(score key, uid) of bucket b's oldest candidate (the bucket must not be empty)."""
        heap = self._heaps[b]
        uid = heap.min()
        assert uid is not None  # the bucket is not empty
        a, seq = heap.key(uid)
        # bucket b stands for completed = b (0 -> mid-turn-0; K pools c >= K, same law)
        return (self.predictor.p_return(b, now - a), a, seq), uid

    def peek(self, now: float) -> int | None:
        heads = [self._head(b, now) for b, heap in enumerate(self._heaps) if heap]
        return min(heads)[1] if heads else None  # keys are unique (seq)

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """The victims of successive ``evict`` calls at one time: only the bucket a victim left
        has a new head, so each victim scores one candidate, not one per bucket."""
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_bytes(nbytes, now)
        heaps = self._heaps
        heads = {b: self._head(b, now) for b, heap in enumerate(heaps) if heap}
        out: list[int] = []
        while len(out) < n and heads:
            b = min(heads, key=heads.__getitem__)
            uid = heads[b][1]
            self._evicted(uid)
            out.append(uid)
            if heaps[b]:
                heads[b] = self._head(b, now)
            else:
                del heads[b]
        return out

    def __len__(self) -> int:
        return len(self._bucket)

    def __contains__(self, uid: int) -> bool:
        return uid in self._bucket
