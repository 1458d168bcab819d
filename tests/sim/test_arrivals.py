"""The arrivals queue: a trace's first turns scheduled at once pop as scheduled one by one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sim.arrivals import Arrivals

TIMES = st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5]) | st.floats(0, 10), max_size=40)


@given(TIMES, TIMES, TIMES, st.floats(0, 12))
def test_schedule_all_pops_as_schedule_one_by_one(before, firsts, after, now):
    # the plain model: every arrival scheduled one call at a time (ties: the earlier call first)
    one_by_one, at_once = Arrivals(), Arrivals()
    for q in (one_by_one, at_once):
        for j, t in enumerate(before):
            q.schedule(1000 + j, t)
    for i, t in enumerate(firsts):
        one_by_one.schedule(i, t)
    at_once.schedule_all(firsts)
    for q in (one_by_one, at_once):
        for j, t in enumerate(after):
            q.schedule(2000 + j, t)
    assert at_once.next_s() == one_by_one.next_s()
    assert list(at_once.pop_due(now)) == list(one_by_one.pop_due(now))
    assert list(at_once.pop_due(20.0)) == list(one_by_one.pop_due(20.0))
