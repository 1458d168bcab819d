"""ARC's p after a batch of ghost hits (``adapted_p``: a long run of one list's hits in numpy)
against the hit-by-hit loop of ``_ghost_hit`` (hypothesis): the same p, to the bit."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies import arc
from sim.policies.arc import adapted_p


def _hit_by_hit(p, c, u, b1b, b2b, hits):
    for a, s, ghost in hits:
        for _ in range(s - a):
            if ghost == 1:
                p = min(p + (max(b2b / b1b, 1) if b1b > 0 else 1), c)
                b1b -= u
            else:
                p = max(p - (max(b1b / b2b, 1) if b2b > 0 else 1), 0)
                b2b -= u
    return p


HITS = st.lists(st.tuples(st.integers(1, 300), st.sampled_from([1, 2])), min_size=1, max_size=8)


@settings(max_examples=500, deadline=None)
@given(
    HITS,
    st.integers(0, 5000),  # ghosts beside the hits, in B1
    st.integers(0, 5000),  # and in B2
    st.sampled_from([1, 3, 4096, 131072, 2_621_440]),  # unit bytes
    st.integers(1, 20000),  # c, in units
    st.floats(0, 1),  # p, as a share of c
    st.sampled_from([1, 2, 32]),
)
# p reaches c in the middle of a run, and 0 in the middle of the next
@example([(40, 1), (300, 2)], 2, 0, 3, 30, 0.5, 1)
def test_a_run_of_hits_moves_p_as_hit_by_hit(runs, more1, more2, u, c_units, share, vector):
    hits, a = [], 0
    for k, ghost in runs:
        hits.append((a, a + k, ghost))
        a += k
    b1b = (more1 + sum(k for k, g in runs if g == 1)) * u
    b2b = (more2 + sum(k for k, g in runs if g == 2)) * u
    c = c_units * u
    p = share * c
    kept = arc.VECTOR_HITS
    arc.VECTOR_HITS = vector
    try:
        got = adapted_p(p, c, u, b1b, b2b, hits)
    finally:
        arc.VECTOR_HITS = kept
    want = _hit_by_hit(p, c, u, b1b, b2b, hits)
    assert got == want and float(got).hex() == float(want).hex()
