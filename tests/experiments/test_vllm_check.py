"""The differential harness against the real vLLM 0.33.0 scheduler (marked `vllm`: it needs a
Python environment with vLLM, named by KVSIM_VLLM_PYTHON; see README). A multi-turn synthetic trace
under memory pressure, with preemptions and chunked prefill, sync and async, must give identical
step logs; a
scratch copy of kvsim's scheduler with one rule broken must be caught at the step it first shows."""

from __future__ import annotations

import os

import pytest

from costmodels import cost_model
from experiments.vllm_check import describe_mismatch, first_mismatch, run_both
from sim.vllm_v1 import scheduler as vllm_scheduler
from sim.vllm_v1.scheduler import VllmConfig
from traces.synthetic import SyntheticConfig, generate_synthetic

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("KVSIM_VLLM_PYTHON")
    if not python:
        pytest.fail("set KVSIM_VLLM_PYTHON to a Python that has vLLM 0.33.0 (see README)")
    return python


@pytest.fixture(scope="module")
def trace():
    return generate_synthetic(SyntheticConfig(sessions=40, seed=3, arrival_rate_per_s=4.0)).sessions


def _price():
    cost = cost_model("llama-3-8b", "h100-sxm")
    return lambda shape: cost.iteration(shape).total_s


def _logs(cfg, trace, python):
    runs = run_both(trace, cfg, python, _price())
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
    ],
    ids=["pressure", "chunked", "no-gate", "async-pressure", "async-chunked"],
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
