"""The previous request of each request from one sort of id-and-index keys
(``sim.stack_distance._sorted_keys``), held to the radix order it replaced and to a dict."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.stack_distance import (
    _previous_request,
    _previous_request_by_radix,
    _sorted_keys,
    lru_hit_flags,
    stable_order_by_id,
)


def _previous_plain(ids: list[int], sizes: list[int]) -> list[int] | None:
    last: dict[int, int] = {}
    size_of: dict[int, int] = {}
    prev = []
    for i, (o, z) in enumerate(zip(ids, sizes)):
        if size_of.setdefault(o, z) != z:
            return None
        prev.append(last.get(o, -1))
        last[o] = i
    return prev


# ids spanning 0 to 63 bits from any least id: keys that fit in 63 bits and keys that do not
_CASES = st.sampled_from([0, 1, 7, 16, 17, 32, 40, 55, 56, 57, 58, 60, 63]).flatmap(
    lambda bits: st.tuples(
        st.integers(-(2**63), 2**63 - 1 - (2**bits - 1)),
        st.just(bits),
        st.lists(st.integers(0, 7), min_size=1, max_size=70),
        st.lists(st.integers(1, 4), min_size=8, max_size=8),
        st.one_of(st.none(), st.tuples(st.integers(0, 69), st.integers(1, 3))),
    )
)


def _stream(case):
    lo, bits, picks, size_of, change = case
    span = 2**bits - 1
    spots = [lo + span * q // 7 for q in range(8)]  # object q's id: the span's ends among them
    ids = [spots[o] for o in picks]
    sizes = [size_of[o] for o in picks]
    if change is not None:  # one request at another size than its object's
        sizes[change[0] % len(sizes)] += change[1]
    return ids, sizes


@settings(max_examples=400, deadline=None)
@given(_CASES)
def test_previous_request_by_keys_is_the_radix_ones_and_a_dicts(case):
    ids, sizes = _stream(case)
    a, z = np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64)
    want = _previous_plain(ids, sizes)
    got = _previous_request(a, z)
    radix = _previous_request_by_radix(a, z)
    assert (got is None) == (want is None) == (radix is None)
    if got is not None:
        assert got.tolist() == want == radix.tolist()


@settings(max_examples=400, deadline=None)
@given(_CASES)
def test_sorted_keys_are_the_stable_order_or_none_where_they_do_not_fit(case):
    ids, _ = _stream(case)
    a = np.array(ids, dtype=np.int64)
    index_bits = max((len(ids) - 1).bit_length(), 1)
    fits = (max(ids) - min(ids)).bit_length() + index_bits <= 63
    got = _sorted_keys(a)
    assert (got is not None) == fits
    if got is not None:
        key, bits = got
        assert bits == index_bits
        order = sorted(range(len(ids)), key=lambda i: ids[i])
        assert (key & ((1 << bits) - 1)).tolist() == order == stable_order_by_id(a).tolist()
        assert (key >> bits).tolist() == [ids[i] - min(ids) for i in order]


def test_no_request_has_no_keys():
    assert _sorted_keys(np.zeros(0, dtype=np.int64)) is None
    assert lru_hit_flags(np.zeros(0, np.int64), np.zeros(0, np.int64), 5).tolist() == []


@settings(max_examples=100, deadline=None)
@given(_CASES, st.integers(1, 12))
def test_lru_hits_are_the_same_on_either_order(case, capacity):
    """The whole rule with its previous requests from the keys or from the radix order."""
    import sim.stack_distance as sd

    ids, sizes = _stream(case)
    a, z = np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64)
    got = lru_hit_flags(a, z, capacity)
    keys = sd._sorted_keys
    try:
        sd._sorted_keys = lambda ids: None
        want = lru_hit_flags(a, z, capacity)
    finally:
        sd._sorted_keys = keys
    assert (got is None) == (want is None)
    if got is not None:
        assert got.tolist() == want.tolist()
