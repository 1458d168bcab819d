"""``RunS3FIFO.acquire`` of one session's increasing uids by runs (``_acquire_runs``: each queue's
members among them read from its runs, counters raised as slices, the session pinned whole)
against the same policy with that path off (members listed, counters and pins a uid at a time),
driven by the same engine-like calls: the same answers to every call and, after every call, the
same candidates of S and of M in order, the same members, pins, counters and ghost keys. And the
two ``RunOrder`` helpers it reads against their per-uid meaning."""

from __future__ import annotations

from collections import Counter

from hypothesis import example, given, settings
from hypothesis import strategies as st
from twin_driver import OPS, PAGE, OneSizeView, TwinDriver

from sim.policies.base import PolicyContext
from sim.policies.run_order import ALL, RunOrder
from sim.policies.s3fifo_runs import RunS3FIFO
from sim.units import UNIT_BITS, Tier


class _ListedAcquire(RunS3FIFO):
    """``RunS3FIFO`` without the by-runs acquire: the path it had before."""

    def _acquire_runs(self, uids) -> bool:
        return False


def _policy(cls, capacity: int | None) -> RunS3FIFO:
    ctx = PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=1, view=OneSizeView(True))
    pol = cls(ctx)
    if capacity is not None:
        pol.set_capacity(capacity * PAGE)
    return pol


def _pins(order: RunOrder) -> dict:
    return {b: (st if st is ALL else frozenset(st)) for b, st in order._pins.items()}


class Twins(TwinDriver):
    def __init__(self, capacity: int | None) -> None:
        super().__init__(_policy(RunS3FIFO, capacity), _policy(_ListedAcquire, capacity))

    def compare(self) -> None:
        r, u = self.runs, self.plain
        for q in ("_s", "_m"):
            a, b = getattr(r, q), getattr(u, q)
            assert list(a.candidates()) == list(b.candidates())
            assert _pins(a) == _pins(b)
            assert a._count == b._count and len(a) == len(b)
            assert [a.is_member(x) for x in self.state] == [b.is_member(x) for x in self.state]
        assert r.counters() == u.counters()
        assert r._marks == u._marks == Counter(x >> UNIT_BITS for x in r.counters())
        assert list(r._ghost) == list(u._ghost)

    def turn_starts(self, s: int, a: int, n: int, now: float) -> None:
        """A turn starts: its units (a range where they are one, part of them now and then, its
        pinned ones with them now and then), twice over now and then (counters past 2)."""
        uids = self.turn_start_units(s, n)
        if n % 4 == 1:
            uids = uids[: len(uids) // 2]
        if n % 5 == 2:
            uids = uids[::2]  # gaps: several runs
        if uids and uids[-1] - uids[0] + 1 == len(uids) and a % 2:
            uids = range(uids[0], uids[-1] + 1)
        for _ in range(1 + n % 2):
            self.both("acquire", uids, now)
            self.state.update(dict.fromkeys(uids, "pinned"))
            if n % 2:
                self.both("release", uids, now)
                self.state.update(dict.fromkeys(uids, "cand"))


def test_the_by_runs_path_is_taken_for_a_session_in_both_queues():
    """A session with units in S and in M, all candidates: its turn goes by runs, counters and
    pins as the listed path leaves them."""
    twins = Twins(None)
    uids = list(range(0, 12))
    twins.both("insert_many", uids, 0.0, False)
    twins.state.update(dict.fromkeys(uids, "cand"))
    for u in uids[4:8]:  # some move to M
        twins.runs._m.enter(u) if twins.runs._s.take(u) else None
        twins.plain._m.enter(u) if twins.plain._s.take(u) else None
    twins.check()
    assert twins.runs._acquire_runs(range(0, 12)) is True  # (the path, on the run form alone)
    twins.plain.acquire(range(0, 12), 0.0)
    twins.state.update(dict.fromkeys(uids, "pinned"))
    twins.check()
    assert twins.runs.counters() == dict.fromkeys(uids, 1)


@settings(max_examples=500, deadline=None)
@given(OPS, st.sampled_from([None, 6, 20, 45]))
@example([(0, 0, 0, 16), (1, 0, 1, 5)], None)
def test_acquire_by_runs_equals_acquire_listed(ops, capacity):
    twins = Twins(capacity)
    for op in ops:
        twins.step(*op)


SPAN = 24


def _order(steps) -> RunOrder:
    order = RunOrder()
    for s in range(2):
        order.enter_many(range(s << UNIT_BITS, (s << UNIT_BITS) + SPAN))
    for op, s, a, n in steps:
        uids = [(s << UNIT_BITS) + i for i in range(a, min(SPAN, a + n))]
        if op == "enter":
            order.enter_many([x for x in uids if not order.is_member(x)])
        elif op == "leave":
            for x in uids[::2]:
                order.leave(x)
        elif op == "drop_head":  # a run's head leaves: a run no longer from the session's start
            order.pop_runs(n)
        else:
            order.discard_all(uids)
    return order


order_ops = st.lists(
    st.tuples(
        st.sampled_from(["enter", "leave", "drop_head", "pin"]),
        st.integers(0, 1),
        st.integers(0, SPAN - 1),
        st.integers(1, 8),
    ),
    max_size=30,
)


@settings(max_examples=500, deadline=None)
@given(order_ops, st.integers(0, 1), st.lists(st.integers(0, SPAN - 1), min_size=1, max_size=SPAN))
def test_session_member_runs_are_the_members_among_the_runs(steps, s, picks):
    order = _order(steps)
    base = s << UNIT_BITS
    batch = sorted({base + i for i in picks})
    runs: list[tuple[int, int]] = []
    for x in batch:
        if runs and runs[-1][1] == x:
            runs[-1] = (runs[-1][0], x + 1)
        else:
            runs.append((x, x + 1))
    got = order.session_member_runs(s, runs)
    members = [x for x in batch if order.is_member(x)]
    if got is None:  # only where a run with holes meets the batch's span
        assert any(
            order._holes[e] and order._first[e] < batch[-1] + 1 and batch[0] < order._stop[e]
            for e in order._runs.get(s, ())
        )
        return
    assert all(a < b for a, b in got)
    assert [x for a, b in got for x in range(a, b)] == members
    assert list(order.session_members_among(batch)) == members


@settings(max_examples=300, deadline=None)
@given(order_ops, st.integers(0, 1))
def test_pin_session_is_discard_many_of_every_member(steps, s):
    a, b = _order(steps), _order(steps)
    if not a.session_count(s):
        return
    members = sorted(x for x in range(s << UNIT_BITS, (s << UNIT_BITS) + SPAN) if a.is_member(x))
    assert a.session_count(s) == len(members)
    if not a.pins_all_or_none(s):
        assert isinstance(a._pins.get(s), set) and a._pins[s]
        return
    a.pin_session(s)
    b.discard_many(members)
    assert list(a.candidates()) == list(b.candidates()) and len(a) == len(b)
    assert _pins(a) == _pins(b) and bytes(a._flag) == bytes(b._flag)
