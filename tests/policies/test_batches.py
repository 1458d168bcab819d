"""A policy's own batch calls (``acquire``, ``release``, ``insert_many``) against the base class's
one call per unit, on twin instances driven by the same calls: the same victims throughout. The
units all have one size, the case the batch forms take in C (``view.unit_bytes``)."""

from __future__ import annotations

import random
import types

import pytest
from test_contract import PAGE, ContractView, Driver

from sim.policies import EvictionPolicy, available_policies, policy_class
from sim.units import Tier, uid_of

BATCH_CALLS = ("acquire", "release", "insert_many")
BATCHED = [
    n
    for n in available_policies()
    if any(getattr(policy_class(n), c) is not getattr(EvictionPolicy, c) for c in BATCH_CALLS)
]


class UniformView(ContractView):
    unit_bytes = PAGE


class UniformDriver(Driver):
    """Every unit one page; a new unit arrives with up to three more of its session, in one
    ``insert_many``."""

    view_class = UniformView

    def new_unit(self, a: int, b: int) -> None:
        s = a % len(self.view.sessions)
        sess, view = self.view.sessions[s], self.view
        uids = [uid_of(s, len(self.units[s]) + i) for i in range(1 + b % 4)]
        for k, uid in enumerate(uids):
            view.first[uid] = len(self.units[s]) + k
            view.npages[uid], view.sizes[uid] = 1, PAGE
            view.last[uid] = self.now
            view.next[uid] = self.now + (b % 50) if b % 7 else float("inf")
        self.units[s].extend(uids)
        sess.tokens += 16 * len(uids)
        pinned = a % 3 == 0
        self.members.update(dict.fromkeys(uids, pinned))
        self.pol.insert_many(uids, self.now, pinned)

    def grow(self, a: int) -> None:
        """Units of one size do not grow."""


def test_the_policies_with_batches_are_checked():
    assert {"arc", "twoq", "s3fifo", "lru", "fifo", "pensieve"} <= set(BATCHED)


@pytest.mark.slow
@pytest.mark.parametrize("name", BATCHED)
def test_batch_calls_equal_one_call_per_unit(name):
    rng = random.Random(name)
    for tier, capacity_pages in [(Tier.GPU, None), (Tier.CPU, 40), (Tier.GPU, 7)] * 15:
        ops = [(rng.randint(0, 11), rng.randrange(10**6), rng.randrange(10**6)) for _ in range(150)]
        batched = UniformDriver(name, tier, capacity_pages)
        looped = UniformDriver(name, tier, capacity_pages)
        for call in BATCH_CALLS:
            setattr(looped.pol, call, types.MethodType(getattr(EvictionPolicy, call), looped.pol))
        assert batched.run(ops) == looped.run(ops), f"{name}: a batch call != one call per unit"


EVICTING = [
    n for n in available_policies() if policy_class(n).evict_bytes is not EvictionPolicy.evict_bytes
]


@pytest.mark.slow
@pytest.mark.parametrize("name", EVICTING)
def test_a_batch_eviction_of_units_of_one_size_equals_one_evict_after_another(name):
    """A policy's own ``evict_bytes`` where every unit has one size (ARC's loop over local list
    sizes, ...) against the base class's loop of ``evict``, on twin instances."""
    assert {"arc", "lru"} <= set(EVICTING)
    rng = random.Random(name + "/evict")
    for tier, capacity_pages in [(Tier.GPU, None), (Tier.CPU, 40), (Tier.GPU, 7)] * 15:
        ops = [(rng.randint(0, 11), rng.randrange(10**6), rng.randrange(10**6)) for _ in range(150)]
        batched = UniformDriver(name, tier, capacity_pages)
        looped = UniformDriver(name, tier, capacity_pages)
        looped.pol.evict_bytes = types.MethodType(EvictionPolicy.evict_bytes, looped.pol)
        assert batched.run(ops) == looped.run(ops), f"{name}: evict_bytes != evict one by one"
