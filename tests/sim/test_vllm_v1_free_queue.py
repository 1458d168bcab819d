"""The block pool's free queue of runs, worked by hand, and the decode spans that take their blocks
at once: vLLM's order block by block (the head first, a request's tail freed first, a hit taken
out of the middle of a run), and the same step log as step by step."""

from __future__ import annotations

import random

import pytest

import costmodels
from sim.vllm_v1.block_pool import BlockPool, FreeQueue
from sim.vllm_v1.loop import KvsimSide, StepPrices, replay
from sim.vllm_v1.scheduler import VllmConfig, VllmScheduler
from traces import load_trace

COST = costmodels.cost_model("llama-3-8b", "h100-sxm")

# --- the queue of runs ----------------------------------------------------------------------------


def test_runs_leave_from_the_head_in_slices_across_runs_with_their_keys():
    q = FreeQueue([1, 2, 3])
    q.push_back([7, 6], ["k7", "k6"])
    assert q.pop_many(2) == ([1, 2], [None, None])
    assert q.pop_many(2) == ([3, 7], [None, "k7"])  # the rest of one run, then the next
    assert list(q) == [6] and len(q) == 1
    assert q.pop() == (6, "k6")
    with pytest.raises(IndexError):
        q.pop()


def test_a_run_pushed_to_the_front_goes_first_in_its_order():
    q = FreeQueue()
    q.push_back([1, 2, 3, 4], ["a", "b", "c", "d"])
    assert q.pop() == (1, "a")  # the head run is partly taken
    q.push_front([9, 8])
    assert list(q.entries()) == [(9, None), (8, None), (2, "b"), (3, "c"), (4, "d")]
    assert q.pop_many(3) == ([9, 8, 2], [None, None, "b"])


def test_a_block_taken_from_the_middle_is_skipped_and_its_new_entry_counts():
    q = FreeQueue()
    q.push_back([1, 2, 3, 4], ["a", "b", "c", "d"])
    q.remove(3)  # a hit on a free block: its entry goes stale
    assert list(q) == [1, 2, 4] and len(q) == 3
    q.push_back([3], ["c"])  # freed again: the tail
    assert list(q) == [1, 2, 4, 3]
    assert q.pop_many(3) == ([1, 2, 4], ["a", "b", "d"])  # the stale 3 is passed over
    assert q.pop() == (3, "c") and not q.pulled


def test_a_block_hit_twice_while_free_keeps_only_its_newest_entry():
    q = FreeQueue()
    q.push_back([5, 6], ["x", "y"])
    q.remove(5)
    q.push_back([5], ["x"])  # queue: (5), 6, 5
    q.remove(5)
    q.push_back([5], ["x"])  # queue: (5), 6, (5), 5
    assert list(q) == [6, 5]
    assert [q.pop(), q.pop()] == [(6, "y"), (5, "x")] and len(q) == 0


def test_a_block_with_a_stale_entry_cannot_rejoin_the_head():
    q = FreeQueue([1, 2])
    q.remove(2)
    with pytest.raises(AssertionError):
        q.push_front([2])


# --- the pool on it ----------------------------------------------------------------------------------


def _pool_with_two_requests_freed() -> BlockPool:
    """Blocks 1..3 (a, keys a0..a2) and 4..5 (b, b0, b1 and an unkeyed partial 6), freed."""
    pool = BlockPool(9)  # free: 1..8
    a, b = pool.allocate(3), pool.allocate(3)
    pool.cache_blocks(a, 0, ["a0", "a1", "a2"])
    pool.cache_blocks(b, 0, ["b0", "b1"])
    pool.release([3, 2, 1], ["a2", "a1", "a0"])  # the tail first
    pool.release([6, 5, 4], [None, "b1", "b0"])  # 6 unkeyed to the head; 5, 4 to the tail
    return pool


def test_freeing_puts_a_requests_tail_first_and_its_unkeyed_block_at_the_head():
    pool = _pool_with_two_requests_freed()
    assert list(pool.free) == [6, 7, 8, 3, 2, 1, 5, 4]
    assert pool.num_free == 8 and pool.num_free_cached == 5


def test_the_least_recently_freed_cached_block_is_evicted_first():
    pool = _pool_with_two_requests_freed()
    assert pool.allocate(4) == [6, 7, 8, 3]  # unkeyed and never-used blocks, then a's tail
    assert pool.lookup("a2") is None and pool.lookup("a1") == 2
    assert pool.evictions == 1 and pool.num_free_cached == 4


def test_a_hit_in_the_middle_of_a_run_splits_it():
    pool = _pool_with_two_requests_freed()
    pool.touch([pool.lookup("a1")])  # block 2, inside the run 3, 2, 1
    assert pool.holders(2) == 1 and pool.num_free == 7
    assert pool.allocate(6) == [6, 7, 8, 3, 1, 5]  # 2 is passed over
    assert pool.lookup("a1") == 2 and pool.lookup("a0") is None
    pool.release([2], ["a1"])
    assert list(pool.free) == [4, 2]


