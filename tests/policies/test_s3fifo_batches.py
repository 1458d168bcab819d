"""S3-FIFO's eviction of many units of one size at once (S's walk taken a stretch of candidates at
a time) against ``evict`` one unit after another, on twin instances driven by the same
engine-like calls (hypothesis): the same victims throughout. The stretches are made short so that
the walk crosses many of them, and S's walk goes by stretches from the first victim wanted."""

from __future__ import annotations

import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_batches import UniformDriver
from test_contract import PAGE

from sim.policies import EvictionPolicy, s3fifo
from sim.units import Tier

OPS = st.lists(
    st.tuples(st.integers(0, 11), st.integers(0, 10**6), st.integers(0, 10**6)),
    min_size=80,
    max_size=300,
)


class ManyVictimsDriver(UniformDriver):
    """``evict_bytes`` asks for up to 40 units (the contract's driver asks for at most 5), and an
    access touches a few units twice, so that units move from S to M and fill M to its share."""

    def access(self, a: int) -> None:
        for i in range(1 + a % 4):
            super().access(a + i)
            super().access(a + i)

    def evict_bytes(self, b: int) -> None:
        got = self.pol.evict_bytes((1 + b % 40) * PAGE, self.now)
        self.victims.extend(got)
        for u in got:
            self._gone(u)


@pytest.fixture(params=[(1, 1), (1, 3), (s3fifo.FEW_VICTIMS, s3fifo.STRETCH_SLACK)])
def stretches(request, monkeypatch):
    few, slack = request.param
    monkeypatch.setattr(s3fifo, "FEW_VICTIMS", few)
    monkeypatch.setattr(s3fifo, "STRETCH_SLACK", slack)


@pytest.mark.slow
def test_evict_bytes_of_many_units_equals_evict_one_by_one(stretches):
    @settings(
        max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
    )
    @given(
        ops=OPS,
        tier=st.sampled_from([Tier.GPU, Tier.CPU]),
        capacity_pages=st.one_of(st.none(), st.integers(3, 24)),
    )
    def check(ops, tier, capacity_pages):
        batched = ManyVictimsDriver("s3fifo", tier, capacity_pages)
        looped = ManyVictimsDriver("s3fifo", tier, capacity_pages)
        looped.pol.evict_bytes = types.MethodType(EvictionPolicy.evict_bytes, looped.pol)
        assert batched.run(ops) == looped.run(ops)
        assert list(batched.pol._ghost) == list(looped.pol._ghost)

    check()
