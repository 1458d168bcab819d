"""vLLM's CPU offloading in kvsim's vllm-v1 engine: the CPU manager's orders worked by hand, and the
connector's stores, lookups, loads and flushes (the real scheduler's step logs are compared in
tests/experiments/test_vllm_check.py)."""

from __future__ import annotations

import pytest

import costmodels
from sim.vllm_v1.loop import KvsimSide, replay
from sim.vllm_v1.offload import PENDING, Access, CpuChunks, OffloadConfig, OffloadConnector
from sim.vllm_v1.scheduler import LOADING, Request, VllmConfig, VllmScheduler
from traces.records import Session, Turn

COST = costmodels.cost_model("llama-3-8b", "h100-sxm")


def _store(cpu: CpuChunks, acc: Access, keys: list[str], first: int = 0) -> list[str] | None:
    """Store chunks first, first + 1, ... of 16 tokens each."""
    return cpu.prepare_store(keys, acc, {k: (first + i + 1) * 16 for i, k in enumerate(keys)})


def test_lru_evicts_a_running_requests_tail_first_and_a_finished_one_before_it():
    """Ranks by hand: A's chunks share A's rank 1 at positions 16, 32: (1, -16), (1, -32). A
    finishes: fresh ranks from its tail, a1 (2, 0), then a0 (3, 0). B's rank is 4: (4, -16),
    (4, -32). Lowest first: a1, a0, b1, b0."""
    cpu = CpuChunks(4, "lru")
    a, b = Access(), Access()
    assert _store(cpu, a, ["a0", "a1"]) == ["a0", "a1"]
    cpu.complete_store(["a0", "a1"])
    cpu.on_request_finished(a)
    assert _store(cpu, b, ["b0", "b1"]) == ["b0", "b1"]
    cpu.complete_store(["b0", "b1"])
    assert cpu.policy.rank == {"a1": (2, 0), "a0": (3, 0), "b0": (4, -16), "b1": (4, -32)}
    assert cpu.policy.evict(3, set()) == ["a1", "a0", "b1"]


def test_lru_ranks_a_reused_chunk_by_its_position_like_the_chunks_stored_beside_it():
    """B offers its first five chunks (positions 16..80); the CPU already holds the fifth (stored
    by A, who finished: fresh rank (2, 0)). B stores the first four at (3, -16) .. (3, -64) and
    reuses the fifth at (3, -80), the lowest: the reused tail goes first, as its position says."""
    cpu = CpuChunks(8, "lru")
    a, b = Access(), Access()
    assert _store(cpu, a, ["k5"], first=4) == ["k5"]
    cpu.complete_store(["k5"])
    cpu.on_request_finished(a)
    assert _store(cpu, b, ["k1", "k2", "k3", "k4", "k5"]) == ["k1", "k2", "k3", "k4"]
    cpu.complete_store(["k1", "k2", "k3", "k4"])
    assert cpu.policy.rank["k5"] == (3, -80)
    assert cpu.policy.evict(2, set()) == ["k5", "k4"]


def test_a_full_cpu_refuses_a_store_it_cannot_make_room_for_and_never_evicts_the_offer():
    cpu = CpuChunks(2, "lru")
    a, b = Access(), Access()
    _store(cpu, a, ["x", "y"])
    assert _store(cpu, b, ["z"]) is None  # x and y are pending: nothing idle to evict
    cpu.complete_store(["x", "y"])
    # the offer holds x (held) and z (new): z needs one chunk, and x may not go
    assert _store(cpu, b, ["x", "z"]) == ["z"]
    assert set(cpu.ref) == {"x", "z"}
    assert cpu.ref["z"] == PENDING


def test_arc_promotes_a_reused_chunk_at_the_request_end_and_a_ghost_store_moves_the_target():
    cpu = CpuChunks(2, "arc")
    arc = cpu.policy
    a, b, c = Access(), Access(), Access()
    _store(cpu, a, ["x", "y"])
    cpu.complete_store(["x", "y"])
    cpu.on_request_finished(a)  # a store is no reuse: both stay in T1
    assert list(arc.t1) == ["y", "x"] and not arc.t2  # recency from the tail: x newest
    cpu.prepare_load(["x"], b, {"x": 16})
    cpu.complete_load(["x"])
    cpu.on_request_finished(b)  # b reused x: T2
    assert list(arc.t1) == ["y"] and list(arc.t2) == ["x"]
    assert _store(cpu, c, ["z"]) == ["z"]  # T1 (1 chunk) >= target 0: y goes, to ghost B1
    assert list(arc.b1) == ["y"]
    cpu.complete_store(["z"])
    assert arc.target_t1 == 0
    assert _store(cpu, Access(), ["y"]) == ["y"]  # y again: a ghost hit in B1 grows T1's target
    assert arc.target_t1 == 1


class _Req:
    def __init__(self, rid: str, prompt: int, keys: str = "k") -> None:
        self.rid, self.num_prompt_tokens, self.num_tokens = rid, prompt, prompt
        self.num_computed = 0
        self.blocks: list[int] = []
        self.keys = keys

    def block_key(self, j: int) -> str:
        return f"{self.keys}{j}"


