"""A plan (``plan_pinned``) whose units are not the fresh pages the engine names: some members of
S or M (pinned or not), some ghosts, some repeated. The run form's batch (which checks the plan's
units before the eviction and enters them after it without checking again, where they are fresh
and none is a ghost) against the one-entry-per-unit form, call for call: the victims, G, and the
order of S and M."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_batches import UniformView
from test_contract import PAGE

from sim.policies import PolicyContext
from sim.policies.s3fifo import S3FIFO
from sim.policies.s3fifo_runs import RunS3FIFO
from sim.units import Tier, uid_of

SESSIONS, PAGES = 4, 12


class PerUnitS3FIFO(S3FIFO):
    """S3-FIFO with one entry per unit (``S3FIFO`` builds the run form, but not for a subclass)."""


def _pair(capacity: int) -> list[S3FIFO]:
    out = []
    for form in (S3FIFO, PerUnitS3FIFO):
        view = UniformView()
        for s in range(SESSIONS):
            for p in range(PAGES):
                view.sizes[uid_of(s, p)] = PAGE
        pol = form(PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=1, view=view))
        pol.set_capacity(capacity * PAGE)
        out.append(pol)
    assert type(out[0]) is RunS3FIFO and type(out[1]) is PerUnitS3FIFO
    return out


def _state(pol: S3FIFO):
    """S's and M's candidates in order, G, and the bytes held."""
    if isinstance(pol, RunS3FIFO):
        s, m = list(pol._s.candidates()), list(pol._m.candidates())
    else:
        s, m = list(pol._q[0]._order.candidates()), list(pol._q[1]._order.candidates())
    return s, m, list(pol._ghost), pol._budget.resident


UID = st.tuples(st.integers(0, SESSIONS - 1), st.integers(0, PAGES - 1))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("enter"), UID, st.integers(1, 4), st.booleans()),
        st.tuples(st.just("release"), st.integers(0, SESSIONS - 1)),
        st.tuples(st.just("hit"), st.integers(0, SESSIONS - 1)),
        st.tuples(st.just("evict"), st.integers(1, 4)),
        st.tuples(st.just("plan"), st.lists(UID, min_size=1, max_size=8), st.integers(0, 3)),
    ),
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(OPS, st.integers(4, 24))
def test_a_plan_of_any_units_equals_the_per_unit_form(ops, capacity):
    pols = _pair(capacity)
    now = 0.0
    for op in ops:
        now += 1.0
        results = []
        for pol in pols:
            got: list = []
            every = (uid_of(s, p) for s in range(SESSIONS) for p in range(PAGES))
            members = [u for u in every if _member(pol, u)]
            if op[0] == "enter":
                (s, p), k, pinned = op[1], op[2], op[3]
                uids = [uid_of(s, q) for q in range(p, min(p + k, PAGES))]
                pol.insert_many([u for u in uids if u not in members], now, pinned)
            elif op[0] == "release":
                mine = [u for u in members if u >> 24 == op[1]]
                pol.release(mine, now)
            elif op[0] == "hit":
                mine = [u for u in members if u >> 24 == op[1]]
                pol.acquire(mine, now)
                pol.release(mine, now)
            elif op[0] == "evict":
                got.append(pol.evict_extents(op[1] * PAGE, now))
            else:
                uids = [uid_of(s, p) for s, p in op[1]]
                before = [min(i // 2 + op[2] % 2, op[2]) for i in range(len(uids))]
                pol.plan_pinned(uids, before)
                got.append(pol.evict_extents(max(op[2], 1) * PAGE, now))
                pol.insert_many(uids, now, True)
            got.append(_state(pol))
            results.append(got)
        assert results[0] == results[1], op


def _member(pol: S3FIFO, uid: int) -> bool:
    if isinstance(pol, RunS3FIFO):
        return pol._s.is_member(uid) or pol._m.is_member(uid)
    return uid in pol._queue_of
