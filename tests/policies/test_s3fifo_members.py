"""``RunS3FIFO``'s batch lookup of a session's members (``RunOrder.session_members_among``: from
the session's runs in one queue) against asking the queue uid by uid, on queues whose runs have
holes, runs that a re-entered uid overlaps, and pinned members, for ranges and increasing lists
with gaps."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies.run_order import RunOrder
from sim.policies.s3fifo_runs import _one_session_increasing
from sim.units import UNIT_BITS

SPAN = 24  # uids per session that the ops touch

ops = st.lists(
    st.tuples(
        st.sampled_from(["enter", "leave", "pin", "pop"]),
        st.integers(0, 2),  # session
        st.integers(0, SPAN - 1),  # first uid
        st.integers(1, 8),  # how many
    ),
    max_size=40,
)


def uid(s: int, i: int) -> int:
    return s << UNIT_BITS | i


def build(steps) -> RunOrder:
    """Every session's uids enter, then the ops run."""
    order = RunOrder()
    for s in range(3):
        order.enter_many(range(uid(s, 0), uid(s, SPAN)))
    for op, s, a, n in steps:
        uids = [uid(s, i) for i in range(a, min(SPAN, a + n))]
        if op == "enter":
            order.enter_many([u for u in uids if not order.is_member(u)])
        elif op == "leave":  # every other uid: holes inside runs
            for u in uids[::2]:
                order.leave(u)
        elif op == "pin":
            order.discard_all(uids)
        else:
            order.pop_runs(n)
    return order


@settings(max_examples=600, deadline=None)
@given(
    ops,
    st.integers(0, 2),
    st.integers(0, SPAN - 1),
    st.integers(1, SPAN),
    st.none() | st.lists(st.booleans(), min_size=SPAN, max_size=SPAN),  # a list, with gaps
)
@example([("leave", 0, 3, 3), ("enter", 0, 3, 3)], 0, 0, SPAN, None)  # re-entered in a hole
def test_members_by_runs_equal_one_uid_at_a_time(steps, s, a, n, keep):
    order = build(steps)
    batch = range(uid(s, a), uid(s, min(SPAN, a + n)))
    if keep is not None:
        batch = [u for u, k in zip(batch, keep, strict=False) if k] or [batch[0]]
    assert _one_session_increasing(batch)
    got = order.session_members_among(batch)
    assert list(got) == [u for u in batch if order.is_member(u)]
    assert isinstance(got, range) == (len(got) == len(batch) == batch[-1] - batch[0] + 1)


def test_batches_of_two_sessions_or_out_of_order_are_not_one_sessions():
    assert not _one_session_increasing([uid(0, 3), uid(1, 0)])
    assert not _one_session_increasing([uid(0, 3), uid(0, 2)])
    assert not _one_session_increasing(range(uid(0, 0), uid(1, 1)))