def test_a_lookup_takes_whole_chunks_after_the_gpu_hit_up_to_every_token_and_waits_for_pending():
    conn = OffloadConnector(OffloadConfig(cpu_chunks=16, blocks_per_chunk=2), block_size=4)
    writer, reader = _Req("w", 40), _Req("r", 40)
    conn.add(writer)
    conn.add(reader)
    writer.blocks = list(range(1, 11))
    jobs, flush = conn.build([(writer, 40, 0)], [], [])
    # 40 tokens = 5 chunks of 8 tokens (2 blocks each): one store of the 5 chunks' 10 blocks
    assert [(j.kind, j.keys, len(j.blocks)) for j in jobs] == [
        ("store", ["k1", "k3", "k5", "k7", "k9"], 10)
    ] and flush == []
    assert conn.lookup(reader, 0) is None  # the chunks are pending: defer
    conn.complete([jobs[0].job_id])
    assert conn.lookup(reader, 0) == 40  # all 40 tokens (the scheduler computes the last again)
    # after a GPU hit of 3 blocks (12 tokens, inside chunk 1): chunks 1-4, less what the GPU has
    assert conn.lookup(reader, 12) == 28
    reader.num_tokens = 39
    assert conn.lookup(reader, 0) == 32  # whole chunks only


def _sessions(turns: int, prompt: int, out: int) -> list[Session]:
    def turn(k: int, i: int) -> Turn:
        return Turn(prompt, out, arrival_s=0.01 * i if k == 0 else None, think_s=1.0)

    return [Session(f"s{i}", tuple(turn(k, i) for k in range(turns))) for i in range(4)]


def _run(offload: OffloadConfig | None, num_blocks: int, async_scheduling: bool = False):
    cfg = VllmConfig(
        num_blocks=num_blocks, block_size=16, max_num_seqs=8, async_scheduling=async_scheduling
    )
    conn = OffloadConnector(offload, 16) if offload is not None else None
    sched = VllmScheduler(cfg, offload=conn)
    bb = 16 * COST.kv_bytes_per_token

    def transfer_s(kind: str, blocks: int) -> float:
        return COST.copy_s("h2d" if kind == "load" else "d2h", blocks * bb, blocks)

    run = replay(
        _sessions(3, 150, 30),
        KvsimSide(sched),
        lambda shape: COST.iteration(shape).total_s,
        16,
        cfg.model_len,
        log_steps=True,
        transfer_s=transfer_s,
        async_scheduling=async_scheduling,
    )
    return run, sched


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_later_turn_loads_its_evicted_history_from_the_cpu_and_waits_for_the_load(
    async_scheduling,
):
    """Four sessions of three turns of 150 + 30 tokens in a GPU of 63 blocks: most histories are
    evicted by the time their next turn comes. With the CPU tier its prompt chunks were stored, so the turn
    loads them (the step that starts the load does not schedule it) and is admitted later with
    them as computed tokens."""
    plain, _ = _run(None, 64, async_scheduling)
    off, sched = _run(OffloadConfig(cpu_chunks=200), 64, async_scheduling)
    hits = lambda run: sum(t.hit for t in run.turns if t.k > 0)  # noqa: E731
    assert hits(off) > hits(plain) + 1000
    loads = [(e["step"], j) for e in off.steps for j in e.get("jobs", []) if j[1] == "load"]
    assert loads
    step, (job, _, rid, blocks) = loads[0]
    by_step = {e["step"]: e for e in off.steps}
    assert rid not in [s[0] for s in by_step[step]["sched"]]
    later = [e for e in off.steps if e["step"] > step and rid in e["hit"]]
    assert later and later[0]["hit"][rid] >= blocks * 16
    assert not sched.offload.jobs and not sched.has_requests()
    assert len(off.turns) == len(plain.turns) == 12


def test_a_loading_request_holds_its_blocks_in_the_holding_queue():
    cfg = VllmConfig(num_blocks=64, block_size=4, max_num_seqs=4)
    conn = OffloadConnector(OffloadConfig(cpu_chunks=16), 4)
    sched = VllmScheduler(cfg, offload=conn)
    a = Request("a", 16, 2, lambda j: ("p", j))
    sched.add(a)
    plan = sched.schedule()
    assert [j.kind for j in plan.jobs] == ["store"]
    sched.complete_jobs([plan.jobs[0].job_id])
    sched.update({a})
    sched.schedule()
    sched.update({a})  # a finishes; its 4 blocks stay cached on the GPU and on the CPU
    b = Request("b", 16, 2, lambda j: ("p", j))  # the same 16 tokens
    sched.add(b)
    plan = sched.schedule()
    # GPU hit: 3 blocks (at most 15 tokens); the CPU has chunk 3 (tokens 12-15): load it
    assert [(j.kind, len(j.blocks)) for j in plan.jobs] == [("load", 1)]
    assert b.status == LOADING and b.num_computed == 16 and list(sched.holding) == [b]
    assert plan.sched == []
    sched.update(set())
    assert sched.schedule().sched == []  # still loading: skipped
    sched.update(set())
    sched.complete_jobs([plan.jobs[0].job_id])
    plan = sched.schedule()  # loaded: all 16 tokens, so the last is computed again
    assert [(r.rid, n, c) for r, n, c in plan.sched] == [("b", 1, 15)] and plan.admitted == [b]
