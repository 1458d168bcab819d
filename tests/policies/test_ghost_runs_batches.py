"""``GhostRuns.push_runs`` of batches shaped as a decode span's victims leave them (many short runs
of different sessions, interleaved, some of them going on where the newest entry stops) against a
plain list of uids: the keys in order, the forgotten ones, and the one-uid questions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.ghost_runs import GhostRuns
from sim.units import UNIT_BITS, extents_of

# (bucket, offset, length) runs, pushed as one batch; then a limit, a forget or a ghost hit
RUNS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 4)), max_size=12)
STEPS = st.lists(
    st.tuples(RUNS, st.one_of(st.none(), st.integers(0, 60)), st.integers(0, 3), st.integers(0, 9)),
    max_size=25,
)


@settings(max_examples=400, deadline=None)
@given(STEPS)
def test_batches_of_short_runs_equal_a_plain_list(steps):
    g, ref = GhostRuns(), []
    for runs, limit, hit_bucket, hit_at in steps:
        batch, taken = [], set(ref)
        for b, a, n in runs:
            lo = (b << UNIT_BITS) + a
            new = [u for u in range(lo, lo + n) if u not in taken]
            taken.update(new)
            batch += extents_of(new)  # (adjacent runs stay apart: the batch may go on them)
        g.push_runs(batch, limit)
        ref += [u for a, s in batch for u in range(a, s)]
        if limit is not None:
            ref = ref[max(0, len(ref) - limit) :]
        uid = (hit_bucket << UNIT_BITS) + hit_at * 4
        assert g.discard(uid) == (uid in ref)
        if uid in ref:
            ref.remove(uid)
        assert list(g) == ref and len(g) == len(ref)
        for b in range(4):
            lo = b << UNIT_BITS
            want = [u for u in ref if lo <= u < lo + 50]
            assert g.first_in(lo, lo + 50) == (min(want) if want else None)
            assert set(g.buckets()) >= {u >> UNIT_BITS for u in ref}
