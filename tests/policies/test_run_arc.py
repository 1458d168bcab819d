"""ARC on runs (``RunARC``, built where every unit has one size) against ARC on one ordered dict
per list (built where sizes may vary), driven by the same engine-like calls with units of one size
(hypothesis): the same victims, the same four lists in the same order and the same p after every
call. And ``RunList`` against a plain list of uids."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from twin_driver import OPS, PAGE, OneSizeView, TwinDriver

from sim.policies import run_lists
from sim.policies.arc import ARC, RunARC
from sim.policies.base import PolicyContext
from sim.policies.run_lists import RunList
from sim.units import UNIT_BITS, Tier, extents_of


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


# -- RunList against a plain list -------------------------------------------------------------
LIST_OPS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, 2),
        st.integers(0, 90),
        st.integers(1, 90),
    ),
    max_size=150,
)


@settings(max_examples=400, deadline=None)
@given(
    LIST_OPS,
    st.sampled_from([3, run_lists.SHORT_RUN]),
    st.sampled_from([0, 2, run_lists.INDEX_AT]),
)
# a hole of a short run taken again as a run of its own, then the old run popped past it
@example([(0, 0, 0, 10), (3, 0, 5, 1), (0, 0, 0, 10), (2, 0, 0, 9)], run_lists.SHORT_RUN, 0)
def test_run_list_equals_a_plain_list(ops, short_run, index_at):
    kept = run_lists.SHORT_RUN, run_lists.INDEX_AT
    # In an indexed bucket short runs are indexed by uid, long ones scanned; a bucket is indexed
    # once a find meets more than INDEX_AT runs in it (0: at its first find).
    run_lists.SHORT_RUN, run_lists.INDEX_AT = short_run, index_at
    try:
        _run_list_against_a_list(ops)
    finally:
        run_lists.SHORT_RUN, run_lists.INDEX_AT = kept


def _check_index(rl: RunList) -> None:
    """The index holds exactly the members of the indexed buckets' short runs, each to its run."""
    want = {}
    for b in rl._indexed:
        for key in rl._in[b]:
            first, stop, holes, bucket, short = rl._runs[key]
            assert bucket == b
            if short:
                want.update((u, key) for u in range(first, stop) if not holes or u not in holes)
    assert rl._where == want
    assert rl._indexed <= rl._in.keys()


def _run_list_against_a_list(ops) -> None:
    rl, ref = RunList(), []
    for op, s, a, n in ops:
        lo, hi = s << UNIT_BITS | a, s << UNIT_BITS | min(a + n, 100)
        if op == 0:  # append the range's non-members, as runs
            new = [u for u in range(lo, hi) if u not in ref]
            rl.push_runs(extents_of(new))
            ref += new
        elif op == 1:
            want = sorted(u for u in ref if lo <= u < hi)
            assert rl.count_in(lo, hi) == len(want)
            assert rl.first_in(lo, hi) == (want[0] if want else None)
            got = rl.take_range(lo, hi)
            assert got == extents_of(want)
            ref = [u for u in ref if not lo <= u < hi]
        elif op == 2:
            got = [u for x, y in rl.pop_runs(n) for u in range(x, y)]
            assert got == ref[:n]
            ref = ref[n:]
        elif op == 3:
            assert rl.discard(lo) == (lo in ref)
            if lo in ref:
                ref.remove(lo)
        elif op == 4:  # the whole bucket's members, a range at a time
            assert rl.count_in(lo, hi) == sum(lo <= u < hi for u in ref)
            if any(lo <= u < hi for u in ref):
                assert rl.meets(lo, hi)
        else:
            assert rl.first() == (ref[0] if ref else None)
        assert list(rl) == ref and len(rl) == len(ref)
        _check_index(rl)
        assert all(u in rl for u in ref)
        members = set(ref)
        for u in range(lo - 1, hi + 1):
            assert (u in rl) == (u in members)
        _check_index(rl)
