"""kvsim's vLLM v1 engine as a run: kvsim policies in vLLM's prefix cache, and the ledger.

The policy path is proven against vLLM's own free queue: with ``lru`` it must make the same
choices, so the step logs of a run under memory pressure are equal line for line."""

from __future__ import annotations

import itertools
import math

import pytest

import costmodels
from sim.config import EngineConfig, MemoryConfig
from sim.metrics import summarize
from sim.policies import PolicyContext, policy_class
from sim.units import Tier
from sim.vllm_v1.block_pool import BlockView, PolicyBlockPool
from sim.vllm_v1.loop import KvsimSide, replay
from sim.vllm_v1.offload import OffloadConfig
from sim.vllm_v1.run import (
    _BookedPrices,
    check_policy,
    make_scheduler,
    offload_config,
    simulate_vllm,
    transfer_prices,
    vllm_config,
)
from sim.vllm_v1.scheduler import VllmConfig, VllmScheduler
from traces import load_trace
from traces.synthetic import SyntheticConfig, generate_synthetic

COST = costmodels.cost_model("llama-3-8b", "h100-sxm")
VLLM = EngineConfig(kind="vllm-v1")


@pytest.fixture(scope="module")
def sessions():
    return load_trace({"kind": "synthetic", "sessions": 60, "seed": 3}).sessions


def _policy_pool(cfg: VllmConfig, name: str) -> PolicyBlockPool:
    view = BlockView(cfg.block_size)
    pol = policy_class(name)(
        PolicyContext(tier=Tier.GPU, block_tokens=cfg.block_size, num_layers=32, view=view)
    )
    pol.set_capacity(cfg.num_blocks - 1)
    return PolicyBlockPool(cfg.num_blocks, pol, view)


def _log(sessions, sched: VllmScheduler) -> list[dict]:
    cfg = sched.cfg
    price = lambda shape: COST.iteration(shape).total_s  # noqa: E731
    return replay(
        sessions, KvsimSide(sched), price, cfg.block_size, cfg.model_len, log_steps=True
    ).steps


PRESSED = VllmConfig(num_blocks=700, block_size=16, max_num_seqs=32)


@pytest.fixture(scope="module")
def free_queue_run(sessions):
    """vLLM's own free queue on the trace under pressure, run once: (scheduler, step log)."""
    queue = VllmScheduler(PRESSED)
    return queue, _log(sessions, queue)


@pytest.mark.slow
def test_lru_through_the_policy_interface_is_vllms_free_queue(sessions, free_queue_run):
    cfg = PRESSED
    queue, a = free_queue_run
    policy = VllmScheduler(cfg, _policy_pool(cfg, "lru"))
    b = _log(sessions, policy)
    assert queue.pool.evictions > 500  # under pressure: the eviction order matters
    assert a == b
    assert policy.pool.evictions == queue.pool.evictions
    for pool in (queue.pool, policy.pool):  # the count of spare cached blocks is kept right
        assert pool.num_free_cached == sum(1 for b in pool.cached_blocks() if pool.holders(b) == 0)


@pytest.mark.slow
def test_another_policy_changes_the_hits(sessions, free_queue_run):
    cfg = PRESSED
    _, a = free_queue_run  # LRU, vLLM's free queue
    b = _log(sessions, VllmScheduler(cfg, _policy_pool(cfg, "fifo")))
    hits = lambda log: sum(sum(e["hit"].values()) for e in log)  # noqa: E731
    assert hits(a) != hits(b)


def test_a_ghost_hit_is_recognised_by_content_not_by_block():
    """ARC's ghost list holds a content that left the cache; when the same content is cached again
    (in another block), ARC sees a ghost hit and adapts its target p."""
    cfg = VllmConfig(num_blocks=3, block_size=4)
    pool = _policy_pool(cfg, "arc")
    arc = pool.policy
    (b,) = pool.allocate(1)
    pool.cache(b, "x")
    pool.release([b], ["x"])
    (c,) = pool.allocate(1)  # the unkeyed block first: x stays
    assert pool.lookup("x") == b
    pool.cache(c, "y")
    pool.release([c], ["y"])
    pool.allocate(2)  # both go: x (freed first) then y
    assert pool.lookup("x") is None and pool.evictions == 2
    p0 = arc.p
    pool.release([1, 2], [None, None])  # unkeyed now
    (d,) = pool.allocate(1)
    pool.cache(d, "x")  # x again: in ARC's ghost list B1
    assert arc.p > p0


