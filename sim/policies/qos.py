"""qos: evict the lowest priority class first, LRU within a class.

A unit's class is its session's priority (``SessionKV.priority``: the trace's ``Turn.priority`` of
turn 0, 0 by default), read when the unit becomes a candidate. **A larger number is a more important
class** (kept longer): e.g. 1 = interactive, 0 = default, -1 = batch. Within a class the order is
kvsim's LRU (order of becoming a candidate, a hit moves to the back).

Priority inversions, counted per tier instance and returned by ``metrics()``:

* ``victim_inversions``: victims of class c returned while this tier held a candidate of a class < c.
  Zero by construction (checked, not assumed).
* ``admission_inversions``: admissions of a turn of class c that must bring history back into the
  GPU (swap-in from CPU or recompute: c_k + d_k > 0) at a moment when this tier holds evictable KV of
  a class < c, i.e. lower-class KV stayed resident while higher-class KV had been evicted. The GPU
  instance checks swap-ins and recomputes; the CPU instance checks recomputes only (a drop from the
  CPU tier while lower-class KV was kept there). ``inversion_tokens`` sums those turns' c_k + d_k
  (GPU) or d_k (CPU). This is a symptom count at admission time, not a blame assignment: the
  higher-class KV may have been evicted before the lower-class KV arrived. It needs the engine to
  call ``on_admit`` (see the wiring note in the report); without it the count stays 0.
* Waits are not counted: admission waits only when evicting every unpinned unit would still not
  make room, which no eviction order changes.
* ``evictions_by_class``: victims actually removed, per class.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections import OrderedDict
from dataclasses import dataclass, field

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.units import Tier


@dataclass(frozen=True, slots=True)
class QoSMetrics:
    tier: int
    victim_calls: int
    victim_inversions: int
    admissions: int                 # admissions seen through on_admit
    admission_inversions: int
    inversion_tokens: int
    evictions_by_class: dict[int, int] = field(default_factory=dict)


@register("qos")
class QoS(EvictionPolicy):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._classes: dict[int, OrderedDict[int, object]] = {}
        self._present: list[int] = []          # classes with candidates, ascending
        self._filed: dict[int, int] = {}       # unit key -> class it is filed under
        self._last_victim = None
        self._victim_calls = 0
        self._victim_inversions = 0
        self._admissions = 0
        self._admission_inversions = 0
        self._inversion_tokens = 0
        self._evicted: dict[int, int] = {}

    @staticmethod
    def unit_class(unit) -> int:
        return unit.session.priority if unit.session is not None else 0  # cachesim objects: class 0

    def _add(self, unit, now: float) -> None:
        self._discard(unit)
        cls = self.unit_class(unit)
        od = self._classes.get(cls)
        if od is None:
            od = self._classes[cls] = OrderedDict()
            insort(self._present, cls)
        od[unit.key] = unit
        self._filed[unit.key] = cls

    def access(self, unit, now: float) -> None:
        cls = self._filed.get(unit.key)
        if cls is not None:
            self._classes[cls].move_to_end(unit.key)

    def _discard(self, unit) -> None:
        cls = self._filed.pop(unit.key, None)
        if cls is None:
            return
        od = self._classes[cls]
        del od[unit.key]
        if not od:
            del self._classes[cls]
            del self._present[bisect_left(self._present, cls)]

    def remove(self, unit) -> None:
        if unit is self._last_victim and unit.key in self._filed:
            cls = self._filed[unit.key]
            self._evicted[cls] = self._evicted.get(cls, 0) + 1
            self._last_victim = None
        super().remove(unit)

    def victim(self, now: float):
        if not self._present:
            return None
        lowest = self._present[0]
        unit = next(iter(self._classes[lowest].values()))
        self._victim_calls += 1
        if self._filed[unit.key] > self._present[0]:
            self._victim_inversions += 1
        self._last_victim = unit
        return unit

    # -- the engine's admission hook ------------------------------------------------------------
    def on_admit(self, session, split: tuple[int, int, int], now: float) -> None:
        """A turn of ``session`` is admitted; ``split`` = its history tokens (GPU, CPU, DROPPED)
        before anything moves. Called before its units are pinned (they are still candidates, of its
        own class, so they never count as lower-class KV)."""
        self._admissions += 1
        missing = split[Tier.CPU] + split[Tier.DROPPED] if self.ctx.tier == Tier.GPU else split[Tier.DROPPED]
        if missing > 0 and self._present and self._present[0] < session.priority:
            self._admission_inversions += 1
            self._inversion_tokens += missing

    def metrics(self) -> QoSMetrics:
        return QoSMetrics(int(self.ctx.tier), self._victim_calls, self._victim_inversions,
                          self._admissions, self._admission_inversions, self._inversion_tokens,
                          dict(sorted(self._evicted.items())))

    def __len__(self) -> int:
        return len(self._filed)

    def __contains__(self, unit) -> bool:
        return unit.key in self._filed
