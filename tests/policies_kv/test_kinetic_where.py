"""The kinetic tournament's uid -> group maps against a dict: ``GroupsBySession`` (a byte a unit
per session, a table of groups per session, an overflow dict when a session names more groups
than its table holds) and ``GroupsByUid``, fed single units, consecutive and scattered batches
(with repeats and units of several sessions), victims in any order, and groups that empty and
give their codes to others."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies import kinetic_where
from sim.policies.kinetic_where import GroupsBySession, GroupsByUid
from sim.units import UNIT_BITS


class _G:
    """A group: the model says whether it has members."""

    def __init__(self, name: int) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"G{self.name}"


OPS = st.lists(
    st.tuples(
        st.integers(0, 7),  # the operation
        st.integers(0, 2),  # a session
        st.integers(0, 90),  # a unit number, the first of a batch
        st.integers(1, 70),  # a batch's size
        st.integers(0, 5),  # a group, a pattern
    ),
    max_size=60,
)


def _uid(s: int, unit: int) -> int:
    return (s << UNIT_BITS) | unit


@settings(max_examples=400, deadline=None)
@given(ops=OPS, codes=st.sampled_from([2, 5, 254]), by_session=st.booleans())
def test_groups_by_session_are_a_dict(ops, codes, by_session):
    # A small table (``_CODES``) makes sessions reuse, recode and overflow their codes.
    model: dict[int, _G] = {}
    groups: dict[int, _G] = {}

    def group(k: int) -> _G:
        return groups.setdefault(k, _G(k))

    def alive(g) -> bool:
        return g in model.values()

    where = GroupsBySession(alive) if by_session else GroupsByUid()
    with patch.object(kinetic_where, "_CODES", codes):
        for op, s, lo, n, k in ops:
            g = group(k + 6 * (lo % 3) + 18 * s)  # many groups: tables fill
            if op == 0:  # one unit joins
                uid = _uid(s, lo)
                if uid not in model:
                    where.set(uid, g)
                    model[uid] = g
            elif op == 1:  # a batch joins: consecutive, scattered, repeated, across sessions
                uids = [_uid(s, lo + i * (1 + k % 3)) for i in range(n)]
                if k == 4:
                    uids = list(range(_uid(s, lo), _uid(s, lo) + n))[::-1]
                if k == 5 and n > 1:
                    uids[-1] = uids[0]
                if k == 3:
                    uids += [_uid((s + 1) % 3, lo)]
                if k == 2:
                    uids = range(uids[0], uids[0] + n)
                got = where.join(uids, g)
                if model.keys().isdisjoint(uids):
                    assert got == (len(set(uids)) == len(uids))
                    model.update(dict.fromkeys(uids, g))
                else:
                    assert got is None
            elif op == 2:  # one unit leaves
                uid = _uid(s, lo)
                assert where.pop(uid) is model.pop(uid, None)
            elif op == 3:  # any units leave, by group
                uids = [_uid(s, lo + i * (1 + k % 2)) for i in range(n)]
                if k >= 4:
                    uids += uids[:3] + [_uid((s + 2) % 3, lo + 1)]
                want: dict = {}
                for u in uids:
                    h = model.pop(u, None)
                    if h is not None:
                        want.setdefault(h, []).append(u)
                got = where.pop_many(uids)
                assert {h: sorted(v) for h, v in got.items()} == {
                    h: sorted(v) for h, v in want.items()
                }
            elif op == 4 and model:  # victims leave, in any order
                members = sorted(model)
                victims = members[lo % len(members) :: 1 + k % 3][:n]
                if k % 2:
                    victims.reverse()
                    where.take_out(victims)
                else:  # with the same, sorted, as an array
                    where.take_out(victims, np.sort(np.array(victims, dtype=np.int64)))
                for u in victims:
                    del model[u]
            elif op == 5 and model:  # the group of all of a page's members (ascending)
                members = sorted(model)
                first = members[lo % len(members)]
                page = [u for u in members if first <= u < first + 1 + k * 4]
                heard = {model[u] for u in page}
                want_g = heard.pop() if len(heard) == 1 else None
                assert where.group_of_all(page) is want_g
            elif op == 6:
                base = _uid(s, lo)
                assert where.members_in(base, base + n) == [
                    u for u in range(base, base + n) if u in model
                ]
            assert len(where) == len(model)
            assert sorted(where) == sorted(model)
            for u, h in model.items():
                assert u in where
                assert where.get(u) is h
            for u in (_uid(s, lo), _uid(s, lo + 1), _uid(s, 10**5)):
                assert (u in where) == (u in model)
                assert where.get(u) is model.get(u)
