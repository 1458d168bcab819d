"""kvsim's vLLM v1 engine, worked by hand from vLLM 0.33.0's source (``v1/core/block_pool.py``,
``kv_cache_manager.py``, ``sched/scheduler.py``): the free queue, prefix hits, chunked prefill,
the admission gate and the preemption victim. Block size 4 throughout, so counts stay small."""

from __future__ import annotations

import pytest

from sim.vllm_v1.block_pool import BlockPool
from sim.vllm_v1.scheduler import PREEMPTED, Request, VllmConfig, VllmScheduler


def own(session: int):
    return lambda j: ("own", session, j)


def req(rid: str, prompt: int, out: int, session: int = 0) -> Request:
    return Request(rid, prompt, out, own(session))


def ids(plan):
    return [(r.rid, n, c) for r, n, c in plan.sched]


# --- the block pool ------------------------------------------------------------------------------


def test_blocks_come_from_the_head_and_block_0_is_never_used():
    pool = BlockPool(5)
    assert pool.num_free == 4
    assert pool.allocate(2) == [1, 2]
    assert pool.allocate(2) == [3, 4]
    with pytest.raises(ValueError):
        pool.allocate(1)


def test_freed_keyed_blocks_go_to_the_tail_unkeyed_to_the_head():
    pool = BlockPool(7)  # free: 1..6
    assert pool.allocate(3) == [1, 2, 3]
    pool.cache(1, "k1")
    pool.cache(2, "k2")  # 3 stays unkeyed (a partial block)
    pool.release([3, 2, 1], [None, "k2", "k1"])  # tail first, with the keys they hold
    # 3 (unkeyed) to the head; 2 then 1 (keyed) to the tail after 4, 5, 6
    assert list(pool.free) == [3, 4, 5, 6, 2, 1]


def test_reusing_a_cached_block_evicts_its_key_and_a_hit_takes_it_out_of_the_queue():
    pool = BlockPool(3)  # free: 1, 2
    pool.allocate(2)
    pool.cache(1, "x")
    pool.cache(2, "y")
    pool.release([1, 2], ["x", "y"])  # queue: 1 (x), 2 (y): x least recently freed
    assert pool.lookup("x") == 1
    pool.touch([2])  # a hit on y
    assert list(pool.free) == [1] and pool.holders(2) == 1
    assert pool.allocate(1) == [1]  # reuses x's block
    assert pool.lookup("x") is None and pool.evictions == 1
    assert pool.lookup("y") == 2


def test_a_key_cached_twice_is_found_in_the_first_block_until_that_one_is_reused():
    pool = BlockPool(4)
    pool.allocate(3)
    pool.cache(1, "k")
    pool.cache(2, "k")  # two requests computed the same block
    assert pool.lookup("k") == 1
    pool.release([1], ["k"])
    pool.allocate(1)  # block 1 reused
    assert pool.lookup("k") == 2


# --- the scheduler ---------------------------------------------------------------------------------


def test_chunked_prefill_and_running_requests_first():
    s = VllmScheduler(VllmConfig(num_blocks=64, block_size=4, max_num_batched_tokens=10))
    a, b = req("a", 14, 2, 0), req("b", 6, 1, 1)
    s.add(a)
    s.add(b)
    # step 1: a gets the whole budget (10 of 14 tokens), b none
    assert ids(s.schedule()) == [("a", 10, 0)]
    assert s.update([]) == []  # a prefill chunk samples nothing
    # step 2: a (running) first: its last 4 tokens; then b is admitted with the 6 left
    assert ids(s.schedule()) == [("a", 4, 10), ("b", 6, 0)]
    assert [r.rid for r in s.update([a, b])] == ["b"]  # b's one output token: done
    # step 3: a decodes its second token (computed 14, scheduling token 15)
    assert ids(s.schedule()) == [("a", 1, 14)]
    assert [r.rid for r in s.update([a])] == ["a"]


