"""CLOCK's hand on runs (``RunOrder``, bits read a stretch at a time) against a plain CLOCK of
single uids (hypothesis): the same victims, candidates in the same order and the same bits after
every call, whichever batch hook made it (insert_many, acquire, release, remove_many, evict,
evict_bytes, evict_extents, take_in, take_in_extents). The ``RunOrder`` calls the hand reads
(``head_run``, ``members_among``, ``may_hold``) are checked against the same reference."""

from __future__ import annotations

from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.base import PolicyContext
from sim.policies.clock import Clock, _run_starts, _slice_runs
from sim.units import UNIT_BITS, Tier, extents_of

UNIT = 4096


class UnitView:
    """Every unit one size."""

    unit_bytes = UNIT

    def size(self, uid: int) -> int:
        return UNIT


class ClockRef:
    """CLOCK one uid at a time: members with an entry number and a candidacy, and their bits."""

    def __init__(self) -> None:
        self.members: dict[int, list] = {}  # uid -> [entry number, candidate]
        self.bits: set[int] = set()
        self.n = 0

    def _enter(self, uid: int, candidate: bool) -> None:
        self.n += 1
        self.members[uid] = [self.n, candidate]

    def insert(self, uid: int, pinned: bool) -> None:
        self.bits.discard(uid)
        self._enter(uid, not pinned)

    def acquire(self, uid: int) -> None:
        if uid in self.members:
            self.bits.add(uid)
            self.members[uid][1] = False

    def release(self, uid: int) -> None:
        if uid in self.members:
            self.members[uid][1] = True
        else:
            self._enter(uid, True)

    def remove(self, uid: int) -> None:
        self.members.pop(uid, None)
        self.bits.discard(uid)

    def candidates(self) -> list[int]:
        order = sorted(self.members.items(), key=lambda kv: kv[1][0])
        return [u for u, (_, c) in order if c]

    def evict(self) -> int | None:
        while True:
            cands = self.candidates()
            if not cands:
                return None
            u = cands[0]
            if u not in self.bits:
                del self.members[u]
                return u
            self.bits.discard(u)
            self._enter(u, True)

    def take_in(self, uids: list[int], free: int) -> list[int]:
        out = []
        for u in uids:
            while free < 1:
                v = self.evict()
                assert v is not None
                out.append(v)
                free += 1
            self.insert(u, False)
            free -= 1
        return out


def _uids(got) -> list[int]:
    return [u for a, s in got for u in range(a, s)]


def _check(pol: Clock, ref: ClockRef) -> None:
    cands = ref.candidates()
    order = pol._order
    assert list(order.candidates()) == cands
    # every member in order, pinned ones too (they come back to their places)
    members = [u for e in range(len(order._first)) for u in order._members(e)]
    assert members == sorted(ref.members, key=lambda u: ref.members[u][0])
    assert len(pol) == len(cands)
    assert pol._referenced == ref.bits
    head = order.head_run()
    if cands:
        assert head is not None and cands[: head[1] - head[0]] == list(range(*head))
    else:
        assert head is None
    for s in range(4):
        lo = s << UNIT_BITS
        mine = [u for u in ref.members if lo <= u < lo + 41]
        assert order.members_among(range(lo, lo + 41)) == sorted(mine)
        assert order.may_hold(lo, lo + 41) or not mine  # (False only where none is)


# (operation, session, a, b): sessions 0-3 with unit indices 0-40
OPS = st.lists(
    st.tuples(st.integers(0, 12), st.integers(0, 3), st.integers(0, 40), st.integers(0, 12)),
    min_size=10,
    max_size=120,
)


