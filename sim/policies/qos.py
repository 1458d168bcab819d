"""qos: evict the lowest priority class first, LRU within a class.

A unit's class is its session's priority (``SessionKV.priority``: the trace's ``Turn.priority`` of
turn 0, 0 by default), read when the unit becomes a candidate. **A larger number is a more important
class** (kept longer): e.g. 1 = interactive, 0 = default, -1 = batch. Within a class the order is
kvsim's LRU (order of becoming a candidate, a hit moves to the back). Victims always come from the
lowest class present, so a victim is never a priority inversion; the figures below count what the
order cannot prevent.

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
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import eq

import numpy as np

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import consume, pop_oldest
from sim.units import UNIT_BITS, Tier, UnitView


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
        self._classes: dict[int, OrderedDict[int, None]] = {}  # class -> its candidates, LRU order
        self._present: list[int] = []  # classes with candidates, ascending
        self._filed: dict[int, int] = {}  # uid -> class it is filed under
        self._admissions = 0
        self._admission_inversions = 0
        self._inversion_tokens = 0
        self._by_class: dict[int, int] = {}  # victims per class

    def unit_class(self, uid: int) -> int:
        sess = self.view.session(uid)
        return sess.priority if sess is not None else 0  # cachesim objects: class 0

    def _add(self, uid: int, now: float) -> None:
        self._discard(uid)
        cls = self.unit_class(uid)
        od = self._classes.get(cls)
        if od is None:
            od = self._classes[cls] = OrderedDict()
            insort(self._present, cls)
        od[uid] = None
        self._filed[uid] = cls

    def access(self, uid: int, now: float) -> None:
        cls = self._filed.get(uid)
        if cls is not None:
            self._classes[cls].move_to_end(uid)

    def _discard(self, uid: int) -> None:
        cls = self._filed.pop(uid, None)
        if cls is None:
            return
        od = self._classes[cls]
        del od[uid]
        if not od:
            del self._classes[cls]
            del self._present[bisect_left(self._present, cls)]

    def _evicted(self, uid: int) -> None:
        cls = self._filed[uid]
        self._by_class[cls] = self._by_class.get(cls, 0) + 1
        self._discard(uid)

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """The heads of the lowest classes, in turn: what ``evict`` one at a time takes."""
        k = self._units_in(nbytes)
        if k is None:
            return super().evict_bytes(nbytes, now)
        present, classes, filed = self._present, self._classes, self._filed
        out: list[int] = []
        while k > 0 and present:
            cls = present[0]
            od = classes[cls]
            taken = pop_oldest(od, min(k, len(od)))
            consume(map(filed.__delitem__, taken))
            out += taken
            k -= len(taken)
            self._by_class[cls] = self._by_class.get(cls, 0) + len(taken)
            if not od:
                del classes[cls]
                del present[0]
        return out

    # -- batches: a session's units share its class, so they join or leave one class's dict in C --
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
        if not self._filed.keys().isdisjoint(uids):
            self._forget(uids)
        for cls, members in self._by_unit_class(uids):
            od = self._classes.get(cls)
            if od is None:
                od = self._classes[cls] = OrderedDict()
                insort(self._present, cls)
            od.update(zip(members, repeat(None)))
            self._filed.update(zip(members, repeat(cls)))

    def _by_unit_class(self, uids) -> list[tuple[int, list[int]]]:
        """``uids`` split by class, each part in the batch's order. The engine's uids carry their
        session (one class for all its units), so the class is asked once per session."""
        if not isinstance(self.view, UnitView):
            classes = list(map(self.unit_class, uids))
        elif _one_session(uids):
            return [(self.unit_class(uids[0]), list(uids))]
        else:
            sessions = (np.asarray(uids, dtype=np.int64) >> UNIT_BITS).tolist()
            class_of = {s: self.unit_class(s << UNIT_BITS) for s in set(sessions)}
            classes = list(map(class_of.__getitem__, sessions))
        distinct = set(classes)
        if len(distinct) == 1:
            return [(classes[0], list(uids))]
        return [(c, list(compress(uids, map(eq, classes, repeat(c))))) for c in sorted(distinct)]

    def _forget(self, uids) -> None:
        """``_discard`` each (those not filed are ignored)."""
        uids = uids if isinstance(uids, range) else list(uids)
        classes = set(map(self._filed.pop, uids, repeat(None)))
        for cls in classes:
            if cls is None:
                continue
            od = self._classes[cls]
            consume(map(od.pop, uids, repeat(None)))
            if not od:
                del self._classes[cls]
                del self._present[bisect_left(self._present, cls)]

    def peek(self, now: float) -> int | None:
        if not self._present:
            return None
        return next(iter(self._classes[self._present[0]]))

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
        return len(self._filed)

    def __contains__(self, uid: int) -> bool:
        return uid in self._filed
