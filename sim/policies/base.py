"""The one base class every eviction policy derives from.

A policy orders the *evictable* (unpinned) units of one tier; the engine keeps one instance per
tier. Units are integer ids (``sim.units``); what a policy may know about a unit (size, page, layer,
its session's timing) it reads through ``self.view``, and it keys its own structures by uid.

The engine reports:
- ``insert(uid, now, pinned)``: the unit entered this tier (a miss); a candidate unless pinned;
- ``access(uid, now)``: a hit;
- ``pin`` / ``unpin`` (and their batches ``acquire`` / ``release``): a running turn holds it;
- ``remove(uid, pinned)``: the engine takes the unit away for its own reasons (moved, dropped,
  session gone). A removal is never an eviction: ghost lists do not hear of it.

The policy chooses:
- ``peek(now)``: the unit it would evict now. Pure: a peek changes nothing.
- ``evict(now)``: choose that unit and let it go (ghost lists record it here).
- ``evict_bytes(nbytes, now)``: victims, in order, until ``nbytes`` are freed ("free N bytes" in
  one call); policies may override it with a batch path that gives the same victims.

Time is passed in; policies never read a clock. Most policies are a priority key over the
candidates plus these hooks; the shared structures (lazy-deletion heap, ghost FIFO, byte budget)
live in ``sim.policies.structures``.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Container
from dataclasses import dataclass
from itertools import chain, starmap
from typing import Any, ClassVar, NamedTuple

from sim.units import Tier, extents_of, join_extents


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may know about the run beyond its units."""

    tier: int  # sim.units.Tier of the instance
    block_tokens: int
    num_layers: int
    view: Any = None  # sim.units.UnitView (engine) or the cachesim's object view
    cost: Any = None  # costmodels.CostModel, for cost-aware policies
    cpu_kv_bytes: float | None = (
        None  # CPU tier capacity: decides demote (swap) vs drop (recompute)
    )
    predictor: Any = None  # sim.lifetime predictor, fitted on a training split of the trace


class ReplayHooks(NamedTuple):
    """A policy's own structure, exposed for an unpinned replay of requests (``kvsim cachesim``):
    membership, the hit hook, insert and evict as direct (C-level where possible) calls, so the
    replay loop reaches the policy's structure without a method dispatch per request. Same
    decisions as the hooks above; the policy is in replay form afterwards (only these calls)."""

    members: Container[int]  # the cached uids
    on_hit: Callable[[int], object] | None  # a hit on a member, or None if a hit is a no-op
    insert: Callable[[int], object]  # a miss admitted (unpinned)
    evict: Callable[[], tuple]  # let the victim go: (uid, anything); KeyError
    #                                               when there is none


