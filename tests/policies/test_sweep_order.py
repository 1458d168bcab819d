"""``SweepOrder``'s batches (``enter_many``, ``pin_many``, ``back_many``, ``sweep_many``) against
SIEVE's sweep written plainly, one unit at a time (hypothesis): the same victims, candidates and
marks. The uids come from a few sessions, as ranges and lists (one session's or several's), and
the entry numbers are compacted at any step (a compaction changes nothing a caller sees)."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies.structures import SweepOrder
from sim.units import extents_of, uid_of


class EagerSweepOrder(SweepOrder):
    def _make_room_for(self, k: int) -> None:
        if len(self._state) - 1 > self._members:  # any member left: compact
            self._compact()


class PlainSweep:
    """Members by entry number, a hand, the candidates ahead of it: every call one unit at a time,
    every lookup a scan."""

    def __init__(self) -> None:
        self.members: dict[int, list] = {}  # uid -> [entry, candidate, marked]
        self.n = 0
        self.hand = -1

    def ordered(self):
        return sorted(self.members.items(), key=lambda kv: kv[1][0])

    def ahead(self):
        return [u for u, (e, c, _) in self.ordered() if c and e > self.hand]

    def wrap_if_done(self):
        if not self.ahead():
            self.hand = -1

    def enter(self, uid, candidate=True):
        self.leave(uid)
        self.n += 1
        self.members[uid] = [self.n, candidate, False]

    def pin(self, uid, mark):
        m = self.members.get(uid)
        if m is None:
            return
        m[2] = m[2] or mark
        if m[1]:
            m[1] = False
            if m[0] > self.hand:
                self.wrap_if_done()

    def back_many(self, uids):
        new = []
        for u in uids:
            m = self.members.get(u)
            if m is None or m[1]:
                new.append(u)
            else:
                m[1] = True
        for u in new:
            self.enter(u)

    def leave(self, uid):
        m = self.members.get(uid)
        if m is None:
            return False
        ahead = self.ahead()
        del self.members[uid]
        if m[1] and m[0] > self.hand:
            if ahead[0] == uid:
                self.hand = m[0]
            self.wrap_if_done()
        return m[1]

    def sweep(self):
        while any(c for _, c, _ in self.members.values()):
            ahead = self.ahead()
            if not ahead:
                self.hand = -1
                continue
            m = self.members[ahead[0]]
            self.hand = m[0]
            if m[2]:
                m[2] = False
                continue
            del self.members[ahead[0]]
            self.wrap_if_done()
            return ahead[0]
        return None


def batch(kind: int, session: int, page: int, count: int):
    """A batch of distinct uids: a range of one session's pages, the same as a list, a list of
    one session's pages out of order, or a list across two sessions (unit by unit, or in runs)."""
    first = uid_of(session, page)
    if kind == 0:
        return range(first, first + count)
    if kind == 1:
        return list(range(first, first + count))
    if kind == 2:
        return [uid_of(session, page + i) for i in reversed(range(0, 2 * count, 2))]
    other = uid_of((session + 1) % 3, page)
    if kind == 3:
        return [u for i in range(count) for u in (first + i, other + i)]
    # a decode step's new pages at layer units: each session's page, its layers (3) in a run
    return [u + 3 * i + layer for i in range(count) for u in (first, other) for layer in range(3)]


OPS = st.lists(
    st.tuples(
        st.integers(0, 8),  # the call
        st.integers(0, 4),  # the batch's kind (or a flag)
        st.integers(0, 2),  # session
        st.integers(0, 12),  # first page
        st.integers(1, 6),  # count
    ),
    max_size=150,
)


def _check(order: SweepOrder, ref: PlainSweep) -> None:
    cands = {u for u, (_, c, _) in ref.members.items() if c}
    assert len(order) == len(cands)
    for u, (_, c, marked) in ref.members.items():
        assert (u in order) == c
        assert order.marked(u) == marked


