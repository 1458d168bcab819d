"""Costs of a batch of one session's units against each unit priced alone, bit for bit
(hypothesis): ``RecoveryCosts.many`` (the ``unit_costs`` of pensieve-physics and cost-belady)
against the cost model asked for each unit (``recovery_cost_s``), while sessions grow between
batches (the table of dropped full pages outlives a batch) and batches reach partly filled pages
and pages past the session's tokens; pensieve-depth's ``unit_costs`` against its ``unit_cost``,
over pages with dropped layers and drops of the call still pending."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import cost_model
from sim.policies import PolicyContext
from sim.policies.cost_belady import CostBelady
from sim.policies.pensieve import (
    Pensieve,
    PensieveFlat,
    PensievePhysics,
    is_run,
    recovery_cost_s,
)
from sim.policies.pensieve_depth import PensieveDepth
from sim.units import SessionKV, Tier, UnitView, uid_of

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16
PAGE_LAYER = BT * COST.kv_bytes_per_token // COST.model.num_layers

# (session, its tokens grow by, first unit, units, stride): one batch
BATCH = st.tuples(
    st.integers(0, 2),
    st.integers(0, 3 * BT),
    st.integers(0, 60),
    st.integers(1, 40),
    st.sampled_from([1, 1, 2, 5]),
)


def as_floats(costs, n: int) -> list[float]:
    """A batch's ``n`` costs as Python floats: a list of floats, or a float64 array's."""
    if isinstance(costs, np.ndarray):
        assert costs.dtype == np.float64 and costs.shape == (n,)
        return costs.tolist()
    assert len(costs) == n and all(type(x) is float for x in costs)
    return costs


def world(layers: int, tier: Tier, cpu_pages: int | None, policy):
    sessions = [SessionKV(i, f"s{i}", 0) for i in range(3)]
    page_bytes = PAGE_LAYER * (1 if layers > 1 else COST.model.num_layers)
    view = UnitView(sessions, page_bytes, layers=layers)
    cpu = None if cpu_pages is None else cpu_pages * page_bytes
    ctx = PolicyContext(tier, BT, COST.model.num_layers, view, COST, cpu)
    return sessions, policy(ctx)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([1, 3, 32]),
    st.sampled_from([Tier.GPU, Tier.CPU]),
    st.sampled_from([None, 0, 1, 100]),  # CPU tier in pages: none, too small, holds a unit
    st.sampled_from([PensievePhysics, CostBelady]),
    st.lists(BATCH, min_size=1, max_size=12),
)
def test_a_batch_is_priced_as_each_unit_alone(layers, tier, cpu_pages, policy, batches):
    sessions, pol = world(layers, tier, cpu_pages, policy)
    for s, grow, first, n, stride in batches:
        sessions[s].tokens += grow
        uids = [uid_of(s, first + k * stride) for k in range(n)]
        want = [recovery_cost_s(pol.ctx, u) for u in uids]
        got = as_floats(pol.unit_costs(uids), len(uids))
        assert [x.hex() for x in got] == [x.hex() for x in want], (s, uids)
        run = range(uids[0], uids[-1] + 1, stride)  # the same units as a range
        got = as_floats(pol.unit_costs(run), len(uids))
        assert [x.hex() for x in got] == [x.hex() for x in want], (s, run)


# A batch long enough that ``is_run`` reads it in numpy: (session, its tokens grow by, first
# unit, units, stride)
LONG_BATCH = st.tuples(
    st.integers(0, 2),
    st.integers(0, 40 * BT),
    st.integers(0, 60),
    st.integers(500, 700),
    st.sampled_from([1, 1, 2]),
)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([1, 32]),
    st.sampled_from([None, 100]),
    st.sampled_from([PensievePhysics, CostBelady]),
    st.lists(LONG_BATCH, min_size=1, max_size=4),
)
def test_a_long_batch_is_priced_as_each_unit_alone(layers, cpu_pages, policy, batches):
    sessions, pol = world(layers, Tier.GPU, cpu_pages, policy)
    for s, grow, first, n, stride in batches:
        sessions[s].tokens += grow
        uids = [uid_of(s, first + k * stride) for k in range(n)]
        want = [recovery_cost_s(pol.ctx, u) for u in uids]
        got = as_floats(pol.unit_costs(uids), len(uids))
        assert [x.hex() for x in got] == [x.hex() for x in want], (s, uids)


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from([0, uid_of(2, 5), (1 << 63) - 300]),  # the last: past int64 from 300 on
    st.integers(1, 1200),
    st.lists(st.tuples(st.integers(0, 1199), st.integers(-2, 2)), max_size=3),
    st.booleans(),
)
def test_is_run_is_the_comparison_with_a_range(head, n, changes, swap):
    # a run, then some units moved by a little (changes) or two swapped: is_run against the
    # plain comparison, on both sides of the length read in numpy
    uids = list(range(head, head + n))
    for i, d in changes:
        uids[i % n] += d
    if swap and n > 2:
        uids[1], uids[-2] = uids[-2], uids[1]
    assert is_run(uids) == (uids == list(range(uids[0], uids[0] + n)))


@given(st.integers(0, 1 << 40), st.integers(1, 600), st.integers(1, 3))
def test_is_run_of_a_range_is_that_of_its_list(head, n, step):
    units = range(head, head + n * step, step)
    assert is_run(units) == is_run(list(units)) == (step == 1 or n == 1)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([1, 32]),
    st.sampled_from([Pensieve, PensieveFlat]),
    st.lists(BATCH, min_size=1, max_size=12),
)
def test_the_formula_prices_a_batch_as_each_unit_alone(layers, policy, batches):
    # pensieve's and pensieve-flat's costs of a session's units at once, as a list and as a
    # range, against unit_cost
    sessions, pol = world(layers, Tier.GPU, None, policy)
    for s, grow, first, n, stride in batches:
        sessions[s].tokens += grow
        uids = [uid_of(s, first + k * stride) for k in range(n)]
        want = [pol.unit_cost(u) for u in uids]
        for batch in (uids, range(uids[0], uids[-1] + 1, stride)):
            got = as_floats(pol.unit_costs(batch), len(uids))
            assert [x.hex() for x in got] == [x.hex() for x in want], (s, batch)


def test_units_of_several_sessions_are_priced_one_by_one():
    sessions, pol = world(3, Tier.CPU, None, PensievePhysics)
    sessions[0].tokens, sessions[1].tokens = 5 * BT, 2 * BT + 3
    uids = [uid_of(0, 4), uid_of(1, 7), uid_of(0, 0), uid_of(1, 1), uid_of(0, 14)]
    assert pol.unit_costs(uids) == [recovery_cost_s(pol.ctx, u) for u in uids]


# (session, its tokens grow by, first unit, units, stride, units dropped: (unit, ...),
# drops pending in the call: (page, layer), ...): one batch
DEPTH_BATCH = st.tuples(
    st.integers(0, 2),
    st.integers(0, 3 * BT),
    st.integers(0, 40),
    st.integers(1, 40),
    st.sampled_from([1, 1, 3]),
    st.lists(st.integers(0, 71), max_size=8),
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 7)), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([2, 8]), st.lists(DEPTH_BATCH, min_size=1, max_size=10))
def test_depth_prices_a_batch_as_each_unit_alone(layers, batches):
    sessions, pol = world(layers, Tier.CPU, None, PensieveDepth)
    assert pol._drops
    for s, grow, first, n, stride, drop, pending in batches:
        sess = sessions[s]
        sess.tokens += grow
        uids = [uid_of(s, first + k * stride) for k in range(n)]
        units = max(u & 0xFFFFFF for u in uids) + 1
        units = -(-units // layers) * layers  # whole pages
        sess.tier.extend(bytes(max(0, units - len(sess.tier))))
        for u in drop:
            if u < len(sess.tier):
                sess.tier[u] = Tier.DROPPED
        pol._pending = {uid_of(s, p * layers): min(ly, layers - 1) for p, ly in pending}
        want = [pol.unit_cost(u) for u in uids]
        got = as_floats(pol.unit_costs(uids), len(uids))
        assert [x.hex() for x in got] == [x.hex() for x in want], (s, uids)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([1, 3, 32]),
    st.sampled_from([Pensieve, PensieveFlat, PensievePhysics, CostBelady]),
    st.lists(BATCH, min_size=1, max_size=8),
)
def test_a_released_span_enters_as_its_list(layers, policy, batches):
    """``release`` of a span (priced as a range) puts each unit in the tournament with the cost
    and time that the release of its list gives, and the victims follow alike."""
    sessions, spans = world(layers, Tier.GPU, None, policy)
    _, lists = world(layers, Tier.GPU, None, policy)
    lists.view.sessions[:] = sessions  # one world: the same sessions, the same tokens
    now = 0.0
    for s, grow, first, n, _ in batches:
        sessions[s].tokens += grow
        now += 1.0
        span = range(uid_of(s, first), uid_of(s, first + n))
        spans.release(span, now)
        lists.release(list(span), now)
        for u in span:
            assert spans._kin.cost_of(u).hex() == lists._kin.cost_of(u).hex()
            assert spans._kin.tau_of(u) == lists._kin.tau_of(u)
    assert spans._kin.pop_many(len(spans), now + 1.0) == lists._kin.pop_many(len(lists), now + 1.0)
