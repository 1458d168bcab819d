"""Prefix sharing, worked by hand: equal prefix hashes share one KV across sessions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from costmodels import attention_pairs, cost_model
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import GIB
from sim.metrics import summarize
from sim.prefix import prefix_keys
from sim.pricing import Prefill, Pricer, recompute_pairs
from traces import load_mooncake
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16
PAGE = BT * COST.kv_bytes_per_token
TRACE_BLOCK = 32  # two pages per trace block: the hashes are remapped
PRICER = Pricer(COST, PAGE, True, True, True)


def shared(
    sid: str,
    start: float,
    prompt: int,
    output: int,
    hashes: list[int],
    later: list[tuple[int, int]] = (),
) -> Session:
    turns = [Turn(prompt, output, arrival_s=start, prefix_hashes=tuple(hashes))]
    turns += [Turn(p, o, think_s=1.0) for p, o in later]
    return Session(sid, tuple(turns), block_tokens=TRACE_BLOCK)


def plain(sid: str, start: float, prompt: int, output: int) -> Session:
    return Session(sid, (Turn(prompt, output, arrival_s=start),))


def run(
    sessions, gpu_pages: float, cpu_pages: float = 0, sharing: bool = True, unit: str = "block"
):
    mem = MemoryConfig(
        gpu_kv_gb=gpu_pages * PAGE / GIB,
        cpu_kv_gb=cpu_pages * PAGE / GIB,
        block_tokens=BT,
        evict_unit=unit,
        prefix_sharing=sharing,
    )
    res = simulate(sessions, COST, mem, EngineConfig(), policy="lru", debug=True)
    return res, res.turns.set_index(["session_id", "turn"])


def alone_ttft(tokens: int, offset: int, computed_pages=()) -> float:
    """The TTFT of a turn admitted alone: ``tokens`` new tokens after ``offset`` resident ones,
    plus the prefix pages it computes (new to the kernel; the rest of the offset is cached)."""
    computed = BT * len(computed_pages)
    pf = Prefill(
        tokens=tokens + computed,
        seqs=1,
        pairs=attention_pairs(tokens, offset)
        + recompute_pairs(list(computed_pages), 1, BT, offset),
        lens=[(tokens + computed, offset - computed)],
    )
    return PRICER.admission_s(pf, 0, 0)[0]


def test_keys_remap_trace_blocks_to_pages():
    s = shared("A", 0.0, 100, 1, [7, 8, 9, 10])  # full blocks: min(4, 100 // 32) = 3
    assert prefix_keys(s, 16) == [(7, 0), (7, 1), (8, 2), (8, 3), (9, 4), (9, 5)]
    assert prefix_keys(s, 48) == [(8, 0), (9, 1)]  # a page spanning blocks: its last token's
    assert prefix_keys(s, 64) == [(8, 0)]  # 96 tokens hold one page of 64
    assert prefix_keys(plain("B", 0.0, 100, 1), 16) == []


# A: 100 prompt tokens under hashes [1, 2, 3, 4] -> prefix pages 0..5 (96 tokens), 105 tokens in
# all: 6 pool pages + 1 own. B: 80 tokens under [1, 2, 99] -> 2 full blocks = pages 0..3, all A's.
A = shared("A", 0.0, 100, 5, [1, 2, 3, 4])
B = shared("B", 10.0, 80, 5, [1, 2, 99])


def test_two_sessions_share_a_system_prompt():
    res, t = run([A, B], math.inf)
    assert t.loc[("A", 0), "shared_hit_tokens"] == 0
    assert t.loc[("B", 0), "shared_hit_tokens"] == 64
    assert t.loc[("B", 0), "history_tokens"] == 0 and t.loc[("B", 0), "gpu_hit_tokens"] == 0
    # B computes its 16 tokens after the 64 it found, nothing else.
    assert t.loc[("B", 0), "ttft_s"] == pytest.approx(alone_ttft(16, 64), rel=1e-12)
    assert summarize(res)["shared_hit_rate"] == pytest.approx(64 / 180)
    # One copy of the shared pages: pool 6 + A's own 1 + B's own 2 (tokens 64..84).
    assert res.stats.gpu_peak_bytes == 9 * PAGE
    off, t_off = run([A, B], math.inf, sharing=False)
    assert t_off.loc[("B", 0), "shared_hit_tokens"] == 0
    assert t_off.loc[("B", 0), "ttft_s"] == pytest.approx(alone_ttft(80, 0), rel=1e-12)
    assert off.stats.gpu_peak_bytes == (7 + 6) * PAGE


def test_a_later_turn_finds_its_prefix_as_history():
    a = shared("A", 0.0, 100, 5, [1, 2, 3, 4], later=[(20, 5)])
    _, t = run([a], math.inf)
    assert t.loc[("A", 1), "history_tokens"] == 105
    assert t.loc[("A", 1), "gpu_hit_tokens"] == 105  # 96 in the pool, 9 its own
    assert t.loc[("A", 1), "shared_hit_tokens"] == 0


# D (no hashes, at 5 s) needs 7 pages. Released A's pages go in page order: the prefix first.
D = plain("D", 5.0, 100, 5)


def test_evicted_shared_pages_are_recomputed():
    # 7 pages: D evicts all of A; B finds nothing and computes its whole prompt.
    _, t = run([A, D, B], 7)
    assert t.loc[("B", 0), "shared_hit_tokens"] == 0
    assert t.loc[("B", 0), "ttft_s"] == pytest.approx(alone_ttft(16, 64, range(4)), rel=1e-12)


def test_shared_pages_under_partial_pressure_lose_the_oldest_first():
    # 12 pages: D needs 7 with 5 free, so LRU evicts A's two oldest: pool pages 0 and 1. B finds
    # pages 2 and 3 on the GPU and computes 0 and 1 with its own 16 tokens.
    _, t = run([A, D, B], 12)
    assert t.loc[("B", 0), "shared_hit_tokens"] == 32
    assert t.loc[("B", 0), "ttft_s"] == pytest.approx(alone_ttft(16, 64, [0, 1]), rel=1e-12)


def test_shared_pages_demoted_to_the_cpu_are_swapped_in():
    _, t = run([A, D, B], 7, cpu_pages=7)
    assert t.loc[("B", 0), "shared_hit_tokens"] == 0
    assert t.loc[("B", 0), "shared_cpu_tokens"] == 64
    assert t.loc[("B", 0), "swap_in_bytes"] == 4 * PAGE


def test_a_shared_page_is_pinned_while_a_running_turn_holds_it():
    # A: 64 prompt tokens (4 pool pages), 40 out -> 7 pages, the whole GPU. C (no hashes) arrives
    # during A's decode and needs 3 pages with 2 free: only A's pages could make room, and they
    # are all held (its own, and the pool's by A's turn), so C waits for A to finish.
    a = shared("A", 0.0, 64, 40, [1, 2])
    c = plain("C", 0.01, 40, 2)
    _, t = run([a, c], 7)
    assert t.loc[("C", 0), "admit_s"] >= t.loc[("A", 0), "finish_s"]
    assert t.loc[("A", 0), "preemptions"] == 0


def test_prefix_sharing_needs_block_units():
    with pytest.raises(ValueError, match="prefix_sharing"):
        run([A, B], math.inf, unit="layer_block")
    _, t = run([A, B], math.inf, unit="layer_block", sharing=False)  # off: hashes are ignored
    assert t["shared_hit_tokens"].sum() == 0


MOONCAKE = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "data"
    / "mooncake"
    / "conversation_trace.jsonl"
)


def _reuse_bound(lines: list[dict], page: int, block: int = 512) -> tuple[int, int]:
    """(prompt tokens whose page key an earlier request computed, all input tokens), straight from
    the hashes in arrival order: a page is shareable when it lies in the request's full blocks."""
    seen: set[tuple[int, int]] = set()
    reused = total = 0
    for r in sorted(lines, key=lambda r: r["timestamp"]):  # stable: file order within ties
        h, n = r["hash_ids"], r["input_length"]
        total += n
        for j in range(min(len(h), n // block) * block // page):
            key = (h[((j + 1) * page - 1) // block], j)
            reused += page * (key in seen)
            seen.add(key)
    return reused, total


@pytest.mark.data
@pytest.mark.parametrize("page", [16, 512])
def test_mooncake_infinite_memory_reuses_exactly_the_hash_bound(tmp_path, page):
    if not MOONCAKE.exists():
        pytest.skip(f"{MOONCAKE} is absent")
    head = MOONCAKE.read_text().splitlines()[:600]
    sample = tmp_path / "head.jsonl"
    sample.write_text("\n".join(head) + "\n")
    reused, total = _reuse_bound([json.loads(x) for x in head], page)
    sessions = load_mooncake(sample, jitter=False, chain=False).sessions
    mem = MemoryConfig(gpu_kv_gb=math.inf, block_tokens=page)
    t = simulate(sessions, COST, mem, EngineConfig(), policy="lru").turns
    assert t["prompt_tokens"].sum() == total
    assert t["shared_hit_tokens"].sum() == reused
    assert reused / total > 0.1  # the sample does share: the check is not 0 == 0


def _system_prompt_trace(n: int = 24, seed: int = 3) -> list[Session]:
    """Sessions opening with one of three system prompts (2..4 shared trace blocks), then a user
    message of their own, then two later turns; arrivals overlap, so turns share pages while
    others run."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = rng.randrange(3)
        shared_blocks = [100 * kind + b for b in range(2 + kind)]
        own = rng.randrange(10, 70)
        prompt = TRACE_BLOCK * len(shared_blocks) + own
        hashes = shared_blocks + [10_000 + i * 10 + b for b in range(-(-own // TRACE_BLOCK))]
        out.append(
            shared(
                f"s{i:02d}",
                rng.uniform(0, 2.0),
                prompt,
                rng.randrange(5, 60),
                hashes,
                later=[(rng.randrange(5, 40), rng.randrange(5, 40)) for _ in range(2)],
            )
        )
    return sorted(out, key=lambda s: (s.turns[0].arrival_s, s.session_id))


@pytest.mark.parametrize("policy", ["lru", "fifo", "arc", "pensieve", "belady", "session-aware"])
@pytest.mark.parametrize("gpu_pages,cpu_pages", [(30, 0), (30, 16), (60, 8)])
def test_shared_pages_keep_every_invariant_under_pressure(policy, gpu_pages, cpu_pages):
    """Debug mode checks every iteration: pool pages held exactly by the running turns that name
    them, held pages on the GPU and never candidates, byte counts per tier."""
    sessions = _system_prompt_trace()
    mem = MemoryConfig(
        gpu_kv_gb=gpu_pages * PAGE / GIB, cpu_kv_gb=cpu_pages * PAGE / GIB, block_tokens=BT
    )
    t = simulate(sessions, COST, mem, EngineConfig(), policy=policy, debug=True).turns
    assert len(t) == 3 * len(sessions)
    first = t[t.turn == 0]
    assert (first.shared_hit_tokens + first.shared_cpu_tokens <= first.prompt_tokens).all()
    assert (t[t.turn > 0][["shared_hit_tokens", "shared_cpu_tokens"]] == 0).all().all()
    later = t[t.turn > 0]
    assert (
        later.gpu_hit_tokens + later.cpu_hit_tokens + later.recomputed_tokens
        == later.history_tokens
    ).all()
    assert first.shared_hit_tokens.sum() > 0
