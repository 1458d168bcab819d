"""The one base class every eviction policy derives from.

A policy instance orders the *evictable* (unpinned) units of one tier; the engine keeps one
instance per tier. It never sees pinned units as candidates, so "pinned is never evicted" holds by
construction. The engine reports a miss as ``insert``, a hit as ``access``, a use by a running turn
as ``pin``/``unpin``, and a departure as ``remove``; it asks for victims through ``victim``, which
only peeks (libCacheSim's split of "peek victim" from "evict"): the unit leaves only when the engine
then calls ``remove``. ``kvsim cachesim`` drives the same calls without pins: insert on a miss,
access on a hit.

Time is passed in (``now``); policies never read a clock. Unit metadata the engine maintains
(``last_access_s``, ``tier_since_s``, ``tier_seq``, ``hits``, ``next_access_s``) is there to key on.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may know about the run beyond its units."""

    tier: int                 # sim.units.Tier of the instance
    block_tokens: int
    num_layers: int
    seed: int = 0
    cost: Any = None          # costmodels.CostModel, for cost-aware policies
    cpu_kv_bytes: float | None = None  # CPU tier capacity: decides demote (swap) vs drop (recompute)
    predictor: Any = None     # sim.lifetime predictor, fitted on a training split of the trace


class EvictionPolicy(ABC):
    name: ClassVar[str] = ""

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    def set_capacity(self, capacity: int) -> None:
        """The tier's capacity in bytes, told once when finite (ARC, S3-FIFO, SLRU, 2Q size their
        queues by it)."""

    def on_admit(self, session, split: tuple[int, int, int], now: float) -> None:
        """A turn of ``session`` is being admitted with its history split (gpu, cpu, recomputed)
        tokens; called before its units are acquired (QoS counts priority inversions here)."""

    def metrics(self):
        """Policy-specific figures for the run (a dataclass), or None."""
        return None

    # -- membership, reported by the engine ------------------------------------------------------
    def insert(self, unit, now: float) -> None:
        """``unit`` entered this tier; it is a candidate unless ``unit.pinned``."""
        if not unit.pinned:
            self._add(unit, now)

    def access(self, unit, now: float) -> None:
        """A hit: ``unit`` is in this tier and is used now (the engine pins it right after)."""

    def remove(self, unit) -> None:
        """``unit`` left this tier (evicted, moved, or dropped), pinned or not."""
        if not unit.pinned:
            self._discard(unit)

    def pin(self, unit) -> None:
        """``unit`` is used by a running turn: no longer a candidate (called before the flag is set)."""
        self._discard(unit)

    def unpin(self, unit, now: float) -> None:
        """The turn using ``unit`` finished: it is a candidate again (called after the flag is cleared)."""
        self._add(unit, now)

    # -- batches: a turn uses and releases all of a session's units at once -----------------------
    def acquire(self, units, now: float) -> None:
        """A turn uses these units of this tier: ``access`` then ``pin`` each (flags not yet set)."""
        for unit in units:
            self.access(unit, now)
            self.pin(unit)

    def release(self, units, now: float) -> None:
        """The turn finished: ``unpin`` each (flags already cleared), in page order."""
        for unit in units:
            self.unpin(unit, now)

    # -- the ordering, supplied by each policy ----------------------------------------------------
    @abstractmethod
    def _add(self, unit, now: float) -> None: ...

    @abstractmethod
    def _discard(self, unit) -> None: ...

    @abstractmethod
    def victim(self, now: float):
        """The unit to evict next, without evicting it; None when there is no candidate."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, unit) -> bool: ...
