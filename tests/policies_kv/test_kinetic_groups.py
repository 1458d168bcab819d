"""The kinetic tournament's groups against plain models: a group's queue (a batch sorted in numpy
with its arrays kept, single pushes, members leaving from the front or the middle and coming back)
as a sorted list of its live (cost, uid); and ``KineticMin`` fed session-sized batches, batches
that bring back units of other groups, single adds into existing groups and units that come back,
its ``pop_many`` (the numpy sort of the groups' values and the heap merge) as the successive exact
minima, and each unit's cost and time."""

from __future__ import annotations

import math
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_kv_pensieve import _exact_key

from sim.policies import kinetic
from sim.policies.kinetic import (
    _MERGE_REL,
    _STALE_SLACK,
    _TINY,
    _WINDOW,
    SINCE,
    UNTIL,
    KineticMin,
    _GroupQueue,
    _in_uid_order,
)
from sim.units import UNIT_BITS

COSTS = st.sampled_from([0.0, 0.25, 1.0, 1.0 / 3.0, 2.0, 3.0, 7.5])
QUEUE_OPS = st.lists(
    st.tuples(
        st.integers(0, 6),  # the operation
        st.integers(0, 60),  # a uid, or the first of a batch
        st.integers(0, 40),  # a batch's size, a count
        COSTS,
        st.booleans(),  # a batch with a repeated uid, or with an int cost
    ),
    max_size=60,
)
SCALES = [(None, math.inf), (None, 0.0), (1.0, 0.0), (3.0, 0.0), (0.7, 0.0)]


def _model_value(scale, key):
    d, const = scale
    return const if d is None else key / d


@settings(max_examples=300, deadline=None)
@given(
    ops=QUEUE_OPS,
    slack=st.sampled_from([0, 3, _STALE_SLACK]),
    window=st.sampled_from([1, 5, _WINDOW]),
)
def test_group_queue_is_a_sorted_list_of_live_entries(ops, slack, window):
    # The queue is told only of its own live members (the tournament's ``_where`` knows them):
    # a member that comes back leaves first, as ``KineticMin.add`` has it. A small slack makes
    # the queue drop the entries of members that left often (``_compact``), with its arrays and
    # index built or not; a small window makes the arrays of its first entries cover part of
    # the lists, rebuilt as the read position passes them.
    with patch.object(kinetic, "_STALE_SLACK", slack), patch.object(kinetic, "_WINDOW", window):
        _run_queue_ops(ops)


