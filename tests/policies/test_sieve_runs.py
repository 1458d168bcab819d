"""SIEVE's queue with its uids kept by run (``RunSweepOrder``, the form at layer units) against
``SweepOrder``, which keeps them by unit, and against SIEVE written plainly (hypothesis).

The twin runs the same calls on both and compares every answer and the whole state after each
call: the state bytes (member, candidate, mark per entry number), the hand, the candidates ahead
of it. The two number their entries alike (a unit each, in order of entry, compacted by the same
rule), so any difference in a victim, a mark or the hand's place shows. The uids are a few
sessions' pages of a few layers each: ranges, a session's list, a decode step's pages across
sessions (a page's layers a run), lists with a uid twice, units one at a time."""

from __future__ import annotations

import copy

from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_sweep_order import (
    EXAMPLE,
    HAND_ON_A_MEMBER,
    HAND_ON_A_PIN,
    OPS,
    PIN_ALL_AHEAD,
    PlainSweep,
    _check,
    _run,
)

from sim.policies.base import PolicyContext
from sim.policies.sieve import RunSweepOrder, Sieve
from sim.policies.structures import SweepOrder
from sim.units import UNIT_BITS, extents_of, uid_of

LAYERS = 4


class EagerRunSweepOrder(RunSweepOrder):
    def _make_room_for(self, k: int) -> None:
        if len(self._state) - 1 > self._members:  # any member left: compact
            self._compact()


class EagerSweepOrder(SweepOrder):
    def _make_room_for(self, k: int) -> None:
        if len(self._state) - 1 > self._members:
            self._compact()


# -- against the plain sweep (test_sweep_order's model and calls) --------------------------------


@settings(max_examples=300, deadline=None)
@given(ops=OPS, hint=st.sampled_from([1, 3, 5]))
@example(ops=EXAMPLE, hint=3)
@example(ops=PIN_ALL_AHEAD, hint=3)
@example(ops=HAND_ON_A_PIN, hint=3)
@example(ops=HAND_ON_A_MEMBER, hint=3)
def test_run_sweep_order_is_the_plain_sweep(ops, hint):
    _run(ops, RunSweepOrder(run_hint=hint))


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
@example(ops=EXAMPLE)
@example(ops=HAND_ON_A_PIN)
def test_compacting_at_every_step_changes_nothing(ops):
    _run(ops, EagerRunSweepOrder(run_hint=3))


# -- against SweepOrder, state and all ------------------------------------------------------------


def _uids(kind: int, session: int, page: int, count: int, other: int) -> object:
    """A batch of layer units (``LAYERS`` a page, uid = page * LAYERS + layer position)."""
    first = uid_of(session, page * LAYERS)
    if kind == 0:  # a session's pages, a range (a history coming in, a release)
        return range(first, first + count * LAYERS)
    if kind == 1:  # the same, listed
        return list(range(first, first + count * LAYERS))
    if kind == 2:  # a decode step's new pages: each session's page, its layers a run
        second = uid_of(other, page * LAYERS)
        return [
            base + i * LAYERS + layer
            for i in range(count)
            for base in (first, second)
            for layer in range(LAYERS)
        ]
    if kind == 3:  # some layers of some pages (a partial bring-in: runs of other lengths)
        return [first + i * LAYERS + layer for i in range(count) for layer in range(1, LAYERS)]
    if kind == 4 and count > 2:  # a session's pages listed with two units swapped mid-run
        listed = list(range(first, first + count * LAYERS))
        listed[LAYERS + 1], listed[LAYERS + 2] = listed[LAYERS + 2], listed[LAYERS + 1]
        return listed
    if kind == 4:  # a page listed twice (a uid twice: one unit at a time)
        page_ = list(range(first, first + LAYERS))
        return page_ + list(range(first + LAYERS, first + count * LAYERS)) + page_
    # units one at a time, across sessions, out of order
    return [uid_of(other, page * LAYERS + 1), first + 2, uid_of(other, page * LAYERS), first]


TWIN_OPS = st.lists(
    st.tuples(
        st.integers(0, 9),  # the call
        st.integers(0, 5),  # the batch's kind
        st.integers(0, 3),  # session
        st.integers(0, 10),  # first page
        st.integers(1, 5),  # pages
        st.integers(0, 3),  # the other session
    ),
    max_size=120,
)


def _same(a: SweepOrder, b: RunSweepOrder) -> None:
    assert bytes(b._state) == bytes(a._state)
    assert (b.hand, b.ahead, b._n, b._members) == (a.hand, a.ahead, a._n, a._members)
    assert len(b) == len(a)


