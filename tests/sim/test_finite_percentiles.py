"""sim.metrics.finite_percentiles (every q from one in-place partition of one copy) gives, to the
bit, what a call of sim.samples.finite_percentile per q gives (the plain model), and leaves its
input as it was."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.metrics import finite_percentiles
from sim.samples import finite_percentile

VALUES = st.lists(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True, width=64),
        st.sampled_from([0.0, 1.0, 1.5, 1e-9, math.nan, math.inf, -math.inf]),
    ),
    max_size=40,
)
QS = st.lists(
    st.one_of(st.sampled_from([0.0, 50.0, 90.0, 99.0, 100.0]), st.floats(0.0, 100.0)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(values=VALUES, qs=QS)
def test_finite_percentiles_is_finite_percentile_per_q(values, qs):
    a = np.array(values, dtype=float)
    before = a.copy()
    got = finite_percentiles(a, qs)
    want = [finite_percentile(a, q) for q in qs]
    assert np.array_equal(np.array(got), np.array(want), equal_nan=True), (got, want)
    assert [type(v) for v in got] == [float] * len(qs)
    assert np.array_equal(a, before, equal_nan=True)  # the caller's array is not reordered
