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

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import pop_oldest
from sim.units import Tier


@dataclass(frozen=True, slots=True)
class QoSMetrics:
    tier: int
    victim_calls: int  # victims chosen by evict
    admissions: int  # admissions seen through on_admit
    admission_inversions: int
    inversion_tokens: int
    evictions_by_class: dict[int, int] = field(default_factory=dict)


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
            for uid in taken:
                del filed[uid]
            out += taken
            k -= len(taken)
            self._by_class[cls] = self._by_class.get(cls, 0) + len(taken)
            if not od:
                del classes[cls]
                del present[0]
        return out

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
