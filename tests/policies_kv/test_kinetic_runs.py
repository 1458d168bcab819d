"""The kinetic tournament's uid -> group map as runs (``GroupsByRuns``, the engine's uids at block
units) against a plain dict, fed what the engine gives it (a session's pages as a range, its
leading pages as victims, a pin of its pages) and what it may give (single units, scattered and
repeated batches, batches across sessions, victims from a run's middle and end); and
``KineticMin`` keeping its uids so against the same tournament keeping them in a dict."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.kinetic import SINCE, UNTIL, KineticMin
from sim.policies.kinetic_where import GroupsByRuns
from sim.units import UNIT_BITS, UNIT_MASK


class _G:
    def __init__(self, name: int) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"G{self.name}"


OPS = st.lists(
    st.tuples(
        st.integers(0, 8),  # the operation
        st.integers(0, 2),  # a session
        st.integers(0, 90),  # a unit number, the first of a batch
        st.integers(1, 70),  # a batch's size
        st.integers(0, 5),  # a group, a pattern
    ),
    max_size=60,
)


def _uid(s: int, unit: int) -> int:
    return (s << UNIT_BITS) | unit


def _check_runs(where: GroupsByRuns, model: dict) -> None:
    """The runs are the model's members, each session's sorted, disjoint and non-empty, within
    the session, and runs that touch are of different groups (joined otherwise)."""
    for s, rs in where._sess.items():
        assert rs.starts, "a session without runs is dropped"
        assert len(rs.starts) == len(rs.stops) == len(rs.groups)
        for i, (a, b, g) in enumerate(zip(rs.starts, rs.stops, rs.groups, strict=True)):
            assert a < b and a >> UNIT_BITS == s and (b - 1) >> UNIT_BITS == s
            assert all(model.get(u) is g for u in range(a, b))
            if i:
                assert rs.stops[i - 1] <= a
                assert rs.stops[i - 1] < a or rs.groups[i - 1] is not g
    assert sum(b - a for rs in where._sess.values() for a, b in zip(rs.starts, rs.stops)) == len(
        model
    )


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_groups_by_runs_are_a_dict(ops):
    model: dict[int, _G] = {}
    groups: dict[int, _G] = {}
    where = GroupsByRuns()

    def group(k: int) -> _G:
        return groups.setdefault(k, _G(k))

    for op, s, lo, n, k in ops:
        g = group(k % 3 + 3 * s)  # few groups a session: runs that touch, of one group or two
        if op == 0:  # one unit joins
            uid = _uid(s, lo)
            if uid not in model:
                where.set(uid, g)
                model[uid] = g
        elif op == 1:  # a batch joins: a range, consecutive, scattered, repeated, across sessions
            uids: list[int] | range = [_uid(s, lo + i * (1 + k % 3)) for i in range(n)]
            if k == 4:
                uids = list(range(_uid(s, lo), _uid(s, lo) + n))[::-1]
            if k == 5 and n > 1:
                uids[-1] = uids[0]
            if k == 3:
                uids = [*uids, _uid((s + 1) % 3, lo)]
            if k in (0, 2):  # a session's pages, as the engine releases them
                uids = range(_uid(s, lo), _uid(s, lo) + n)
            got = where.join(uids, g)
            if model.keys().isdisjoint(uids):
                assert got == (len(set(uids)) == len(uids))
                model.update(dict.fromkeys(uids, g))
            else:
                assert got is None
        elif op == 2:  # one unit leaves (often a session's first: a single victim)
            uid = min((u for u in model if u >> UNIT_BITS == s), default=_uid(s, lo))
            if k % 2:
                uid = _uid(s, lo)
            assert where.pop(uid) is model.pop(uid, None)
        elif op == 3:  # any units leave, by group: a pin's range, scattered, repeated
            uids = [_uid(s, lo + i * (1 + k % 2)) for i in range(n)]
            if k >= 4:
                uids += uids[:3] + [_uid((s + 2) % 3, lo + 1)]
            if k == 0:
                uids = range(_uid(s, lo), _uid(s, lo) + n)
            want: dict = {}
            for u in uids:
                h = model.pop(u, None)
                if h is not None:
                    want.setdefault(h, []).append(u)
            got_out = where.pop_many(uids)
            assert {h: sorted(v) for h, v in got_out.items()} == {
                h: sorted(v) for h, v in want.items()
            }
        elif op in (4, 8) and model:  # victims leave: sessions' leading members, or any
            members = sorted(model)
            if op == 8:  # each session's first few members (a merge's usual victims)
                victims = [u for u in members if (u & UNIT_MASK) < lo][: n * 3]
            else:
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
            base = _uid(s, lo) if k else _uid(s, UNIT_MASK - lo % 8)  # (across sessions too)
            span = n
            assert where.members_in(base, base + span) == [
                u for u in range(base, base + span) if u in model
            ]
        _check_runs(where, model)
        assert len(where) == len(model)
        assert sorted(where) == sorted(model)
        for u, h in model.items():
            assert u in where
            assert where.get(u) is h
        for u in (_uid(s, lo), _uid(s, lo + 1), _uid(s, 10**5), _uid(s + 3, lo)):
            assert (u in where) == (u in model)
            assert where.get(u) is model.get(u)


def test_victims_across_a_session_boundary_are_two_runs():
    # consecutive integers, two sessions: the last unit of one and the first of the next
    where = GroupsByRuns()
    g, h = _G(0), _G(1)
    last = _uid(1, UNIT_MASK)
    where.join(range(last - 40, last + 1), g)
    where.join(range(last + 1, last + 41), h)
    victims = list(range(last - 20, last + 21))
    where.take_out(victims, np.array(victims, dtype=np.int64))
    assert sorted(where) == [*range(last - 40, last - 20), *range(last + 21, last + 41)]
    assert where.get(last - 21) is g and where.get(last + 21) is h


KIN_OPS = st.lists(
    st.tuples(
        st.integers(0, 5),  # the operation
        st.integers(0, 12),  # a time step, a group's tau offset
        st.integers(1, 60),  # a batch's size, a count of victims
        st.integers(0, 3),  # the pattern of a batch's costs
    ),
    max_size=40,
)


@settings(max_examples=50, deadline=None)
@given(ops=KIN_OPS, mode=st.sampled_from([SINCE, UNTIL]))
def test_kinetic_min_by_runs_is_by_dict(ops, mode):
    # The same changes to a tournament keeping its uids as runs and to one keeping them in a
    # dict: the same victims, in the same order, and the same members. Sessions of 50 units, so
    # batches cross sessions; a session's pages released as a range, costs rising with the page
    # (Pensieve's) or not.
    runs, plain = KineticMin(mode, by_runs=True), KineticMin(mode)
    both = (runs, plain)

    def uid_of(n: int) -> int:
        return ((n // 50) << UNIT_BITS) + n

    now, key = 50.0, 0
    for op, a, b, pattern in ops:
        now += a / 4
        tau = now - a if mode is SINCE else (float("inf") if a == 12 else now + a + 1)
        members = sorted(plain.uids())
        if op <= 1:
            uids: list[int] | range = [uid_of(n) for n in range(key + 1, key + b + 1)]
            key += b
            if op == 0 and uids == list(range(uids[0], uids[-1] + 1)):
                uids = range(uids[0], uids[-1] + 1)
            if op == 1 and members:  # some come back from their groups, one of them twice
                back = members[pattern::3][:b]
                uids = back + list(uids)[: b - len(back)] + back[:1]
            costs = [
                [float(1 + i), 0.5 * (1 + i % 7), 1.0 / (1 + i % 3), float(1 + i // 4)][pattern]
                for i in range(len(uids))
            ]
            for kin in both:
                kin.add_many(uids, costs, tau, now)
        elif op == 2 and members:  # one unit into a group: a hit, a move
            uid = members[b % len(members)]
            for kin in both:
                kin.add(uid, plain.cost_of(uid), tau, now)
        elif op == 3 and members:  # some leave: a session's pages (a pin), or scattered
            gone = members[a % len(members) :: 1 + pattern][:b]
            first = gone[0]
            pinned = range(first, min(first + b, (first | UNIT_MASK) + 1))  # within its session
            for kin in both:
                kin.discard_many(pinned if pattern == 0 else gone)
        else:
            in_uid_order = a % 2 == 1
            got = runs.pop_many(b * (1 + pattern), now, in_uid_order)
            assert got == plain.pop_many(b * (1 + pattern), now, in_uid_order)
        assert len(runs) == len(plain)
        assert sorted(runs.uids()) == sorted(plain.uids())
        assert runs.peek(now) == plain.peek(now)
        for u in members[::7]:
            assert (u in runs) == (u in plain)
            if u in plain:
                assert runs.group_of(u).tau == plain.group_of(u).tau


def test_runs_that_touch_in_one_group_are_one():
    # a run joined before, after and between runs of its group makes one run with them
    where = GroupsByRuns()
    g, h = _G(0), _G(1)
    base = _uid(2, 0)
    where.join(range(base + 10, base + 20), g)
    where.join(range(base + 5, base + 10), g)  # before
    where.set(base + 20, g)  # after
    where.join(range(base + 22, base + 30), g)
    where.set(base + 21, g)  # between
    where.set(base + 4, h)  # another group: its own run
    rs = where._sess[2]
    assert (rs.starts, rs.stops, rs.groups) == ([base + 4, base + 5], [base + 5, base + 30], [h, g])
