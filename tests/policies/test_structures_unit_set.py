"""``UnitSet`` (a byte a unit, per session) against a plain set (hypothesis): batches of one
session's uids as ranges, sorted lists with holes, long scattered lists (numpy's form) and lists
across sessions, added and discarded as its contract states (only non-members added, only
members discarded), with the counts a batch reports."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.structures import UnitSet
from sim.units import uid_of


def batch(kind: int, session: int, first: int, count: int):
    base = uid_of(session, first)
    if kind == 0:
        return range(base, base + count)
    if kind == 1:
        return [base + 2 * i for i in range(count)]  # holes
    if kind == 2:
        return [base + 3 * i for i in range(count * 20)]  # long and scattered: numpy's form
    other = uid_of((session + 1) % 3, first)
    return [u for i in range(count) for u in (base + i, other + i)]  # two sessions


OPS = st.lists(
    st.tuples(
        st.integers(0, 2),  # add, discard, or count
        st.integers(0, 3),  # the batch's kind
        st.integers(0, 2),  # session
        st.integers(0, 40),  # first unit
        st.integers(0, 6),  # count
        st.booleans(),  # a sorted batch said to be ascending
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_unit_set_is_a_set(ops):
    units, plain = UnitSet(), set()
    for op, kind, session, first, count, said in ops:
        uids = batch(kind, session, first, count)
        asc = said and kind < 3  # (ranges and lists with holes are sorted)
        assert units.count_in(uids, asc) == len(plain.intersection(uids))
        if op == 0:
            fresh = [u for u in uids if u not in plain]
            units.add_many(range(fresh[0], fresh[0] + 1) if len(fresh) == 1 else fresh, asc)
            plain.update(fresh)
        elif op == 1:
            held = uids if plain.issuperset(uids) else [u for u in uids if u in plain]
            units.discard_many(held, asc)
            plain.difference_update(held)
        assert len(units) == len(plain)
        for u in uids:
            assert (u in units) == (u in plain)
    assert set(units._flags) == {u >> 24 for u in plain}  # a session's array goes when it empties
