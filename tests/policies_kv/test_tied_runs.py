"""``TiedRuns`` (hypothesis): the same calls on it and on a plain ``KineticMin`` give the same
answers (victims in order, minima, membership, costs and times), under random batches of whole
pages and of scattered units, single adds (also in a batch at one time, as ``take_in`` makes), removals one by one and in batches, and evictions of
one unit to a few pages (also as runs made extents), in both orders (``SINCE``, ``UNTIL``). Costs come from a few values, so
a page's units often tie (one run), sometimes not (runs of one unit)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.kinetic import SINCE, UNTIL, KineticMin
from sim.policies.tied_runs import TiedRuns, extents_of_runs
from sim.units import extents_of, uid_of

L = 3  # layers: units a page
PAGES = 4  # pages a session
SESSIONS = 3
COSTS = [0.0, 0.5, 1.0, 2.0]
TIMES = [0.0, 1.0, 2.5]

session = st.integers(0, SESSIONS - 1)
page = st.integers(0, PAGES - 1)
unit = st.builds(lambda s, u: uid_of(s, u), session, st.integers(0, PAGES * L - 1))
op = st.one_of(
    st.tuples(
        st.just("pages"),
        session,
        page,
        st.integers(1, PAGES),
        st.sampled_from(COSTS),
        st.booleans(),
    ),
    st.tuples(st.just("many"), st.lists(unit, min_size=1, max_size=8)),
    st.tuples(st.just("add"), unit, st.sampled_from(COSTS)),
    st.tuples(st.just("discard"), unit),
    st.tuples(st.just("discard_span"), session, st.integers(0, PAGES * L - 1), st.integers(1, 8)),
    st.tuples(st.just("discard_list"), st.lists(unit, max_size=6, unique=True)),
    st.tuples(st.just("pop"), st.integers(1, 3 * L + 1), st.booleans()),
    st.tuples(st.just("peek")),
    st.tuples(st.just("extents"), st.integers(1, 3 * L + 1), st.booleans()),
    st.tuples(st.just("hit"), unit),
    st.tuples(st.just("batch"), unit, st.sampled_from(COSTS), st.integers(1, 2)),
)


def _same(a: KineticMin, b: TiedRuns) -> None:
    assert len(a) == len(b)
    assert sorted(a.uids()) == sorted(b.uids())
    for u in a.uids():
        assert u in b
        assert (a.cost_of(u), a.tau_of(u)) == (b.cost_of(u), b.tau_of(u))


@settings(max_examples=300, deadline=None)
@given(
    mode=st.sampled_from([SINCE, UNTIL]),
    ops=st.lists(st.tuples(op, st.sampled_from(TIMES), st.floats(0, 2)), max_size=40),
)
def test_tied_runs_answer_as_the_plain_tournament(mode, ops) -> None:
    plain, tied = KineticMin(mode), TiedRuns(KineticMin(mode), L)
    now = 3.0
    for (name, *args), tau, step in ops:
        now += step
        tau = now - tau if mode is SINCE else now + tau
        if name == "pages":
            s, p, n, cost, tied_pages = args  # each page's units of one cost, or of a few
            p = min(p, PAGES - n)
            uids = range(uid_of(s, p * L), uid_of(s, (p + n) * L))
            costs = [cost if tied_pages else COSTS[u % 2] for u in uids]
            plain.add_many(uids, costs, tau, now)
            tied.add_many(uids, costs, tau, now)
        elif name == "many":
            (uids,) = args
            costs = [COSTS[u % len(COSTS)] for u in uids]
            plain.add_many(uids, costs, tau, now)
            tied.add_many(uids, costs, tau, now)
        elif name == "add":
            u, cost = args
            plain.add(u, cost, tau, now)
            tied.add(u, cost, tau, now)
        elif name == "discard":
            (u,) = args
            assert plain.discard(u) == tied.discard(u)
        elif name == "discard_span":
            s, lo, n = args
            span = range(uid_of(s, lo), uid_of(s, min(PAGES * L, lo + n)))
            plain.discard_many(list(span))
            tied.discard_many(span)
        elif name == "discard_list":
            (uids,) = args
            plain.discard_many(uids)
            tied.discard_many(uids)
        elif name == "pop":
            n, in_uid_order = args
            assert plain.pop_many(n, now, in_uid_order) == tied.pop_many(n, now, in_uid_order)
        elif name == "extents":  # the victims as runs, then extents (in uid order: dropped)
            n, in_uid_order = args
            victims = plain.pop_many(n, now)
            want = extents_of(sorted(victims) if in_uid_order else victims)
            assert extents_of_runs(tied.pop_runs(n, now), in_uid_order) == want
        elif name == "peek":
            assert plain.peek(now) == tied.peek(now)
        elif name == "batch":  # take_in's form: inserts and minima at one time, in a batch
            u, cost, n = args
            for kin in (plain, tied):
                kin.begin_batch(now)
                kin.add(u, cost, tau, now)
            for _ in range(n):
                victim = plain.peek(now)
                assert tied.peek(now) == victim
                if victim is not None:
                    assert plain.discard(victim) and tied.discard(victim)
            plain.end_batch()
            tied.end_batch()
        else:  # a hit: the candidate's time changes, its cost stays
            (u,) = args
            if u in plain:
                plain.add(u, plain.cost_of(u), tau, now)
                tied.add(u, tied.cost_of(u), tau, now)
        _same(plain, tied)
    assert plain.pop_many(len(plain), now + 1.0) == tied.pop_many(len(tied), now + 1.0)
