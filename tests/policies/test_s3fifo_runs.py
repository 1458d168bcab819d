"""S3-FIFO on runs (``RunS3FIFO``, built where every unit has one size) against S3-FIFO on one
entry per unit (built where sizes may vary), driven by the same engine-like calls with units of
one size (hypothesis): the same answers to every call, and after every call the same candidates of
S and of M in the same order, the same members, the same counters and the same ghost keys."""

from __future__ import annotations

from collections import Counter

from hypothesis import example, given, settings
from hypothesis import strategies as st
from twin_driver import OPS, PAGE, OneSizeView, TwinDriver

from sim.policies import s3fifo_runs
from sim.policies.base import PolicyContext
from sim.policies.s3fifo import S3FIFO
from sim.policies.s3fifo_runs import RunS3FIFO
from sim.units import UNIT_BITS, Tier, extents_of


def _s3fifo(says: bool, tier: Tier, capacity: int | None) -> S3FIFO:
    ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=1, view=OneSizeView(says))
    pol = RunS3FIFO(ctx) if says else S3FIFO(ctx)  # (S3FIFO builds runs in a GPU tier only)
    if capacity is not None:
        pol.set_capacity(capacity * PAGE)
    return pol


class Twins(TwinDriver):
    """The run form and the per-unit form: the same candidates of S and of M in order, the same
    members, counters and ghost keys."""

    def __init__(self, tier: Tier, capacity: int | None) -> None:
        super().__init__(_s3fifo(True, tier, capacity), _s3fifo(False, tier, capacity))
        assert type(self.runs) is RunS3FIFO and type(self.plain) is S3FIFO

    def compare(self) -> None:
        r, u = self.runs, self.plain
        assert list(r._s.candidates()) == list(u._q[0]._order.candidates())
        assert list(r._m.candidates()) == list(u._q[1]._order.candidates())
        for uid in self.state:
            q = u._queue_of[uid]
            assert (r._s.is_member(uid), r._m.is_member(uid)) == (q == 0, q == 1), uid
        counters = r.counters()  # (saturated: only min(counter, 3) is read)
        assert counters == {uid: min(f, s3fifo_runs.MAX_COUNT) for uid, f in u._freq.items() if f}
        assert r._marks == Counter(uid >> UNIT_BITS for uid in counters)  # (a session's counters)
        assert r._counts.keys() == r._marks.keys()
        assert list(r._ghost) == list(u._ghost)
        assert r._has_evicted == u._has_evicted and r._budget.c == u._budget.c

    def turn_starts(self, s: int, a: int, n: int, now: float) -> None:
        """A turn starts (twice over: the counters reach 2 and more), now and then on part of a
        run."""
        uids = self.turn_start_units(s, n)
        if n % 4 == 1:
            uids = uids[: len(uids) // 2]  # a hit on part of a run
        for _ in range(1 + n % 2):
            self.both("acquire", uids, now)
            self.state.update(dict.fromkeys(uids, "pinned"))
            if n % 2:
                self.both("release", uids, now)
                self.state.update(dict.fromkeys(uids, "cand"))


def test_s3fifo_keeps_runs_where_units_have_one_size_outside_the_cpu_tier():
    """Block and layer_block units alike (a session's units of every layer are consecutive
    uids); the run form reads no layer."""
    for layers in (1, 32):
        view = OneSizeView(True)
        view.layers = layers  # type: ignore[attr-defined]
        for tier, form in ((Tier.GPU, RunS3FIFO), (Tier.CPU, S3FIFO)):
            ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=32, view=view)
            assert type(S3FIFO(ctx)) is form, (layers, tier)


@settings(max_examples=600, deadline=None)
@given(OPS, st.sampled_from([None, 6, 20, 45]), st.sampled_from([Tier.GPU, Tier.CPU]))
def test_s3fifo_on_runs_equals_s3fifo_per_unit(ops, capacity, tier):
    assert type(_s3fifo(True, Tier.GPU, None)) is RunS3FIFO
    twins = Twins(tier, capacity)
    for op in ops:
        twins.step(*op)


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from([None, 6, 20]))
@example([(0, 0, 0, 15), (1, 0, 0, 3), (0, 1, 0, 11), (3, 0, 0, 16), (3, 0, 0, 9)], 20)
def test_short_readings_of_the_counters_equal_s3fifo_per_unit(ops, capacity):
    """The walks read a run's counters a few units at a time: many readings per walk."""
    kept = s3fifo_runs.FIRST_LOOK
    s3fifo_runs.FIRST_LOOK = 1
    try:
        twins = Twins(Tier.GPU, capacity)
        for op in ops:
            twins.step(*op)
    finally:
        s3fifo_runs.FIRST_LOOK = kept


def _walk_one_by_one(a: int, end: int, hot: list[int], want: int):
    """The walk of ``_walk_past``, a uid at a time: (where it stops, the hot uids passed, the
    victims as extents)."""
    pos, passed, victims = a, [], []
    for u in range(a, end):
        if len(victims) == want:
            break
        if u in hot:
            passed.append(u)
        else:
            victims.append(u)
        pos = u + 1
    return pos, passed, extents_of(victims)


@settings(max_examples=500, deadline=None)
@given(
    st.integers(0, 50),
    st.integers(1, 200),
    st.lists(st.integers(0, 199), max_size=200),
    st.integers(1, 60),
    st.sampled_from([0, 64]),
)
def test_walk_past_takes_the_victims_one_step_at_a_time_takes(a, length, picks, want, loop):
    """``_walk_past`` (a plain loop below ``LOOP_HOT`` counted units, bisection above) against a
    walk a uid at a time: where it stops, how many counted units it passes, the victims."""
    end = a + length
    hot = sorted({a + p % length for p in picks})
    if picks and picks[0] % 2:  # a dense stretch: the counted units of a session's run
        hot = sorted(set(hot) | set(range(a + picks[0] % length, end)))
    old, s3fifo_runs.LOOP_HOT = s3fifo_runs.LOOP_HOT, loop
    try:
        out: list[tuple[int, int]] = []
        pos, passed = s3fifo_runs._walk_past(a, end, hot, want, out)
    finally:
        s3fifo_runs.LOOP_HOT = old
    assert (pos, hot[:passed], out) == _walk_one_by_one(a, end, hot, want)
