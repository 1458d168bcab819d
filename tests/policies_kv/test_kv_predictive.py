"""The lifetime predictor (fit recovers known parameters; the split) and the predictive policy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from kv_helpers import Ctx, HandView, drain, run_random, session

from sim.lifetime import (
    BucketFit,
    LifetimePredictor,
    fit_buckets,
    fit_lifetime,
    train_split,
)
from sim.policies.predictive import Predictive
from traces.records import Session, Turn

# Known law: continuation p_c and lognormal think (mu_c, sigma_c) for c = 1, 2, 3; c >= 4 pooled.
P = {1: 0.8, 2: 0.6, 3: 0.5, 4: 0.3}
MU = {1: math.log(20.0), 2: math.log(45.0), 3: math.log(10.0), 4: math.log(60.0)}
SIGMA = {1: 0.7, 2: 1.2, 3: 0.5, 4: 1.0}


def synthetic_sessions(n: int, seed: int = 0, open_loop: bool = False) -> list[Session]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        start = float(i)  # sessions start one second apart: the split is by start time
        turns = [Turn(10, 10, arrival_s=start)]
        c, t = 1, start
        while rng.random() < P[min(c, 4)]:
            think = float(np.exp(rng.normal(MU[min(c, 4)], SIGMA[min(c, 4)])))
            t += think
            turns.append(Turn(10, 10, arrival_s=t) if open_loop else Turn(10, 10, think_s=think))
            c += 1
        out.append(Session(f"x{i:05d}", tuple(turns)))
    return out


@pytest.mark.parametrize("open_loop", [False, True])
def test_fit_recovers_known_parameters(open_loop):
    fits = fit_buckets(synthetic_sessions(20000, seed=1, open_loop=open_loop), buckets=4)
    for f in fits:
        se = math.sqrt(P[f.c] * (1 - P[f.c]) / f.at_risk)
        assert abs(f.p_next - P[f.c]) < 4 * se + 1e-9, f
        assert abs(f.mu - MU[f.c]) < 4 * SIGMA[f.c] / math.sqrt(f.think_n), f
        assert abs(f.sigma - SIGMA[f.c]) < 0.05 * SIGMA[f.c], f
        assert not f.pooled
    # bucket 1 sees every session; the pooled last bucket every c >= 4
    assert fits[0].at_risk == 20000


def test_split_is_the_first_30_percent_by_start_time():
    sessions = synthetic_sessions(100)
    shuffled = sessions[::-1]
    train, rest = train_split(shuffled, 0.3)
    assert [s.session_id for s in train] == [f"x{i:05d}" for i in range(30)]
    assert len(rest) == 70
    pred = fit_lifetime(shuffled, train_frac=0.3, buckets=4, min_count=1)
    assert pred.train_ids == {f"x{i:05d}" for i in range(30)}


def test_sparse_buckets_borrow_from_the_pool():
    fits = fit_buckets(synthetic_sessions(40, seed=2), buckets=8, min_count=10)
    assert fits[-1].pooled and 0.0 <= fits[-1].p_next <= 1.0 and fits[-1].sigma > 0


def test_quantities_match_the_formulas():
    b1 = BucketFit(1, 0, 0, 0.9, 0, math.log(30.0), 1.0)
    b2 = BucketFit(2, 0, 0, 0.5, 0, math.log(10.0), 0.5)
    pred = LifetimePredictor((b1, b2))
    # S(60) = Q(ln 2) = 0.244109; P = 0.9 S / (0.1 + 0.9 S) = 0.687205
    assert pred.survival(1, 60.0) == pytest.approx(0.244109, abs=1e-6)
    assert pred.p_return(1, 60.0) == pytest.approx(0.687205, abs=1e-6)
    assert pred.p_return(1, 0.0) == pytest.approx(0.9)
    assert pred.p_return(0, 1e9) == 1.0  # mid-turn-0 (preempted): certainly back
    assert pred.p_return(7, 5.0) == pred.p_return(2, 5.0)  # c >= K uses the last bucket
    assert pred.expected_think_s(1) == pytest.approx(30.0 * math.exp(0.5))
    # within a horizon: p (S(e) - S(e+h)) / (1 - p + p S(e)); h -> inf gives p_return
    assert pred.p_return_within(1, 60.0, 1e12) == pytest.approx(pred.p_return(1, 60.0))
    # mean residual at e = 0 is the mean; it is positive and finite later
    assert pred.mean_residual_s(1, 0.0) == pytest.approx(pred.expected_think_s(1))
    assert 0 < pred.mean_residual_s(1, 100.0) < math.inf
    e = np.linspace(0.0, 500.0, 2001)
    r = [pred.p_return(1, x) for x in e]
    assert all(a >= b for a, b in itertools.pairwise(r))  # non-increasing in idle time


def test_prior_is_usable_without_data():
    pred = LifetimePredictor.prior()
    assert pred.num_buckets == 16 and all(0 <= b.p_next <= 1 for b in pred.buckets)
    assert pred.bucket(1).median_think_s == pytest.approx(30.0)


# -- the policy ----------------------------------------------------------------------------------
HAND = LifetimePredictor(
    (
        BucketFit(1, 0, 0, 0.9, 0, math.log(30.0), 1.0),
        BucketFit(2, 0, 0, 0.5, 0, math.log(10.0), 0.5),
    )
)


def test_hand_order():
    # now = 100.
    #   unit  completed  idle  S(idle)                       P(next turn | c, idle)
    #   P1    1          60    Q(ln(60/30)/1)      = 0.2441  0.9*0.2441/(0.1+0.9*0.2441) = 0.6872
    #   P2    2           5    Q(ln(5/10)/0.5)     = 0.9172  0.5*0.9172/(0.5+0.5*0.9172) = 0.4784
    #   P3    1          10    Q(ln(10/30)/1)      = 0.8640  0.9*0.8640/(0.1+0.9*0.8640) = 0.8861
    #   P4    0         100    (mid-turn-0, preempted)       1
    # -> P2, P1, P3, P4. LRU would evict P4 first and P2 last.
    view = HandView()
    pol = Predictive(Ctx(view, predictor=HAND))
    u = {
        1: view.unit(1, session(1, 50, next_turn=1), 0, last_access=40.0),
        2: view.unit(2, session(2, 50, next_turn=2), 0, last_access=95.0),
        3: view.unit(3, session(3, 50, next_turn=1), 0, last_access=90.0),
        4: view.unit(4, session(4, 50, next_turn=0), 0, last_access=0.0),
    }
    for x in u.values():
        pol.insert(x, 100.0)
    assert drain(pol, 100.0) == [2, 1, 3, 4]


def test_same_bucket_is_oldest_first_and_hits_refresh():
    view = HandView()
    pol = Predictive(Ctx(view, predictor=HAND))
    s = session(1, 50, next_turn=1)
    a = view.unit(1, s, 0, last_access=10.0)
    b = view.unit(2, session(2, 50, next_turn=1), 0, last_access=20.0)
    pol.insert(a, 30.0)
    pol.insert(b, 30.0)
    assert pol.peek(30.0) == a
    pol.access(a, 31.0)
    assert drain(pol, 31.0) == [2, 1]


def test_default_predictor_when_the_context_has_none():
    pol = Predictive(Ctx())
    assert pol.predictor.source.startswith("prior")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_traffic_matches_brute_force(seed):
    laws = (
        (1, 0.9, 30, 1.0),
        (2, 0.5, 10, 0.5),
        (3, 1.0, 5, 0.3),
        (4, 0.0, 5, 1.0),
    )  # c, p, median, sigma
    pred = LifetimePredictor(tuple(BucketFit(c, 0, 0, p, 0, math.log(m), s) for c, p, m, s in laws))
    pol = Predictive(Ctx(predictor=pred))

    def ref(uid, r, now, recs):
        return pred.p_return(r.completed, now - r.a), r.a, r.seq

    assert run_random(pol, ref, seed) > 100
