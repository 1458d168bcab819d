"""StepBuckets' heap of steps: steps taken out of ``due`` without popping are compacted away, and
the live steps still come out in order, to callers holding the heap too."""

from __future__ import annotations

import heapq
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.step_buckets import _SLACK, NEVER, StepBuckets

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 400)),
        st.tuples(st.just("take"), st.integers(0, 400)),  # a span deletes a key, no pop
        st.tuples(st.just("next"), st.just(0)),
        st.tuples(st.just("reach"), st.integers(0, 400)),  # the budget's pop loop
    ),
    max_size=600,
)


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_the_heap_stays_small_and_yields_the_live_steps_in_order(ops):
    with mock.patch("sim.step_buckets._SLACK", 2):  # compact often
        _check_against_a_dict(ops, 2)


def _check_against_a_dict(ops, slack: int) -> None:
    b = StepBuckets()
    heap = b.steps  # held across calls, as the budget's reach loop holds it
    live: dict[int, list] = {}
    for i, (op, step) in enumerate(ops):
        if op == "add":
            b.add(step, i, 0)
            live.setdefault(step, []).append((i, 0))
            assert len(heap) <= 2 * len(live) + slack  # compacted when more
        elif op == "take" and live:
            key = sorted(live)[step % len(live)]
            del b.due[key], live[key]
        elif op == "next":
            assert b.next_step() == min(live, default=NEVER)
        elif op == "reach":
            seen = []
            while heap and heap[0] <= step:
                seen.extend(b.due.pop(heapq.heappop(heap), ()))
            want = [e for k in sorted(k for k in live if k <= step) for e in live.pop(k)]
            assert seen == want
        assert b.steps is heap and set(live) <= set(heap)
    assert dict(b.due) == live


def test_steps_taken_out_by_spans_do_not_pile_up():
    b = StepBuckets()
    for step in range(100_000):
        b.add(step, "run", 0)
        del b.due[step]  # a span takes the step's entries out without popping the heap
    assert len(b.steps) <= 2 * 1 + _SLACK  # at most twice the live steps (one) and the slack
    b.add(7, "late", 1)
    assert b.next_step() == 7 and b.due[7] == [("late", 1)]


def test_a_held_heap_pops_the_live_steps_in_order_across_a_compaction():
    b = StepBuckets()
    heap = b.steps  # as the budget's reach loop holds it
    for step in range(0, 2000, 2):
        b.add(step, step, 0)
    for step in range(0, 2000, 2):
        if step % 8:
            del b.due[step]  # three in four taken out by a span, none popped
    for step in range(1, 2000, 2):
        b.add(step, step, 0)  # the first of these compacts
    assert b.steps is heap and len(heap) < 2 * len(b.due) + _SLACK + 1
    seen = []
    while heap and heap[0] <= 1500:
        seen.extend(run for run, _ in b.due.pop(heapq.heappop(heap), ()))
    assert seen == [s for s in range(1501) if s % 2 or s % 8 == 0]
