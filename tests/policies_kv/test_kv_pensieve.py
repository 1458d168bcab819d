"""Pensieve, pensieve-flat, pensieve-physics: hand-computed orders and exactness of the kinetic
tournament against a brute-force reference in exact arithmetic."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from kv_helpers import FakeCost, HandView, drain, run_random, since_key
from kv_helpers import session as kv_session

from costmodels import (
    BatchShape,
    attention_pairs,
    cost_model,
    pipelined_time_uniform,
    recompute_s,
    swap_in_s,
)
from sim.policies import PolicyContext, make_policy
from sim.policies.kinetic import SINCE, UNTIL, KineticMin
from sim.policies.pensieve import Pensieve, PensieveFlat, PensievePhysics
from sim.units import SessionKV, Tier

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16


# -- hand-built units: kv_helpers' view, cost stand-in and drain ---------------------------------
def session(index: int, tokens: int) -> SessionKV:
    return kv_session(index, tokens)


def ctx(view, tier=Tier.GPU, block_tokens=BT, num_layers=4, cost=None, cpu_kv_bytes=None):
    return PolicyContext(
        tier=tier,
        block_tokens=block_tokens,
        num_layers=num_layers,
        view=view,
        cost=cost,
        cpu_kv_bytes=cpu_kv_bytes,
    )


# -- the worked example --------------------------------------------------------------------------
# L = 4 layers, block_tokens = 100; alpha = 0.001 s/token, beta = 0.02 s, non_attention = 0.03 s, so
# base_cost = 0.001 * context + 0.05 with context = the tokens before the unit's chunk. now = 100.
#
#   unit  session (tokens, pages)  page  context  layer  layer_w         pos_w  base  cost     idle  value
#   U1    A (1000, 10)             9     900      0      (4-0)/4 = 1     10/10  0.95  0.95     10    0.095
#   U2    A (1000, 10)             0     0        0      1               1/10   0.05  0.005    10    0.0005
#   U3    B (200, 2)               1     100      3      (4-3)/4 = 0.25  2/2    0.15  0.0375   2     0.01875
#   U4    C (500, 5)               2     200      all    (4+1)/8 = 0.625 3/5    0.25  0.09375  40    0.00234375
#
# The numbers give U2 < U4 < U3 < U1. (Ordering by cost alone would give U2, U3, U4, U1 and by idle
# time alone U4, U1/U2, U3: neither is Pensieve.)
A_CTX = {"alpha": 0.001, "beta": 0.02, "non_attention": 0.03}


def worked_example(cls=Pensieve):
    cost = FakeCost(**A_CTX)
    view = HandView()
    pol = cls(ctx(view, block_tokens=100, num_layers=4, cost=cost))
    a, b, c = session(0, 1000), session(1, 200), session(2, 500)
    view.unit(1, a, 9, last_access=90.0, layer=0)
    view.unit(2, a, 0, last_access=90.0, layer=0)
    view.unit(3, b, 1, last_access=98.0, layer=3)
    view.unit(4, c, 2, last_access=60.0, layer=-1)
    for uid in (1, 2, 3, 4):
        pol.insert(uid, 100.0)
    return pol, view, cost


def test_worked_example_values_follow_the_formula():
    pol, _, cost = worked_example()
    assert cost.asked == [100]  # a recomputed chunk is an append of block_tokens new tokens
    expected_cost = {1: 0.95, 2: 0.005, 3: 0.0375, 4: 0.09375}
    expected_value = {1: 0.095, 2: 0.0005, 3: 0.01875, 4: 0.00234375}
    for k, c in expected_cost.items():
        assert pol.unit_cost(k) == pytest.approx(c, rel=1e-12)
        assert pol.value(k, 100.0) == pytest.approx(expected_value[k], rel=1e-12)


def test_worked_example_order_follows_the_numbers():
    pol, _, _ = worked_example()
    assert drain(pol, 100.0) == [2, 4, 3, 1]


def test_order_changes_with_time():
    # U4 = 0.09375/(t-60) and U3 = 0.0375/(t-98) cross where 0.09375(t-98) = 0.0375(t-60),
    # t = 6.9375/0.05625 = 123.33...: at t=120 U4 (0.0015625) < U3 (0.0017045); at t=130
    # U3 (0.0375/32 = 0.0011719) < U4 (0.09375/70 = 0.0013393).
    pol, _, _ = worked_example()
    assert pol.evict(100.0) == 2
    assert pol.peek(100.0) == 4
    assert pol.peek(120.0) == 4
    assert pol.peek(130.0) == 3
    assert pol.evict(130.0) == 3
    assert drain(pol, 130.0) == [4, 1]


def test_flat_variant_drops_the_weights():
    # costs = base: U1 = 0.95, U2 = 0.05, U3 = 0.15, U4 = 0.25; values at 100: U1 = 0.095,
    # U2 = 0.005, U3 = 0.075, U4 = 0.00625 -> U2, U4, U3, U1.
    pol, _, _ = worked_example(PensieveFlat)
    assert drain(pol, 100.0) == [2, 4, 3, 1]


def test_flat_and_weighted_differ_where_the_weights_matter():
    # Two units of one chunk, layers 0 and 3: flat prices them alike (tie: lower uid first),
    # weighted sends the back layer first.
    cost = FakeCost(**A_CTX)
    for cls, order in ((PensieveFlat, [1, 2]), (Pensieve, [2, 1])):
        view = HandView()
        pol = cls(ctx(view, block_tokens=100, num_layers=4, cost=cost))
        s = session(0, 300)
        view.unit(1, s, 1, last_access=0.0, layer=0)
        view.unit(2, s, 1, last_access=0.0, layer=3)
        pol.insert(1, 10.0)
        pol.insert(2, 10.0)
        assert drain(pol, 10.0) == order, cls.name


def test_idle_zero_is_infinite_value_ordered_by_cost():
    pol, view, _ = worked_example()
    late = view.unit(9, session(5, 50), 0, last_access=100.0, layer=0)  # cost 1 * 1 * 0.05, idle 0
    pol.insert(late, 100.0)
    assert pol.value(late, 100.0) == math.inf
    assert drain(pol, 100.0) == [2, 4, 3, 1, 9]


def test_hit_makes_a_unit_fresh():
    pol, _, _ = worked_example()
    pol.access(4, 100.0)  # U4 used now: idle 0, value +inf
    assert drain(pol, 100.0) == [2, 3, 1, 4]


def test_time_must_not_run_backwards():
    pol, _, _ = worked_example()
    pol.peek(100.0)
    with pytest.raises(ValueError, match="backwards"):
        pol.peek(99.0)


def test_needs_a_cost_model():
    with pytest.raises(ValueError, match="PolicyContext.cost"):
        Pensieve(ctx(HandView(), cost=None))


def test_registered_and_built_from_the_real_cost_model():
    view = HandView()
    pol = make_policy("pensieve", ctx(view, num_layers=32, cost=COST))
    k = COST.pensieve_constants(BT)
    x = view.unit(1, session(0, 100), 6)  # the last of 7 pages, all layers: weight (33/64) * 1
    pol.insert(x, 0.0)  # 6 pages of 16 tokens before it: context 96
    assert pol.unit_cost(x) == pytest.approx((33 / 64) * (k.alpha * 96 + k.beta + k.non_attention))


# -- pensieve-physics ----------------------------------------------------------------------------
def test_recovery_costs_follow_the_cost_model():
    L, model, prof = 32, COST.model, COST.profile
    view = HandView()
    s = session(0, 10 * BT)
    size = BT * COST.kv_bytes_per_token
    head, tail = view.unit(1, s, 0), view.unit(2, s, 9)
    one_layer = view.unit(3, s, 9, layer=5)
    page = view.unit(4, s, 9, size=size)
    dropped = PensievePhysics(ctx(view, tier=Tier.CPU, num_layers=32, cost=COST))
    demoted = PensievePhysics(
        ctx(view, tier=Tier.GPU, num_layers=32, cost=COST, cpu_kv_bytes=10 * size)
    )

    def by_hand(n, before, layers):
        gemm = n * 2 * model.linear_params_per_layer / prof.linear.flops
        attn = (
            attention_pairs(n, before)
            * 4
            * model.num_heads
            * model.head_dim
            / prof.prefill_attn.flops
        )
        per_layer = gemm + COST.elementwise_s(n) + attn
        return layers * per_layer

    assert dropped.unit_cost(head) == pytest.approx(by_hand(BT, 0, L))
    assert dropped.unit_cost(tail) == pytest.approx(by_hand(BT, 9 * BT, L))
    assert dropped.unit_cost(tail) > dropped.unit_cost(head)  # attention grows with position
    assert dropped.unit_cost(one_layer) == pytest.approx(by_hand(BT, 9 * BT, 6))  # layers 0..5
    t_x = COST.copy_s("h2d", size, L) / L
    t_c = COST.layer_s(BatchShape.prefill(BT, s.tokens))
    stall = pipelined_time_uniform(L, t_x, t_c, prof.overlap.compute_slowdown) - L * t_c
    assert demoted.unit_cost(page) == pytest.approx(stall)
    assert 0 < demoted.unit_cost(page) < COST.copy_s("h2d", size, L)  # pipelining hides part


def test_physics_tier_decides_between_recompute_and_swap():
    size = BT * COST.kv_bytes_per_token
    view = HandView()
    s = session(0, 10 * BT)
    x = view.unit(1, s, 9, size=size)
    gpu_with_cpu = PensievePhysics(
        ctx(view, tier=Tier.GPU, num_layers=32, cost=COST, cpu_kv_bytes=10 * size)
    )
    gpu_small_cpu = PensievePhysics(
        ctx(view, tier=Tier.GPU, num_layers=32, cost=COST, cpu_kv_bytes=size - 1)
    )
    gpu_no_cpu = PensievePhysics(ctx(view, tier=Tier.GPU, num_layers=32, cost=COST))
    cpu = PensievePhysics(
        ctx(view, tier=Tier.CPU, num_layers=32, cost=COST, cpu_kv_bytes=10 * size)
    )
    assert gpu_with_cpu.unit_cost(x) == swap_in_s(COST, size, 1, s.tokens, BT)
    for pol in (gpu_small_cpu, gpu_no_cpu, cpu):
        assert pol.unit_cost(x) == recompute_s(COST, BT, 9 * BT)


def test_physics_order_prefers_cheap_head_pages_when_dropping():
    # CPU tier (victims are dropped): two pages of one session, same idle time -> the head page
    # (fewer attention pairs) is cheaper to recompute and goes first; a page idle far longer goes
    # before both.
    view = HandView()
    s = session(0, 10 * BT)
    pol = PensievePhysics(ctx(view, tier=Tier.CPU, num_layers=32, cost=COST))
    head, tail = view.unit(1, s, 0, last_access=50.0), view.unit(2, s, 9, last_access=50.0)
    old = view.unit(3, session(1, 10 * BT), 9, last_access=0.0)
    for x in (tail, head, old):
        pol.insert(x, 60.0)
    # values at 60: old = r9/60, head = r0/10, tail = r9/10 with r0 < r9 and r9/60 < r0/10 here
    r0, r9 = recompute_s(COST, BT, 0), recompute_s(COST, BT, 9 * BT)
    assert r9 / 60 < r0 / 10 < r9 / 10
    assert drain(pol, 60.0) == [3, 1, 2]


# -- exactness against brute force ---------------------------------------------------------------
@pytest.mark.parametrize("cls", [Pensieve, PensieveFlat, PensievePhysics])
@pytest.mark.parametrize("seed", [1, 2])
def test_random_traffic_matches_brute_force(cls, seed):
    view = HandView()
    pol = cls(
        ctx(
            view,
            num_layers=4,
            cost=COST if cls is PensievePhysics else FakeCost(1e-3, 0.02, 0.03),
            cpu_kv_bytes=4 << 20,
        )
    )
    assert run_random(pol, since_key, seed, layers=seed == 2, cost_of=pol.unit_cost) > 100


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_exact_ties_and_crossings_on_integer_times(seed):
    # alpha = beta = 1, non_attention = 0: costs are small rationals, times integers, so values tie
    # and cross exactly at representable times; the order must still be the exact one. (beta > 0
    # as in every real profile: a leading chunk has context 0, and a cost of 0 at idle 0 would be
    # 0/0.)
    view = HandView()
    pol = Pensieve(ctx(view, num_layers=4, cost=FakeCost(1.0, 1.0, 0.0)))
    assert (
        run_random(pol, since_key, seed, integer_times=True, layers=True, cost_of=pol.unit_cost)
        > 100
    )


def _exact_key(mode: str, uid: int, c: float, tau: float, now: float):
    if mode == "since":
        idle = Fraction(now) - Fraction(tau)
        v = (1, 0) if idle == 0 else (0, Fraction(c) / idle)
        return v, c, tau, uid
    if tau == math.inf:
        v = (0, Fraction(0))
    elif tau <= now:
        v = (1, Fraction(0))
    else:
        v = (0, Fraction(c) / (Fraction(tau) - Fraction(now)))
    return v, c, -tau, uid


@pytest.mark.parametrize("mode", ["since", "until"])
def test_kinetic_min_many_groups(mode):
    # Direct stress of the tournament: a few hundred groups (it grows from 64 leaves), costs with
    # equal values, queries at increasing times, against brute force in exact arithmetic.
    rng = random.Random(11)
    kin = KineticMin(SINCE if mode == "since" else UNTIL)
    live = {}
    now = 0.0
    key = 0
    for step in range(2000):
        now += rng.choice([0.0, 0.25, 1.0, rng.random()])
        if rng.random() < 0.45 or not live:
            key += 1
            tau = (
                now - rng.choice([0, 1, 2, 3.5, rng.random() * 50])
                if mode == "since"
                else rng.choice([math.inf, now + rng.choice([1, 2, 4, 8]), now + rng.random() * 30])
            )
            c = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, rng.random()])
            kin.add(key, c, tau, now)
            live[key] = (c, tau)
        elif rng.random() < 0.25:
            k = rng.choice(sorted(live))
            del live[k]
            kin.discard(k)
        else:
            best = min(live, key=lambda uid, t=now: _exact_key(mode, uid, *live[uid], t))
            assert kin.peek(now) == best, f"step {step} t={now}"
        assert len(kin) == len(live)


@pytest.mark.parametrize("mode", ["since", "until"])
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])  # seed 2: -m slow
def test_kinetic_batches_match_one_at_a_time(mode, seed):
    # add_many / discard_many / pop_many against brute force in exact arithmetic: batches of one
    # time (a session's units) with repeated and distinct costs, batch removals, and runs of
    # minima taken at once.
    rng = random.Random(seed)
    kin = KineticMin(SINCE if mode == "since" else UNTIL)
    live: dict[int, tuple[float, float]] = {}
    now, key = 0.0, 0
    for step in range(600):
        now += rng.choice([0.0, 0.5, 1.0, rng.random()])
        op = rng.random()
        if op < 0.45 or not live:
            tau = (
                now - rng.choice([0, 1, 2, rng.random() * 20])
                if mode == "since"
                else rng.choice([math.inf, now + rng.choice([1, 4]), now + rng.random() * 30])
            )
            n = rng.randint(1, 40)
            uids = list(range(key + 1, key + n + 1))
            key += n
            costs = [rng.choice([0.25, 1.0, 3.0, rng.random()]) for _ in uids]
            kin.add_many(uids, costs, tau, now)
            live.update({u: (c, tau) for u, c in zip(uids, costs)})
        elif op < 0.6:
            gone = rng.sample(sorted(live), min(len(live), rng.randint(1, 30)))
            kin.discard_many(gone)
            for u in gone:
                del live[u]
        else:
            n = rng.randint(1, 60)
            got = kin.pop_many(n, now)
            want = []
            for _ in range(min(n, len(live))):
                best = min(live, key=lambda uid, t=now: _exact_key(mode, uid, *live[uid], t))
                want.append(best)
                del live[best]
            assert got == want, f"step {step} t={now}"
        assert len(kin) == len(live)


@pytest.mark.parametrize("mode", ["since", "until"])
def test_kinetic_pop_many_decides_float_near_ties_exactly(mode):
    # pop_many merges the groups' heads by their float values; heads whose floats are equal or a
    # rounding apart while their exact values differ (or tie, broken by cost then time) must come
    # out in the exact order. Costs c and c * k rounded, idle times (or times to the next use) 1
    # and k: value c either way in floats, not exactly. Until: never-used groups (value 0) and
    # groups whose turn has come (+inf) too, each a tie among its kind.
    rng = random.Random(5)
    for trial in range(40):
        kin = KineticMin(SINCE if mode == "since" else UNTIL)
        live: dict[int, tuple[float, float]] = {}
        now, key = 100.0, 0
        for _ in range(rng.randint(2, 30)):
            c = rng.choice([0.1, 0.7, 1.3, rng.random()])
            k = rng.choice([1, 3, 7, 10])
            tau = now - k if mode == "since" else now + k
            if mode == "until" and rng.random() < 0.2:
                tau = rng.choice([math.inf, now - k])
            if tau in {t for _, t in live.values()}:
                continue
            n = rng.randint(1, 4)
            uids = list(range(key + 1, key + n + 1))
            key += n
            costs = [c * k * (j + 1) for j in range(n)]  # rounded products: near ties
            kin.add_many(uids, costs, tau, now - 0.5)
            live.update({u: (cost, tau) for u, cost in zip(uids, costs)})
        n = rng.randint(1, len(live))
        want = sorted(live, key=lambda uid: _exact_key(mode, uid, *live[uid], now))[:n]
        assert kin.pop_many(n, now) == want, f"trial {trial}"


@pytest.mark.parametrize("tier", [Tier.GPU, Tier.CPU])
def test_physics_memo_gives_the_cost_models_answer_for_every_unit(tier):
    # Units that share and units that differ in every input the recovery reads; each asked
    # twice (the second answer comes from the memo) must equal a fresh recovery_cost_s.
    from sim.policies.pensieve import recovery_cost_s

    view = HandView()
    size = BT * COST.kv_bytes_per_token
    pol = PensievePhysics(ctx(view, tier=tier, num_layers=32, cost=COST, cpu_kv_bytes=100 * size))
    uid = 0
    for tokens in (5 * BT, 5 * BT - 3, 9 * BT):
        s = session(tokens, tokens)
        for page in range(tokens // BT):
            for layer in (-1, 0, 7, 31):
                uid += 1
                view.unit(uid, s, page, layer=layer, size=size if layer < 0 else size // 32)
    for _ in range(2):
        for u in view.units:
            assert pol.unit_cost(u) == recovery_cost_s(pol.ctx, u), u


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_take_in_batch_matches_one_unit_at_a_time(seed):
    # A demotion batch into a full CPU tier: each unit evicts what it lacks room for, then enters.
    # The batched tournament must name the victims the unbatched base implementation names.
    from sim.policies.base import EvictionPolicy

    rng = random.Random(seed)
    view = HandView()
    cost = FakeCost(**A_CTX)
    a = Pensieve(ctx(view, tier=Tier.CPU, block_tokens=100, num_layers=4, cost=cost))
    b = Pensieve(ctx(view, tier=Tier.CPU, block_tokens=100, num_layers=4, cost=cost))
    uid, now = 0, 10.0
    resident = []
    for s in range(12):
        sess = session(s, rng.randint(100, 900))
        for page in range(-(-sess.tokens // 100)):
            for layer in range(4):
                uid += 1
                view.unit(
                    uid, sess, page, last_access=rng.choice([0.0, 2.0, 5.0, 9.0]), layer=layer
                )
                resident.append(uid)
    cut = len(resident) // 2
    for u in resident[:cut]:
        a.insert(u, now)
        b.insert(u, now)
    incoming = resident[cut:]
    rng.shuffle(incoming)
    free = rng.randint(0, 20) * view.size(incoming[0])
    got = a.take_in(incoming, free, 12.0)
    want = EvictionPolicy.take_in(b, incoming, free, 12.0)
    assert got == want and len(got) == len(incoming) - free // view.size(incoming[0])
    assert drain(a, 13.0) == drain(b, 13.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, -0.0 - 1e-300])
@pytest.mark.parametrize("at", [0, 2])
def test_kinetic_batch_refuses_a_cost_that_is_not_finite_and_non_negative(bad, at):
    kin = KineticMin(SINCE)
    costs = [1.0, 2.0, 3.0]
    costs[at] = bad
    with pytest.raises(ValueError, match=f"unit {10 + at}: cost must be finite and >= 0"):
        kin.add_many([10, 11, 12], costs, 0.0, 1.0)
    assert len(kin) == 0
