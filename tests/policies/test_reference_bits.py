"""``ReferenceBits`` (CLOCK's reference bits, a byte per unit of each session) against a plain set of
uids (hypothesis): every batch, run and query gives the set's answer. Runs cross session bounds
(a session's uids span 256 here, as they span 2**24 in the engine) and lists are long enough for
the numpy form, some with a uid listed twice."""

from __future__ import annotations

from itertools import chain, pairwise, starmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.reference_bits import ReferenceBits

UNIT_BITS = 8
SESSIONS = 3
NEAR_END = (1 << UNIT_BITS) - 40  # positions near a session's last: runs cross into the next


def uid(session: int, position: int) -> int:
    return (session << UNIT_BITS) + position


positions = st.one_of(st.integers(0, 100), st.integers(NEAR_END, NEAR_END + 39))
uids = st.builds(uid, st.integers(0, SESSIONS - 1), positions)
runs = st.tuples(uids, st.integers(0, 150)).map(lambda r: (r[0], r[0] + r[1]))
lists = st.one_of(
    st.lists(uids, max_size=10),
    st.lists(uids, min_size=64, max_size=150),
    runs.map(lambda r: list(range(*r))),  # consecutive, maybe across sessions
)
ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["add", "discard"]), uids),
        st.tuples(st.sampled_from(["set_run", "clear_run", "update_range", "clear_range"]), runs),
        st.tuples(st.just("clear_runs"), st.lists(runs, max_size=5)),
        st.tuples(st.sampled_from(["update", "difference_update"]), lists),
        st.tuples(st.just("look"), runs),
    ),
    max_size=60,
)


def _check(bits: ReferenceBits, ref: set[int]) -> None:
    assert len(bits) == len(ref)
    assert bool(bits) == bool(ref)
    assert sorted(bits) == sorted(ref)
    assert set(bits.sessions) == {u >> UNIT_BITS for u in ref}


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(ops=ops)
def test_reference_bits_are_a_set_of_uids(ops):
    bits, ref = ReferenceBits(UNIT_BITS), set()
    for op, arg in ops:
        if op == "add":
            bits.add(arg)
            ref.add(arg)
        elif op == "discard":
            bits.discard(arg)
            ref.discard(arg)
        elif op == "set_run":
            bits.set_run(*arg)
            ref.update(range(*arg))
        elif op == "clear_run":
            bits.clear_run(*arg)
            ref.difference_update(range(*arg))
        elif op == "clear_runs":
            bits.clear_runs(arg)
            for run in arg:
                ref.difference_update(range(*run))
        elif op == "update_range":
            bits.update(range(*arg))
            ref.update(range(*arg))
        elif op == "clear_range":
            bits.difference_update(range(*arg))
            ref.difference_update(range(*arg))
        elif op == "update":
            bits.update(arg)
            ref.update(arg)
        elif op == "difference_update":
            bits.difference_update(arg)
            ref.difference_update(arg)
        else:
            a, s = arg
            inside = sorted(u for u in ref if a <= u < s)
            assert bits.set_in(a, s) == inside
            extents = bits.runs_in(a, s)
            assert list(chain.from_iterable(starmap(range, extents))) == inside
            assert all((f >> UNIT_BITS) == ((t - 1) >> UNIT_BITS) for f, t in extents)
            assert all(t < f or f % (1 << UNIT_BITS) == 0 for (_, t), (f, _) in pairwise(extents))
            assert bits.count_in(a, s) == len(inside)
            assert bits.isdisjoint(range(a, s)) == (not inside)
            assert bits.isdisjoint(list(range(a, s))) == (not inside)
            assert all((u in bits) == (u in ref) for u in range(a, min(s, a + 50)))
        _check(bits, ref)
