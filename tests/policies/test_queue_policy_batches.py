"""SLRU's and S3-FIFO's batch paths that ``test_batches`` does not drive: ``evict_extents`` (the
victims as extents; increasing runs when they are dropped, else in eviction order) and
``remove_many``, against the base class's forms on twin instances driven by the same calls. Units
all have one size, the case the batch forms take."""

from __future__ import annotations

import dataclasses
import random
import types
from itertools import chain, starmap

import pytest
from test_batches import UniformDriver
from test_contract import PAGE

from sim.policies import EvictionPolicy, make_policy
from sim.units import Tier

NAMES = ["slru", "s3fifo"]


class ExtentDriver(UniformDriver):
    """Evictions through ``evict_extents``; removals of a session's units through ``remove_many``.
    ``drops``: the victims are dropped (then only their set is checked, call by call)."""

    def __init__(self, name: str, tier: Tier, capacity_pages: int | None, drops: bool) -> None:
        super().__init__(name, tier, capacity_pages)
        ctx = dataclasses.replace(self.pol.ctx, cpu_kv_bytes=None if drops else 1e9)
        self.pol = make_policy(name, ctx)
        if capacity_pages is not None:
            self.pol.set_capacity(capacity_pages * PAGE)
        self.drops = drops and tier == Tier.GPU or tier == Tier.CPU

    def evict_bytes(self, b: int) -> None:
        nbytes = (1 + b % 7) * PAGE
        unpinned = {u for u, p in self.members.items() if not p}
        extents = self.pol.evict_extents(nbytes, self.now)
        assert all(a < z for a, z in extents), f"{self.name}: empty extent in {extents}"
        got = list(chain.from_iterable(starmap(range, extents)))
        assert len(set(got)) == len(got) and set(got) <= unpinned, f"{self.name}: {got}"
        assert len(got) == min(1 + b % 7, len(unpinned)), f"{self.name}: {len(got)} victims"
        self.victims.append(sorted(got) if self.drops else got)
        for u in got:
            self._gone(u)

    def remove(self, uid: int) -> None:
        """A session's units leave together: its pinned ones (the engine's call), or all."""
        s = uid >> 24
        pinned_only = uid % 2 == 0
        uids = [
            u for u in self.units[s] if u in self.members and (self.members[u] or not pinned_only)
        ]
        if pinned_only:
            self.pol.remove_many(uids, True)
        else:
            for u in uids:
                self.pol.remove(u, self.members[u])
        for u in uids:
            self._gone(u)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("drops", [True, False])
def test_extents_and_removals_equal_the_base_forms(name, drops):
    rng = random.Random(f"{name}/{drops}")
    for tier, capacity_pages in [
        (Tier.GPU, None),
        (Tier.CPU, 40),
        (Tier.GPU, 7),
        (Tier.GPU, 64),
    ] * 12:
        ops = [(rng.randint(0, 11), rng.randrange(10**6), rng.randrange(10**6)) for _ in range(200)]
        batched = ExtentDriver(name, tier, capacity_pages, drops)
        looped = ExtentDriver(name, tier, capacity_pages, drops)
        for call in ("evict_extents", "remove_many", "evict_bytes"):
            setattr(looped.pol, call, types.MethodType(getattr(EvictionPolicy, call), looped.pol))
        assert batched.run(ops) == looped.run(ops), f"{name}: a batch form != the base form"