def _run(ops, order: SweepOrder, scale: int = 1) -> None:
    ref = PlainSweep()
    for op, kind, session, page, count in ops:
        uids = batch(kind, session, page * scale, count * scale)
        if op <= 1:
            order.enter_many(uids, candidate=op == 0)
            for u in uids:
                ref.enter(u, candidate=op == 0)
        elif op == 2:
            order.pin_many(uids, mark=kind % 2 == 1)
            for u in uids:
                ref.pin(u, mark=kind % 2 == 1)
        elif op == 3:
            order.back_many(uids)
            ref.back_many(uids)
        elif op == 4:
            uid = uid_of(session, page)
            assert order.leave(uid) == ref.leave(uid)
        elif op == 5:
            uid = uid_of(session, page)
            order.mark(uid)
            if uid in ref.members:
                ref.members[uid][2] = True
        elif op == 6:
            assert order.sweep() == ref.sweep()
        elif op == 7 and kind >= 3:  # the same victims as extents, in order or sorted
            victims = [v for v in (ref.sweep() for _ in range(count * 2 * scale)) if v is not None]
            increasing = kind == 4
            expected = extents_of(sorted(victims) if increasing else victims)
            assert order.sweep_extents(count * 2 * scale, increasing) == expected
        elif op == 7:
            assert order.sweep_many(count * 2) == [
                v for v in (ref.sweep() for _ in range(count * 2)) if v is not None
            ]
        elif kind == 0:
            order._compact()
        _check(order, ref)
    assert order.sweep_many(len(ref.members) + 1) == [
        v for v in (ref.sweep() for _ in range(len(ref.members) + 1)) if v is not None
    ]


# A session's history enters, is pinned with its hits and released, then a batch of victims.
EXAMPLE = [(0, 0, 0, 0, 6), (1, 1, 1, 0, 4), (2, 1, 0, 2, 3), (7, 0, 0, 0, 2), (3, 0, 0, 2, 3)]
EXAMPLE += [(0, 3, 2, 0, 3), (7, 0, 0, 0, 6)]
# Pinning every candidate ahead of the hand wraps it: the next victim is the oldest candidate.
PIN_ALL_AHEAD = [(0, 0, 0, 0, 4), (5, 0, 0, 0, 1), (6, 0, 0, 0, 1), (2, 0, 0, 2, 2)]
PIN_ALL_AHEAD += [(3, 0, 0, 2, 2), (6, 0, 0, 0, 1)]
# A compaction leaves the hand on a pinned member; released with its neighbours, it is not ahead.
HAND_ON_A_PIN = [(0, 0, 0, 0, 6), (2, 0, 0, 0, 2), (6, 0, 0, 0, 1), (8, 0, 0, 0, 1)]
HAND_ON_A_PIN += [(3, 0, 0, 0, 2), (6, 0, 0, 0, 1), (6, 0, 0, 0, 1), (6, 0, 0, 0, 1)]
HAND_ON_A_PIN += [(0, 0, 0, 6, 1), (6, 0, 0, 0, 1)]

# Two compactions with the hand on a member (the one it passed): it stays on that member.
HAND_ON_A_MEMBER = [(0, 0, 0, 0, 6), (5, 0, 0, 0, 1), (6, 0, 0, 0, 1), (8, 0, 0, 0, 1)]
HAND_ON_A_MEMBER += [(4, 0, 0, 3, 1), (8, 0, 0, 0, 1), (6, 0, 0, 0, 1)]


@settings(max_examples=400, deadline=None)
@given(ops=OPS)
@example(ops=EXAMPLE)
@example(ops=PIN_ALL_AHEAD)
@example(ops=HAND_ON_A_PIN)
@example(ops=HAND_ON_A_MEMBER)
def test_sweep_order_batches_are_the_plain_sweep_one_unit_at_a_time(ops):
    _run(ops, SweepOrder())


@settings(max_examples=400, deadline=None)
@given(ops=OPS)
@example(ops=EXAMPLE)
@example(ops=PIN_ALL_AHEAD)
@example(ops=HAND_ON_A_PIN)
def test_compacting_at_every_step_changes_nothing(ops):
    _run(ops, EagerSweepOrder())


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(ops=OPS)
@example(ops=EXAMPLE)
def test_long_batches_are_the_plain_sweep_one_unit_at_a_time(ops):
    """Batches of up to 240 units: the forms for long batches (numpy's) take the same steps."""
    _run(ops, SweepOrder(), scale=40)


