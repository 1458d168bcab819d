"""predictive: evict the unit whose session is least likely to come back.

Score of a candidate = ``P(next turn | c, e)`` from the lifetime predictor (``sim.lifetime``): the
probability that its session has another turn at all, given the turns it has completed
(c = ``SessionKV.next_turn`` when the unit became a candidate) and how long it has been idle
(e = now - last use). Lowest score first; ties (e.g. several scores that have reached 0) go to the
older last use, then to the earlier candidate (insertion order). A session mid-turn-0 (c = 0: its
units were released by a preemption) scores 1: it is certainly coming back. An object without a
session (``kvsim cachesim``) counts as a session with one completed turn, so objects rank by idle
time. The policy is online: it never reads ``SessionKV.done`` or ``Unit.next_access_s`` (the future).

Why this score and not "P(return within a horizon h)": for a lognormal think time the within-horizon
probability rises and then falls with idle time (a user who just got a reply rarely types within a
second), so the order of two sessions of the same bucket would change over time and no exact
sublinear structure is known for it. ``P(next turn | c, e)`` is non-increasing in e for *any* think-time
law (the predictor evaluates it with monotone float operations), so within a bucket the least likely
candidate is the one idle longest. The predictor still exposes the horizon form and expected think times.

Exact and sublinear: one heap per bucket keyed by (last use, insertion order), lazy deletion with
compaction; ``victim`` evaluates the score of each non-empty bucket's oldest candidate and takes the
minimum: O(K) score evaluations + O(log n) heap work, K = buckets (16 by default).

The predictor comes from ``ctx.predictor`` (the engine fits it on the trace's training split, see
``sim.lifetime``); without one, ``LifetimePredictor.prior()``.
"""
from __future__ import annotations

import heapq

from sim.lifetime import LifetimePredictor
from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


@register("predictive")
class Predictive(EvictionPolicy):
    needs_predictor = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        pred = getattr(ctx, "predictor", None)
        self.predictor: LifetimePredictor = pred if pred is not None else LifetimePredictor.prior()
        k = self.predictor.num_buckets
        self._heaps: list[list[tuple[float, int, int, object]]] = [[] for _ in range(k + 1)]
        self._live: dict[int, tuple[int, float, int]] = {}   # key -> (bucket, a, seq)
        self._size = [0] * (k + 1)
        self._seq = 0

    def _put(self, unit, a: float) -> None:
        c = unit.session.next_turn if unit.session is not None else 1  # a cachesim object: used once
        b = self.predictor.bucket_index(c)
        self._seq += 1
        self._live[unit.key] = (b, a, self._seq)
        self._size[b] += 1
        heapq.heappush(self._heaps[b], (a, self._seq, unit.key, unit))

    def _add(self, unit, now: float) -> None:
        if unit.key in self._live:
            self._discard(unit)
        a = unit.last_access_s
        self._put(unit, a if a < now else now)

    def access(self, unit, now: float) -> None:
        if unit.key in self._live:  # a hit on a candidate (cachesim): used now
            self._discard(unit)
            self._put(unit, now)

    def _discard(self, unit) -> None:
        entry = self._live.pop(unit.key, None)
        if entry is None:
            return
        b = entry[0]
        self._size[b] -= 1
        heap = self._heaps[b]
        if len(heap) > 2 * self._size[b] + 32:
            live = self._live
            self._heaps[b] = [e for e in heap if live.get(e[2], (None, None, None))[2] == e[1]]
            heapq.heapify(self._heaps[b])

    def _head(self, b: int):
        heap, live = self._heaps[b], self._live
        while heap:
            a, seq, key, unit = heap[0]
            entry = live.get(key)
            if entry is not None and entry[2] == seq:
                return heap[0]
            heapq.heappop(heap)
        return None

    def victim(self, now: float):
        best = None
        best_key = None
        pred = self.predictor
        for b, n in enumerate(self._size):
            if not n:
                continue
            a, seq, _, unit = self._head(b)
            # bucket b stands for completed = b (0 -> mid-turn-0; K pools c >= K, same law)
            k = (pred.p_return(b, now - a), a, seq)
            if best_key is None or k < best_key:
                best, best_key = unit, k
        return best

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, unit) -> bool:
        return unit.key in self._live
