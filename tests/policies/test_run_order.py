"""``RunOrder`` (runs of a session's units, pins per session) against a plain entry order of
single uids (hypothesis): the same candidates in the same order after every call, whichever of
its whole-session, run or one-uid paths a call takes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies import run_order
from sim.policies.run_order import RunOrder
from sim.units import UNIT_BITS, join_extents


class EntryRef:
    """Members with an entry number and a candidacy; the candidates in entry order."""

    def __init__(self) -> None:
        self.members: dict[int, list] = {}  # uid -> [entry number, candidate]
        self.n = 0

    def enter(self, uid: int, candidate: bool = True) -> None:
        self.n += 1
        self.members[uid] = [self.n, candidate]

    def back(self, uid: int) -> None:
        if uid in self.members:
            self.members[uid][1] = True
        else:
            self.enter(uid)

    def discard(self, uid: int) -> bool:
        m = self.members.get(uid)
        if m is None or not m[1]:
            return False
        m[1] = False
        return True

    def leave(self, uid: int) -> bool:
        m = self.members.pop(uid, None)
        return m is not None and m[1]

    def session(self, s: int) -> list[int]:
        return sorted(u for u in self.members if u >> UNIT_BITS == s)

    def candidates(self) -> list[int]:
        order = sorted(self.members.items(), key=lambda kv: kv[1][0])
        return [u for u, (_, c) in order if c]


# (operation, session, a, b): sessions 0-3 with unit indices 0-40
OPS = st.lists(
    st.tuples(st.integers(0, 18), st.integers(0, 3), st.integers(0, 40), st.integers(0, 12)),
    max_size=150,
)


def _check(order: RunOrder, ref: EntryRef) -> None:
    cands = ref.candidates()
    assert list(order.candidates()) == cands
    assert len(order) == len(cands)
    assert order.min() == (cands[0] if cands else None)
    for u in list(ref.members)[:20]:
        assert order.is_member(u) and (u in order) == ref.members[u][1]


def _apply(order: RunOrder, ref: EntryRef, op: int, s: int, a: int, b: int) -> None:
    base = s << UNIT_BITS
    mine = ref.session(s)
    if op == 0:  # a stretch enters (some may be members already)
        uids = range(base + a, base + a + b + 1)
        order.enter_many(uids, candidate=b % 3 != 0)
        for u in uids:
            ref.enter(u, candidate=b % 3 != 0)
    elif op == 1:  # a list with repeats and members enters
        uids = [base + (a + 5 * i) % 41 for i in range(b)]
        order.enter_many(uids, candidate=a % 2 == 0)
        for u in uids:
            ref.enter(u, candidate=a % 2 == 0)
    elif op == 2:  # one uid is pinned
        assert order.discard(base + a) == ref.discard(base + a)
    elif op == 3:  # one uid is released (a non-member enters)
        order.back(base + a)
        ref.back(base + a)
    elif op == 4:  # one uid leaves
        assert order.leave(base + a) == ref.leave(base + a)
    elif op in (5, 6):  # the whole session is pinned: as a range where it is one, else a list
        uids = range(mine[0], mine[-1] + 1) if mine and op == 5 else mine
        if op == 5 and mine and len(uids) != len(mine):
            uids = mine
        assert order.discard_many(uids) == [u for u in uids if ref.discard(u)]
    elif op == 7:  # the whole session is released
        order.back_many(mine)
        for u in mine:
            ref.back(u)
    elif op == 8:  # a batch release with non-members and repeats
        uids = [base + (a + 3 * i) % 41 for i in range(b)]
        order.back_many(uids)
        new = []
        for u in uids:
            if u in ref.members:
                ref.back(u)
            else:
                new.append(u)
        for u in new:
            ref.enter(u)
    elif op == 9:  # the whole session leaves, or a part of it
        uids = mine if b % 2 else mine[: b // 2]
        order.leave_many(uids)
        for u in uids:
            ref.leave(u)
    elif op == 12:  # up to b of the oldest leave while none is marked (every third of a session)
        marked = {base + u for u in range(a % 3, 41, 3)}
        got: list[tuple[int, int]] = []
        n = order.pop_unmarked(b, marked, got)
        taken = [u for x, y in got for u in range(x, y)]
        cands = ref.candidates()
        assert len(taken) == n <= b and taken == cands[:n] and not marked.intersection(taken)
        for u in taken:
            ref.leave(u)
        head = order.head_run()
        if n < b and head is not None:  # it stops only where the caller must read the stretch
            e = order._lo
            plain = order._bucket[e] not in order._pins and not order._holes[e]
            assert not plain or marked.intersection(range(head[0], min(head[1], head[0] + b - n)))
    elif op == 13:  # a decode span's pages: two sessions' units interleaved, some members
        other = ((s + 1) % 4) << UNIT_BITS
        uids = [u for i in range(b) for u in (base + (a + i) % 41, other + (a + i) % 41)]
        order.enter_many(uids, candidate=b % 2 == 0)
        for u in uids:
            ref.enter(u, candidate=b % 2 == 0)
    elif op == 14:  # runs of two sessions enter, each run at once where it holds no member
        other = ((s + 1) % 4) << UNIT_BITS
        runs = [(base + a, base + a + b // 2 + 1), (other + b, other + b + a % 5 + 1)]
        held = any(u in ref.members for x, y in runs for u in range(x, y))
        assert order.may_hold_any(runs) == any(order.may_hold(x, y) for x, y in runs)
        assert order.may_hold_any(runs) or not held
        order.enter_runs(runs, candidate=a % 3 != 0)
        for x, y in runs:
            for u in range(x, y):
                ref.enter(u, candidate=a % 3 != 0)
    elif op == 15:  # as many uids as the session's members, one a non-member: not the session
        outside = [base + u for u in range(41) if base + u not in ref.members]
        if mine and outside:
            uids = sorted(
                mine[: a % len(mine)] + mine[a % len(mine) + 1 :] + [outside[b % 41 % len(outside)]]
            )
            assert order.members_among(uids) == [u for u in uids if u in ref.members]
            assert order.discard_many(uids) == [u for u in uids if ref.discard(u)]
    elif op == 16:  # how many members the session holds within a stretch (None: some outside)
        lo, hi = base + a % 20, base + a % 20 + 2 * b + 10
        held = order.held_within(lo, hi)
        inside = all(lo <= u < hi for u in mine)
        assert held is None or (inside and held == len(mine))
        if not mine or (lo == base and hi >= max(order._top.get(s, 0), base)):
            assert held == len(mine) and inside
    elif op == 17:  # a session whose members are all pinned is released at once
        every = bool(mine) and not any(ref.members[u][1] for u in mine)
        assert order.pins_all(s) == every
        assert order.back_session(s) == every
        if every:
            for u in mine:
                ref.back(u)
    elif op == 18:  # a decode span's pages: three sessions' new pages, interleaved, by step
        others = [((s + k) % 4) << UNIT_BITS for k in range(3)]
        tops = [max(ref.session(x >> UNIT_BITS), default=x + a % 7 - 1) + 1 for x in others]
        step = 1 + a % 2  # (pages of two units: each session's runs are apart)
        uids = [t + step * i + step - 1 for i in range(b) for t in tops]
        order.enter_many(uids, candidate=a % 3 != 0)
        for u in uids:
            ref.enter(u, candidate=a % 3 != 0)
    else:  # the oldest b candidates leave, as extents
        got = order.pop_runs(b)
        expect = ref.candidates()[:b]
        assert join_extents(got) == got and [u for x, y in got for u in range(x, y)] == expect
        for u in expect:
            ref.leave(u)


@settings(max_examples=500, deadline=None)
@given(ops=OPS)
def test_run_order_is_an_entry_order_of_uids(ops):
    order, ref = RunOrder(), EntryRef()
    for op, s, a, b in ops:
        _apply(order, ref, op, s, a, b)
        _check(order, ref)


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_run_order_compacts_emptied_runs_and_keeps_its_order(ops):
    old = run_order.COMPACT_SLACK
    run_order.COMPACT_SLACK = 2  # compact at every chance
    try:
        order, ref = RunOrder(), EntryRef()
        for op, s, a, b in ops:
            _apply(order, ref, op, s, a, b)
            _check(order, ref)
        # the next run to enter finds the emptied entries and drops them first
        order.enter_many(range(9 << UNIT_BITS, (9 << UNIT_BITS) + 2))
        ref.enter(9 << UNIT_BITS)
        ref.enter((9 << UNIT_BITS) + 1)
        assert len(order._first) <= 4 * order._live + 2
        _check(order, ref)
    finally:
        run_order.COMPACT_SLACK = old


def test_a_session_pinned_and_released_keeps_its_runs_places():
    """Two sessions' runs interleave; pinning one skips its runs, releasing it puts them back."""
    order = RunOrder()
    s0, s1 = 0, 1 << UNIT_BITS
    order.enter_many(range(s0, s0 + 3))
    order.enter_many([s1, s1 + 1])
    order.enter_many([s0 + 3])  # a later page of session 0: a run of its own
    assert order.discard_many(range(s0, s0 + 4)) == [0, 1, 2, 3]
    assert order.pop_runs(1) == [(s1, s1 + 1)]
    order.back_many(range(s0, s0 + 4))
    assert order.pop_runs(10) == [(s0, s0 + 3), (s1 + 1, s1 + 2), (s0 + 3, s0 + 4)]
    assert len(order) == 0 and order.min() is None


def test_a_list_as_long_as_a_session_with_a_hole_is_not_the_session():
    """A run with a hole: a list of as many uids as the session's members, one of them the hole
    (a non-member) in place of a member, is not the session (a batch of it takes its members
    only)."""
    order = RunOrder()
    s0 = 0
    order.enter_many(range(s0, s0 + 10))
    order.leave(s0 + 3)  # a hole inside the run
    order.enter_many([s0 + 20, s0 + 21])  # a later run: the list is not consecutive
    members = [u for u in range(s0, s0 + 10) if u != s0 + 3] + [s0 + 20, s0 + 21]
    uids = sorted([u for u in members if u != s0 + 5] + [s0 + 3])
    assert order.members_among(uids) == [u for u in uids if u in members]
    assert order.members_among(members) == members  # the session itself, holes and all
    order.back_many(uids)  # a non-member among them enters; the members stay candidates
    assert list(order.candidates()) == members + [s0 + 3]
