"""LRU's hits in numpy (``sim.stack_distance``) against the replay one request at a time: the same
hit or miss for every request (hypothesis), objects larger than the capacity included; streams
where an object's size changes are left to the replay. And the merge sort and the radix grouping
against plain Python."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cachesim import CacheSim, simulate_cache, stream_from_arrays
from sim.policies.lru import LRU
from sim.stack_distance import (
    _previous_request,
    _rule_out_by_recent_requests,
    earlier_greater_sums,
    lru_hit_flags,
    stable_order_by_id,
)


def reuse_windows(ids: np.ndarray, sizes: np.ndarray, capacity: int):
    """The rule-out rounds' inputs, built as ``lru_hit_flags`` builds them: the requests whose
    object was requested before and fits (``ends``), that previous request (``starts``), their
    sizes, the prefix sums of the fitting sizes (``before``), and whether a window's sizes and its
    own pass the capacity (``undecided``)."""
    prev = _previous_request(ids, sizes)
    assert prev is not None
    fits = sizes <= capacity
    before = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(np.where(fits, sizes, 0), out=before[1:])
    ends = np.flatnonzero((prev >= 0) & fits)
    starts, size = prev[ends], sizes[ends]
    undecided = before[ends] - before[starts + 1] + size > capacity
    return ends, starts, size, before, undecided


class ReplayedLRU(LRU):
    """LRU as any other policy: ``simulate_cache`` replays it request by request."""


def _stepped(ids, sizes, capacity) -> list[bool]:
    sim = CacheSim("lru", capacity)
    return [sim.get(o, z) for o, z in zip(ids, sizes)]


def _replayed(ids, sizes, capacity) -> list[bool]:
    return simulate_cache(stream_from_arrays(ids, sizes), ReplayedLRU, capacity).hit_flags.tolist()


@st.composite
def streams(draw, max_objects=12, max_len=120):
    """Requests to a few objects, each with one size (some larger than the capacity)."""
    capacity = draw(st.integers(1, 40))
    objects = draw(st.integers(1, max_objects))
    one_size = st.integers(1, max(1, capacity // 3)) | st.integers(1, capacity + 5)
    size_of = draw(
        st.lists(one_size, min_size=objects, max_size=objects)
        | st.lists(st.just(draw(st.integers(1, capacity + 1))), min_size=objects, max_size=objects)
    )
    ids = draw(st.lists(st.integers(0, objects - 1), max_size=max_len))
    return [o * 7919 - 40_000 for o in ids], [size_of[o] for o in ids], capacity


@settings(max_examples=300, deadline=None)
@given(streams())
def test_numpy_hits_equal_the_replay_request_by_request(case):
    ids, sizes, capacity = case
    want = _stepped(ids, sizes, capacity)
    got = lru_hit_flags(np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64), capacity)
    assert got is not None and got.tolist() == want
    assert _replayed(ids, sizes, capacity) == want
    assert (
        simulate_cache(stream_from_arrays(ids, sizes), "lru", capacity).hit_flags.tolist() == want
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), capacity=st.integers(1, 3_000), sized=st.booleans())
def test_long_streams_equal_the_replay(seed, capacity, sized):
    """Thousands of requests: many levels of the merge sort, short and long windows."""
    rng = np.random.default_rng(seed)
    objects = int(rng.integers(10, 2_000))
    ids = (rng.zipf(1.3, 6_000) % objects).astype(np.int64)
    size_of = rng.integers(1, 120, objects) if sized else np.full(objects, 1 + seed % 3)
    sizes = size_of[ids]
    want = _replayed(ids, sizes, capacity)
    assert lru_hit_flags(ids, sizes, capacity).tolist() == want


@settings(max_examples=100, deadline=None)
@given(streams(), st.data())
def test_a_size_that_changes_is_left_to_the_replay(case, data):
    """A cached object keeps its admitted size, and a request larger than the capacity to a cached
    object hits: no prefix rule, so the numpy path declines and the replay decides."""
    ids, sizes, capacity = case
    if not ids:
        return
    i = data.draw(st.integers(0, len(ids) - 1))
    changed = list(sizes)
    changed[i] = data.draw(st.integers(1, capacity + 5).filter(lambda z: z != sizes[i]))
    if any(o == ids[i] for o in ids[:i] + ids[i + 1 :]):
        assert lru_hit_flags(np.array(ids), np.array(changed), capacity) is None
    got = simulate_cache(stream_from_arrays(ids, changed), "lru", capacity).hit_flags.tolist()
    assert got == _stepped(ids, changed, capacity)


@settings(max_examples=400, deadline=None)
@given(streams(max_objects=6, max_len=200), st.integers(1, 3))
def test_what_the_recent_requests_rule_out_misses(case, spread):
    """The rule-out rounds alone (what decides most misses of a long stream) against the replay:
    every request they rule out misses. Short windows among long ones (few objects, one of them
    ``spread`` times rarer), so that rounds run."""
    ids, sizes, capacity = case
    ids = [o if o % 3 else o + i % spread for i, o in enumerate(ids)]
    size_of: dict[int, int] = {}  # one size per object still
    sizes = [size_of.setdefault(o, z) for o, z in zip(ids, sizes)]
    if len(ids) < 2:
        return
    ids_a, sizes_a = np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64)
    ends, starts, size, before, undecided = reuse_windows(ids_a, sizes_a, capacity)
    if not undecided.any():
        return
    was = undecided.copy()
    _rule_out_by_recent_requests(undecided, ends, starts, size, before, capacity)
    hits = _stepped(ids, sizes, capacity)
    assert not any(hits[e] for e in ends[was & ~undecided])


def test_a_too_large_request_to_a_cached_object_hits():
    # object 1 is admitted at size 2, then asked for at size 50 > capacity: a hit in the replay
    ids, sizes = [1, 1, 2], [2, 50, 3]
    assert lru_hit_flags(np.array(ids), np.array(sizes), 10) is None
    got = simulate_cache(stream_from_arrays(ids, sizes), "lru", 10).hit_flags.tolist()
    assert got == _stepped(ids, sizes, 10) == [False, True, False]


def test_recent_requests_that_exactly_fill_the_capacity_rule_nothing_out():
    """x's window is 19 requests of two objects; with x, exactly the capacity (3): a hit. The
    shortest undecided window (p's, 4 long) makes the first round's k 16, so x's last 16 requests
    are tested, and they fill the capacity exactly: not ruled out."""
    p, q, r, s, x, a, b = range(7)
    ids = [p, q, r, s, p, x] + [a, b] * 9 + [a, x]
    want = _stepped(ids, [1] * len(ids), 3)
    assert want[-1]
    assert lru_hit_flags(np.array(ids), np.ones(len(ids), dtype=np.int64), 3).tolist() == want


def test_the_recent_requests_stay_inside_the_window():
    """The last k requests before x's second request must lie inside its window (x's first
    request and its own size must not count): two objects between, capacity 3, a hit."""
    c, d, e, f, x, y, a, b = range(8)
    ids = [c, d, e, f, c, y, x, a, b, a, b, a, b, a, b, a, b, a, x, a, b, a, y]
    want = _stepped(ids, [1] * len(ids), 3)
    assert want[18] and not want[22]
    assert lru_hit_flags(np.array(ids), np.ones(len(ids), dtype=np.int64), 3).tolist() == want


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), unique=True, max_size=70).flatmap(
        lambda values: st.tuples(
            st.just(values),
            st.lists(
                st.integers(1, 9) | st.integers(1, 2**40),  # large ones: the sums in a second array
                min_size=len(values),
                max_size=len(values),
            ),
        )
    )
)
def test_earlier_greater_sums_against_a_double_loop(case):
    values, weights = case
    want = [sum(weights[j] for j in range(k) if values[j] > values[k]) for k in range(len(values))]
    got = earlier_greater_sums(np.array(values, dtype=np.int64), np.array(weights, dtype=np.int64))
    assert got.tolist() == want


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=8).flatmap(
        lambda pool: st.lists(st.sampled_from(pool), max_size=60)
    )
)
def test_stable_order_by_id_is_a_stable_sort(ids):
    got = stable_order_by_id(np.array(ids, dtype=np.int64)).tolist()
    assert got == sorted(range(len(ids)), key=lambda i: ids[i])
