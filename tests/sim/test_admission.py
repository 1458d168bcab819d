"""Admission by hand: max_running, max_batch_tokens and head-of-line blocking (FCFS, as vLLM)."""

from __future__ import annotations

import math

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import GIB
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token


def single(sid: str, at: float, prompt: int, output: int) -> Session:
    return Session(sid, (Turn(prompt, output, arrival_s=at),))


def run(sessions, gpu_gb=math.inf, **engine):
    mem = MemoryConfig(gpu_kv_gb=gpu_gb, block_tokens=16, evict_unit="block")
    res = simulate(sessions, COST, mem, EngineConfig(**engine), policy="lru", debug=True)
    return res.turns.set_index("session_id")


def running_at(t, when: float) -> int:
    return int(((t.admit_s <= when) & (t.finish_s > when)).sum())


def test_max_running_caps_the_batch_and_the_queue_is_fcfs():
    sessions = [single(f"s{i}", 0.0, 10, 50) for i in range(5)]
    t = run(sessions, max_running=2)
    admits = sorted(t.admit_s)
    assert admits[0] == admits[1] == 0.0  # two start at once ...
    assert admits[2] > 0.0  # ... the third waits for a slot
    for when in sorted(set(t.admit_s) | set(t.finish_s)):
        assert running_at(t, when) <= 2
    order = list(t.sort_values(["admit_s", "arrival_s"]).index)
    assert order == [f"s{i}" for i in range(5)]  # first come, first served
    assert t.loc["s2"].admit_s == min(t.loc["s0"].finish_s, t.loc["s1"].finish_s)


def test_max_batch_tokens_blocks_the_head_and_everything_behind_it():
    # s0 decodes; s1's 900-token prompt fits in the 1000 - 1 tokens left beside it and joins at once.
    # s2's prompt (1500) never fits beside a decode: it waits until nothing runs, and the small s3
    # behind it waits too (head-of-line blocking), though its 10 tokens would fit.
    sessions = [
        single("s0", 0.0, 10, 400),
        single("s1", 0.001, 900, 5),
        single("s2", 0.002, 1500, 5),
        single("s3", 0.003, 10, 5),
    ]
    t = run(sessions, max_batch_tokens=1000)
    last_decode_end = max(t.loc["s0"].finish_s, t.loc["s1"].finish_s)
    assert t.loc["s1"].admit_s < t.loc["s0"].finish_s  # fitted beside s0's decode
    assert t.loc["s2"].admit_s >= last_decode_end  # alone: larger than the budget
    assert t.loc["s3"].admit_s >= t.loc["s2"].admit_s  # never overtakes the head
    assert t.loc["s3"].queue_s > 0.0


def test_memory_blocks_the_head_and_nothing_behind_it_jumps_ahead():
    # GPU of 8 pages. s0 holds 5 pages while it runs; s1 needs 6 pages: it waits for s0 to finish
    # (s0's pages are then evicted); s2 needs 1 page and would fit now, but it is behind s1.
    gpu = 8 * PAGE / GIB
    sessions = [single("s0", 0.0, 60, 20), single("s1", 0.001, 80, 10), single("s2", 0.002, 4, 4)]
    t = run(sessions, gpu_gb=gpu)
    assert t.loc["s1"].admit_s >= t.loc["s0"].finish_s
    assert t.loc["s2"].admit_s >= t.loc["s1"].admit_s
    assert t.loc["s2"].queue_s > 0.0


def test_the_token_budget_leaves_one_token_per_decoding_sequence():
    # s0 decodes from its first iteration on; beside it the budget is 100 - 1 = 99 tokens. A 99-token
    # prompt joins at the next iteration; a 100-token one waits until s0 has finished.
    def admitted_beside_s0(prompt: int) -> bool:
        t = run([single("s0", 0.0, 10, 200), single("s1", 0.0001, prompt, 5)], max_batch_tokens=100)
        s0, s1 = t.loc["s0"], t.loc["s1"]
        assert s0.admit_s == 0.0 and s1.arrival_s < s0.first_token_s
        if s1.admit_s == s0.first_token_s:  # the iteration right after s0's prefill
            return True
        assert s1.admit_s >= s0.finish_s
        return False

    assert admitted_beside_s0(99)
    assert not admitted_beside_s0(100)


def test_prefills_admitted_together_share_the_token_budget():
    # z's 100-token prefill fills the budget of 100 alone. a, b, c (40 tokens each) arrive during it;
    # the trace lists them in reverse, the queue follows their arrival times. After it, z decodes
    # (99 tokens left): a and b start together (80), c (40 > 19 left) waits for the next iteration.
    sessions = [
        single("z", 0.0, 100, 50),
        single("c", 0.0003, 40, 50),
        single("b", 0.0002, 40, 50),
        single("a", 0.0001, 40, 50),
    ]
    t = run(sessions, max_batch_tokens=100)
    z, a, b, c = (t.loc[k] for k in "zabc")
    assert z.admit_s == 0.0 and c.arrival_s < z.first_token_s
    assert a.admit_s == b.admit_s == z.first_token_s
    assert c.admit_s == a.first_token_s  # the very next iteration