def test_offline_and_session_policies_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="belady.*future"):
        check_policy("belady")
    with pytest.raises(ValueError, match="predictive"):
        check_policy("predictive")
    for name in ("qos", "session-aware"):  # they read the unit's session
        with pytest.raises(ValueError, match=f"{name}.*no one session"):
            check_policy(name)
    check_policy("s3fifo")  # fine


def test_the_ledger_splits_each_history_into_hit_and_reprefill(sessions):
    mem = MemoryConfig(gpu_kv_gb=0.25)
    res = simulate_vllm(sessions, COST, mem, VLLM, policy="lru")
    t = res.turns
    assert len(t) == sum(len(s.turns) for s in sessions) - res.stats.rejected_turns
    assert (t["gpu_hit_tokens"] + t["recomputed_tokens"] == t["history_tokens"]).all()
    assert (t["cpu_hit_tokens"] == 0).all()
    # vLLM hits whole blocks only, so a hit is a multiple of the block size or the shared part
    later = t[t["turn"] > 0]
    assert (later["gpu_hit_tokens"] > 0).any() and (later["recomputed_tokens"] > 0).any()
    assert (t["first_token_s"] > t["admit_s"]).all() and (t["finish_s"] >= t["first_token_s"]).all()
    assert (t["admit_s"] >= t["arrival_s"]).all()
    row = summarize(res)
    assert 0 < row["reprefill_rate"] < 1
    assert math.isclose(row["reprefill_rate"] + row["gpu_hit_rate"], 1.0)
    cfg = vllm_config(COST, mem, VLLM)
    assert res.stats.gpu_capacity_bytes == cfg.num_blocks * 16 * COST.kv_bytes_per_token


def test_a_larger_cache_hits_more(sessions):
    small = summarize(simulate_vllm(sessions, COST, MemoryConfig(gpu_kv_gb=0.25), VLLM))
    large = summarize(simulate_vllm(sessions, COST, MemoryConfig(gpu_kv_gb=8.0), VLLM))
    assert large["gpu_hit_rate"] > small["gpu_hit_rate"]
    assert large["preemptions"] <= small["preemptions"]


def test_the_ledger_is_the_same_as_the_step_log_says(sessions):
    """Each turn's first-token time and hit come from the step log's own entries."""
    steps: list[dict] = []
    res = simulate_vllm(sessions, COST, MemoryConfig(gpu_kv_gb=0.25), VLLM, on_step=steps.append)
    first_hit: dict[str, int] = {}
    for e in steps:
        for rid, c in e["hit"].items():
            first_hit.setdefault(rid, c)
    t = res.turns.set_index(res.turns["session_id"] + "/" + res.turns["turn"].astype(str))
    for rid, hit in first_hit.items():
        assert t.loc[rid, "gpu_hit_tokens"] + t.loc[rid, "shared_hit_tokens"] == hit
    done_at = {rid: e["t"] + e["dur"] for e in steps for rid in e["done"]}
    for rid, end in done_at.items():
        assert t.loc[rid, "finish_s"] == pytest.approx(end)


def test_a_policy_by_name_runs_and_infinite_memory_is_refused(sessions):
    res = simulate_vllm(sessions[:10], COST, MemoryConfig(gpu_kv_gb=0.25), VLLM, policy="arc")
    assert len(res.turns) > 0 and res.stats.evict_us.size > 0  # it evicted, and was timed
    with pytest.raises(ValueError, match="finite"):
        simulate_vllm(sessions[:2], COST, MemoryConfig(gpu_kv_gb=math.inf), VLLM)
    with pytest.raises(ValueError, match="finite memory.cpu_kv_gb"):
        simulate_vllm(sessions[:2], COST, MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=math.inf), VLLM)
    assert isinstance(make_scheduler(VllmConfig(num_blocks=10), "lru"), VllmScheduler)


