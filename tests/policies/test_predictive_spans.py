"""predictive's ``evict_extents_at`` (a decode span's allocations, each one's victims chosen at its
step's start) against one ``evict_bytes`` call after another at those times on the policy one unit
at a time (``UnitHeaps``, the plain model of ``test_predictive_batches``): the same victims, and
the same order of every later victim. The laws are drawn so that buckets' scores cross within a
span's times (a steep, likely bucket against a flat, unlikely one), which is where the choice of a
span depends on the time of each allocation."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from test_predictive_batches import PAGE, UnitHeaps

from sim.lifetime import BucketFit, LifetimePredictor
from sim.policies import EvictionPolicy, PolicyContext, make_policy
from sim.units import SessionKV, Tier, UnitView, extents_of, uid_of

# c, p, median think (s), sigma: bucket 1 falls steeply around 10 s, bucket 2 stays flat, so their
# heads' scores cross (near 14 s of idle time for one last use); bucket 3 pools c >= 3.
LAWS = ((1, 0.9, 10.0, 0.2), (2, 0.5, 10.0, 2.0), (3, 0.7, 12.0, 0.7))
PREDICTOR = LifetimePredictor(
    tuple(BucketFit(c, 0, 0, p, 0, math.log(m), s) for c, p, m, s in LAWS)
)
RELEASED_AT = 10.0

sessions = st.lists(
    st.tuples(
        st.integers(0, 4),  # next_turn: its bucket (0: mid-turn-0, scores 1)
        st.sampled_from([0.0, 0.0, 1.0, 2.5, 4.0, 7.0, 10.0]),  # last use
        st.sampled_from([1, 1, 1, 2, 3, 6]),  # units (one: a bucket's next head soon)
        st.integers(0, 3),  # units pinned again (a hole: the session's run is keyed)
    ),
    min_size=1,
    max_size=8,
)
spans = st.tuples(
    st.floats(10.0, 30.0),  # the span's first step
    st.lists(  # (time to the allocation, units it evicts, a part of a unit less)
        st.tuples(
            st.sampled_from([0.0, 0.0, 0.001, 0.02, 0.3, 1.0, 4.0]),
            st.integers(0, 4),
            st.integers(0, PAGE - 1),
        ),
        min_size=1,
        max_size=12,
    ),
)


class Twins:
    def __init__(self, scenario, dropped: bool) -> None:
        self.kv = [SessionKV(i, f"s{i}", 0) for i in range(len(scenario))]
        view = UnitView(self.kv, PAGE, layers=1)
        ctx = PolicyContext(
            tier=Tier.GPU,
            block_tokens=16,
            num_layers=32,
            view=view,
            cpu_kv_bytes=None if dropped else 1 << 40,
            predictor=PREDICTOR,
        )
        self.fast = make_policy("predictive", ctx)
        self.ref = UnitHeaps(ctx)
        self.ref.predictor = PREDICTOR
        for s, (next_turn, last_use, units, pinned) in enumerate(scenario):
            sess = self.kv[s]
            sess.next_turn, sess.last_access_s = next_turn, last_use
            uids = range(uid_of(s, 0), uid_of(s, units))
            self.fast.release(uids, RELEASED_AT)
            EvictionPolicy.release(self.ref, uids, RELEASED_AT)
            held = list(uids[1 : 1 + pinned])  # pinned by another turn: out of the middle
            self.fast.acquire(held, RELEASED_AT)
            EvictionPolicy.acquire(self.ref, held, RELEASED_AT)


def schedule_of(span) -> list[tuple[float, int]]:
    t, out = span[0], []
    for dt, units, less in span[1]:
        t += dt
        out.append((t, max(0, units * PAGE - less)))
    return out


@settings(max_examples=400, deadline=None)
@given(sessions, spans, st.booleans())
def test_a_span_at_its_times_equals_one_call_after_another(scenario, span, dropped):
    twins = Twins(scenario, dropped)
    schedule = schedule_of(span)
    want: list[int] = []
    for now, nbytes in schedule:
        want += EvictionPolicy.evict_bytes(twins.ref, nbytes, now)
    got = twins.fast.evict_extents_at(schedule)
    assert got == extents_of(sorted(want) if dropped else want)
    # the order left behind: every later victim, one at a time and then the rest at once
    later = schedule[-1][0] + 0.5
    assert len(twins.fast) == len(twins.ref)
    assert twins.fast.peek(later) == twins.ref.peek(later)
    assert twins.fast.evict(later) == twins.ref.evict(later)
    rest = len(twins.ref) * PAGE
    assert twins.fast.evict_bytes(rest, later) == EvictionPolicy.evict_bytes(twins.ref, rest, later)


def test_the_heads_cross_within_a_span():
    """Two sessions, one last use: the flat bucket's head is the victim early in the span, the
    steep one's after the crossing, where a choice made at the span's start would keep it."""
    scenario = [(1, 0.0, 2, 0), (2, 0.0, 2, 0)]
    twins = Twins(scenario, dropped=False)
    assert twins.fast.peek(RELEASED_AT + 1.0) == uid_of(1, 0)
    assert twins.fast.peek(RELEASED_AT + 10.0) == uid_of(0, 0)
    got = twins.fast.evict_extents_at([(RELEASED_AT + 1.0, PAGE), (RELEASED_AT + 10.0, PAGE)])
    assert got == [(uid_of(1, 0), uid_of(1, 1)), (uid_of(0, 0), uid_of(0, 1))]


def test_a_bucket_s_next_head_is_scored_at_its_first_victim_s_time():
    """Bucket 1's oldest session goes first at 20 s; its next head (last use 7 s) scores above
    bucket 2's head at 20 s and below it at 24 s, so bucket 2's goes next, then that head. Scored
    at the span's last time, the next head would look least at 20 s already."""
    scenario = [(1, 7.0, 1, 0), (2, 4.0, 1, 0), (1, 0.0, 1, 0), (1, 7.0, 1, 0)]
    twins = Twins(scenario, dropped=False)
    got = twins.fast.evict_extents_at([(20.0, PAGE), (20.0, PAGE), (24.0, PAGE)])
    assert got == [(uid_of(s, 0), uid_of(s, 1)) for s in (2, 1, 0)]