def test_a_shared_block_goes_back_only_with_its_last_holder():
    pool = _pool_with_two_requests_freed()
    pool.touch([1, 1])  # two requests hit a0
    pool.release([1], ["a0"])
    assert 1 not in list(pool.free) and pool.holders(1) == 1
    pool.release([1], ["a0"])
    assert list(pool.free)[-1] == 1


def test_taking_blocks_one_by_one_at_once_is_allocating_each():
    one, each = _pool_with_two_requests_freed(), _pool_with_two_requests_freed()
    blocks = [one.allocate(1)[0] for _ in range(5)]
    got, evicted = each.take_each(5)
    assert got == blocks == [6, 7, 8, 3, 2]
    assert evicted == [False, False, False, True, True]
    assert len(each.evict_ns) == len(one.evict_ns) == 2  # one sample per allocation that evicted
    assert each.evictions == one.evictions == 2
    assert each.cached == one.cached and list(each.free) == list(one.free)


def test_a_key_cached_twice_in_one_call_is_found_in_its_first_block():
    pool = BlockPool(5)
    blocks = pool.allocate(3)
    pool.cache_blocks(blocks, 0, ["k", "x", "k"])
    assert pool.lookup("k") == 1 and pool.more == {"k": [3]}
    pool.release([1], ["k"])
    pool.allocate(2)  # block 1 reused, then 4
    assert pool.lookup("k") == 3 and not pool.more


# --- a session's own keys: chains, the same as any key ----------------------------------------------


def _drive(pool: BlockPool, key, seed: int) -> list:
    """Random requests of a few sessions against ``pool``: each takes blocks (some hit), caches a
    prefix of them under ``key(session, j)`` and frees them; what the pool shows after each."""
    rng = random.Random(seed)
    held: list[tuple[int, list[int], int]] = []  # (session, blocks, cached)
    seen = []
    for _ in range(300):
        if held and (rng.random() < 0.5 or pool.num_free < 12):
            s, blocks, cached = held.pop(rng.randrange(len(held)))
            keys = [key(s, j) for j in range(cached)]
            if isinstance(key(0, 0), int):  # chain keys: a range, as the scheduler gives them
                keys = range(key(s, 0), key(s, cached))
            parts = [keys[::-1]] if cached else []
            pool.free_request(blocks[::-1], len(blocks) - cached, parts)
        else:
            s = rng.choice([t for t in range(6) if t not in {h[0] for h in held}] or [0])
            if any(h[0] == s for h in held):
                continue
            hit = pool.cached_prefix([key(s, j) for j in range(8)])
            pool.touch(hit)
            blocks = hit + pool.allocate(rng.randint(0, min(10, pool.num_free)))
            cached = rng.randint(len(hit), len(blocks))
            if cached > len(hit):
                pool.cache_blocks(blocks, len(hit), [key(s, j) for j in range(len(hit), cached)])
            held.append((s, blocks, cached))
        seen.append(
            (
                list(pool.free),
                pool.evictions,
                [pool.lookup(key(s, j)) for s in range(6) for j in range(18)],
            )
        )
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chain_keys_evict_and_hit_as_dict_keys_do(seed):
    chains, dicts = BlockPool(40), BlockPool(40)
    assert _drive(chains, lambda s, j: (s << 32) | j, seed) == _drive(
        dicts, lambda s, j: f"{s}/{j}", seed
    )
    assert not dicts.chains and not chains.cached  # each kept its keys where it should


# --- decode spans: blocks taken at once -----------------------------------------------------------


def _log(sched: VllmScheduler, decode_spans: bool = True) -> list[dict]:
    sessions = load_trace({"kind": "synthetic", "sessions": 40, "seed": 3}).sessions
    cfg = sched.cfg
    return replay(
        sessions,
        KvsimSide(sched),
        StepPrices(COST),
        cfg.block_size,
        cfg.model_len,
        log_steps=True,
        async_scheduling=cfg.async_scheduling,
        decode_spans=decode_spans,
    ).steps


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_decode_spans_taking_blocks_at_once_log_what_step_by_step_does(async_scheduling):
    cfg = VllmConfig(num_blocks=400, block_size=16, async_scheduling=async_scheduling)
    at_once = VllmScheduler(cfg)
    by_step = VllmScheduler(cfg)
    by_step.pool.caching_commutes = False  # the per-step path
    logs = [_log(at_once), _log(by_step), _log(VllmScheduler(cfg), decode_spans=False)]
    assert at_once.pool.evictions > 1000  # under pressure: decode blocks evict cached ones
    assert logs[0] == logs[1] == logs[2]
    assert at_once.pool.evictions == by_step.pool.evictions
    assert len(at_once.pool.evict_ns) == len(by_step.pool.evict_ns)
