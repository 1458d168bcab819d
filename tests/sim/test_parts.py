"""The engine's parts: each created only when its configuration asks for it, the step buckets the
core files turns in, and the feature-combination rules that live in one place (sim.config)."""

from __future__ import annotations

import pytest

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig
from sim.admission import Admission
from sim.config import BudgetConfig, SparseConfig, combination_problems
from sim.parts.budget import TokenBudget
from sim.parts.chunked import ChunkedPrefill
from sim.parts.offload import OffloadDecode
from sim.parts.prefetch import Prefetch
from sim.parts.sharing import PrefixSharing
from sim.parts.stream import StreamIntake
from sim.recovery import LayerRecovery, PageRecovery
from sim.scheduler import Scheduler
from sim.step_buckets import NEVER, StepBuckets
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
PLAIN = [Session("a", (Turn(100, 5, arrival_s=0.0),))]
HASHED = [Session("h", (Turn(64, 5, arrival_s=0.0, prefix_hashes=(7, 8)),), block_tokens=32)]
PARTS = ("budget", "offload", "prefetch", "share", "stream")


def _sched(sessions=PLAIN, unit="block", cpu=0.0, engine=None, budget=None, sparse=None):
    mem = MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit)
    return Scheduler(
        sessions, COST, mem, engine or EngineConfig(), "lru", budget=budget, sparse=sparse
    )


def _present(sched) -> dict[str, type]:
    return {name: type(getattr(sched, name)) for name in PARTS if getattr(sched, name) is not None}


def test_a_plain_run_has_no_part_fcfs_admission_and_page_recovery():
    sched = _sched()
    assert _present(sched) == {}
    assert type(sched.admission) is Admission and type(sched.recovery) is PageRecovery


def test_chunked_prefill_replaces_the_admission():
    sched = _sched(engine=EngineConfig(chunked_prefill=True))
    assert _present(sched) == {} and type(sched.admission) is ChunkedPrefill


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({"budget": BudgetConfig("streamingllm", sink=4, window=60)}, {"budget": TokenBudget}),
        ({"cpu": 1.0, "sparse": SparseConfig("quest", k=4)}, {"offload": OffloadDecode}),
        ({"cpu": 1.0, "engine": EngineConfig(prefetch="queue")}, {"prefetch": Prefetch}),
        ({"sessions": HASHED}, {"share": PrefixSharing}),
        ({"sessions": iter(PLAIN)}, {"stream": StreamIntake}),
    ],
)
def test_each_part_is_created_when_its_config_asks_and_no_other(kwargs, expected):
    assert _present(_sched(**kwargs)) == expected


def test_a_full_budget_and_sharing_off_create_nothing():
    sched = _sched(HASHED, budget=BudgetConfig("full"), engine=EngineConfig(prefetch="off"))
    assert "budget" not in _present(sched)
    mem = MemoryConfig(gpu_kv_gb=1.0, block_tokens=16, prefix_sharing=False)
    assert Scheduler(HASHED, COST, mem, EngineConfig(), "lru").share is None


def test_layer_units_recover_layer_by_layer():
    assert type(_sched(unit="layer_block").recovery) is LayerRecovery


def test_step_buckets_file_by_step_and_skip_taken_steps():
    b = StepBuckets()
    assert b.next_step() == NEVER
    b.add(9, "x", 0)
    b.add(4, "y", 1)
    b.add(9, "z", 0)
    assert b.next_step() == 4
    assert b.due[9] == [("x", 0), ("z", 0)]
    del b.due[4]  # the core takes a step's entries out when it handles them
    assert b.next_step() == 9
    b.due.pop(9)
    assert b.next_step() == NEVER and b.steps == []
    b.add(9, "w", 2)  # a step filed again after it was taken
    assert b.next_step() == 9 and b.due[9] == [("w", 2)]


@pytest.mark.parametrize(
    "unit,cpu,engine,budget,sparse,key,words",
    [
        ("layer_block", 0.0, {"chunked_prefill": True}, None, None, "engine.chunked_prefill", "layer_block"),
        ("block", 0.0, {"chunked_prefill": True, "fused_recompute": False}, None, None, "engine.chunked_prefill", "fused_recompute"),
        ("session", 1.0, {}, None, ("quest", 4), "sparse.kind", "evict_unit"),
        ("block", 0.0, {}, None, ("quest", 4), "sparse.kind", "cpu_kv_gb"),
        ("block", 1.0, {}, ("streamingllm", 4, 60), ("quest", 4), "sparse.kind", "token budgets"),
        ("block", 1.0, {"chunked_prefill": True}, None, ("quest", 4), "sparse.kind", "chunked prefill"),
    ],
)  # fmt: skip
def test_each_combination_rule_names_its_key_and_the_engine_raises_it(
    unit, cpu, engine, budget, sparse, key, words
):
    mem = MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit)
    eng = EngineConfig(**engine)
    bud = BudgetConfig(budget[0], sink=budget[1], window=budget[2]) if budget else None
    sp = SparseConfig(sparse[0], k=sparse[1]) if sparse else None
    problems = combination_problems(mem, eng, bud, sp)
    assert [k for k, _ in problems] == [key] and words in problems[0][1], problems
    with pytest.raises(ValueError, match=words):
        Scheduler(PLAIN, COST, mem, eng, "lru", budget=bud, sparse=sp)


def test_sharing_on_layer_units_is_refused_when_a_session_shares():
    with pytest.raises(ValueError, match="prefix_sharing"):
        _sched(HASHED, unit="layer_block")
    assert _sched(PLAIN, unit="layer_block").share is None  # no hashes: nothing to refuse
