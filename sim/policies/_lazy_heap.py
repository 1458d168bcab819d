"""The lazy-deletion heap peek that ordered policies share."""
from __future__ import annotations

import heapq


def first_live(heap: list, live: dict):
    """The unit of the first heap entry ``(seq, token, unit)`` still live, or None.

    ``live[unit.key][1]`` is the token of the unit's current entry; entries of removed units, or
    superseded by a newer entry, are popped on the way.
    """
    while heap:
        _, tok, unit = heap[0]
        entry = live.get(unit.key)
        if entry is not None and entry[1] == tok:
            return unit
        heapq.heappop(heap)
    return None
