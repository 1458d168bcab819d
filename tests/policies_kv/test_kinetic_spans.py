"""The tournament's merge taking a group's victims as a span (a ``consecutive`` queue: a session's
pages released as a range, costs rising with the page), ``pop_extents`` and ``pop_schedule``
(the groups that may give a decode span's victims found once), against a twin tournament fed the
same changes as lists, with its uids in a dict (no queue consecutive, so no span and no
filtering shortcut beyond the per-time merge): the same victims, in the same order, and the same
members, in both modes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies.kinetic import SINCE, UNTIL, KineticMin, _GroupQueue
from sim.policies.kinetic_where import GroupsByRuns
from sim.units import UNIT_BITS, extents_of

OPS = st.lists(
    st.tuples(
        st.integers(0, 6),  # the operation
        st.integers(0, 12),  # a time step, a group's tau offset
        st.integers(1, 40),  # a batch's size, a count of victims
        st.integers(0, 3),  # the pattern of a batch's costs, of a schedule
    ),
    max_size=40,
)
# few distinct costs and times: values of different groups tie or come within the rounding
# bound often
COSTS = [
    lambda i: float(1 + i),  # rising with the page (Pensieve's): a consecutive queue
    lambda i: float(1 + i // 4),  # rising, in steps: consecutive, ties inside the group
    lambda i: 0.5 * (1 + i % 7),  # not rising: sorted, not consecutive
    lambda i: 1.0 / (1 + i % 3),
]


def _uid(n: int) -> int:
    return ((n // 50) << UNIT_BITS) + n  # sessions of 50 units: batches may cross sessions


def _same(fast: KineticMin, plain: KineticMin, now: float) -> None:
    assert len(fast) == len(plain)
    assert sorted(fast.uids()) == sorted(plain.uids())
    assert fast.peek(now) == plain.peek(now)
    for u in sorted(plain.uids())[::5]:
        assert fast.group_of(u).tau == plain.group_of(u).tau
        assert fast.cost_of(u) == plain.cost_of(u)


@settings(max_examples=150, deadline=None)
@example(ops=[(0, 0, 30, 0), (0, 3, 30, 0), (0, 6, 30, 1), (5, 1, 20, 0)], mode=SINCE)
@example(ops=[(0, 0, 30, 0), (0, 3, 30, 0), (0, 6, 30, 1), (5, 1, 20, 0)], mode=UNTIL)
@example(ops=[(0, 0, 12, 0)] * 6 + [(6, 1, 5, 1)], mode=SINCE)  # many groups, few victims
@given(ops=OPS, mode=st.sampled_from([SINCE, UNTIL]))
def test_spans_and_schedules_are_the_plain_merges(ops, mode):
    fast, plain = KineticMin(mode, by_runs=True), KineticMin(mode)
    now, key = 50.0, 0
    for op, a, b, pattern in ops:
        now += a / 8
        tau = now - a if mode is SINCE else (float("inf") if a == 12 else now + a + 1)
        members = sorted(plain.uids())
        if op <= 1:  # a release: a session's pages (a range), maybe joining a group of its time
            lo = key + 1
            key += b
            uids = range(_uid(lo), _uid(lo) + b)
            if _uid(lo + b - 1) != uids[-1]:  # (across a session's end: a list)
                uids = [_uid(n) for n in range(lo, lo + b)]  # type: ignore[assignment]
            costs = [COSTS[pattern](i) for i in range(b)]
            batch = np.array(costs) if op == 0 else costs
            fast.add_many(uids, batch, tau, now)
            plain.add_many(list(uids), list(costs), tau, now)
        elif op == 2 and members:  # a hit: one unit into another group
            uid = members[b % len(members)]
            for kin in (fast, plain):
                kin.add(uid, plain.cost_of(uid), tau, now)
        elif op == 3 and members:  # a pin: some of a group's members leave
            gone = members[a % len(members) :: 1 + pattern][:b]
            for kin in (fast, plain):
                kin.discard_many(gone)
        elif op == 4:  # victims in order
            n = b * (1 + pattern)
            assert fast.pop_many(n, now) == plain.pop_many(n, now)
        elif op == 5:  # victims dropped: their extents
            n = b * (1 + pattern)
            assert fast.pop_extents(n, now) == extents_of(plain.pop_many(n, now, True))
        else:  # a decode span's allocations: a few victims at each of successive times
            schedule = [(now + i * (0.25 + pattern), 1 + (i * pattern) % 9) for i in range(b)]
            want: list[int] = []
            for t, n in schedule:
                want += plain.pop_many(n, t)
            assert fast.pop_schedule(schedule) == want
            now = schedule[-1][0]
        _same(fast, plain, now)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.integers(2, 40),
    steps=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=12),
    mode=st.sampled_from([SINCE, UNTIL]),
    tie=st.booleans(),
)
def test_a_schedule_reads_the_groups_it_may_take_from(groups, steps, mode, tie):
    # many groups, a short schedule: most groups are left out of its merges; the victims are
    # those of a merge over every group at each time (near ties across groups: equal costs)
    fast, plain = KineticMin(mode, by_runs=True), KineticMin(mode)
    now = 100.0
    for g in range(groups):
        uids = range(g << UNIT_BITS, (g << UNIT_BITS) + 5)
        costs = [(1.0 if tie else 1.0 + g % 7 / 3) * (1 + i) for i in range(5)]
        tau = now - 1 - g % 9 if mode is SINCE else now + 1 + g % 9
        fast.add_many(uids, np.array(costs), tau, now)
        plain.add_many(list(uids), costs, tau, now)
    schedule, t = [], now
    for dt, n in steps:
        t += dt / 4
        schedule.append((t, n))
    want: list[int] = []
    for t, n in schedule:
        want += plain.pop_many(n, t)
    assert fast.pop_schedule(schedule) == want
    _same(fast, plain, schedule[-1][0])


def test_a_rising_range_is_consecutive_and_gives_spans():
    q = _GroupQueue()
    q.push_batch(range(100, 140), np.arange(40, dtype=np.float64), distinct=True)
    assert q.consecutive
    twin = _GroupQueue()
    twin.push_batch(list(range(100, 140)), np.arange(40, dtype=np.float64), distinct=True)
    assert not twin.consecutive  # a list: not known consecutive
    assert q.take_span(7) == (100, 107)
    twin.drop_prefix(7)
    assert (q.head(), len(q)) == (twin.head(), len(twin)) == ((7.0, 107), 33)
    q.discard(120)
    assert not q.consecutive  # a hole
    r = _GroupQueue()
    r.push_batch(range(0, 40), np.arange(40, 0, -1, dtype=np.float64), distinct=True)
    assert not r.consecutive  # costs fall: sorted, not in uid order
    s = _GroupQueue()
    s.push_batch(range(0, 40), np.arange(40, dtype=np.float64), distinct=True)
    s.push(99, 0.5)
    assert not s.consecutive


def test_a_merge_of_session_groups_takes_spans():
    # sessions' pages, costs rising with the page: each group's victims are a span, and the
    # extents are those of the plain merge
    fast, plain = KineticMin(SINCE, by_runs=True), KineticMin(SINCE)
    for s in range(6):
        uids = range(s << UNIT_BITS, (s << UNIT_BITS) + 50)
        costs = np.arange(1.0, 51.0) * (1.0 + 0.1234 * s)  # (no values of two groups near)
        fast.add_many(uids, costs, 10.0 + 0.37 * s, 20.0)
        plain.add_many(list(uids), costs.tolist(), 10.0 + 0.37 * s, 20.0)
    taken = fast._sorted_take(100, 30.0)
    assert taken is not None
    chosen, ascending = taken
    assert isinstance(ascending, list) and len(ascending) <= 6  # a span a group
    want = plain.pop_many(100, 30.0)
    assert chosen.tolist() == want
    assert [u for lo, hi in ascending for u in range(lo, hi)] == sorted(want)
    _same(fast, plain, 30.0)


@settings(max_examples=100, deadline=None)
@given(
    members=st.lists(st.integers(0, 120), min_size=1, max_size=80, unique=True),
    picks=st.lists(st.booleans(), min_size=80, max_size=80),
)
def test_take_spans_is_taking_each_uid(members, picks):
    # disjoint spans of members (across a session's end too) leave as a dict's entries do
    where, model = GroupsByRuns(), {}
    g = object()

    def uid(n: int) -> int:
        return (1 << UNIT_BITS) - 60 + n  # session 0's last 60 units, then session 1's

    for n in members:
        where.set(uid(n), g)
        model[uid(n)] = g
    chosen = sorted(uid(n) for n, p in zip(members, picks, strict=False) if p)
    spans = extents_of(chosen)  # consecutive uids: one span, maybe across a session's end
    where.take_spans(spans)
    for u in chosen:
        del model[u]
    assert sorted(where) == sorted(model)
    assert len(where) == len(model)


@pytest.mark.parametrize("mode", [SINCE, UNTIL])
def test_a_group_that_overtakes_during_the_schedule_is_read(mode):
    # values move with time at different rates: the least at the schedule's start is not the
    # least at its end (Pensieve: a cheap recent group overtakes a dear old one; cost-Belady: a
    # group whose turn nears rises past a far one), and a third group is never a victim
    t0 = 100.0
    if mode is SINCE:  # (cost, tau): values cost / (t - tau)
        groups = [(1.0, t0 - 1), (50.0, t0 - 1000), (100.0, t0 - 999)]
    else:  # values cost / (tau - t)
        groups = [(2.0, t0 + 1000), (0.05, t0 + 45), (3.0, t0 + 999)]
    fast, plain = KineticMin(mode, by_runs=True), KineticMin(mode)
    for s, (cost, tau) in enumerate(groups):
        uids = range(s << UNIT_BITS, (s << UNIT_BITS) + 4)
        fast.add_many(uids, np.full(4, cost), tau, t0)
        plain.add_many(list(uids), [cost] * 4, tau, t0)
    schedule = [(t0, 1), (t0 + 40, 1)]
    want = plain.pop_many(1, t0) + plain.pop_many(1, t0 + 40)
    assert want[0] >> UNIT_BITS != want[1] >> UNIT_BITS  # (the least changed)
    assert fast.pop_schedule(schedule) == want
    _same(fast, plain, t0 + 40)
