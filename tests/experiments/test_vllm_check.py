"""The differential harness against the real vLLM 0.33.0 scheduler (marked `vllm`: it needs a
Python environment with vLLM, named by KVSIM_VLLM_PYTHON; see docs/vllm.md). A multi-turn
synthetic trace under memory pressure, with preemptions and chunked prefill, sync and async, with
and without vLLM's CPU offloading connector, must give identical step logs; a scratch copy of
kvsim's scheduler with one rule broken must be caught at the step it first shows."""

from __future__ import annotations

import os

import pytest

from costmodels import cost_model
from experiments.vllm_check import describe_mismatch, first_mismatch, run_both
from sim.vllm_v1 import scheduler as vllm_scheduler
from sim.vllm_v1.offload import LruChunks, OffloadConfig
from sim.vllm_v1.run import transfer_prices
from sim.vllm_v1.scheduler import VllmConfig
from traces.synthetic import SyntheticConfig, generate_synthetic

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("KVSIM_VLLM_PYTHON")
    if not python:
        pytest.fail("set KVSIM_VLLM_PYTHON to a Python that has vLLM 0.33.0 (see docs/vllm.md)")
    return python


@pytest.fixture(scope="module")
def trace():
    return generate_synthetic(SyntheticConfig(sessions=40, seed=3, arrival_rate_per_s=4.0)).sessions


COST = cost_model("llama-3-8b", "h100-sxm")


def _price():
    return lambda shape: COST.iteration(shape).total_s


def _logs(cfg, trace, python, offload=None, copy_scale=1.0):
    copy_s = transfer_prices(COST, cfg.block_size)
    runs = run_both(
        trace,
        cfg,
        python,
        _price(),
        offload=offload,
        transfer_s=lambda kind, blocks: copy_scale * copy_s(kind, blocks),
    )
    return runs["kvsim"][0].steps, runs["vllm"][0].steps


@pytest.mark.parametrize(
    "cfg",
    [
        VllmConfig(num_blocks=200, max_num_seqs=64, max_num_batched_tokens=2048),
        VllmConfig(
            num_blocks=400,
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            long_prefill_token_threshold=256,
        ),
        VllmConfig(
            num_blocks=200,
            max_num_seqs=64,
            max_num_batched_tokens=512,
            scheduler_reserve_full_isl=False,
        ),
        VllmConfig(
            num_blocks=100, max_num_seqs=64, max_num_batched_tokens=2048, async_scheduling=True
        ),
        VllmConfig(
            num_blocks=400,
            max_num_seqs=64,
            max_num_batched_tokens=512,
            long_prefill_token_threshold=128,
            async_scheduling=True,
        ),
        VllmConfig(
            num_blocks=200,
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            enable_prefix_caching=False,
            async_scheduling=True,
        ),
    ],
    ids=["pressure", "chunked", "no-gate", "async-pressure", "async-chunked", "async-no-caching"],
)
def test_step_logs_match_the_real_scheduler(cfg, trace, vllm_python):
    ours, theirs = _logs(cfg, trace, vllm_python)
    at = first_mismatch(ours, theirs)
    assert at is None, describe_mismatch(ours, theirs, at)
    assert len(ours) > 10_000
    if cfg.num_blocks <= 200 and cfg.scheduler_reserve_full_isl:
        assert sum(len(s["preempted"]) for s in ours) > 0  # the pressure case preempts


def test_a_broken_rule_is_reported_at_its_first_step(trace, vllm_python, monkeypatch):
    cfg = VllmConfig(num_blocks=200, max_num_seqs=64, max_num_batched_tokens=2048)
    real_preempt = vllm_scheduler.VllmScheduler._preempt
    calls = []

    def first_running_is_the_victim(self, victim):  # vLLM takes the last running request
        calls.append(victim)
        if self.running:  # put the victim back and take the first one instead
            self.running.append(victim)
            victim = self.running.pop(0)
        real_preempt(self, victim)

    monkeypatch.setattr(vllm_scheduler.VllmScheduler, "_preempt", first_running_is_the_victim)
    ours, theirs = _logs(cfg, trace, vllm_python)
    at = first_mismatch(ours, theirs)
    assert at is not None and calls
    step, field = at
    assert field in ("sched", "preempted")
    assert theirs[step]["preempted"] or ours[step]["preempted"]
    assert "first mismatch at step" in describe_mismatch(ours, theirs, at)


# Slow copies (x300, x500) keep jobs in flight across steps: lookups wait for pending stores, loads
# overlap, and a finished request's reused blocks or a preemption flush its stores.
OFFLOAD_CASES = {
    "sync-lru": (VllmConfig(num_blocks=150, max_num_batched_tokens=2048), OffloadConfig(400), 500),
    "async-arc": (
        VllmConfig(num_blocks=150, max_num_batched_tokens=2048, async_scheduling=True),
        OffloadConfig(400, eviction_policy="arc"),
        300,
    ),
    "sync-2-blocks-a-chunk": (
        VllmConfig(num_blocks=200, max_num_batched_tokens=2048),
        OffloadConfig(3000, blocks_per_chunk=2),
        1,
    ),
}


@pytest.mark.parametrize("case", list(OFFLOAD_CASES))
def test_offloading_step_logs_match_the_real_connector(case, trace, vllm_python):
    cfg, offload, scale = OFFLOAD_CASES[case]
    ours, theirs = _logs(cfg, trace, vllm_python, offload, scale)
    at = first_mismatch(ours, theirs)
    assert at is None, describe_mismatch(ours, theirs, at)
    jobs = [j for s in ours for j in s.get("jobs", ())]
    assert sum(1 for j in jobs if j[1] == "load") > 20
    assert sum(1 for j in jobs if j[1] == "store") > 50
    if scale > 1:
        assert sum(len(s.get("flush", ())) for s in ours) > 0
        assert sum(len(s["preempted"]) for s in ours) > 0


def test_a_broken_cpu_eviction_order_is_reported(trace, vllm_python, monkeypatch):
    """LRU gives a finished request's chunks fresh ranks from its tail to its head; from the head
    instead, its tail outlives its head in the CPU, and a later lookup finds less."""

    def head_first(self, keys, acc):
        for key in keys:
            if key in self.ref:
                self.next_rank += 1
                self.rank[key] = (self.next_rank, 0)
                if key in self.idle:
                    self._push(key)

    monkeypatch.setattr(LruChunks, "on_request_finished", head_first)
    cfg, offload, scale = OFFLOAD_CASES["sync-lru"]
    ours, theirs = _logs(cfg, trace, vllm_python, offload, scale)
    at = first_mismatch(ours, theirs)
    assert at is not None
    assert at[1] in ("sched", "hit", "jobs", "waiting", "running", "free_blocks")
