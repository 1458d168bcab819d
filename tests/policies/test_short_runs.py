"""``distinct_short_runs`` and ``uids_apart`` against the plain answer (a set of the uids), for
batches of short runs (checked by a set) and of long ones (checked by sorting the runs); and
``split_short`` against ``split_at_sessions`` (runs crossing a session's bound among them)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.run_lists import runs_in_order, split_at_sessions
from sim.policies.short_runs import distinct_short_runs, split_short, uids_apart
from sim.units import UNIT_BITS

# runs (bucket, offset, length): short ones, long ones, some overlapping, some crossing a bucket
RUNS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(-20, 60), st.sampled_from([1, 1, 2, 3, 30])),
    max_size=12,
)


@given(RUNS, st.booleans())
@settings(max_examples=500, deadline=None)
def test_short_runs_equal_the_plain_answer(runs, as_range):
    uids = [(b << UNIT_BITS) + a + i for b, a, n in runs for i in range(n)]
    distinct = len(set(uids)) == len(uids)
    got = distinct_short_runs(uids)
    assert got == (runs_in_order(uids) if distinct else None)
    assert uids_apart(uids, split_at_sessions(runs_in_order(uids))) == distinct
    assert split_short(uids, runs_in_order(uids)) == split_at_sessions(runs_in_order(uids))
    if as_range and uids:
        r = range(uids[0], uids[0] + len(uids))
        assert distinct_short_runs(r) == [(r.start, r.stop)]