class EvictionPolicy(ABC):
    name: ClassVar[str] = ""
    offline: ClassVar[bool] = False  # needs next-access times (Belady-style bounds)
    reads_last_access: ClassVar[bool] = True  # reads view.last_access_s (cachesim keeps it then)
    # True when a pinned insert never changes the next victims, time plays no part in the choice,
    # consecutive evict_bytes calls equal one call for their sum, and take_in of a batch equals
    # taking its units in one at a time (a queue): the engine may then give a decode span's new
    # pages, and demote their victims, in one batch.
    grows_in_bulk: ClassVar[bool] = False
    # True for a ``grows_in_bulk`` policy whose victims do not depend on pinned inserts but whose
    # later order does (CLOCK: a second chance goes behind the pages that entered before it): the
    # engine then tells it, before the batch's eviction, where each new page enters among the
    # victims (``plan_pinned``), so that the batch leaves the order of one step at a time.
    plans_pinned: ClassVar[bool] = False
    # True when a pinned insert never changes the next victims though the order reads the clock,
    # and a call's victims change the next call's choice only through the policy's own state (not
    # through the tier arrays, which the engine updates after each call): the engine may then give
    # a decode span's new pages in one batch where their victims are dropped, asking for each
    # allocation's victims at its step's start (``evict_extents_at``).
    grows_by_time: ClassVar[bool] = False
    # True when the choice reads the unit's session (its priority, its other units): a unit that
    # belongs to no one session (a prefix-cache block) gives it nothing to go on.
    reads_session: ClassVar[bool] = False

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx
        self.view = ctx.view
        # Victims of the CPU tier, and of a GPU with no CPU tier, are dropped: no policy hears
        # their order, so ``evict_extents`` may hand them over as increasing runs.
        self.drops_victims = ctx.tier == Tier.CPU or not getattr(ctx, "cpu_kv_bytes", None)

    def set_capacity(self, capacity: int) -> None:
        """The tier's capacity in bytes, told once when finite (ARC, S3-FIFO, SLRU, 2Q size their
        queues by it)."""

    def on_admit(self, session, split: tuple[int, int, int], now: float) -> None:
        """A turn of ``session`` is being admitted with its history split (gpu, cpu, recomputed)
        tokens; called before its units are acquired (QoS counts priority inversions here)."""

    def metrics(self):
        """Policy-specific figures for the run (a dataclass), or None."""
        return

    # -- membership, reported by the engine ------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        """``uid`` entered this tier; it is a candidate unless ``pinned``."""
        if not pinned:
            self._add(uid, now)

    def access(self, uid: int, now: float) -> None:
        """A hit: ``uid`` is in this tier and is used now (the engine pins it right after)."""

    def remove(self, uid: int, pinned: bool = False) -> None:
        """The engine takes ``uid`` out of this tier (moved, dropped); not an eviction."""
        if not pinned:
            self._discard(uid)

    def pin(self, uid: int) -> None:
        """``uid`` is used by a running turn: no longer a candidate."""
        self._discard(uid)

    def unpin(self, uid: int, now: float) -> None:
        """The turn using ``uid`` finished: it is a candidate again."""
        self._add(uid, now)

    # -- batches: a turn uses and releases all of a session's units at once -----------------------
    def acquire(self, uids, now: float) -> None:
        """A turn uses these units of this tier: ``access`` then ``pin`` each."""
        for uid in uids:
            self.access(uid, now)
            self.pin(uid)

    def release(self, uids, now: float) -> None:
        """The turn finished: ``unpin`` each, in page order."""
        for uid in uids:
            self.unpin(uid, now)

    def hears_pinned(self) -> bool:
        """Does the policy track units that enter pinned (``insert(pinned=True)``)? A plain
        ordering does not: the caller may then skip listing them."""
        return type(self).insert is not EvictionPolicy.insert

    def plan_pinned(self, uids: list[int], before: list[int]) -> None:
        """(``plans_pinned``) The next eviction and the pinned ``insert_many`` of ``uids`` that
        follows it are one batch of steps: taken one step at a time, ``uids[i]`` would enter after
        the batch's first ``before[i]`` victims (a non-decreasing count). The policy may enter
        them during the eviction, each in its place; the ``insert_many`` then adds nothing."""

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order (new pages of a running turn, a session swapped in)."""
        if pinned and not self.hears_pinned():
            return  # a pinned unit is nothing to a plain ordering
        for uid in uids:
            self.insert(uid, now, pinned)

    def remove_many(self, uids, pinned: bool = False) -> None:
        """``remove`` each, in order."""
        if pinned and type(self).remove is EvictionPolicy.remove:
            return
        for uid in uids:
            self.remove(uid, pinned)

    # -- the choice ------------------------------------------------------------------------------
    @abstractmethod
    def peek(self, now: float) -> int | None:
        """The unit this policy would evict now, or None when there is no candidate. Pure."""

    def evict(self, now: float) -> int | None:
        """Choose a victim and let it go; None when there is no candidate."""
        uid = self.peek(now)
        if uid is not None:
            self._evicted(uid)
        return uid

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """Victims, in eviction order, until their sizes add up to ``nbytes`` (fewer only when the
        candidates run out)."""
        out: list[int] = []
        size = self.view.size
        while nbytes > 0:
            uid = self.evict(now)
            if uid is None:
                break
            out.append(uid)
            nbytes -= size(uid)
        return out

    def _units_in(self, nbytes: int) -> int | None:
        """How many units hold ``nbytes`` when every unit has one size (``view.unit_bytes``), the
        count a batch eviction takes; None when sizes vary."""
        unit_bytes = self.view.unit_bytes
        return -(-nbytes // unit_bytes) if unit_bytes else None

    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        """Insert these unpinned units in order, evicting whenever the next one does not fit in
        ``free_bytes`` (a demotion batch into a full tier). Returns the evicted uids, in order; a
        unit inserted here may itself be evicted by a later one. Queue-like policies override it
        with a batch that gives the same victims."""
        out: list[int] = []
        size = self.view.size
        for uid in uids:
            need = size(uid)
            while free_bytes < need:
                victim = self.evict(now)
                if victim is None:
                    raise AssertionError(f"{type(self).__name__}: no victim to make room for {uid}")
                out.append(victim)
                free_bytes += size(victim)
            self.insert(uid, now)
            free_bytes -= need
        return out

    def _peek_by_dry_run(self, now: float) -> int | None:
        """A pure peek for a policy whose choice is a walk that reorders as it goes (S-3FIFO's
        moves to main, SIEVE's hand): ``evict`` on a copy of the policy, which leaves this one as it
        was. O(n) per peek; the engine and cachesim call ``evict``, which walks once."""
        memo = {id(self.view): self.view, id(self.ctx): self.ctx}
        return copy.deepcopy(self, memo).evict(now)

    def replay_hooks(self) -> ReplayHooks | None:
        """Direct calls for an unpinned replay, or None to be driven through the hooks above."""
        return None

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        """``evict_bytes`` as extents: (first, stop) ranges of consecutive uids, in eviction order.
        Policies that keep runs (LRU) hand them over without listing their pages. Victims that
        are dropped (the CPU tier's, or the GPU's with no CPU tier: no policy hears their order)
        may come as increasing runs instead; the set of victims is the same."""
        victims = self.evict_bytes(nbytes, now)
        if self.drops_victims:  # nobody hears their order: a session's pages as runs
            victims = sorted(victims)
        return extents_of(victims)

    def evict_extents_at(self, schedule: list[tuple[float, int]]) -> list[tuple[int, int]]:
        """``evict_extents(nbytes, now)`` for each (now, nbytes) of ``schedule`` in turn (times
        that never decrease), all its victims as one list of extents: increasing runs when they
        are dropped (``drops_victims``), else in eviction order."""
        out: list[tuple[int, int]] = []
        for now, nbytes in schedule:
            out += self.evict_extents(nbytes, now)
        return join_extents(sorted(out)) if self.drops_victims else join_extents(out)

    def take_in_extents(
        self, extents: list[tuple[int, int]], free_bytes: int, now: float
    ) -> list[tuple[int, int]]:
        """``take_in`` of the uids of ``extents``, its victims as extents. Policies that keep runs
        (LRU) take and give runs without listing their pages."""
        return extents_of(
            self.take_in(list(chain.from_iterable(starmap(range, extents))), free_bytes, now)
        )

    def _evicted(self, uid: int) -> None:
        """``uid`` was chosen and leaves: policies with ghost lists record it here."""
        self._discard(uid)

    # -- the ordering, supplied by each policy ----------------------------------------------------
    @abstractmethod
    def _add(self, uid: int, now: float) -> None: ...

    @abstractmethod
    def _discard(self, uid: int) -> None: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, uid: int) -> bool: ...


class Memoryless(EvictionPolicy):
    """A policy that keeps nothing of a unit once it stops being a candidate (no ghost, no count):
    a hit then a pin is a plain removal, and an unpinned insert is an unpin. Its batches then come
    down to two calls it gives: ``release`` (units become candidates) and ``_forget`` (they stop
    being candidates)."""

    @abstractmethod
    def _forget(self, uids) -> None:
        """These units stop being candidates (those that are not are ignored)."""

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        if not pinned:  # a pinned insert is nothing to a plain order
            self.release(uids, now)

    def acquire(self, uids, now: float) -> None:
        self._forget(uids)

    def remove_many(self, uids, pinned: bool = False) -> None:
        if not pinned:
            self._forget(uids)
