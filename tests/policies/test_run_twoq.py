"""2Q on runs (``RunTwoQ``, built where every unit has one size) against 2Q on ordered dicts (built
where sizes may vary), driven by the same engine-like calls with units of one size (hypothesis):
the same victims and the same queues (A1in's candidates in order, Am, A1out, the pinned units and
the queue each returns to) after every call. And ``GhostRuns`` (A1out) against a plain list of
uids."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from twin_driver import OPS, PAGE, OneSizeView, TwinDriver

from sim.policies.base import PolicyContext
from sim.policies.ghost_runs import GhostRuns
from sim.policies.run_lists import split_at_sessions
from sim.policies.twoq import A1IN, AM, RunTwoQ, TwoQ
from sim.units import UNIT_BITS, Tier, extents_of


def _twoq(says: bool, tier: Tier, capacity: int | None) -> TwoQ:
    ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=1, view=OneSizeView(says))
    pol = TwoQ(ctx)
    if capacity is not None:
        pol.set_capacity(capacity * PAGE)
    return pol


class Twins(TwinDriver):
    """The run form and the dict form: the same queues, the pinned units and the queue each
    returns to."""

    def __init__(self, tier: Tier, capacity: int | None) -> None:
        super().__init__(_twoq(True, tier, capacity), _twoq(False, tier, capacity))
        assert type(self.runs) is RunTwoQ and type(self.plain) is TwoQ

    def compare(self) -> None:
        r, d = self.runs, self.plain
        assert list(r._ain.candidates()) == list(d._ain._order.candidates())
        assert list(r._am) == list(d._am) and list(r._aout) == list(d._aout)
        assert r._sizes() == d._sizes() and r._budget.resident == d._budget.resident
        assert set(r._hm) == {u for u, q in d._pinned.items() if q == AM}
        for u, v in self.state.items():
            in_ain = r._ain.is_member(u) and u not in r._ain
            assert in_ain == (d._pinned.get(u) == A1IN), u
            assert (v == "pinned") == (u in d._pinned)

    def turn_end_units(self, s: int, n: int) -> list[int]:
        uids = super().turn_end_units(s, n)
        if n % 4 == 0:  # with a candidate among them: one at a time
            uids = sorted(set(uids + self.with_state(s, "cand")[:1]))
        return uids

    def admits(self, uid: int, a: int, now: float) -> bool:
        """Some single inserts with a request incoming (a ghost lookup, then the admission)."""
        if a % 2:
            self.both("admitting", uid, now)
            return self.both("admit", uid)
        return True


@settings(max_examples=600, deadline=None)
@given(OPS, st.sampled_from([None, 6, 20, 45]), st.sampled_from([Tier.GPU, Tier.CPU]))
def test_twoq_on_runs_equals_twoq_on_dicts(ops, capacity, tier):
    twins = Twins(tier, capacity)
    for op in ops:
        twins.step(*op)


def test_a1in_over_kin_then_am_then_a1in_again_equals_one_victim_after_another():
    """``evict_bytes``' three stretches in one call: A1in down to Kin, Am to empty, A1in again,
    its victims' keys entering A1out (which drops its oldest past Kout)."""
    twins = Twins(Tier.GPU, 20)
    twins.step(0, 0, 1, 9)  # 9 units of session 0 into A1in (n odd: unpinned)
    twins.step(3, 0, 0, 9)  # all evicted: their keys in A1out
    twins.step(0, 0, 1, 9)  # ghost hits: into Am
    twins.step(0, 1, 1, 15)  # 15 into A1in
    twins.step(3, 0, 0, 30)


# -- GhostRuns against a plain list ------------------------------------------------------------
GHOST_OPS = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.integers(1, 3),
        st.integers(0, 99),
        st.integers(1, 60),
    ),
    max_size=150,
)


def _ghost_uid(s: int, i: int) -> int:
    """Uids ``i`` of 0 .. 99 around the start of bucket ``s``: ranges may cross two buckets."""
    return (s << UNIT_BITS) + i - 50


@settings(max_examples=500, deadline=None)
@given(GHOST_OPS)
# the oldest run emptied by ghost hits, then forgotten past it (a dead entry at the head)
@example([(0, 1, 60, 5), (0, 1, 70, 5), (2, 1, 60, 5), (0, 2, 60, 5), (0, 2, 70, 8)])
def test_ghost_runs_equal_a_plain_list(ops):
    g, ref = GhostRuns(), []
    for op, s, a, n in ops:
        lo, hi = _ghost_uid(s, a), _ghost_uid(s, min(a + n, 100))
        if op == 0:  # victims enter as runs; the oldest past a limit are forgotten
            new = [u for u in range(lo, hi) if u not in ref]
            limit = None if n % 3 == 0 else 2 * n
            g.push_runs(extents_of(new), limit)
            ref += new
            if limit is not None:
                ref = ref[max(0, len(ref) - limit) :]
        elif op == 1:
            g.forget(n)
            ref = ref[n:]
        elif op == 2:  # the ghosts of a range taken out (ghost hits)
            want = sorted(u for u in ref if lo <= u < hi)
            assert g.take_range(lo, hi) == extents_of(want)
            ref = [u for u in ref if not lo <= u < hi]
        elif op == 3:
            assert g.discard(lo) == (lo in ref)
            if lo in ref:
                ref.remove(lo)
        else:  # the one-bucket questions, a bucket's part of the range at a time
            for x, y in split_at_sessions([(lo, hi)]):
                want = [u for u in ref if x <= u < y]
                assert g.first_in(x, y) == (min(want) if want else None)
                if want:
                    assert g.meets(x, y)
        assert list(g) == ref and len(g) == len(ref) and bool(g) == bool(ref)
        members = set(ref)
        for u in range(lo - 1, hi + 1):
            assert (u in g) == (u in members)
