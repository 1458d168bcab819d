"""qos: evict the lowest priority class first, LRU within a class.

A unit's class is its session's priority (``SessionKV.priority``: the trace's ``Turn.priority`` of
turn 0, 0 by default), read when the unit becomes a candidate. **A larger number is a more important
class** (kept longer): e.g. 1 = interactive, 0 = default, -1 = batch. Within a class the order is
kvsim's LRU (order of becoming a candidate, a hit moves to the back). Victims always come from the
lowest class present, so a victim is never a priority inversion; the figures below count what the
order cannot prevent.

Structure: one ``SegmentQueue`` per class (LRU's queue of runs of consecutive uids): a session's units
join and leave their class together, so a batch is a few runs whatever the eviction unit. A unit's
class is found from its session each time (a session's priority is fixed), not kept per unit.

Counted per tier instance at real decisions (``evict``, ``on_admit``; ``peek`` counts nothing) and
returned by ``metrics()``:

* ``victim_calls``: victims chosen by ``evict``; ``evictions_by_class``: the same, per class.
* ``admission_inversions``: admissions of a turn of class c that must bring history back into the
  GPU (swap-in from CPU or recompute: c_k + d_k > 0) at a moment when this tier holds evictable KV of
  a class < c, i.e. lower-class KV stayed resident while higher-class KV had been evicted. The GPU
  instance checks swap-ins and recomputes; the CPU instance checks recomputes only (a drop from the
  CPU tier while lower-class KV was kept there). ``inversion_tokens`` sums those turns' c_k + d_k
  (GPU) or d_k (CPU). This is a symptom count at admission time, not a blame assignment: the
  higher-class KV may have been evicted before the lower-class KV arrived. The engine calls
  ``on_admit`` before it pins the admitted session's units.
* Waits are not counted: admission waits only when evicting every unpinned unit would still not
  make room, which no eviction order changes.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.segment_runs import SegmentQueue
from sim.units import UNIT_BITS, Tier, UnitView, join_extents


@dataclass(frozen=True, slots=True)
class QoSMetrics:
    tier: int
    victim_calls: int  # victims chosen by evict
    admissions: int  # admissions seen through on_admit
    admission_inversions: int
    inversion_tokens: int
    evictions_by_class: dict[int, int] = field(default_factory=dict)


def _one_session(uids) -> bool:
    """Are the engine's ``uids`` (not empty) all of one session?"""
    lo, hi = (uids[0], uids[-1]) if isinstance(uids, range) else (min(uids), max(uids))
    return lo >> UNIT_BITS == hi >> UNIT_BITS


