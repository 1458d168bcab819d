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
        for tier in (GPU, CPU):
            if math.isfinite(self.capacity[tier]):
                self.policy[tier].set_capacity(int(self.capacity[tier]))
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
        size, pinned = unit.size, unit.pinned
        pages = unit.session.tier_pages
        pages[old] -= unit.pages
        pages[tier] += unit.pages
        used = self.used
        if old != DROPPED:
            self.policy[old].remove(unit)
            used[old] -= size
            if not pinned:
                self.evictable[old] -= size
        unit.tier = tier
        unit.tier_since_s = now
        self._seq += 1
        unit.tier_seq = self._seq
        if tier != DROPPED:
            used[tier] += size
            if used[tier] > self.capacity[tier]:
                raise AssertionError(f"{tier.name} over capacity placing unit {unit.key}: "
                                     f"{used[tier]} > {self.capacity[tier]}")
            if tier == GPU and used[GPU] > self.peak_gpu_bytes:
                self.peak_gpu_bytes = used[GPU]
            if not pinned:
                self.evictable[tier] += size
            self.policy[tier].insert(unit, now)

    def resize(self, unit: Unit, pages: int, size: int) -> None:
        """A pinned GPU unit grows (session granularity); the caller made room."""
        assert unit.pinned and unit.tier == GPU, "only pinned GPU units grow"
        self.used[GPU] += size - unit.size
        unit.session.tier_pages[GPU] += pages - unit.pages
        unit.size, unit.pages = size, pages
        self.peak_gpu_bytes = max(self.peak_gpu_bytes, self.used[GPU])

    def acquire(self, units: list[Unit], now: float) -> None:
        """A turn uses all these units where they are: a hit in their tier, then pinned."""
        held = ([], [])
        for u in units:
            if u.pinned:
                raise AssertionError(f"unit {u.key} pinned twice")
            if u.tier != DROPPED:
                held[u.tier].append(u)
        for tier in (GPU, CPU):
            if held[tier]:
                self.policy[tier].acquire(held[tier], now)
                self.evictable[tier] -= sum(u.size for u in held[tier])
        for u in units:
            u.pinned = True

    def release(self, units: list[Unit], now: float) -> None:
        """The turn using these units finished: they are candidates again, in page order."""
        held = ([], [])
        for u in units:
            if not u.pinned:
                raise AssertionError(f"unit {u.key} unpinned but not pinned")
            u.pinned = False
            if u.tier != DROPPED:
                held[u.tier].append(u)
        for tier in (GPU, CPU):
            if held[tier]:
                self.evictable[tier] += sum(u.size for u in held[tier])
                self.policy[tier].release(held[tier], now)

    # -- reclaiming room -------------------------------------------------------------------------
    def make_room(self, nbytes: int, now: float) -> bool:
        """Evict GPU victims until ``nbytes`` are free. False (and no change) if that is impossible."""
        if self.reclaimable(GPU) < nbytes:
            return False
        used, cap, policy = self.used, self.capacity[GPU], self.policy[GPU]
        clock, record = time.perf_counter_ns, self.evict_ns.append
        while cap - used[GPU] < nbytes:
            t0 = clock()
            unit = policy.victim(now)
            record(clock() - t0)
            self._check_victim(unit, GPU)
            size = unit.size
            if self.capacity[CPU] >= size and self.reclaimable(CPU) >= size:
                self._demote(unit, now)
            else:
                self._drop_unpinned_gpu(unit, now)
        return True

    def _drop_unpinned_gpu(self, unit: Unit, now: float) -> None:
        """``drop`` for the hottest case, an unpinned GPU victim, without the general ``place``."""
        size = unit.size
        pages = unit.session.tier_pages
        pages[GPU] -= unit.pages
        pages[DROPPED] += unit.pages
        self.policy[GPU].remove(unit)
        self.used[GPU] -= size
        self.evictable[GPU] -= size
        self._seq += 1
        unit.tier, unit.tier_since_s, unit.tier_seq, unit.hits = DROPPED, now, self._seq, 0
        self.dropped_bytes += size

    def recompute_on_gpu(self, units: list[Unit], now: float) -> None:
        """Place one session's pinned DROPPED units on the GPU (the caller made room): its prefill
        recomputes them. ``place`` for each, with the shared accounting done once."""
        insert = self.policy[GPU].insert
        seq = self._seq
        size = pages = 0
        for u in units:
            if u.tier != DROPPED or not u.pinned:
                raise AssertionError(f"unit {u.key} is not a pinned dropped unit")
            seq += 1
            u.tier, u.tier_since_s, u.tier_seq, u.created_s = GPU, now, seq, now
            size += u.size
            pages += u.pages
            insert(u, now)
        self._seq = seq
        if units:
            tier_pages = units[0].session.tier_pages
            tier_pages[DROPPED] -= pages
            tier_pages[GPU] += pages
        self.used[GPU] += size
        if self.used[GPU] > self.capacity[GPU]:
            raise AssertionError(f"GPU over capacity recomputing {len(units)} units: "
                                 f"{self.used[GPU]} > {self.capacity[GPU]}")
        self.peak_gpu_bytes = max(self.peak_gpu_bytes, self.used[GPU])

    def _victim(self, tier: Tier, now: float) -> Unit:
        t0 = time.perf_counter_ns()
        unit = self.policy[tier].victim(now)
        self.evict_ns.append(time.perf_counter_ns() - t0)
        self._check_victim(unit, tier)
        return unit

    def _check_victim(self, unit: Unit | None, tier: Tier) -> None:
        if unit is None or unit.pinned or unit.tier != tier:
            raise AssertionError(f"{type(self.policy[tier]).__name__} returned {unit!r} as a {tier.name} "
                                 f"victim with {self.evictable[tier]} evictable bytes")

    def _demote(self, unit: Unit, now: float) -> None:
        size = unit.size
        if self.capacity[CPU] >= size and self.reclaimable(CPU) >= size:
            while self.capacity[CPU] - self.used[CPU] < size:
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
