"""The sequence-level adapter (same ledger as built-in LRU at session granularity) and a user's
``module:Class`` policy (notebooks/custom_policy_example.py) run through sim.simulate."""

from __future__ import annotations

import pandas as pd
import pytest
from kv_helpers import AdaptedSeqLRU, Ctx, HandView, SeqLRU, drain, run_random, session

import traces
from costmodels import cost_model
from sim import MemoryConfig, simulate
from sim.adapters import (
    EvictionCandidate,
    SequencePolicyAdapter,
    adapt,
    is_sequence_policy,
    resolve_policy_class,
)
from sim.lifetime import LifetimePredictor
from sim.policies import EvictionPolicy, policy_class
from sim.policies.lru import LRU

COST = cost_model("llama-3-8b", "h100-sxm")
SESSIONS = traces.load_trace({"kind": "synthetic", "sessions": 30, "seed": 3}).sessions


def mem(cpu: float, unit: str) -> MemoryConfig:
    return MemoryConfig(gpu_kv_gb=2.5, cpu_kv_gb=cpu, block_tokens=64, evict_unit=unit)


@pytest.mark.parametrize("cpu", [0.0, 1.0])
def test_sequence_lru_gives_the_builtin_lru_ledger(cpu):
    ours = simulate(
        SESSIONS, COST, mem(cpu, "session"), policy="kv_helpers:AdaptedSeqLRU", debug=True
    )
    ref = simulate(SESSIONS, COST, mem(cpu, "session"), policy="lru", debug=True)
    assert len(ref.stats.evict_us) > 20  # the trace does make the policy choose
    assert len(ours.stats.evict_us) == len(ref.stats.evict_us)
    pd.testing.assert_frame_equal(ours.turns, ref.turns)
    assert (ours.stats.swap_out_bytes, ours.stats.dropped_bytes) == (
        ref.stats.swap_out_bytes,
        ref.stats.dropped_bytes,
    )


def test_registry_detection_helper():
    cls = resolve_policy_class(SeqLRU, "kv_helpers:SeqLRU")
    assert issubclass(cls, SequencePolicyAdapter) and cls.name == "kv_helpers:SeqLRU"
    assert resolve_policy_class(LRU) is LRU
    assert is_sequence_policy(SeqLRU) and not is_sequence_policy(LRU)
    with pytest.raises(ValueError, match="neither"):
        resolve_policy_class(dict)
    with pytest.raises(TypeError):
        adapt(dict)
    assert issubclass(policy_class("kv_helpers:AdaptedSeqLRU"), EvictionPolicy)


def test_adapter_hands_out_a_plan_tail_first_and_reasks_on_change():
    view = HandView()
    pol = AdaptedSeqLRU(Ctx(view, predictor=LifetimePredictor.prior()))
    a, b = session(0, 48), session(1, 32)
    ua = [view.unit(i + 1, a, i, last_access=1.0) for i in range(3)]
    ub = [view.unit(i + 10, b, i, last_access=2.0) for i in range(2)]
    for x in (*ua, *ub):
        pol.insert(x, 2.0)
    # the user's LRU picks sequence s0 (accessed first); its units go tail first, user asked once
    assert [pol.peek(3.0) for _ in range(2)] == [3, 3]  # peek only looks
    assert pol.evict(3.0) == ua[2]
    assert pol.peek(3.0) == ua[1]
    assert pol.user.selections == 1
    pol.insert(view.unit(20, session(2, 16), 0, last_access=3.0), 3.0)  # the candidate set changed
    assert pol.peek(3.0) == ua[1]
    assert pol.user.selections == 2
    assert pol.metrics() == {"selections": 2}


def test_adapter_candidates_describe_sequences():
    seen: list[list[EvictionCandidate]] = []

    class Spy(SeqLRU):
        def select_victims(self, candidates, required_blocks):
            seen.append(candidates)
            assert required_blocks == 1
            return super().select_victims(candidates, required_blocks)

    view = HandView()
    pol = adapt(Spy)(Ctx(view, predictor=LifetimePredictor.prior()))
    s = session(0, 40, priority=2, next_turn=3)
    us = [view.unit(k, s, k - 1, last_access=5.0) for k in (1, 2, 3)]
    for x in us:
        pol.insert(x, 5.0, pinned=True)  # computed by a running turn: one use each
    for _ in range(3):  # three more turns use page 1: four uses in all
        pol.release([us[1]], 5.0)
        pol.acquire([us[1]], 5.0)
    pol.release(us, 6.0)
    pol.peek(10.0)
    (c,) = seen[0]
    assert (
        c.sequence_id,
        c.block_ids,
        c.last_access_time,
        c.access_count,
        c.priority,
        c.is_pinned,
        c.sequence_length,
    ) == ("s0", [1, 2, 3], 5.0, 4, 2, False, 40)
    assert c.estimated_lifetime == pytest.approx(LifetimePredictor.prior().mean_residual_s(3, 5.0))


def test_adapter_rejects_a_broken_answer():
    class Bad(SeqLRU):
        def select_victims(self, candidates, required_blocks):
            return ["nobody"]

    view = HandView()
    pol = adapt(Bad)(Ctx(view))
    pol.insert(view.unit(1, session(0, 16), 0), 0.0)
    with pytest.raises(ValueError, match="not a candidate"):
        pol.evict(0.0)


def test_adapter_random_traffic_matches_sequence_lru():
    # With one unit per sequence the adapted LRU is kvsim's LRU: order of becoming a candidate / hit.
    pol = AdaptedSeqLRU(Ctx())

    assert run_random(pol, lambda uid, r, now, recs: r.seq, seed=9, max_pages=1) > 100


# -- a user's EvictionPolicy named module:Class ---------------------------------------------------
CUSTOM = "notebooks.custom_policy_example:LargestSessionFirst"


def test_custom_policy_order():
    cls = policy_class(CUSTOM)
    view = HandView()
    pol = cls(Ctx(view))
    small, big = session(0, 20), session(1, 70)
    for key, (s, page) in enumerate(((small, 0), (small, 1), (big, 0), (big, 4)), start=1):
        pol.insert(view.unit(key, s, page), 0.0)
    assert drain(pol, 0.0) == [4, 3, 2, 1]  # the 70-token session first, last page first


def test_custom_policy_runs_through_simulate():
    res = simulate(SESSIONS, COST, mem(1.0, "block"), policy=CUSTOM, debug=True)
    assert len(res.turns) == sum(len(s.turns) for s in SESSIONS)
    assert len(res.stats.evict_us) > 0
    assert res.labels["policy"] == CUSTOM


def test_custom_policy_random_traffic_matches_brute_force():
    pol = policy_class(CUSTOM)(Ctx())
    view = pol.view

    def key(uid, r, now, recs):
        return -view.session(uid).tokens, view.session(uid).index, -view.first_page(uid)

    assert run_random(pol, key, seed=13) > 100