def _apply(pol: Clock, ref: ClockRef, op: int, s: int, a: int, b: int) -> None:
    base = s << UNIT_BITS
    mine = sorted(u for u in ref.members if u >> UNIT_BITS == s)
    if op == 0:  # a stretch enters, pinned or not (some may be members already)
        uids = range(base + a, base + min(41, a + b + 1))
        pol.insert_many(uids, 0.0, pinned=b % 3 == 0)
        for u in uids:
            ref.insert(u, b % 3 == 0)
    elif op == 1:  # the session is used (a hit on each member) and pinned, or a part of it
        uids = mine if b % 2 else mine[: b // 2]
        pol.acquire(uids, 0.0)
        for u in uids:
            ref.acquire(u)
    elif op == 2:  # the session is released (with non-members when b is odd)
        uids = mine if b % 2 == 0 else sorted({*mine, base + a})
        pol.release(uids, 0.0)
        for u in uids:
            ref.release(u)
    elif op == 3:  # the session leaves, or a part of it
        uids = mine if b % 2 else mine[a % 3 :: 2]
        pol.remove_many(uids)
        for u in uids:
            ref.remove(u)
    elif op == 4:  # one unit leaves
        pol.remove(base + a)
        ref.remove(base + a)
    elif op == 5:
        assert pol.evict(0.0) == ref.evict()
    elif op == 11:  # hits on every third unit from a (a bit set inside a run)
        for u in range(base + a, base + 41, 3):
            pol.access(u, 0.0)
            if u in ref.members:
                ref.bits.add(u)
    elif op in (6, 7):  # b victims, as uids or extents
        expect = [v for v in (ref.evict() for _ in range(b)) if v is not None]
        if op == 6:
            assert pol.evict_bytes(b * UNIT, 0.0) == expect
        else:
            got = pol.evict_extents(b * UNIT, 0.0)
            assert _uids(got) == (sorted(expect) if pol.drops_victims else expect)
    elif op == 12:  # decode steps in one batch: each takes k victims, then a page enters pinned
        steps = _planned_steps(ref, s, a, b)
        expect: list[int] = []
        for k, uid in steps:
            expect += [v for v in (ref.evict() for _ in range(k)) if v is not None]
            ref.insert(uid, True)
        uids = [uid for _, uid in steps]
        before = list(accumulate(k for k, _ in steps))
        pol.plan_pinned(uids, before)
        got = pol.evict_extents(sum(k for k, _ in steps) * UNIT, 0.0)
        assert _uids(got) == (sorted(expect) if pol.drops_victims else expect)
        pol.insert_many(uids, 0.0, pinned=True)
    elif op in (8, 9, 10):  # new units come in with room for some of them (one stretch, or two)
        uids = [u for u in range(base + a, base + min(41, a + b + 1)) if u not in ref.members]
        if op == 10:
            uids = uids[::2]
        if not uids or len(ref.candidates()) + b // 3 < len(uids):
            return  # (not enough candidates to make room)
        free = (b // 3) * UNIT + (b % 3)
        expect = ref.take_in(uids, b // 3)
        if op == 8:
            assert pol.take_in(uids, free, 0.0) == expect
        else:
            extents = [(u, u + 1) for u in uids] if op == 10 else [(uids[0], uids[-1] + 1)]
            if op == 9 and uids[-1] - uids[0] + 1 != len(uids):
                extents = [(u, u + 1) for u in uids]
            assert _uids(pol.take_in_extents(extents, free, 0.0)) == expect


def _planned_steps(ref: ClockRef, s: int, a: int, b: int) -> list[tuple[int, int]]:
    """Up to ``b`` steps of (victims, new page): pages of two sessions in turn, from unit ``a``
    on, each a non-member; 0 to 2 victims a step, as ``a`` and ``b`` pick."""
    steps: list[tuple[int, int]] = []
    taken: set[int] = set()
    for i in range(b):
        base = ((s + i % 2) % 4) << UNIT_BITS
        free = [u for u in range(base + a, base + 41) if u not in ref.members and u not in taken]
        if free:
            taken.add(free[0])
            steps.append(((a * (i + 1) + b) % 3, free[0]))
    return steps


def _clock(dropped: bool) -> Clock:
    ctx = PolicyContext(
        tier=Tier.GPU, block_tokens=16, num_layers=1, view=UnitView(), cpu_kv_bytes=None
    )
    pol = Clock(ctx)
    pol.drops_victims = dropped
    return pol


@settings(max_examples=400, deadline=None)
@given(ops=OPS, dropped=st.booleans())
def test_clock_on_runs_is_a_clock_of_uids(ops, dropped):
    pol, ref = _clock(dropped), ClockRef()
    for op, s, a, b in ops:
        _apply(pol, ref, op, s, a, b)
        _check(pol, ref)


def test_a_fully_referenced_run_goes_round_as_one_run():
    """Every bit set: the hand clears them and the run comes back whole at the newest end, and
    a full turn reaches it again in the same batch."""
    pol = _clock(False)
    one = range(1 << UNIT_BITS, (1 << UNIT_BITS) + 300)
    two = range(2 << UNIT_BITS, (2 << UNIT_BITS) + 5)
    pol.insert_many(one, 0.0)
    pol.insert_many(two, 0.0)
    pol.acquire(one, 0.0)
    pol.release(one, 0.0)
    assert pol.evict_extents(7 * UNIT, 0.0) == [(two.start, two.stop), (one.start, one.start + 2)]
    assert not pol._referenced
    assert pol._order.head_run() == (one.start + 2, one.stop)
    assert len(pol._order._runs[1]) == 1


def test_take_in_lets_each_new_unit_in_after_its_victim():
    """A bit set between two victims: its second chance comes after the first new unit entered,
    so it goes back behind that unit, not before it."""
    pol, ref = _clock(False), ClockRef()
    old = [1 << UNIT_BITS, (1 << UNIT_BITS) + 1, (1 << UNIT_BITS) + 2]
    new = [2 << UNIT_BITS, (2 << UNIT_BITS) + 1]
    pol.insert_many(old, 0.0)
    pol.access(old[1], 0.0)
    for u in old:
        ref.insert(u, False)
    ref.bits.add(old[1])
    assert pol.take_in_extents([(new[0], new[1] + 1)], 0, 0.0) == [
        (old[0], old[0] + 1),
        (old[2], old[2] + 1),
    ]
    assert ref.take_in(new, 0) == [old[0], old[2]]
    assert list(pol._order.candidates()) == ref.candidates() == [new[0], old[1], new[1]]


def test_a_pinned_insert_between_two_evictions_keeps_its_place_among_second_chances():
    """Why CLOCK's batch needs ``plan_pinned``: a decode step's page enters (pinned) between one
    step's eviction and the next, behind the units the first eviction sent round and before those
    the second sends. Evicting for both steps first, then taking both pages in, gives the same
    victims but another order once the pages are released; told the plan first, the batch gives
    the order of the steps."""

    def order(step_by_step: bool, planned: bool = False) -> list[int]:
        pol = _clock(True)
        r1, x, r2, y = (s << UNIT_BITS for s in range(4))
        for u in (r1, x, r2, y):
            pol.insert(u, 0.0)
        pol.access(r1, 0.0)
        pol.access(r2, 0.0)
        p1, p2 = (9 << UNIT_BITS) + 0, (9 << UNIT_BITS) + 1
        if step_by_step:
            assert pol.evict_extents(UNIT, 0.0) == [(x, x + 1)]
            pol.insert_many([p1], 0.0, pinned=True)
            assert pol.evict_extents(UNIT, 0.0) == [(y, y + 1)]
            pol.insert_many([p2], 0.0, pinned=True)
        else:
            pages = [p1, p2]
            if planned:
                pol.plan_pinned(pages, [1, 2])
            assert pol.evict_extents(2 * UNIT, 0.0) == [(x, x + 1), (y, y + 1)]
            pol.insert_many(pages, 0.0, pinned=True)
        pol.release([p1, p2], 0.0)
        return list(pol._order.candidates())

    r1, r2, p1, p2 = 0, 2 << UNIT_BITS, 9 << UNIT_BITS, (9 << UNIT_BITS) + 1
    assert order(True) == [r1, p1, r2, p2]
    assert order(False) == [r1, r2, p1, p2]
    assert order(False, planned=True) == [r1, p1, r2, p2]
    assert Clock.grows_in_bulk and Clock.plans_pinned


def test_take_in_with_no_units_or_less_than_no_room():
    """No unit: no victim, whatever the room. Less than no room (``free_bytes`` < 0): the first
    unit follows as many victims as it takes to make room for it, one at a time."""
    for free in (-UNIT - 5, -UNIT, -1, 0, 5, UNIT):
        pol, ref = _clock(False), ClockRef()
        old = list(range(1 << UNIT_BITS, (1 << UNIT_BITS) + 6))
        pol.insert_many(old, 0.0)
        pol.access(old[2], 0.0)
        for u in old:
            ref.insert(u, False)
        ref.bits.add(old[2])
        assert pol.take_in([], free, 0.0) == pol.take_in_extents([], free, 0.0) == []
        new = [2 << UNIT_BITS, (2 << UNIT_BITS) + 1]
        expect, room = [], free
        for u in new:
            while room < UNIT:
                expect.append(ref.evict())
                room += UNIT
            ref.insert(u, False)
            room -= UNIT
        assert pol.take_in(new, free, 0.0) == expect
        assert list(pol._order.candidates()) == ref.candidates()


@settings(max_examples=200, deadline=None)
@given(ops=OPS, dropped=st.booleans(), ks=st.lists(st.integers(0, 9), min_size=8, max_size=12))
def test_a_planned_span_of_pages_of_layers(ops, dropped, ks):
    """A decode span at layer units: each step's page is a run of 8 units (its layers), of two
    sessions in turn, after ``ks[i]`` victims: the plan is long, so its slices enter as runs."""
    pol, ref = _clock(dropped), ClockRef()
    for op, s, a, b in ops:
        _apply(pol, ref, op, s, a, b)
    steps = []
    for i, k in enumerate(ks):
        page = ((4 + i % 2) << UNIT_BITS) + 8 * (i // 2)
        steps += [(k if layer == 0 else 0, page + layer) for layer in range(8)]
    expect: list[int] = []
    for k, uid in steps:
        expect += [v for v in (ref.evict() for _ in range(k)) if v is not None]
        ref.insert(uid, True)
    uids = [uid for _, uid in steps]
    pol.plan_pinned(uids, list(accumulate(k for k, _ in steps)))
    got = pol.evict_extents(sum(ks) * UNIT, 0.0)
    assert _uids(got) == (sorted(expect) if pol.drops_victims else expect)
    pol.insert_many(uids, 0.0, pinned=True)
    _check(pol, ref)
    pol.release(uids, 0.0)
    for u in uids:
        ref.release(u)
    _check(pol, ref)


@settings(max_examples=300, deadline=None)
@given(
    lens=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    cut=st.tuples(st.integers(0, 500), st.integers(0, 500)),
)
def test_slices_of_a_list_of_runs_are_its_extents(lens, cut):
    """``_slice_runs`` of the run starts ``_run_starts`` found: ``extents_of`` of the slice."""
    uids, at = [], 0
    for i, n in enumerate(lens):
        at += i % 3  # a gap between runs, or none (then they are one run)
        uids += range(at, at + n)
        at += n
    starts = _run_starts(uids)
    if starts is None:
        return
    i, stop = sorted(min(c, len(uids)) for c in cut)
    assert _slice_runs(uids, starts, i, stop) == extents_of(uids[i:stop])