def _twin(ops, a: SweepOrder, b: RunSweepOrder) -> None:
    for op, kind, session, page, count, other in ops:
        uids = _uids(kind, session, page, count, other)
        one = uid_of(session, page * LAYERS + count % LAYERS)
        if op <= 1:
            a.enter_many(uids, candidate=op == 0)
            b.enter_many(uids, candidate=op == 0)
        elif op == 2:
            a.pin_many(uids, mark=kind % 2 == 0)
            b.pin_many(uids, mark=kind % 2 == 0)
        elif op == 3:
            a.back_many(uids)
            b.back_many(uids)
        elif op == 4:
            assert b.leave(one) == a.leave(one)
        elif op == 5:
            a.mark(one)
            b.mark(one)
        elif op == 6:
            assert b.sweep_extents(count * LAYERS + kind, kind % 2 == 0) == a.sweep_extents(
                count * LAYERS + kind, kind % 2 == 0
            )
        elif op == 7:
            assert b.sweep_many(count + kind) == a.sweep_many(count + kind)
        elif op == 8:
            a.enter(one, candidate=kind != 1)
            b.enter(one, candidate=kind != 1)
        else:
            assert b.sweep() == a.sweep()
        _same(a, b)
        for u in (one, uid_of(other, page * LAYERS)):
            assert (u in b) == (u in a)
            assert b.marked(u) == a.marked(u)
    n = a._members + 1
    assert b.sweep_many(n) == a.sweep_many(n)
    _same(a, b)


# A decode step's pages enter, a session's history is pinned with its hits, part is swept, the
# rest released; then a page listed twice and a single unit's leave with the hand before it.
TWIN_EXAMPLE = [(0, 0, 0, 0, 3, 1), (0, 2, 1, 2, 2, 2), (2, 0, 0, 0, 3, 0), (6, 1, 0, 0, 2, 0)]
TWIN_EXAMPLE += [(3, 0, 0, 0, 3, 0), (0, 4, 2, 0, 2, 0), (4, 0, 1, 2, 1, 0), (9, 0, 0, 0, 1, 0)]


@settings(max_examples=300, deadline=None)
@given(ops=TWIN_OPS, hint=st.sampled_from([1, LAYERS, 7]))
@example(ops=TWIN_EXAMPLE, hint=LAYERS)
def test_run_sweep_order_is_sweep_order_state_and_all(ops, hint):
    _twin(ops, SweepOrder(), RunSweepOrder(run_hint=hint))


# A page of another session swept from between two pinned pages of one, a candidate page after
# them: the compaction joins the two into one run with the hand inside it (on the first page's
# last unit), so their release puts only the second page ahead of the hand.
HAND_INSIDE_A_RUN = [(0, 0, 0, 0, 1, 0), (0, 0, 1, 0, 1, 0), (0, 0, 0, 1, 1, 0), (0, 0, 3, 0, 1, 0)]
HAND_INSIDE_A_RUN += [(2, 1, 0, 0, 2, 0), (7, 0, 0, 0, 4, 0), (0, 0, 2, 0, 1, 0)]
HAND_INSIDE_A_RUN += [(3, 0, 0, 0, 2, 0)]


@settings(max_examples=150, deadline=None)
@given(ops=TWIN_OPS)
@example(ops=TWIN_EXAMPLE)
@example(ops=HAND_INSIDE_A_RUN)
def test_eager_compaction_twins(ops):
    """Compacted before every batch: the runs and segments rebuilt from the members each time."""
    _twin(ops, EagerSweepOrder(), EagerRunSweepOrder(run_hint=LAYERS))


def test_long_random_twin_with_the_real_slack():
    """Thousands of calls with the compaction rule (its slack made small): the entry numbers are
    renumbered many times, both forms stay in step."""
    import random

    rng = random.Random(11)
    ops = [
        (
            rng.choice([0, 0, 0, 2, 3, 3, 4, 5, 6, 7, 9]),
            rng.randrange(6),
            rng.randrange(4),
            rng.randrange(40),
            rng.randrange(1, 6),
            rng.randrange(4),
        )
        for _ in range(4000)
    ]

    class SmallSlack(SweepOrder):
        compact_slack = 64

    class SmallSlackRuns(RunSweepOrder):
        compact_slack = 64

    _twin(ops, SmallSlack(), SmallSlackRuns(run_hint=LAYERS))


