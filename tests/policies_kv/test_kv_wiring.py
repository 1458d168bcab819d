"""The engine wires what the KV policies need: CPU capacity, the lifetime predictor, on_admit."""

from __future__ import annotations

from costmodels import cost_model
from sim import MemoryConfig, simulate
from sim.config import EngineConfig
from sim.metrics import summarize
from sim.scheduler import Scheduler
from traces import load_trace
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
TRACE = load_trace({"kind": "synthetic", "sessions": 30, "seed": 3}).sessions


def test_predictive_gets_a_predictor_fitted_on_the_trace_and_physics_sees_the_cpu_tier():
    mem = MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=2.0)
    pred = Scheduler(list(TRACE), COST, mem, EngineConfig(), "predictive")
    assert pred.mem.policy[0].ctx.predictor is not None
    phys = Scheduler(list(TRACE), COST, mem, EngineConfig(), "pensieve-physics")
    assert phys.mem.policy[0].ctx.cpu_kv_bytes == 2 * 2**30
    assert phys.mem.policy[0].ctx.predictor is None  # only policies that ask get a fit


def test_qos_priority_inversions_reach_the_summary():
    # GPU: 225 + 63 + 40 pages of 16 tokens. lo (class 0) runs 3000+600 tokens (225 pages, pinned
    # for ~4 s); hi (class 1) leaves 1005 tokens (63 pages); mid (class 1) arrives at 1 s needing
    # 63 pages with 40 free: lo is pinned, so QoS must take 23 of hi's pages (368 tokens). When hi
    # returns at ~30 s, lo's class-0 KV is evictable yet hi recomputes 368 tokens: one inversion.
    page = 16 * COST.kv_bytes_per_token
    lo = Session("lo", (Turn(3000, 600, arrival_s=0.0, priority=0),))
    hi = Session(
        "hi", (Turn(1000, 5, arrival_s=0.0, priority=1), Turn(10, 5, think_s=30.0, priority=1))
    )
    mid = Session("mid", (Turn(1000, 5, arrival_s=1.0, priority=1),))
    res = simulate(
        [lo, hi, mid],
        COST,
        MemoryConfig(gpu_kv_gb=(225 + 63 + 40) * page / 2**30),
        policy="qos",
        debug=True,
    )
    hi1 = res.turns[(res.turns.session_id == "hi") & (res.turns.turn == 1)].iloc[0]
    assert hi1.recomputed_tokens == 368
    row = summarize(res)
    assert (row["priority_inversions"], row["priority_inversion_tokens"]) == (1, 368)