@register("qos")
class QoS(EvictionPolicy):
    reads_session = True  # its priority class
    # A pinned unit is in no class, time plays no part, and evicting many is taking the heads of
    # the lowest classes in turn: a decode span's pages can be given, and their victims chosen, at
    # once (demotions into a CPU tier still enter it one at a time: ``take_in`` is not batched).
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._classes: dict[int, SegmentQueue] = {}  # class -> its candidates, LRU order
        self._present: list[int] = []  # classes with candidates, ascending
        self._admissions = 0
        self._admission_inversions = 0
        self._inversion_tokens = 0
        self._by_class: dict[int, int] = {}  # victims per class

    def unit_class(self, uid: int) -> int:
        sess = self.view.session(uid)
        return sess.priority if sess is not None else 0  # cachesim objects: class 0

    # A unit's class is fixed (its session's priority never changes), so a unit is found in its
    # class's queue with no map of its own: the queues keep runs of a session's units, and a
    # layer_block batch of hundreds of a session's units is a few runs.
    def _queue(self, cls: int) -> SegmentQueue:
        q = self._classes.get(cls)
        if q is None:
            q = self._classes[cls] = SegmentQueue()
            insort(self._present, cls)
        return q

    def _drop_if_empty(self, cls: int, q: SegmentQueue) -> None:
        if not len(q):
            del self._classes[cls]
            del self._present[bisect_left(self._present, cls)]

    def _add(self, uid: int, now: float) -> None:
        self._discard(uid)
        self._queue(self.unit_class(uid)).append(uid)

    def access(self, uid: int, now: float) -> None:
        q = self._classes.get(self.unit_class(uid))
        if q is not None and q.discard(uid):
            q.push(uid)

    def _discard(self, uid: int) -> None:
        cls = self.unit_class(uid)
        q = self._classes.get(cls)
        if q is not None and q.discard(uid):
            self._drop_if_empty(cls, q)

    def _evicted(self, uid: int) -> None:
        cls = self.unit_class(uid)
        self._by_class[cls] = self._by_class.get(cls, 0) + 1
        self._discard(uid)

    def _pop_runs(self, k: int) -> list[tuple[int, int]]:
        """The ``k`` heads of the lowest classes, in turn, as runs in eviction order."""
        present, classes = self._present, self._classes
        out: list[tuple[int, int]] = []
        while k > 0 and present:
            cls = present[0]
            q = classes[cls]
            taken = min(k, len(q))
            out += q.pop_runs(taken)
            k -= taken
            self._by_class[cls] = self._by_class.get(cls, 0) + taken
            if not len(q):
                del classes[cls]
                del present[0]
        return out

    def _pop_class(self, cls: int, k: int) -> list[tuple[int, int]]:
        """The ``k`` heads of class ``cls`` (it holds them), as runs."""
        q = self._classes[cls]
        out = q.pop_runs(k)
        self._by_class[cls] = self._by_class.get(cls, 0) + k
        self._drop_if_empty(cls, q)
        return out

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """The heads of the lowest classes, in turn: what ``evict`` one at a time takes."""
        k = self._units_in(nbytes)
        if k is None:
            return super().evict_bytes(nbytes, now)
        return [uid for a, b in self._pop_runs(k) for uid in range(a, b)]

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        k = self._units_in(nbytes)
        if k is None:
            return super().evict_extents(nbytes, now)
        runs = self._pop_runs(k)
        return join_extents(sorted(runs) if self.drops_victims else runs)

    def take_in_extents(self, extents, free_bytes: int, now: float) -> list[tuple[int, int]]:
        """``take_in``'s insert-and-evict, an extent's stretch at a time: while a lower class
        than the extent's holds candidates, the new units take their room one for one; once the
        extent's class is the lowest, its queue turns (each new unit at the end, the head out),
        which is the whole stretch appended, then as many heads popped."""
        unit_bytes = self.view.unit_bytes
        if not unit_bytes or not isinstance(self.view, UnitView) or not self._fresh(extents):
            return super().take_in_extents(extents, free_bytes, now)
        free = free_bytes // unit_bytes  # (each victim frees one unit's room)
        out: list[tuple[int, int]] = []
        for a, b in extents:
            cls = self.unit_class(a)
            while a < b:
                if free:
                    n = min(free, b - a)
                    free -= n
                elif not self._present:
                    raise AssertionError(f"QoS: no victim to make room for {a}")
                elif self._present[0] < cls:
                    n = min(b - a, len(self._classes[self._present[0]]))
                    out += self._pop_class(self._present[0], n)
                elif self._present[0] == cls:
                    n = b - a
                    self._queue(cls).push_run(a, b)
                    out += self._pop_class(cls, n)
                    a = b
                    continue
                else:  # one victim of a higher class; then the extent's class is the lowest
                    n = 1
                    out += self._pop_class(self._present[0], 1)
                self._queue(cls).push_run(a, a + n)
                a += n
        return join_extents(out)

    def _fresh(self, extents) -> bool:
        """Are the extents' uids distinct, each of one session, and none of them a candidate?"""
        last = -1
        for a, b in sorted(extents):
            if a < last or (b - 1) >> UNIT_BITS != a >> UNIT_BITS:
                return False
            q = self._classes.get(self.unit_class(a))
            if q is not None and q.holds_any(a, b):
                return False
            last = b
        return True

    # -- batches: a session's units share its class, so they join or leave one class's runs --
    def acquire(self, uids, now: float) -> None:
        self._forget(uids)  # a hit then a pin: the unit is no longer a candidate

    def release(self, uids, now: float) -> None:
        self._file_many(uids, now)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        if not pinned:  # a pinned unit is in no class
            self._file_many(uids, now)

    def remove_many(self, uids, pinned: bool = False) -> None:
        if not pinned:
            self._forget(uids)

    def _engine_session(self, uids) -> bool:
        """Are ``uids`` (not empty) the engine's, all of one session (so of one class)?"""
        return isinstance(self.view, UnitView) and _one_session(uids)

    def _file_many(self, uids, now: float) -> None:
        """``_add`` each, in order: each leaves its class (if filed) and joins its class's end."""
        if not isinstance(uids, range):
            uids = list(uids)
            if len(set(uids)) < len(uids):  # a repeat moves to the end again: one at a time
                for uid in uids:
                    self._add(uid, now)
                return
        if not uids:
            return
        if not self._engine_session(uids):
            for uid in uids:
                self._add(uid, now)
            return
        q = self._queue(self.unit_class(uids[0]))
        if q.holds_bucket(q.bucket(uids[0])):  # some may be filed: they leave first
            for uid in uids:
                q.discard(uid)
        q.extend(uids)

    def _forget(self, uids) -> None:
        """``_discard`` each (those not filed are ignored)."""
        uids = uids if isinstance(uids, range) else list(uids)
        if not uids:
            return
        if not self._engine_session(uids):
            for uid in uids:
                self._discard(uid)
            return
        cls = self.unit_class(uids[0])
        q = self._classes.get(cls)
        if q is None:
            return
        if len(uids) > 1 and q.holds_exactly(uids):
            q.discard_bucket(q.bucket(uids[0]))  # the session's runs, not its units
        elif q.holds_bucket(q.bucket(uids[0])):
            for uid in uids:
                q.discard(uid)
        self._drop_if_empty(cls, q)

    def peek(self, now: float) -> int | None:
        if not self._present:
            return None
        return self._classes[self._present[0]].first()

    # -- the engine's admission hook ------------------------------------------------------------
    def on_admit(self, session, split: tuple[int, int, int], now: float) -> None:
        """A turn of ``session`` is admitted; ``split`` = its history tokens (GPU, CPU, DROPPED)
        before anything moves. Called before its units are pinned (they are still candidates, of its
        own class, so they never count as lower-class KV)."""
        self._admissions += 1
        missing = (
            split[Tier.CPU] + split[Tier.DROPPED]
            if self.ctx.tier == Tier.GPU
            else split[Tier.DROPPED]
        )
        if missing > 0 and self._present and self._present[0] < session.priority:
            self._admission_inversions += 1
            self._inversion_tokens += missing

    def metrics(self) -> QoSMetrics:
        return QoSMetrics(
            int(self.ctx.tier),
            sum(self._by_class.values()),
            self._admissions,
            self._admission_inversions,
            self._inversion_tokens,
            dict(sorted(self._by_class.items())),
        )

    def __len__(self) -> int:
        return sum(map(len, self._classes.values()))

    def __contains__(self, uid: int) -> bool:
        q = self._classes.get(self.unit_class(uid))
        return q is not None and uid in q