# -- the runs of a batch ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    uids=st.lists(st.integers(0, 3).flatmap(lambda s: st.integers(0, 40)), max_size=60),
    sessions=st.lists(st.integers(0, 2), min_size=60, max_size=60),
    hint=st.sampled_from([1, 2, 4, 32]),
)
@example(uids=[0, 1, 2, 3, 4, 6, 5, 7], sessions=[0] * 60, hint=1)  # (a gallop's step past 6, 5)
@example(uids=[0, 2, 1, 3, 9, 10], sessions=[0] * 60, hint=4)  # (a guess's ends hold, not 2, 1)
def test_runs_of_a_list_are_its_consecutive_stretches_within_a_session(uids, sessions, hint):
    listed = [uid_of(s, u) for s, u in zip(sessions, uids, strict=False)]
    got = RunSweepOrder(run_hint=hint)._runs_of(listed)
    assert [u for a, s in got for u in range(a, s)] == listed  # the same uids, in order
    assert all(a >> UNIT_BITS == (s - 1) >> UNIT_BITS for a, s in got)  # within a session
    # maximal: a run ends where the next uid does not follow it (or a session ends)
    assert all(s != a2 or a2 & ((1 << UNIT_BITS) - 1) == 0 for (_, s), (a2, _) in zip(got, got[1:]))


def test_runs_at_a_session_bound_stay_apart_through_a_compaction():
    """A session's last units and the next session's first are consecutive uids, entered
    together: they are two runs (each session's segments its own), also once a compaction has
    rebuilt the runs from the members (the plain sweep: ``SweepOrder`` would hold a page list of
    2**24 entries)."""
    top = uid_of(1, 0)
    listed = [uid_of(2, 0), top - 2, top - 1, top, top + 1, uid_of(2, 1)]
    order, ref = EagerRunSweepOrder(run_hint=2), PlainSweep()
    for uids in (listed, [uid_of(3, 0)]):  # (the second batch compacts first)
        order.enter_many(uids)
        for u in uids:
            ref.enter(u)
    assert order.sweep() == ref.sweep() == uid_of(2, 0)
    order.enter(uid_of(3, 1))  # (a compaction: the runs rebuilt)
    ref.enter(uid_of(3, 1))
    order.pin_many(range(top, top + 2), mark=True)
    for u in range(top, top + 2):
        ref.pin(u, mark=True)
    assert order.leave(top - 1) == ref.leave(top - 1)
    order.back_many([top + 1, top])
    ref.back_many([top + 1, top])
    _check(order, ref)
    n = len(ref.members) + 1
    assert order.sweep_many(n) == [v for v in (ref.sweep() for _ in range(n)) if v is not None]


def test_a_range_across_a_session_bound_is_split_there():
    top = uid_of(1, 0)
    got = RunSweepOrder()._runs_of(range(top - 3, top + 2))
    assert got == [(top - 3, top), (top, top + 2)]
    for hint in (1, 2, 5, 8):  # (5: the guess spans the whole list)
        assert RunSweepOrder(run_hint=hint)._runs_of(list(range(top - 3, top + 2))) == got


# -- SIEVE at layer units ------------------------------------------------------------------------


class _View:
    layers = LAYERS


def test_sieve_keeps_its_queue_by_run_only_at_layer_units():
    layered = Sieve(PolicyContext(tier=0, block_tokens=16, num_layers=LAYERS, view=_View()))
    assert type(layered._order) is RunSweepOrder and layered._order.run_hint == LAYERS
    plain = Sieve(PolicyContext(tier=0, block_tokens=16, num_layers=LAYERS))
    assert type(plain._order) is SweepOrder


def test_a_peek_on_the_runs_is_a_dry_run():
    """``peek`` sweeps a deep copy: the runs and segments copy with the bytes."""
    order = RunSweepOrder(run_hint=LAYERS)
    order.enter_many(range(uid_of(0, 0), uid_of(0, 8)))
    order.enter_many(list(range(uid_of(1, 0), uid_of(1, 8))))
    order.mark(uid_of(0, 0))
    dry = copy.deepcopy(order)
    assert dry.sweep_extents(6, False) == [(uid_of(0, 1), uid_of(0, 7))]
    assert order.sweep_many(2) == [uid_of(0, 1), uid_of(0, 2)]  # the original untouched
    assert extents_of(order.sweep_many(100)) == [
        (uid_of(0, 3), uid_of(0, 8)),
        (uid_of(1, 0), uid_of(1, 8)),
        (uid_of(0, 0), uid_of(0, 1)),
    ]
