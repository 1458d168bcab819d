"""LRU: evict the unit whose last use is oldest.

An OrderedDict is an intrusive doubly linked list in C: O(1) append, removal from the middle and
peek of the oldest (vLLM v1's free-block queue does the same). Units are appended when they become
candidates, i.e. when their turn releases them, and moved to the end on a hit, so the order is
last-use order. Demotions into
the CPU tier arrive in last-use order too (the GPU instance hands them over oldest first).
"""
from __future__ import annotations

from collections import OrderedDict

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


@register("lru")
class LRU(EvictionPolicy):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._order: OrderedDict[int, object] = OrderedDict()

    def _add(self, unit, now: float) -> None:
        self._order[unit.key] = unit
        self._order.move_to_end(unit.key)

    def access(self, unit, now: float) -> None:
        if unit.key in self._order:
            self._order.move_to_end(unit.key)

    def acquire(self, units, now: float) -> None:
        # access (move to the end) then pin (remove) is just a removal
        pop = self._order.pop
        for unit in units:
            pop(unit.key, None)

    def release(self, units, now: float) -> None:
        order = self._order
        for unit in units:
            order[unit.key] = unit  # absent while pinned, so this appends at the MRU end

    def _discard(self, unit) -> None:
        self._order.pop(unit.key, None)

    def victim(self, now: float):
        for unit in self._order.values():
            return unit
        return None

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, unit) -> bool:
        return unit.key in self._order
