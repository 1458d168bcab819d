"""``LifetimePredictor.return_score``: a bucket's ``p_return`` as a function of the idle time, bit
for bit the floats of the formula written out step by step (as ``p_return`` was before it
delegated), for any law and idle time, and ``p_return`` itself the same."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.lifetime import BucketFit, LifetimePredictor


def spelled_out(pred: LifetimePredictor, completed: int, idle_s: float) -> float:
    """P(next turn | completed, idle) as 1 / (1 + (1-p) / (p S)), one step at a time."""
    p = 1.0 if completed <= 0 else pred.bucket(completed).p_next
    if p >= 1.0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if idle_s <= 0:
        survival = 1.0
    else:
        b = pred.bucket(completed)
        survival = 0.5 * math.erfc((math.log(idle_s) - b.mu) / (b.sigma * math.sqrt(2.0)))
    ps = p * survival
    if ps <= 0.0:
        return 0.0
    return 1.0 / (1.0 + (1.0 - p) / ps)


laws = st.lists(
    st.tuples(
        st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0)),  # p
        st.floats(-5.0, 12.0),  # mu
        st.one_of(st.just(1e-6), st.floats(0.01, 4.0)),  # sigma
    ),
    min_size=1,
    max_size=5,
)
idles = st.one_of(
    st.just(0.0),
    st.floats(-10.0, 0.0),
    st.floats(1e-9, 1e9),
    st.just(math.inf),
    st.just(math.nan),
)


def same(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


@settings(max_examples=300, deadline=None)
@given(laws, st.lists(st.tuples(st.integers(-1, 7), idles), min_size=1, max_size=20))
def test_the_score_of_a_bucket_is_p_return_bit_for_bit(law, queries):
    pred = LifetimePredictor(
        tuple(BucketFit(c, 0, 0, p, 0, mu, s) for c, (p, mu, s) in enumerate(law, start=1))
    )
    for completed, idle in queries:
        want = spelled_out(pred, completed, idle)
        assert same(pred.return_score(completed)(idle), want), (completed, idle)
        assert same(pred.p_return(completed, idle), want), (completed, idle)


def test_the_prior_scores_as_its_buckets_say():
    pred = LifetimePredictor.prior()
    for completed in range(-1, pred.num_buckets + 3):
        for idle in (0.0, 0.5, 30.0, 600.0, 1e7):
            assert pred.return_score(completed)(idle) == spelled_out(pred, completed, idle)