def test_long_prefill_threshold_caps_a_chunk_only_with_company():
    cfg = VllmConfig(num_blocks=64, block_size=4, long_prefill_token_threshold=4)
    alone = VllmScheduler(cfg)
    alone.add(req("a", 10, 1))
    assert ids(alone.schedule()) == [("a", 10, 0)]  # nobody to starve: the whole prompt
    two = VllmScheduler(cfg)
    two.add(req("a", 10, 1, 0))
    two.add(req("b", 10, 1, 1))
    assert ids(two.schedule()) == [("a", 4, 0), ("b", 4, 0)]


def test_the_admission_gate_needs_the_whole_prompt_to_fit():
    # 5 usable blocks; a holds 2 (5 tokens after its first decode... 8 slots): 3 left
    gated = VllmScheduler(VllmConfig(num_blocks=6, block_size=4, max_num_batched_tokens=4))
    a = req("a", 8, 5, 0)
    gated.add(a)
    gated.schedule()  # a: 4 tokens (1 block)
    gated.update([])
    gated.add(req("b", 16, 1, 1))  # 16 tokens = 4 blocks; after a's 2nd chunk 3 are free
    plan = gated.schedule()
    assert ids(plan) == [("a", 4, 4)]  # a's chunk used the budget
    gated.update([a])
    plan = gated.schedule()  # a decodes (token 9 needs block 3): 2 free, b needs 4
    assert ids(plan) == [("a", 1, 8)] and [r.rid for r in gated.waiting] == ["b"]
    # without the gate, b's first chunk (3 tokens of budget left) would be admitted
    open_ = VllmScheduler(
        VllmConfig(
            num_blocks=6, block_size=4, max_num_batched_tokens=4, scheduler_reserve_full_isl=False
        )
    )
    a2 = req("a", 8, 5, 0)
    open_.add(a2)
    open_.schedule()
    open_.update([])
    open_.add(req("b", 16, 1, 1))
    open_.schedule()
    open_.update([a2])
    assert ids(open_.schedule()) == [("a", 1, 8), ("b", 3, 0)]


def test_preemption_takes_the_last_running_and_puts_it_first_in_line():
    # 4 usable blocks. a and b hold 2 full blocks each; a's next token needs a third block.
    s = VllmScheduler(VllmConfig(num_blocks=5, block_size=4, scheduler_reserve_full_isl=False))
    a, b, c = req("a", 8, 3, 0), req("b", 8, 3, 1), req("c", 4, 1, 2)
    for r in (a, b):
        s.add(r)
    assert ids(s.schedule()) == [("a", 8, 0), ("b", 8, 0)]
    s.update([a, b])  # 9 tokens each
    s.add(c)
    plan = s.schedule()  # a needs block 3: none free -> b (last) is preempted; then a fits
    assert ids(plan) == [("a", 1, 8)]
    assert [r.rid for r in plan.preempted] == ["b"] and b.status == PREEMPTED
    assert b.num_computed == 0 and b.num_tokens == 9  # its output kept, to be recomputed
    assert [r.rid for r in s.waiting] == ["b", "c"]  # front of the queue, before c
    assert plan.admitted == []  # no admission in a step that preempted


def test_a_preempted_request_hits_what_is_left_of_its_freed_blocks():
    s = VllmScheduler(VllmConfig(num_blocks=5, block_size=4, scheduler_reserve_full_isl=False))
    a, b = req("a", 8, 3, 0), req("b", 8, 3, 1)
    s.add(a)
    s.add(b)
    s.schedule()
    s.update([a, b])
    s.schedule()  # b preempted: its blocks go to the tail, its last block first; a takes that one
    s.update([a])
    # b (9 tokens) hits its first block (still cached), needs 2 new blocks + that one: 1 is free
    assert ids(s.schedule()) == [("a", 1, 9)]
    assert [r.rid for r in s.update([a])] == ["a"]  # a's third output: done, its 3 blocks free
    assert ids(s.schedule()) == [("b", 5, 4)]


