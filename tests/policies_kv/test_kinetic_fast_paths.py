"""The kinetic tournament's short cuts against the plain paths they stand for: a range's uids as
an ``arange`` (``np.array`` of the range), a batch of a range whose costs do not fall queued
without a sort (the same queue as the list's, sorted), one victim taken by ``take_head``
(``take_run`` of one), and ``_near_across``'s early answer (its full scan)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies.kinetic import (
    _MERGE_REL,
    _TINY,
    _GroupQueue,
    _int_array,
    _near_across,
)

EDGES = [0, 5, -(1 << 63), (1 << 63) - 1, 1 << 63, -(1 << 63) - 1, 1 << 70, -(1 << 70)]


@settings(max_examples=300, deadline=None)
@given(
    start=st.one_of(st.sampled_from(EDGES), st.integers(-(1 << 66), 1 << 66)),
    length=st.integers(0, 12),
    step=st.sampled_from([1, 2, 3, -1, -2, 7]),
    shift=st.integers(-6, 6),
)
def test_a_range_is_made_as_numpy_reads_it(start, length, step, shift):
    r = range(start + shift, start + shift + step * length, step)
    for uids in (r, list(r)):
        try:
            want = np.array(uids)
        except OverflowError:  # (beyond what numpy reads: the caller's numpy raises alike)
            continue
        got = _int_array(uids)
        assert got.dtype == want.dtype
        assert got.tolist() == want.tolist()


COSTS = st.sampled_from([0.0, 0.25, 1.0, 1.0 / 3.0, 2.0, 3.0, 7.5, 1e-300])


def _state(q: _GroupQueue) -> tuple:
    arrays = (
        None if q._costs is None else (q._costs.dtype, q._costs.tolist()),
        None if q._uid_arr is None else (q._uid_arr.dtype, q._uid_arr.tolist()),
    )
    return q._keys, q._uids, q._pos, q._n, q._gone, q._base, arrays


@settings(max_examples=400, deadline=None)
@given(
    first=st.integers(0, 1 << 40),
    costs=st.lists(COSTS, min_size=16, max_size=70),
    rising=st.booleans(),
    as_array=st.booleans(),
    step=st.sampled_from([1, 1, 1, 2]),
    distinct=st.booleans(),
    an_int=st.booleans(),
)
def test_a_batch_of_a_range_is_queued_as_its_list(
    first, costs, rising, as_array, step, distinct, an_int
):
    # a session's pages come as a range, their costs rising with the page (mostly): queued in
    # the order given; the same queue as the list's (a numpy sort by (cost, uid)), arrays too
    if rising:
        costs = sorted(costs)
    if an_int and not as_array:
        costs[len(costs) // 2] = int(costs[len(costs) // 2])  # numpy would make it a float
    uids = range(first, first + step * len(costs), step)
    given_costs = np.array(costs, dtype=np.float64) if as_array else list(costs)
    q, plain = _GroupQueue(), _GroupQueue()
    q.push_batch(uids, given_costs, distinct)
    plain.push_batch(list(uids), np.array(costs) if as_array else list(costs), distinct)
    assert _state(q) == _state(plain)
    assert list(zip(q._keys, q._uids, strict=True)) == sorted(zip(costs, uids, strict=True))
    if as_array:  # the caller's array is its own: a change to it changes no queue
        given_costs[:] = -1.0
        assert _state(q) == _state(plain)
    out: list[int] = []
    q.take_run((1.0, 0.0), None, len(costs), out)
    assert out == [u for _, u in sorted(zip(costs, uids, strict=True))]


@settings(max_examples=400, deadline=None)
@example(costs=[1.0, 2.0, 3.0], ops=[(0, 0), (0, 0), (3, 0)], batch=False)
@example(costs=[1.0, 2.0, 3.0], ops=[(2, 0), (0, 0), (3, 0)], batch=True)  # with the index
@given(
    costs=st.lists(COSTS, min_size=1, max_size=40),
    ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 39)), max_size=40),
    batch=st.booleans(),
)
def test_one_taken_by_take_head_is_take_run_of_one(costs, ops, batch):
    # two queues alike: members leave from the middle (maybe the head), come back, the index
    # is read; then the minimum leaves by take_head from one and by take_run from the other
    uids = list(range(len(costs)))
    q, plain = _GroupQueue(), _GroupQueue()
    for g in (q, plain):
        if batch:
            g.push_batch(uids, list(costs), distinct=True)
        else:
            for u, c in zip(uids, costs, strict=True):
                g.push(u, c)
    live = dict(zip(uids, costs, strict=True))
    for op, u in ops:
        order = sorted(live, key=lambda v: (live[v], v))
        if op == 0 and live:  # one of the first three leaves: the head's entry waits gone
            u = order[min(u % 3, len(order) - 1)]
            for g in (q, plain):
                g.discard(u)
            del live[u]
        elif op == 1 and u not in live:
            for g in (q, plain):
                g.push(u, costs[u % len(costs)])
            live[u] = costs[u % len(costs)]
        elif op == 2 and u in live:
            assert q.key(u) == plain.key(u) == live[u]
        elif op == 3 and live:
            out: list[int] = []
            plain.take_run((1.0, 0.0), None, 1, out)
            got = q.take_head()
            assert [got] == out == order[:1]
            del live[got]
            assert (q._pos, q._n, q._gone, q._index) == (
                plain._pos,
                plain._n,
                plain._gone,
                plain._index,
            )
    assert len(q) == len(plain) == len(live)


def _near_across_plain(value, owner, order, n) -> bool:
    """``_near_across`` as it was: the first entry after the n of another owner, found by a scan."""
    head = order[:n]
    v, o = value[head], owner[head]
    lim = np.maximum(v * (1.0 + _MERGE_REL), _TINY)
    if ((o[1:] != o[:-1]) & (v[1:] <= lim[:-1])).any():
        return True
    rest = order[n:]
    other = owner[rest] != o[-1]
    if not other.any():
        return False
    return bool(value[rest[np.argmax(other)]] <= lim[-1])


BASES = st.sampled_from([0.0, 1e-300, 1e-290, 1.0, 1.0 / 3.0, 2.0, 5.0, math.inf])
# factors above 1: within the rounding bound (1 + 1e-15) or beyond
NUDGES = st.sampled_from([1.0, 1.0, 1.0 + 2.0**-52, 1.0 + 2.0**-50, 1.0 + 1e-15, 1.0 + 4e-15, 1.5])


@settings(max_examples=400, deadline=None)
@given(
    entries=st.lists(st.tuples(BASES, NUDGES, st.integers(0, 3)), min_size=1, max_size=30),
    n=st.integers(1, 33),
)
def test_near_across_answers_as_its_scan(entries, n):
    values = np.array([base * nudge for base, nudge, _ in entries])
    owner = np.array([o for *_, o in entries])
    order = np.argsort(values, kind="stable")
    head_owner = owner[order[:n]]
    want = _near_across_plain(values, owner, order, n)
    assert _near_across(values, owner, order, n, head_owner) is want
