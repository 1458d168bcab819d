"""Chunked prefill in kvsim's own engine (``engine.chunked_prefill``), worked by hand: a prompt longer
than the token budget is cut into chunks over iterations, the turns behind it are not held back,
and the chunks add up to the unchunked prefill's work."""

from __future__ import annotations

import pytest

import costmodels
import sim
from costmodels import attention_pairs
from sim.chunks import first_chunk
from sim.config import EngineConfig, MemoryConfig
from sim.pricing import Prefill
from sim.step_log import KvsimStepLog
from traces.records import Session, Turn

COST = costmodels.cost_model("llama-3-8b", "h100-sxm")


def _run(trace, chunked: bool, budget: int = 4096, gpu_kv_gb: float = 8.0, **engine):
    steps: list[dict] = []
    log = KvsimStepLog(steps.append)
    res = sim.simulate(
        trace,
        COST,
        MemoryConfig(gpu_kv_gb=gpu_kv_gb),
        EngineConfig(max_batch_tokens=budget, chunked_prefill=chunked, **engine),
        debug=True,  # the invariants after every iteration
        on_iteration=log,
    )
    log.close()
    return res, steps


def _turn(res, rid: str):
    t = res.turns
    return t[(t["session_id"] + "/" + t["turn"].astype(str)) == rid].iloc[0]


def test_a_long_prompt_is_cut_into_chunks_of_the_budget():
    # 10,000 prompt tokens, budget 4,096: 4,096 + 4,096 + 1,808
    res, steps = _run([Session("a", (Turn(10_000, 3, arrival_s=0.0),))], chunked=True)
    assert [e["sched"] for e in steps[:3]] == [
        [["a/0", 4096, 0]],
        [["a/0", 4096, 4096]],
        [["a/0", 1808, 8192]],
    ]
    assert [e["hit"] for e in steps[:3]] == [{"a/0": 0}, {}, {}]  # admitted at the first chunk
    assert steps[3]["sched"] == [["a/0", 1, 10_001]]  # then it decodes
    a = _turn(res, "a/0")
    assert a["admit_s"] == steps[0]["t"]
    assert a["first_token_s"] == steps[2]["t"] + steps[2]["dur"]  # sampled after the last chunk
    assert len(steps) == 5  # 3 chunks, then 2 decodes for outputs 2 and 3


def test_turns_behind_a_long_prompt_are_admitted_beside_its_chunks():
    trace = [
        Session("a", (Turn(10_000, 2, arrival_s=0.0),)),
        Session("b", (Turn(100, 2, arrival_s=0.0),)),
    ]
    res, steps = _run(trace, chunked=True)
    # a takes the whole budget twice; b joins beside a's last chunk (1,808 + 100 <= 4,096)
    assert steps[2]["sched"] == [["a/0", 1808, 8192], ["b/0", 100, 0]]
    unchunked, plain = _run(trace, chunked=False)
    # without chunks a's 10,000 tokens run alone, over the budget, and b waits for the next step
    assert plain[0]["sched"] == [["a/0", 10_000, 0]]
    assert plain[1]["sched"] == [["a/0", 1, 10_001], ["b/0", 100, 0]]
    # b's TTFT: chunked, the end of a's last chunk; unchunked, a's prefill and one more step
    assert _turn(res, "b/0")["ttft_s"] < _turn(unchunked, "b/0")["ttft_s"]


def test_a_decoding_turn_keeps_its_token_of_the_budget():
    trace = [
        Session("d", (Turn(50, 20, arrival_s=0.0),)),
        Session("a", (Turn(5_000, 2, arrival_s=0.001),)),
    ]
    _, steps = _run(trace, chunked=True)
    row = next(e for e in steps if any(r[0] == "a/0" for r in e["sched"]))
    assert row["sched"] == [["d/0", 1, 51], ["a/0", 4095, 0]]  # 4,096 - 1 decode


def test_chunks_add_up_to_the_whole_prefill():
    cached, total = 300, 1000
    pairs = attention_pairs(total, cached)
    whole = Prefill(
        tokens=total,
        pairs=pairs * 1.25,  # history holes make the real pairs differ from a plain prefill's
        seqs=1,
        h2d_bytes=4096,
        h2d_pages=2,
        recompute_tokens=120,
        recompute_pairs=5e4,
        recompute_seqs=1,
        lens=[(total, cached)],
        recomputed=[120],
    )
    chunk, rest = first_chunk(whole, 400)
    assert chunk.lens == [(400, cached)] and rest.lens == [(600, cached + 400)]
    assert chunk.tokens + rest.tokens == total
    assert chunk.pairs + rest.pairs == pytest.approx(whole.pairs)
    assert chunk.pairs == pytest.approx(1.25 * attention_pairs(400, cached))
    assert (chunk.h2d_bytes, rest.h2d_bytes) == (4096, 0)  # the copies go with the first chunk
    assert (chunk.recompute_tokens, rest.recompute_tokens) == (120, 0)  # history comes first
    with pytest.raises(ValueError):
        first_chunk(whole, total)


def test_off_is_the_engine_as_it_was_and_on_agrees_when_nothing_is_cut():
    # every prompt under the budget: the same iterations, so the same ledger
    trace = [Session(f"s{i}", (Turn(200 + 10 * i, 5, arrival_s=0.01 * i),)) for i in range(8)]
    plain, _ = _run(trace, chunked=False)
    chunked, _ = _run(trace, chunked=True)
    cols = ["admit_s", "first_token_s", "finish_s", "gpu_hit_tokens"]
    assert plain.turns[cols].equals(chunked.turns[cols])


def test_layer_block_units_are_refused():
    with pytest.raises(ValueError, match="layer_block"):
        sim.simulate(
            [Session("a", (Turn(10, 1, arrival_s=0.0),))],
            COST,
            MemoryConfig(gpu_kv_gb=1.0, evict_unit="layer_block"),
            EngineConfig(chunked_prefill=True),
        )