def test_the_hit_is_whole_blocks_and_leaves_the_last_token_to_compute():
    s = VllmScheduler(VllmConfig(num_blocks=16, block_size=4))
    first = req("s/0", 8, 1, 0)
    s.add(first)
    s.schedule()
    s.update([first])  # 9 tokens: blocks 0, 1 cached (8 tokens), freed
    nxt = req("s/1", 8, 1, 0)  # the same 8 tokens again: hit capped at 7 -> 1 block
    s.add(nxt)
    assert ids(s.schedule()) == [("s/1", 4, 4)]


def test_a_request_admitted_later_in_a_step_hits_blocks_scheduled_earlier_in_it():
    s = VllmScheduler(VllmConfig(num_blocks=32, block_size=4))
    shared = lambda j: ("shared", j) if j < 2 else ("own", id(object()), j)  # noqa: E731
    s.add(Request("x", 10, 1, lambda j: ("shared", j) if j < 2 else ("x", j)))
    s.add(Request("y", 10, 1, lambda j: ("shared", j) if j < 2 else ("y", j)))
    del shared
    # x's allocation caches its 2 full blocks before they are computed; y, admitted after it in the
    # same step, hits them
    assert ids(s.schedule()) == [("x", 10, 0), ("y", 2, 8)]


# --- async scheduling ------------------------------------------------------------------------------


def test_async_plans_the_next_decode_before_the_token_it_reads_is_known():
    s = VllmScheduler(VllmConfig(num_blocks=16, block_size=4, async_scheduling=True))
    a = req("a", 6, 3)
    s.add(a)
    assert ids(s.schedule()) == [("a", 6, 0)]  # the prompt: its step will sample output 1
    assert (a.num_computed, a.placeholders) == (6, 1)
    # planned before output 1 is back: a decodes the token in flight (position 6)
    assert ids(s.schedule()) == [("a", 1, 6)] and a.placeholders == 2
    assert s.update({a}) == [] and (a.num_tokens, a.placeholders, a.in_flight) == (7, 1, 1)
    assert ids(s.schedule()) == [("a", 1, 7)]  # output 3 will come from this step
    assert s.update({a}) == [] and a.num_output == 2
    # the token in flight is a's last (2 known + 1 in flight = max_tokens 3): not scheduled again
    assert ids(s.schedule()) == []
    assert s.update({a}) == [a] and a.num_output == 3
    assert s.update(set()) == []  # the empty step
    # its 8 computed tokens (6 prompt, 2 outputs) were cached at the update, before the free
    assert s.pool.lookup(("own", 0, 1)) is not None


def test_async_a_prefill_chunk_holds_no_placeholder():
    s = VllmScheduler(
        VllmConfig(num_blocks=16, block_size=4, max_num_batched_tokens=4, async_scheduling=True)
    )
    a = req("a", 6, 2)
    s.add(a)
    assert ids(s.schedule()) == [("a", 4, 0)] and a.placeholders == 0  # samples nothing
    assert ids(s.schedule()) == [("a", 2, 4)] and a.placeholders == 1  # the rest, not waiting
    assert s.update(set()) == []
    assert ids(s.schedule()) == [("a", 1, 6)]


def test_async_a_preempted_request_still_gets_its_token_in_flight():
    # 4 usable blocks. a and b prefill 8 tokens each (2 blocks each) in one step.
    s = VllmScheduler(
        VllmConfig(
            num_blocks=5, block_size=4, scheduler_reserve_full_isl=False, async_scheduling=True
        )
    )
    a, b = req("a", 8, 3, 0), req("b", 8, 3, 1)
    s.add(a)
    s.add(b)
    assert ids(s.schedule()) == [("a", 8, 0), ("b", 8, 0)]
    # the next step, planned before their first outputs: a's token 9 needs a third block -> b
    # (last) is preempted; its output in flight is stale
    plan = s.schedule()
    assert ids(plan) == [("a", 1, 8)] and [r.rid for r in plan.preempted] == ["b"]
    assert (b.num_computed, b.placeholders, b.stale) == (0, 0, 8)
    assert s.update({a, b}) == []
    assert b.num_tokens == 9 and b.stale == 0  # delivered, and b will recompute 9 tokens
    assert a.placeholders == 1