def _run_queue_ops(ops):
    q, live = _GroupQueue(), {}
    for op, a, b, cost, odd in ops:
        order = sorted((k, u) for u, k in live.items())
        if op == 0:
            if a in live:
                q.discard(a)
            q.push(a, cost)
            live[a] = cost
        elif op == 1:  # a batch, onto nothing or onto entries; maybe a repeat or an int cost
            uids = [(a + 7 * i) % 61 for i in range(b)]
            costs = [cost * ((i * 5) % 4) for i in range(b)]
            if odd and b > 1:
                if b % 2:
                    uids[-1] = uids[0]
                else:
                    costs[0] = int(costs[0])
            back = sorted(set(uids) & live.keys())
            q.discard_many(back)
            for u in back:
                del live[u]
            distinct = len(set(uids)) == len(uids) and a % 2 == 0
            if a % 3 == 0 and all(isinstance(c, float) for c in costs):
                q.push_batch(uids, np.array(costs), distinct)  # as a policy's arrays come
            else:
                q.push_batch(uids, costs, distinct)
            live.update(zip(uids, costs, strict=True))
        elif op == 2 and a in live:
            q.discard(a)
            del live[a]
        elif op == 3:
            gone = sorted({(a + i) % 61 for i in range(b)} & live.keys())
            q.discard_many(gone)
            for u in gone:
                del live[u]
        elif op == 4 and order:  # a run: the minimum, then those certainly below a bound
            scale = SCALES[b % len(SCALES)]
            bound = None if odd else _model_value(scale, order[0][0]) + cost
            out: list[int] = []
            q.take_run(scale, bound, 1 + a % 8, out)
            want = [order[0][1]]
            for key, uid in order[1 : 1 + a % 8]:
                lim = max(_model_value(scale, key) * (1.0 + _MERGE_REL), _TINY)
                if bound is not None and bound <= lim:
                    break
                want.append(uid)
            assert out == want
            for u in out:
                del live[u]
        elif op == 5:  # the first k live as arrays; then the first c of them leave
            costs, members = q.first_live(b)
            assert members.tolist() == [u for _, u in order[:b]]
            assert costs.tolist() == [k for k, _ in order[:b]]
            c = min(len(members), a % 5)
            q.drop_prefix(c)
            for u in members[:c].tolist():
                del live[u]
        elif op == 6:
            assert q.head() == (order[0] if order else None)
        assert len(q) == len(live)
        assert all(q.key(u) == k for u, k in live.items())
    order = sorted((k, u) for u, k in live.items())
    out = []
    if order:
        q.take_run((1.0, 0.0), None, len(order), out)
    assert out == [u for _, u in order]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(16, 60),
    costs=st.lists(COSTS, min_size=60, max_size=60),
    ops=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 9)), max_size=20),
)
def test_a_sorted_batch_keeps_its_arrays_while_stale_entries_go(n, costs, ops):
    # A batch onto nothing keeps its numpy arrays; members taken from the front and from the
    # middle, the stale entries dropped at once (slack 0): the arrays follow the lists.
    with patch.object(kinetic, "_STALE_SLACK", 0):
        q = _GroupQueue()
        uids = [(7 * i) % 61 for i in range(n)]
        q.push_batch(uids, costs[:n], distinct=True)
        live = dict(zip(uids, costs[:n], strict=True))
        for op, x in ops:
            order = sorted((k, u) for u, k in live.items())
            if op == 0 and order:
                out: list[int] = []
                q.take_run((1.0, 0.0), None, x, out)
                assert out == [u for _, u in order[:x]]
                for u in out:
                    del live[u]
            elif op == 1:
                gone = sorted(live)[::x][: max(1, len(live) // x)] if live else []
                q.discard_many(gone)
                for u in gone:
                    del live[u]
            elif op == 2:
                costs, members = q.first_live(x)
                assert members.tolist() == [u for _, u in order[:x]]
                assert costs.tolist() == [k for k, _ in order[:x]]
            assert len(q) == len(live)
            assert q.head() == (min((k, u) for u, k in live.items()) if live else None)


KIN_OPS = st.lists(
    st.tuples(
        st.integers(0, 5),  # the operation
        st.integers(0, 12),  # a time step, a group's tau offset
        st.integers(1, 60),  # a batch's size, a count of victims
        st.integers(0, 3),  # the pattern of a batch's costs
    ),
    max_size=40,
)


# Costs are positive: a cost of 0 at an idle time of 0 is 0/0, a value no real unit has.
@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    ops=KIN_OPS,
    mode=st.sampled_from(["since", "until"]),
    by_session=st.booleans(),
)
def test_kinetic_min_pops_the_exact_minima(ops, mode, by_session):
    # ``by_session``: the engine's uids (50 units a session, so batches cross sessions), kept a
    # byte a unit per session; the order of uids is the order of their numbers.
    def uid_of(n: int) -> int:
        return ((n // 50) << UNIT_BITS) + n if by_session else n

    kin = KineticMin(SINCE if mode == "since" else UNTIL, by_session=by_session)
    live: dict[int, tuple[float, float]] = {}
    now, key = 50.0, 0
    for op, a, b, pattern in ops:
        now += a / 4
        tau = now - a if mode == "since" else (math.inf if a == 12 else now + a + 1)
        if op <= 1:  # a session's units, released together (a few share a tau: one group)
            uids = [uid_of(n) for n in range(key + 1, key + b + 1)]
            key += b
            if op == 0 and pattern % 2 == 0 and uids == list(range(uids[0], uids[-1] + 1)):
                uids = range(uids[0], uids[-1] + 1)  # a whole session, as the engine gives it
            if op == 1 and live:  # some come back from their groups, one of them twice
                back = sorted(live)[pattern::3][:b]
                uids = back + uids[: b - len(back)] + back[:1]
            costs = [
                [1.0, 0.5 * (1 + i % 7), 1.0 / (1 + i % 3), float(1 + i // 4)][pattern]
                for i in range(len(uids))
            ]
            kin.add_many(uids, costs, tau, now)
            live.update((u, (c, tau)) for u, c in zip(uids, costs, strict=True))
        elif op == 2 and live:  # one unit into a group (new or existing): a hit, a move
            if pattern:
                uid = sorted(live)[b % len(live)]
            else:
                key += 1
                uid = uid_of(key)
            cost = live[uid][0] if uid in live else 0.5 * (1 + pattern)
            kin.add(uid, cost, tau, now)
            live[uid] = (cost, tau)
        elif op == 3 and live:  # some leave from the middle of their groups
            gone = sorted(live)[a :: 2 + pattern][:b]
            kin.discard_many(gone)
            for u in gone:
                del live[u]
        else:
            in_uid_order = a % 2 == 1  # a caller that drops its victims hears no order
            got = kin.pop_many(b * (1 + pattern), now, in_uid_order)
            want = sorted(live, key=lambda uid: _exact_key(mode, uid, *live[uid], now))
            want = want[: b * (1 + pattern)]
            assert got == (sorted(want) if in_uid_order else want)
            for u in got:
                del live[u]
        assert len(kin) == len(live)
        assert all(kin.cost_of(u) == c and kin.tau_of(u) == t for u, (c, t) in live.items())
    if live:
        want = min(live, key=lambda uid: _exact_key(mode, uid, *live[uid], now))
        assert kin.peek(now) == want


@settings(max_examples=100, deadline=None)
@given(
    uids=st.lists(
        st.one_of(st.integers(0, 1 << 40), st.integers(1 << 62, 1 << 70)), unique=True, max_size=200
    )
)
def test_victims_in_uid_order_are_sorted(uids):
    # long lists of int64 uids are sorted in numpy; a uid past int64 keeps Python's sort
    assert list(_in_uid_order(uids)) == sorted(uids)


TIMES = st.sampled_from([0.0, 1.0, 2.5, 7.0, 1e-300, math.inf])


@settings(max_examples=300, deadline=None)
@given(
    heads=st.lists(st.tuples(COSTS, TIMES), max_size=12),
    t=st.sampled_from([0.0, 1.0, 2.5, 3.0, 7.0]),
)
def test_many_heads_are_each_groups_head(heads, t):
    # the merges read every group's head in one comprehension: the mode's head of each group
    # (an idle time of 0 or a turn that has come: +inf; never used again or free: 0), and its
    # value alone
    groups = []
    for i, (m, tau) in enumerate(heads):
        g = kinetic._Group(tau, i)
        g.m, g.mkey = m, i
        groups.append(g)
    for many, values, one in (
        (kinetic._since_heads, kinetic._since_values, kinetic._since_head),
        (kinetic._until_heads, kinetic._until_values, kinetic._until_head),
    ):
        assert many(groups, t) == [one(g, t) for g in groups]
        assert values(groups, t) == [one(g, t)[0] for g in groups]


def _pops_are_exact(kin, live, mode, counts, now) -> None:
    """Each ``pop_many(n)`` of ``counts`` takes the n least of ``live`` by the exact rule."""
    for n in counts:
        got = kin.pop_many(n, now)
        want = sorted(live, key=lambda uid: _exact_key(mode, uid, *live[uid], now))[:n]
        assert got == want
        for u in got:
            del live[u]


@settings(max_examples=200, deadline=None)
@given(
    ks=st.lists(st.integers(1, 9), min_size=2, max_size=8, unique=True),
    c=st.sampled_from([0.25, 1.0 / 3.0, 0.1, 7.5]),
    mode=st.sampled_from(["since", "until"]),
    counts=st.lists(st.integers(1, 12), min_size=1, max_size=6),
)
def test_equal_values_across_groups_pop_in_the_exact_order(ks, c, mode, counts):
    # every group's entries have values a rounding apart (cost c k j over a time difference k):
    # each victim, one or many, is decided by the exact comparison, ties by the mode's rule
    now = 20.0
    kin = KineticMin(SINCE if mode == "since" else UNTIL)
    live: dict[int, tuple[float, float]] = {}
    for g, k in enumerate(ks):
        tau = now - k if mode == "since" else now + k
        uids = [10 * g + j for j in range(1, 4)]
        costs = [c * k * j for j in range(1, 4)]
        kin.add_many(uids, costs, tau, now)
        live.update((u, (m, tau)) for u, m in zip(uids, costs, strict=True))
    _pops_are_exact(kin, live, mode, counts, now)


@settings(max_examples=300, deadline=None)
@given(
    heads=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    size=st.integers(1, 3),
    mode=st.sampled_from(["since", "until"]),
    counts=st.lists(st.integers(1, 30), min_size=1, max_size=6),
)
@example(heads=[1, 2, 3, 4, 5, 6, 7, 8, 8, 8], size=1, mode="since", counts=[8])
def test_many_small_groups_pop_in_the_exact_order(heads, size, mode, counts):
    # more groups than victims (a decode step's pages among many sessions): the merges read
    # only the groups whose heads may give a victim; heads of equal value at the cut (a group
    # a time, its head's value a, the others' above 100) must not lose one
    now = 100.0
    kin = KineticMin(SINCE if mode == "since" else UNTIL)
    live: dict[int, tuple[float, float]] = {}
    for g, a in enumerate(heads):
        k = 1 + g  # a time a group; a cost of k times a value
        tau = now - k if mode == "since" else now + k
        uids = [10 * g + j for j in range(size)]
        costs = [float(a + 100 * j) * k for j in range(size)]
        kin.add_many(uids, costs, tau, now)
        live.update((u, (m, tau)) for u, m in zip(uids, costs, strict=True))
    _pops_are_exact(kin, live, mode, counts, now)


@settings(max_examples=300, deadline=None)
@given(
    heads=st.lists(st.tuples(st.integers(0, 3), st.integers(-8, 3)), min_size=1, max_size=30),
    size=st.integers(1, 4),
    counts=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    huge=st.booleans(),
)
@example(heads=[(1, -1), (1, -2), (0, -3), (1, 0)], size=2, counts=[3, 3], huge=False)
@example(heads=[(1, -1), (1, -2)], size=1, counts=[3], huge=True)
def test_groups_whose_turns_came_pop_in_the_exact_order(heads, size, counts, huge):
    # cost-belady: sessions whose next turn has come (tau <= now: every value +inf, so each is
    # within the rounding bound of all the others) go after those of finite value and those never
    # used again, by lower cost, then the later time (the merge's heap of (cost, -tau)); costs
    # from a few values, so heads tie on cost across groups and a group's next entry overtakes.
    # ``huge``: a turn a float step away with a huge cost, a value that overflows to +inf in
    # floats but is finite: it goes before every group whose turn has come
    now = 100.0
    kin = KineticMin(UNTIL)
    live: dict[int, tuple[float, float]] = {}
    if huge:
        kin.add_many([-1], [1e300], math.nextafter(now, math.inf), now)
        live[-1] = (1e300, math.nextafter(now, math.inf))
    for g, (a, k) in enumerate(heads):
        # k < 0: due (k == 0: now itself), k > 0 a future turn, k == 3 never used again
        tau = math.inf if k == 3 else now + k + 0.5 * g / len(heads)
        uids = [10 * g + j for j in range(size)]
        costs = [0.25 * (a + j % 3) + (j // 3) for j in range(size)]
        kin.add_many(uids, costs, tau, now)
        live.update((u, (m, tau)) for u, m in zip(uids, costs, strict=True))
    _pops_are_exact(kin, live, "until", counts, now)


@settings(max_examples=300, deadline=None)
@given(
    first=st.lists(COSTS, min_size=16, max_size=40),
    second=st.lists(COSTS, min_size=16, max_size=40),
    front=st.integers(0, 10),
    middle=st.integers(0, 10),
    window=st.booleans(),
)
def test_a_batch_onto_a_group_with_arrays_is_merged_in_order(first, second, front, middle, window):
    # a session's units (float64 costs) onto a group that kept its arrays (a batch onto nothing,
    # some taken from the front, some gone from the middle; or a window of its first entries):
    # one numpy sort of both, as the sorted (cost, uid) of the live entries and the batch
    q = _GroupQueue()
    uids = [3 * i for i in range(len(first))]
    q.push_batch(uids, np.array(first), distinct=True)
    live = dict(zip(uids, first, strict=True))
    order = sorted((k, u) for u, k in live.items())
    q.drop_prefix(front)
    for _, u in order[:front]:
        del live[u]
    gone = sorted(live)[1 : 1 + middle]
    q.discard_many(gone)
    for u in gone:
        del live[u]
    if window:
        q._costs = q._uid_arr = None
        q.first_live(len(live) + 5)  # its arrays again, from the read position to the end
    more = [3 * i + 1 for i in range(len(second))]
    q.push_batch(more, np.array(second), distinct=True)
    live.update(zip(more, second, strict=True))
    want = sorted((k, u) for u, k in live.items())
    assert len(q) == len(want)
    assert q.head() == want[0]
    assert all(q.key(u) == k and type(q.key(u)) is float for u, k in live.items())
    costs, members = q.first_live(len(want))
    assert members.tolist() == [u for _, u in want]
    assert costs.tolist() == [k for k, _ in want]
    out: list[int] = []
    q.take_run((1.0, 0.0), None, len(want), out)
    assert out == [u for _, u in want]
