"""Tiered KV memory: GPU, CPU, DROPPED, with exact byte accounting.

Plain synchronous code (no event loop): the scheduler drives it and tests drive it directly.
Reclaiming GPU room demotes victims GPU->CPU while the CPU tier has room (after dropping CPU victims
that the CPU policy picks), else drops them. Expected shortage returns False; a broken invariant
raises.
"""
from __future__ import annotations

import math
import time

from sim.units import Tier, Unit

GPU, CPU, DROPPED = Tier.GPU, Tier.CPU, Tier.DROPPED


class TieredMemory:
    def __init__(self, gpu_bytes: float, cpu_bytes: float, gpu_policy, cpu_policy) -> None:
        self.capacity = [gpu_bytes, cpu_bytes]
        self.used = [0, 0]
        self.evictable = [0, 0]          # bytes of unpinned units per tier
        self.policy = [gpu_policy, cpu_policy]
        self.peak_gpu_bytes = 0          # highest GPU occupancy seen
        self.swap_out_bytes = 0
        self.dropped_bytes = 0
        self.evict_ns: list[int] = []    # wall clock of each victim-selection call
        self._seq = 0

    def free(self, tier: Tier) -> float:
        return self.capacity[tier] - self.used[tier]

    def reclaimable(self, tier: Tier) -> float:
        return self.free(tier) + self.evictable[tier]

    # -- moving one unit -------------------------------------------------------------------------
    def place(self, unit: Unit, tier: Tier, now: float) -> None:
        """Move ``unit`` to ``tier`` (the caller made room), keeping policies and bytes in step."""
        old = unit.tier
        if old == tier:
            return
        pages = unit.session.tier_pages
        pages[old] -= unit.pages
        pages[tier] += unit.pages
        if old != DROPPED:
            self.policy[old].remove(unit)
            self.used[old] -= unit.size
            if not unit.pinned:
                self.evictable[old] -= unit.size
        unit.tier = tier
        unit.tier_since_s = now
        self._seq += 1
        unit.tier_seq = self._seq
        if tier != DROPPED:
            if self.used[tier] + unit.size > self.capacity[tier]:
                raise AssertionError(f"{tier.name} over capacity placing unit {unit.key}: "
                                     f"{self.used[tier]} + {unit.size} > {self.capacity[tier]}")
            self.used[tier] += unit.size
            if tier == GPU and self.used[GPU] > self.peak_gpu_bytes:
                self.peak_gpu_bytes = self.used[GPU]
            if not unit.pinned:
                self.evictable[tier] += unit.size
            self.policy[tier].insert(unit, now)

    def resize(self, unit: Unit, pages: int, size: int) -> None:
        """A pinned GPU unit grows (session granularity); the caller made room."""
        assert unit.pinned and unit.tier == GPU, "only pinned GPU units grow"
        self.used[GPU] += size - unit.size
        unit.session.tier_pages[GPU] += pages - unit.pages
        unit.size, unit.pages = size, pages
        self.peak_gpu_bytes = max(self.peak_gpu_bytes, self.used[GPU])

    def access(self, unit: Unit, now: float) -> None:
        """A turn uses ``unit`` where it is (a hit in its tier), before it is pinned."""
        if unit.tier != DROPPED:
            self.policy[unit.tier].access(unit, now)

    def pin(self, unit: Unit) -> None:
        if unit.pinned:
            raise AssertionError(f"unit {unit.key} pinned twice")
        if unit.tier != DROPPED:
            self.policy[unit.tier].pin(unit)
            self.evictable[unit.tier] -= unit.size
        unit.pinned = True

    def unpin(self, unit: Unit, now: float) -> None:
        if not unit.pinned:
            raise AssertionError(f"unit {unit.key} unpinned but not pinned")
        unit.pinned = False
        if unit.tier != DROPPED:
            self.evictable[unit.tier] += unit.size
            self.policy[unit.tier].unpin(unit, now)

    # -- reclaiming room -------------------------------------------------------------------------
    def make_room(self, nbytes: int, now: float) -> bool:
        """Evict GPU victims until ``nbytes`` are free. False (and no change) if that is impossible."""
        if self.reclaimable(GPU) < nbytes:
            return False
        while self.free(GPU) < nbytes:
            self._demote(self._victim(GPU, now), now)
        return True

    def _victim(self, tier: Tier, now: float) -> Unit:
        t0 = time.perf_counter_ns()
        unit = self.policy[tier].victim(now)
        self.evict_ns.append(time.perf_counter_ns() - t0)
        if unit is None or unit.pinned or unit.tier != tier:
            raise AssertionError(f"{type(self.policy[tier]).__name__} returned {unit!r} as a {tier.name} "
                                 f"victim with {self.evictable[tier]} evictable bytes")
        return unit

    def _demote(self, unit: Unit, now: float) -> None:
        size = unit.size
        if self.capacity[CPU] >= size and self.reclaimable(CPU) >= size:
            while self.free(CPU) < size:
                self.drop(self._victim(CPU, now), now)
            self.place(unit, CPU, now)
            self.swap_out_bytes += size
        else:
            self.drop(unit, now)

    def drop(self, unit: Unit, now: float) -> None:
        self.dropped_bytes += unit.size
        self.place(unit, DROPPED, now)
        unit.hits = 0  # counts reset on eviction (LFU)

    @property
    def gpu_capacity_finite(self) -> bool:
        return not math.isinf(self.capacity[GPU])
