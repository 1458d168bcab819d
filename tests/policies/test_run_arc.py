"""ARC on runs (``RunARC``, built where every unit has one size) against ARC on one ordered dict
per list (built where sizes may vary), driven by the same engine-like calls with units of one size
(hypothesis): the same victims, the same four lists in the same order and the same p after every
call."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twin_driver import OPS, PAGE, OneSizeView, TwinDriver

from sim.policies.arc import ARC, RunARC
from sim.policies.base import PolicyContext
from sim.units import Tier


def _arc(says: bool, tier: Tier, capacity: int | None) -> ARC:
    ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=1, view=OneSizeView(says))
    pol = ARC(ctx)
    if capacity is not None:
        pol.set_capacity(capacity * PAGE)
    return pol


class Twins(TwinDriver):
    """The run form and the dict form: the same four lists in the same order, the same p."""

    def __init__(self, tier: Tier, capacity: int | None) -> None:
        super().__init__(_arc(True, tier, capacity), _arc(False, tier, capacity))
        assert type(self.runs) is RunARC and type(self.plain) is ARC

    def compare(self) -> None:
        r, d = self.runs, self.plain
        assert list(r._t1) == list(d._t1) and list(r._t2) == list(d._t2)
        assert list(r._b1) == list(d._b1) and list(r._b2) == list(d._b2)
        assert r.p == d.p and r._c() == d._c()
        assert len(r._t1) + len(r._t2) + len(r._h1) + len(r._h2) == len(self.state)


@settings(max_examples=600, deadline=None)
@given(OPS, st.sampled_from([None, 6, 20, 45]), st.sampled_from([Tier.GPU, Tier.CPU]))
def test_arc_on_runs_equals_arc_on_dicts(ops, capacity, tier):
    twins = Twins(tier, capacity)
    for op in ops:
        twins.step(*op)


def test_a_stretch_that_trims_b2_equals_one_victim_after_another():
    """Case IV's trim of B2 (the four lists over 2c, T1 + B1 within c) over many victims: T1
    empties into B1, then T2 into B2, trimming it while the lists hold 2c or more."""
    for first_t1 in (10, 4):
        twins = Twins(Tier.GPU, 10)
        twins.step(0, 0, 0, 15)  # 15 units of session 0 (pinned: n odd is unpinned)
        twins.step(1, 0, 0, 1)
        twins.step(2, 0, 0, 1)  # a turn: all 15 in T2
        twins.step(0, 1, 0, first_t1 + (first_t1 % 2 == 0))  # into T1
        twins.step(0, 2, 0, 9)
        twins.step(3, 0, 0, 30)
        twins.step(0, 1, 20, 11)  # back in T1, B1 trimmed
        twins.step(3, 0, 0, 12)
