"""cost-belady: hand-computed orders (values cost / (next access - now)) and brute-force exactness."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest
from kv_helpers import Ctx, HandView, drain, run_random, session, until_key

from costmodels import cost_model, recompute_s, swap_in_s
from sim.policies.cost_belady import CostBelady
from sim.units import Tier

COST = cost_model("llama-3-8b", "h100-sxm")
INF = math.inf


class GivenCosts(CostBelady):
    """cost-belady with the recovery cost of each unit given by hand (the ordering under test)."""

    costs: ClassVar[dict[int, float]] = {}

    def unit_cost(self, uid):
        return self.costs[uid]


def hand_policy():
    # unit  cost  next access
    #  B1   2.0   10
    #  B2   1.0    7
    #  B3   5.0   inf   (never used again: value 0)
    #  B4   0.5    1
    GivenCosts.costs = {1: 2.0, 2: 1.0, 3: 5.0, 4: 0.5}
    view = HandView()
    pol = GivenCosts(Ctx(view, tier=Tier.CPU, cost=COST))
    s = session(0, 100)
    u = {
        k: view.unit(k, s, k - 1, next_access=n)
        for k, n in ((1, 10.0), (2, 7.0), (3, INF), (4, 1.0))
    }
    for x in u.values():
        pol.insert(x, 0.0)
    return pol, u


def test_hand_order_at_time_zero():
    # t = 0: B3 0, B2 1/7 = 0.1429, B1 2/10 = 0.2, B4 0.5/1 = 0.5
    pol, _ = hand_policy()
    assert drain(pol, 0.0) == [3, 2, 1, 4]


def test_hand_order_over_time():
    pol, u = hand_policy()
    assert pol.evict(0.0) == u[3]
    assert pol.peek(0.5) == u[2]  # B2 1/6.5 = 0.154 < B1 2/9.5 = 0.211 < B4 0.5/0.5 = 1
    assert pol.peek(2.0) == u[2]  # B4 is due (next 1 <= 2): +inf; B2 1/5 = 0.2 < B1 2/8 = 0.25
    # B1 and B2 cross where 2 (7 - t) = 10 - t, t = 4: equal values 1/3, the cheaper (B2) first
    assert pol.peek(4.0) == u[2]
    assert pol.peek(4.5) == u[1]  # B1 2/5.5 = 0.364 < B2 1/2.5 = 0.4
    assert pol.peek(8.0) == u[1]  # B2 due at 7: +inf; B1 2/2 = 1
    # t = 10: all due (+inf): lower cost first
    assert drain(pol, 10.0) == [4, 2, 1]


def test_recovery_cost_is_tier_aware():
    size = 16 * COST.kv_bytes_per_token
    view = HandView()
    s = session(0, 160)
    x = view.unit(1, s, 9, size=size, next_access=5.0)  # page 9: tokens 144..159
    gpu = CostBelady(Ctx(view, tier=Tier.GPU, num_layers=32, cost=COST, cpu_kv_bytes=size))
    cpu = CostBelady(Ctx(view, tier=Tier.CPU, num_layers=32, cost=COST))
    assert gpu.unit_cost(x) == swap_in_s(COST, size, 1, 160, 16)  # demoted: a swap-in undoes it
    assert cpu.unit_cost(x) == recompute_s(COST, 16, 144)  # dropped: a recompute


@pytest.mark.parametrize("seed,integer", [(1, False), (2, True)])
def test_random_traffic_matches_brute_force(seed, integer):
    pol = CostBelady(Ctx(tier=Tier.CPU, num_layers=4, cost=COST))
    assert (
        run_random(
            pol, until_key, seed, integer_times=integer, layers=integer, cost_of=pol.unit_cost
        )
        > 100
    )