def test_compaction_with_its_slack_keeps_the_hand_among_the_members():
    """A long run of random calls with the real slack: the entry numbers are renumbered many
    times, the victims stay the plain sweep's."""
    rng = random.Random(7)
    ops = [
        (
            rng.choice([0, 0, 0, 2, 3, 3, 5, 6, 7]),
            rng.randrange(4),
            rng.randrange(3),
            rng.randrange(60),
            rng.randrange(1, 7),
        )
        for _ in range(8000)
    ]
    order = SweepOrder()
    _run(ops, order)
    assert len(order._state) < 8000


def test_a_long_release_of_scattered_entries_after_a_compaction():
    """Two sessions' pages entered interleaved, one session pinned and released as a whole (its
    entry numbers every other one: the long scattered form), with the hand left on one of its
    pinned units by a compaction: what is ahead of the hand decides when it wraps."""
    order, ref = SweepOrder(), PlainSweep()
    a, b = uid_of(0, 0), uid_of(1, 0)
    both = [u for i in range(80) for u in (a + i, b + i)]
    order.enter_many(both)
    for u in both:
        ref.enter(u)
    order.pin_many(range(a, a + 80), mark=False)
    for u in range(a, a + 80):
        ref.pin(u, mark=False)
    assert order.sweep() == ref.sweep() == b  # the hand stops on b's entry
    order._compact()  # ... and now on the last member before it: a, pinned
    order.back_many(range(a, a + 80))
    ref.back_many(range(a, a + 80))
    _check(order, ref)
    assert order.sweep_many(158) == [ref.sweep() for _ in range(158)]  # all but a: the hand wraps
    order.enter(b + 100)
    ref.enter(b + 100)
    assert order.sweep() == ref.sweep() == a


def _pin_with_the_hand_on_a_candidate(units: list[int], pinned) -> None:
    """``units`` enter after a unit ``c``; the hand passes c, units[0] and units[1] (marked) and
    takes units[2]; a compaction leaves it on units[1], a candidate. ``pinned`` holds that unit:
    it is not ahead of the hand, so the hand does not wrap before the last candidate ahead (else
    it would take c next)."""
    order, ref = SweepOrder(), PlainSweep()
    c = uid_of(2, 0)
    for batch_ in ([c], units):
        order.enter_many(batch_)
        for u in batch_:
            ref.enter(u)
    for u in (c, units[0], units[1]):
        order.mark(u)
        ref.members[u][2] = True
    assert order.sweep() == ref.sweep() == units[2]
    order._compact()
    order.pin_many(pinned, mark=False)
    for u in pinned:
        ref.pin(u, mark=False)
    _check(order, ref)
    for _ in range(len(ref.members) + 1):  # one at a time: the first wrong victim fails
        assert order.sweep() == ref.sweep()


def test_a_pin_of_consecutive_entries_holding_the_hand():
    """The slice form: the pinned units' entry numbers are consecutive, the hand's among them."""
    a = uid_of(0, 0)
    _pin_with_the_hand_on_a_candidate(list(range(a, a + 8)), range(a, a + 2))


def test_a_long_pin_of_scattered_entries_holding_the_hand():
    """numpy's form: one session's 80 units entered interleaved with another's."""
    a, b = uid_of(0, 0), uid_of(1, 0)
    both = [u for i in range(80) for u in (a + i, b + i)]
    _pin_with_the_hand_on_a_candidate(both, range(b, b + 80))


def test_a_long_batch_across_sessions_with_a_run_listed_twice():
    """A decode step's new pages (layers in runs) with one page listed again: the batch goes
    one unit at a time, the second listing moving that page's units to the newest end."""
    a, b = uid_of(0, 0), uid_of(1, 0)
    step = [u + 3 * i + layer for i in range(20) for u in (a, b) for layer in range(3)]
    for uids in (step + step[:3], step[:3] + step):
        order, ref = SweepOrder(), PlainSweep()
        order.enter_many(uids)
        for u in uids:
            ref.enter(u)
        _check(order, ref)
        n = len(ref.members) + 1
        assert order.sweep_many(n) == [v for v in (ref.sweep() for _ in range(n)) if v is not None]