# --- runs of steady decode steps -------------------------------------------------------------------


def test_async_a_request_whose_prompt_is_the_step_in_flight_decodes_next_with_the_run():
    """Async: the step after a prompt's last chunk decodes its first output like any other
    decode (its placeholder is the token in flight), so it is part of a steady run at once."""
    s = VllmScheduler(VllmConfig(num_blocks=64, block_size=4, async_scheduling=True))
    a = req("a", 10, 5, 0)
    s.add(a)
    assert ids(s.schedule()) == [("a", 10, 0)]  # the prompt, in flight
    assert a.in_flight == 10 and a.placeholders == 1
    run = s.steady_decodes()
    assert run is not None and run.reqs == [a]
    # the step in flight gives token 11, the run's steps 12..15: the 4th gives its last
    assert run.steps == 4
    s.advance_decodes(run, 2, [0.0, 0.0])
    # the prompt's step and the run's first step applied, the second in flight: one token
    assert (a.num_tokens, a.num_computed, a.in_flight, a.placeholders) == (12, 12, 1, 1)


def test_a_run_is_closed_to_arrivals_only_while_the_queue_has_a_head_that_stays_out():
    """A request that arrives during a run joins the queue behind its head: if the head stays
    out, the arrival changes no step of the run; with an empty queue, it could be admitted."""
    s = VllmScheduler(VllmConfig(num_blocks=9, block_size=4))  # 8 usable blocks
    a = req("a", 16, 8, 0)  # 4 blocks for its prompt
    s.add(a)
    assert ids(s.schedule()) == [("a", 16, 0)]
    s.update({a})
    run = s.steady_decodes()
    assert run is not None and not run.closed  # an empty queue: an arrival may be admitted
    s.add(req("b", 20, 2, 1))  # its whole prompt needs 5 blocks: 4 are free
    run = s.steady_decodes()
    assert run is not None and run.closed


def _twin_requests():
    s = VllmScheduler(VllmConfig(num_blocks=64, block_size=4, async_scheduling=True))
    a, b = req("a", 10, 3, 0), req("b", 6, 9, 1)
    s.add(a)
    s.add(b)
    s.schedule()  # both prompts, in flight
    return s, a, b


def test_async_a_run_takes_the_step_that_skips_a_finishing_request_as_schedule_does():
    """The run's last step computes a's last token; the step after it is planned while that token
    is in flight: it skips a and decodes b. Taken with the run, it leaves both schedulers alike."""
    s, a, b = _twin_requests()
    run = s.steady_decodes()
    assert run is not None and run.steps == 2 and run.ending == [a]  # a's tokens 11, 12, 13
    s.advance_decodes(run, 2, [0.0, 0.0, 0.0], skip_step=True)
    t, ta, tb = _twin_requests()
    steps = [t.schedule()]  # step 1, planned while the prompts' step runs
    for _ in range(2):  # a step's output, then the step after the one in flight
        t.update({ta, tb})
        steps.append(t.schedule())
    assert ids(steps[-2]) == [("a", 1, 11), ("b", 1, 7)] and ids(steps[-1]) == [("b", 1, 8)]
    for x, y in ((a, ta), (b, tb)):
        state = (x.num_tokens, x.num_computed, x.in_flight, x.placeholders, x.blocks, x.num_cached)
        assert state == (
            y.num_tokens,
            y.num_computed,
            y.in_flight,
            y.placeholders,
            y.blocks,
            y.num_cached,
        )
    assert [ids(p) for p in s.in_flight] == [ids(p) for p in t.in_flight]
    assert s.pool.num_free == t.pool.num_free
    assert [r.rid for r in s.update({a, b})] == ["a"]  # a's last token arrives: it finishes
    assert b.in_flight == 1