def test_async_scheduling_plans_a_step_ahead_so_a_new_turn_waits_one_more_step():
    """Every step costs 1 s. a arrives at 0, b at 0.5. Sync: b is admitted in the step that starts
    at 1 (planned after step 0 ends). Async: the step starting at 1 was planned at 0, before b
    arrived; b joins the one after it, at 2, and the GPU never idles between steps."""
    from traces.records import Session, Turn

    trace = [
        Session("a", (Turn(6, 3, arrival_s=0.0),)),
        Session("b", (Turn(6, 2, arrival_s=0.5),)),
    ]
    admitted = {}
    for mode in (False, True):
        cfg = VllmConfig(num_blocks=16, block_size=4, async_scheduling=mode)
        run = replay(
            trace,
            KvsimSide(cfg),
            lambda shape: 1.0,
            cfg.block_size,
            cfg.model_len,
            log_steps=True,
            async_scheduling=mode,
        )
        admitted[mode] = {rid: s["t"] for s in run.steps for rid in s["hit"]}
        assert [s["t"] for s in run.steps] == list(range(len(run.steps)))  # back to back
        turns = {t.rid: t for t in run.turns}
        assert turns["a/0"].first_token_s == 1.0 and turns["a/0"].finish_s == 3.0
    assert admitted == {False: {"a/0": 0.0, "b/0": 1.0}, True: {"a/0": 0.0, "b/0": 2.0}}


def test_peak_demand_is_the_conversations_in_progress_at_their_turns_full_length():
    from traces.records import Session, Turn

    # a: turn 0 of 100 + 20 tokens, turn 1 of 50 + 30 more (its context 200: 13 blocks of 16);
    # b: one turn of 300 + 200 (32 blocks), still decoding when a's turn 1 arrives
    trace = [
        Session("a", (Turn(100, 20, arrival_s=0.0), Turn(50, 30, think_s=0.0))),
        Session("b", (Turn(300, 200, arrival_s=0.0),)),
    ]
    res = simulate_vllm(trace, COST, MemoryConfig(gpu_kv_gb=1.0, block_tokens=16), VLLM)
    page = 16 * COST.kv_bytes_per_token
    assert res.stats.peak_demand_bytes == (13 + 32) * page


class _CountingSide(KvsimSide):
    """Counts the steps taken in runs of steady decodes."""

    spanned = 0

    def advance_decodes(self, run, k, plan_times, skip_step=False):
        self.spanned += k + skip_step
        return super().advance_decodes(run, k, plan_times, skip_step)


# The default run takes two of the eight set-ups, between them every value of each axis; the slow
# suite takes the other six.
STEADY_DEFAULT = {("lru", False, True), ("arc", True, False)}


@pytest.mark.parametrize(
    ("policy", "async_scheduling", "reserve"),
    [
        pytest.param(
            *case,
            id="-".join(map(str, case[::-1])),
            marks=() if case in STEADY_DEFAULT else pytest.mark.slow,
        )
        for case in itertools.product(["lru", "arc"], [False, True], [True, False])
    ],
)
def test_steady_decode_runs_give_the_step_by_step_log_and_clock(policy, async_scheduling, reserve):
    """Runs of steady decode steps taken in one go must give the step log (every step, its
    time, duration, free blocks), the turns and the booked prices of the step-by-step loop, under
    memory pressure (preemptions, evictions, a blocked queue)."""
    cfg = VllmConfig(
        num_blocks=200,
        block_size=16,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        async_scheduling=async_scheduling,
        scheduler_reserve_full_isl=reserve,
    )
    _spans_give_the_steps(cfg, policy)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_steady_decode_runs_with_a_cpu_tier_give_the_step_by_step_log(async_scheduling):
    """The same with vLLM's CPU offloading (slow copies: jobs in flight across steps, flushes):
    a run is taken only while the connector has nothing to do."""
    cfg = VllmConfig(
        num_blocks=150,
        block_size=16,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        async_scheduling=async_scheduling,
    )
    _spans_give_the_steps(cfg, "lru", OffloadConfig(400), copy_scale=300)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_steady_decode_runs_without_prefix_caching_give_the_step_by_step_log(async_scheduling):
    """Without prefix caching no block is ever cached: a run's only events are block takes."""
    cfg = VllmConfig(
        num_blocks=200,
        block_size=16,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        async_scheduling=async_scheduling,
        enable_prefix_caching=False,
    )
    _spans_give_the_steps(cfg, "lru")


