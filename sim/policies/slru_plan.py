"""Where a decode span's pinned pages enter SLRU's segments, had they come one step at a time.

A pinned insert enters the lowest segment with room for it (else S0); it adds no candidate, so it
changes no victim, but the room it finds depends on the victims that left before it. The engine
names a span's new pages and how many of the batch's victims precede each (``plan_pinned``)
before it evicts them. The victims are the oldest candidates of the lowest segments, so the
segments' fill after any number of them is known from the fill before the eviction: each page's
segment is found by walking the victims and the pages together, in step order.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class PinnedPlan:
    """What ``plan_pinned`` saw before the batch's eviction."""

    uids: list[int]  # the span's new units, in step order
    before: list[int]  # victims of the batch that precede each (non-decreasing)
    fill: list[int]  # candidate bytes of each segment
    victims: list[tuple[int, int, int]]  # (segment, units, bytes each), in eviction order
    resident: int  # the budget's bytes held
    hwm: int  # and its high-water mark


def victim_runs(fill_units: Sequence[int], n: int, unit: int) -> list[tuple[int, int, int]]:
    """The first ``n`` victims where every unit has ``unit`` bytes: the segments' oldest units,
    lowest segment first, as (segment, units, bytes each)."""
    out: list[tuple[int, int, int]] = []
    for seg, held in enumerate(fill_units):
        if n <= 0:
            break
        if held:
            k = min(held, n)
            out.append((seg, k, unit))
            n -= k
    return out


def planned_segments(
    plan: PinnedPlan, sizes: Sequence[int], capacity: int | None, n_seg: int
) -> tuple[list[int], int]:
    """Each planned unit's segment, and the budget's high-water mark after the last, as one step
    at a time gives them: before unit i its victims leave (their bytes leave the segment and the
    budget), then it grows the budget and enters the lowest segment whose candidates and it fit in
    a share, ``c // n_seg`` with ``c`` the capacity or else the mark."""
    fill = list(plan.fill)
    victims = plan.victims
    resident, hwm = plan.resident, plan.hwm
    out: list[int] = []
    gone = 0  # victims that have left
    v = used = 0  # the victim run being taken, and how many of its units left
    seg = last_size = -1  # the last unit's segment and size (-1: look again)
    for size, before in zip(sizes, plan.before, strict=True):
        while gone < before and v < len(victims):
            vseg, units, each = victims[v]
            k = min(units - used, before - gone)
            fill[vseg] -= k * each
            resident -= k * each
            gone += k
            used += k
            if used == units:
                v, used = v + 1, 0
            last_size = -1
        resident += size
        hwm = max(hwm, resident)
        if capacity is None or size != last_size:  # (else the same fill and share as the last)
            share = (hwm if capacity is None else capacity) // n_seg
            seg = next((i for i in range(n_seg) if fill[i] + size <= share), 0)
            last_size = size
        out.append(seg)
    return out, hwm


def planned_split(plan: PinnedPlan, unit: int, capacity: int, n_seg: int) -> tuple[int, int]:
    """``planned_segments`` where every unit has ``unit`` bytes and the capacity is fixed, as
    (segment, k): the first ``k`` planned units enter that segment, the others S0. A victim
    leaves S0 while S0 has any; until S0 falls below its share of ``m`` units no segment above
    it changes, so a unit enters the lowest segment with room, and from then on S0."""
    m = capacity // n_seg // unit
    units = [f // unit for f in plan.fill]
    first = next((i for i, n in enumerate(units) if n < m), 0)
    if m < 1 or first == 0:
        return 0, 0
    return first, bisect_right(plan.before, units[0] - m)