def _spans_give_the_steps(cfg, policy, offload=None, copy_scale=1.0):
    trace = generate_synthetic(SyntheticConfig(sessions=40, seed=3, arrival_rate_per_s=4.0))
    trace = trace.sessions
    copy_s = transfer_prices(COST, cfg.block_size)
    out = {}
    for spans in (False, True):
        side = _CountingSide(make_scheduler(cfg, policy, COST, offload))
        prices = _BookedPrices(COST, side.sched)
        run = replay(
            trace,
            side,
            prices,
            cfg.block_size,
            cfg.model_len,
            log_steps=True,
            async_scheduling=cfg.async_scheduling,
            decode_spans=spans,
            transfer_s=lambda kind, blocks: copy_scale * copy_s(kind, blocks),
        )
        turns = [(t.rid, t.first_token_s, t.finish_s, t.hit, t.preemptions) for t in run.turns]
        booked = (prices.block_s, prices.peak_held, prices.step_s, prices.step_decode)
        out[spans] = (run.steps, turns, booked, side.spanned)
    (steps, turns, booked, spanned), (span_steps, span_turns, span_booked, n) = (
        out[False],
        out[True],
    )
    assert spanned == 0 and n > len(steps) / 2  # most steps were taken in runs
    assert sum(len(s["preempted"]) for s in steps) > 0
    if offload is not None:
        assert sum(len(s.get("flush", ())) for s in steps) > 0
    assert span_steps == steps
    assert span_turns == turns
    assert span_booked == booked


def test_a_cpu_tier_serves_history_the_gpu_lost_and_the_ledger_splits_it(sessions):
    mem = MemoryConfig(gpu_kv_gb=0.5)
    plain = simulate_vllm(sessions, COST, mem, VLLM)
    tiered = simulate_vllm(sessions, COST, MemoryConfig(gpu_kv_gb=0.5, cpu_kv_gb=4.0), VLLM)
    t, p = tiered.turns, plain.turns
    assert (t.gpu_hit_tokens + t.cpu_hit_tokens + t.recomputed_tokens == t.history_tokens).all()
    assert p.cpu_hit_tokens.sum() == 0 and t.cpu_hit_tokens.sum() > 0
    assert t.recomputed_tokens.sum() < 0.5 * p.recomputed_tokens.sum()
    assert tiered.stats.swap_in_bytes >= t.swap_in_bytes.sum() > 0  # reloads after preemption too
    assert tiered.stats.swap_out_bytes > 0 and tiered.stats.cpu_capacity_bytes > 0


def test_tensor_parallel_blocks_are_one_gpus_share_of_the_groups_pool(sessions):
    """memory.gpu_kv_gb is the whole group's pool (as in kvsim's engine): one GPU of a tp group
    holds 1/tp of it, in blocks of its KV shard, so the block count does not change with tp."""
    mem = MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=4.0)
    eng = EngineConfig(kind="vllm-v1")
    tp2 = costmodels.cost_model("llama-3-8b", "h100-sxm", tp=2)
    assert tp2.kv_bytes_per_token * 2 == COST.kv_bytes_per_token  # 4 of 8 KV heads each
    assert vllm_config(tp2, mem, eng).num_blocks == vllm_config(COST, mem, eng).num_blocks
    assert offload_config(tp2, mem, eng) == offload_config(COST, mem, eng)
    one, two = (simulate_vllm(sessions, c, MemoryConfig(gpu_kv_gb=0.5), VLLM) for c in (COST, tp2))
    assert one.stats.gpu_capacity_bytes == 2 * two.stats.gpu_capacity_bytes  # one GPU's bytes


def test_simulate_runs_the_vllm_engine_when_the_config_names_it():
    """``sim.simulate`` with engine.kind vllm-v1 is ``simulate_vllm`` (it used to run kvsim's
    engine and ignore every vLLM option), and the vLLM options change the run."""
    import pandas as pd

    from sim import simulate
    from sim.config import BudgetConfig, SparseConfig

    trace = load_trace({"kind": "synthetic", "sessions": 40, "seed": 3}).sessions
    mem = MemoryConfig(gpu_kv_gb=0.5, block_tokens=16)
    got = simulate(trace, COST, mem, VLLM, "lru", 3)
    want = simulate_vllm(trace, COST, mem, VLLM, "lru", 3)
    cols = [c for c in want.turns.columns if c != "evict_ns"]
    pd.testing.assert_frame_equal(got.turns[cols], want.turns[cols])
    kvsim = simulate(trace, COST, mem, EngineConfig(), "lru", 3)
    assert not kvsim.turns[cols].equals(got.turns[cols])
    no_cache = simulate(trace, COST, mem, EngineConfig("vllm-v1", enable_prefix_caching=False))
    assert got.turns.gpu_hit_tokens.sum() > 0 and no_cache.turns.gpu_hit_tokens.sum() == 0
    with pytest.raises(ValueError, match="vllm-v1 runs full KV"):
        simulate(trace, COST, mem, VLLM, sparse=SparseConfig("quest", k=4, ring_slots=8))
    simulate(trace[:2], COST, mem, VLLM, budget=BudgetConfig())  # full KV: fine
