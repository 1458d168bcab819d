"""vLLM v1's scheduler (0.33.0, first-come-first-served, one KV-cache group of full attention, no
speculative decoding, no connector), rule for rule, synchronous or async.

One ``schedule()`` is one engine step:

1. **Running requests first**, in the running list's order (admission order). Each gets
   ``min(tokens it lacks, long_prefill_token_threshold if set and more than one request is
   running or waiting, the token budget left)``. A request that cannot get blocks for them
   preempts the *last* running request (recompute: all its blocks are freed, its computed count
   goes to 0, its outputs are kept, it goes to the *front* of the waiting queue), again until it
   fits or it has preempted itself; then the running loop stops.
2. **Waiting requests**, only if nothing was preempted in this step, while budget is left and fewer
   than ``max_num_seqs`` run: the head of the queue looks up its prefix-cache hit (the longest run
   of cached full blocks from its start, at most ``num_tokens - 1`` tokens), is granted
   ``num_tokens - hit`` tokens capped as above, and is admitted if the blocks fit; with
   ``scheduler_reserve_full_isl`` only if the blocks of its *whole* sequence fit now. The loop
   stops at the first request that does not fit.
3. Allocation takes the blocks the scheduled tokens need and caches every full block they make
   known (at allocation: a request admitted later in the same step can hit them).

``update(sampled)`` applies the oldest step's output: each request whose tokens were all computed
sampled one token; one that reaches its ``max_tokens`` finishes and frees its blocks, tail first.

**Async scheduling** (``async_scheduling``, vLLM's ``AsyncScheduler``): the next step is planned
before the last one's output is known. A request whose step will sample holds an output
*placeholder*: it counts as computed, so the next step decodes the token after it, and its KV
block is cached when the real token arrives (in ``update``). A request is not scheduled again once
the token in flight will be its last. A preempted request's tokens in flight are *stale*: they are
still delivered, and the request waits (without blocking the queue behind it) until they are.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import cast

from sim.vllm_v1.block_pool import BlockPool
from sim.vllm_v1.offload import Job, OffloadConnector

WAITING, RUNNING, PREEMPTED, FINISHED, LOADING = 0, 1, 2, 3, 4  # LOADING: its CPU load in flight


@dataclass(frozen=True, slots=True)
class VllmConfig:
    """vLLM's knobs, under their vLLM names."""

    num_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    long_prefill_token_threshold: int = 0
    scheduler_reserve_full_isl: bool = True
    enable_prefix_caching: bool = True
    async_scheduling: bool = False
    max_model_len: int | None = None  # None: what the KV holds, (num_blocks - 1) * block_size

    @property
    def model_len(self) -> int:
        if self.max_model_len is not None:
            return self.max_model_len
        return (self.num_blocks - 1) * self.block_size

    def __post_init__(self) -> None:
        for key in ("num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, key) < 1:
                raise ValueError(f"engine.{key} must be >= 1, got {getattr(self, key)}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError(
                f"engine.long_prefill_token_threshold must be >= 0, got "
                f"{self.long_prefill_token_threshold}"
            )


@dataclass(eq=False, slots=True)
class Request:
    """One turn as vLLM sees it: its tokens so far (prompt, then outputs) and its blocks."""

    rid: str
    num_prompt_tokens: int
    max_tokens: int
    block_key: Callable[[int], Hashable]  # block j's key: the hash of the context through it
    # block_keys(first, end): the keys of blocks first..end-1 at once (None: block_key each)
    block_keys: Callable[[int, int], Sequence[Hashable]] | None = None
    # key_parts(first, end): the same keys in parts, a session's own as a range (None: one part)
    key_parts: Callable[[int, int], list[Sequence[Hashable]]] | None = None
    num_tokens: int = 0
    num_computed: int = 0
    status: int = WAITING
    blocks: list[int] = field(default_factory=list)
    num_cached: int = 0  # leading blocks already cached under their keys
    placeholders: int = 0  # async: outputs in flight, counted in num_computed
    in_flight: int = 0  # tokens scheduled in steps whose output has not arrived
    stale: int = 0  # of those, scheduled before the request was preempted
    # its last prefix lookup while waiting: (hit blocks, the pool's evictions then, num_tokens)
    hit_memo: tuple[list[int], int, int] | None = None
    preemptions: int = 0
    last_seq: int = 0  # the last non-empty step that scheduled it (deferred frees)

    @property
    def num_output(self) -> int:
        return self.num_tokens - self.num_prompt_tokens


@dataclass(slots=True)
class SteadyDecodes:
    """Running requests that can decode ``steps`` steps in a row, nothing else changing."""

    reqs: list[Request]  # in running order
    steps: int
    ctx: int  # the first step's decode contexts, summed (each grows by one a step)
    # no arrival changes them: the queue's head stays out (or every seat is taken), so a request
    # that arrives meanwhile only joins the queue behind it
    closed: bool = False
    # async: the requests whose last token the run's last step computes, if the step after it
    # (which skips them; it is planned before that token arrives) is steady for the rest too:
    # the run may take that step as well (empty: it may not)
    ending: list[Request] = field(default_factory=list)


@dataclass(slots=True)
class StepPlan:
    """What one ``schedule()`` decided."""

    sched: list[tuple[Request, int, int]]  # (request, tokens scheduled, computed before)
    admitted: list[Request]  # new or resumed in this step (their hit: computed before)
    preempted: list[Request]
    jobs: list[Job] = field(default_factory=list)  # CPU offloading: transfers it starts
    flush: list[int] = field(default_factory=list)  # CPU offloading: jobs to finish first


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class VllmScheduler:
    def __init__(
        self,
        cfg: VllmConfig,
        pool: BlockPool | None = None,
        offload: OffloadConnector | None = None,
    ) -> None:
        """``pool``: a ``PolicyBlockPool`` to evict by a kvsim policy (default: vLLM's queue);
        ``offload``: vLLM's CPU offloading connector."""
        self.cfg = cfg
        self.offload = offload
        # CPU offloading: waiting requests that hold blocks (loading, or loaded) go first
        self.holding: deque[Request] = deque()
        self.loaded: set[Request] = set()  # their load reported, not yet scheduled
        self.prefilling: set[Request] = set()  # admitted and still prefilling, or loading
        self.finished_since: list[Request] = []  # since the last step, in order
        # A connector with a step in flight (async): a freed request's blocks return to the pool
        # only once the last step that scheduled it has run (a load might overwrite them).
        self.defer_free = offload is not None and cfg.async_scheduling
        self.sched_seq = 0  # non-empty steps planned
        self.processed_seq = 0  # ... and run
        # (step seq, blocks, unkeyed ones, the others' keys in parts), oldest first: each freed
        # request's, in freeing order (``BlockPool.free_request``)
        self.deferred: deque[tuple[int, list[int], int, list[Sequence[Hashable]]]] = deque()
        self.pool = pool if pool is not None else BlockPool(cfg.num_blocks)
        self.now = 0.0
        self.model_len = cfg.model_len
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.in_flight: deque[StepPlan] = deque()  # planned steps whose output has not arrived
        self._blocked: tuple[tuple, int] = ((), 0)  # the head that last did not fit, as it was
        self.bs = cfg.block_size

    def add(self, req: Request) -> None:
        req.num_tokens = req.num_prompt_tokens
        self.waiting.append(req)
        if self.offload is not None:
            self.offload.add(req)

    def has_requests(self) -> bool:
        return bool(self.running or self.waiting or self.holding)

    # --- one step -------------------------------------------------------------------------

    def schedule(self, now: float = 0.0) -> StepPlan:
        """One step, planned at simulated time ``now`` (policies read it)."""
        self.now = now
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        threshold = (
            cfg.long_prefill_token_threshold
            if len(self.running) + len(self.waiting) + len(self.holding) > 1
            else 0
        )
        sched: list[tuple[Request, int, int]] = []
        preempted: list[Request] = []
        running = self.running
        bs = self.bs
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            if (
                req.placeholders
                and req.num_computed + 2 - req.placeholders
                >= req.num_prompt_tokens + req.max_tokens
            ):
                i += 1  # async: the token in flight is its last
                continue
            n = req.num_tokens + req.placeholders - req.num_computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget, self.model_len - req.num_computed - 1)
            if n <= 0:
                i += 1
                continue
            if (
                n == 1
                and req.num_computed < len(req.blocks) * bs
                and (
                    req.num_computed + 1
                    if req.num_computed + 1 < req.num_tokens
                    else req.num_tokens
                )
                // bs
                <= req.num_cached
            ):
                # the common case, a decode inside its last block: nothing to take, nothing to
                # cache (what ``_allocate`` would find, without its work)
                sched.append((req, 1, req.num_computed))
                budget -= 1
                i += 1
                continue
            fits = self._allocate(req, n)
            while not fits:
                if self.defer_free and running[-1].last_seq > self.processed_seq:
                    break  # its blocks would come back too late to help
                victim = running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
                fits = self._allocate(req, n)
            if not fits:
                break
            sched.append((req, n, req.num_computed))
            budget -= n
            i += 1
        admitted: list[Request] = []
        if not preempted:
            budget = self._admit(budget, threshold, sched, admitted)
        placeholders = cfg.async_scheduling
        offload = self.offload
        for req, n, _ in sched:
            req.num_computed += n
            req.in_flight += n
            if placeholders and req.num_computed >= req.num_tokens + req.placeholders:
                req.placeholders += 1
        if offload is None:
            plan = StepPlan(sched, admitted, preempted)
        else:
            plan = self._offload_step(sched, admitted, preempted)
        if self.defer_free and sched:
            self.sched_seq += 1
            for req, _, _ in sched:
                req.last_seq = self.sched_seq
        self.in_flight.append(plan)
        return plan

    def _admit(
        self,
        budget: int,
        threshold: int,
        sched: list[tuple[Request, int, int]],
        admitted: list[Request],
    ) -> int:
        """The waiting loop: admit from the queue's head while budget and seats are left; the
        requests that hold blocks (CPU offloading) go first. Returns the budget left."""
        cfg, running, pool, offload = self.cfg, self.running, self.pool, self.offload
        waiting, holding = self.waiting, self.holding
        skipped: list[Request] = []  # skipped this step: back to the front of their queue
        skipped_holding: list[Request] = []
        while budget > 0 and len(running) < cfg.max_num_seqs:
            queue = holding if holding else waiting
            if not queue:
                break
            req = queue[0]
            if req.status == LOADING:
                if req not in self.loaded:
                    skipped_holding.append(queue.popleft())
                    continue
                self._loaded(req)
            if req.stale:  # async: its output from before the preemption is in flight
                skipped.append(queue.popleft())
                continue
            ext = 0  # tokens to load from the CPU
            if req.num_computed == 0:
                hit_blocks = self._longest_hit(req) if cfg.enable_prefix_caching else []
                hit = len(hit_blocks) * self.bs
                if offload is not None:
                    found = offload.lookup(req, hit)
                    if found is None:  # deferred: it waits without blocking the queue
                        skipped.append(queue.popleft())
                        continue
                    ext = found
            else:  # loaded from the CPU
                hit_blocks, hit = [], req.num_computed
            reserved = self._reserved_blocks() if ext else 0
            # The head did not fit last time: with the same hit, budget and evictions, and no
            # more free blocks, it still does not (only a free or an eviction changes that).
            state = (
                req,
                req.num_tokens,
                len(hit_blocks),
                ext,
                reserved,
                budget,
                threshold,
                pool.evictions,
            )
            if state == self._blocked[0] and pool.num_free <= self._blocked[1]:
                break
            if ext:  # an async load: no tokens now, its blocks held until the load is done
                n = 0
            else:
                n = req.num_tokens - hit
                if 0 < threshold < n:
                    n = threshold
                n = min(n, budget)
            if not self._allocate(
                req, n, hit_blocks, cfg.scheduler_reserve_full_isl, ext, reserved
            ):
                self._blocked = (state, pool.num_free)
                break
            computed = hit + ext  # (a loaded request: ext 0, its hit what it loaded)
            if offload is not None:
                offload.after_alloc(req, ext)
                if ext:
                    req.status = LOADING
                    req.num_computed = computed
                    self.prefilling.add(req)
                    skipped_holding.append(queue.popleft())
                    continue
                if computed + n < req.num_tokens:
                    self.prefilling.add(req)
            queue.popleft()
            running.append(req)
            req.status = RUNNING
            req.num_computed = computed
            sched.append((req, n, computed))
            admitted.append(req)
            budget -= n
        if skipped:
            waiting.extendleft(reversed(skipped))
        if skipped_holding:
            holding.extendleft(reversed(skipped_holding))
        return budget

    def _loaded(self, req: Request) -> None:
        """Its load was reported: its blocks are cached, and it waits like a resumed request
        (all tokens loaded: the last one is computed again, to sample from it)."""
        self._cache(req, req.num_computed)
        if req.num_computed == req.num_tokens:
            req.num_computed -= 1
        self.loaded.remove(req)
        req.status = PREEMPTED if req.preemptions else WAITING

    def _reserved_blocks(self) -> int:
        """Blocks the requests still prefilling (or loading) need to hold their whole sequence:
        an async load is admitted only if it leaves them free."""
        bs, model_len = self.bs, self.model_len
        return sum(
            max(cdiv(min(r.num_tokens, model_len), bs) - len(r.blocks), 0) for r in self.prefilling
        )

    def _offload_step(
        self,
        sched: list[tuple[Request, int, int]],
        admitted: list[Request],
        preempted: list[Request],
    ) -> StepPlan:
        """The end of a step with CPU offloading: the stores and flushes the connector plans;
        the prefilling set loses who finished its prompt."""
        assert self.offload is not None
        jobs, flush = self.offload.build(sched, preempted, self.finished_since)
        self.finished_since = []
        for req, _, _ in sched:
            if req.num_computed >= req.num_tokens + req.placeholders:
                self.prefilling.discard(req)
        return StepPlan(sched, admitted, preempted, jobs, flush)

    def complete_jobs(self, job_ids: Sequence[int]) -> None:
        """CPU offloading: the worker reported these transfers done (with a step's output)."""
        assert self.offload is not None
        # the connector hands back the scheduler's own requests
        for req in cast(list[Request], self.offload.complete(job_ids)):
            if req.status == LOADING:
                self.loaded.add(req)

    def update(self, sampled: Collection[Request], now: float = 0.0) -> list[Request]:
        """The oldest step in flight ran: each of its requests in ``sampled`` gained one output
        token; those that reached their ``max_tokens`` finish, free their blocks (in the step's
        order) and are returned. ``now``: the step's end."""
        self.now = now
        plan = self.in_flight.popleft()
        if self.defer_free and plan.sched:
            self.processed_seq += 1
            deferred = self.deferred
            while deferred and deferred[0][0] <= self.processed_seq:
                _, blocks, unkeyed, parts = deferred.popleft()
                self.pool.free_request(blocks, unkeyed, parts, self.now)
        done = []
        bs, model_len = self.bs, self.model_len
        for req, n, _ in plan.sched:
            req.in_flight -= n
            if req.stale > 0:
                req.stale -= n
                if req.status == FINISHED or req not in sampled:
                    continue
                req.num_tokens += 1
            else:
                if req.status == FINISHED or req not in sampled:
                    continue
                req.num_tokens += 1
                if req.placeholders > 0:
                    req.placeholders -= 1
                    known = req.num_computed - req.in_flight
                    if req.status == RUNNING and known // bs > req.num_cached:
                        self._cache(req, known)  # the token is known now
            if (
                req.num_tokens - req.num_prompt_tokens >= req.max_tokens
                or req.num_tokens >= model_len
            ):
                self._finish(req)
                done.append(req)
        if done:
            self.running = [r for r in self.running if r.status != FINISHED]
        return done

    # --- runs of steady decode steps -----------------------------------------------------------

    def steady_decodes(self) -> SteadyDecodes | None:
        """The running requests, if the next ``schedule()`` decodes each of them one token and so
        would the steps after it until one finishes or a block allocation would preempt (with no
        arrival meanwhile); None otherwise.

        Steady means: every running request has exactly the next token to compute (sync: the last
        sampled one; async: the placeholder of the one in flight, in the one step in flight), the
        batch fits the token budget, and the queue admits nothing: it is empty, or its head cannot
        fit its whole sequence (``scheduler_reserve_full_isl``; without prefix caching, the tokens
        it would be granted). Decodes only take free blocks and cache blocks of their own
        session's context, which no waiting request can hit, so a head that does not fit stays
        out. Preemption-free: the span ends before the first step whose blocks are not free.

        With CPU offloading, also: no transfer in flight, no block freed and not yet returned, no
        request waiting for or done with a load, none finished since the last step, and every
        running request has offered its prompt's chunks (its decodes store nothing)."""
        cfg, running, pool, bs = self.cfg, self.running, self.pool, self.bs
        n_run = len(running)
        if not n_run or n_run > cfg.max_num_batched_tokens:
            return None
        if self.offload is not None and not self._offload_quiet():
            return None
        sync = not cfg.async_scheduling
        if len(self.in_flight) != (0 if sync else 1):
            return None
        lag = 1 if sync else 0  # num_tokens - num_computed of a steady decoder
        # async: a request whose last prompt chunk is the step in flight decodes next like the
        # rest (the step's output is applied in the run; with a CPU tier its stores wait for it)
        chunk_in_flight = not sync and self.offload is None
        steps = 1 << 62
        allocs = []  # the first step in the span that takes a block, per request (any order)
        lefts = []  # the steps before each one's last token is planned (the same order)
        ctx = 0
        model_len = self.model_len
        for req in reversed(running):  # the newest first: a request still prefilling is one
            if (
                req.num_tokens - req.num_computed != lag
                or req.placeholders != 1 - lag
                or (req.in_flight != 1 - lag and not (chunk_in_flight and req.in_flight > 1))
                or req.stale
            ):
                return None
            # the step whose output finishes it must be planned by schedule() (async: the one
            # before it, which skips it)
            end = req.num_prompt_tokens + req.max_tokens
            left = (end if end < model_len else model_len) - req.num_tokens - 1
            if left < steps:
                if left < 1:  # its last token is planned: the next step skips it
                    return None
                steps = left
            allocs.append(len(req.blocks) * bs - req.num_computed + 1)
            lefts.append(left)
            ctx += req.num_computed + 1
        if steps < 1:
            return None
        # the queue last: its head's check costs a lookup
        if self.waiting and n_run < cfg.max_num_seqs and not self._head_stays_out(n_run):
            return None
        free = pool.num_free

        def taken(k: int) -> int:  # blocks the first k steps take
            return sum((k - a) // bs + 1 for a in allocs if a <= k)

        last = steps  # the step that computes the first last token
        if taken(steps) > free:  # the last k whose blocks are free
            lo, hi = 0, steps
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if taken(mid) <= free else (lo, mid - 1)
            steps = lo
        if steps < 1:
            return None
        closed = self.offload is None and (bool(self.waiting) or n_run >= cfg.max_num_seqs)
        ending: list[Request] = []
        if chunk_in_flight and steps == last:
            ending = self._skip_step(running, allocs, lefts, steps, free - taken(steps), closed)
        return SteadyDecodes(list(running), steps, ctx, closed, ending)

    def _skip_step(
        self,
        running: list[Request],
        allocs: list[int],
        lefts: list[int],
        steps: int,
        free: int,
        closed: bool,
    ) -> list[Request]:
        """Async: the requests whose last token step ``steps`` of a run computes, if the step after
        it is steady for the others (they decode, the blocks they take are free after the run,
        and the queue admits nothing, with their seats and budget back); else none.
        ``allocs`` and ``lefts``: each request's first step taking a block and its steps left,
        newest first; ``free``: blocks free after the run."""
        bs, cfg = self.bs, self.cfg
        after = steps + 1
        ending = []
        takes = 0  # blocks the step after takes
        for req, a, left in zip(reversed(running), allocs, lefts, strict=True):
            if left == steps:
                ending.append(req)
            elif a <= after and (after - a) % bs == 0:
                takes += 1
        if takes > free:
            return []
        n_left = len(running) - len(ending)
        if self.waiting:  # its head stayed out with the run's seats and budget: again with fewer?
            if n_left < cfg.max_num_seqs and not self._head_stays_out(n_left):
                return []
        elif closed:  # closed by its seats alone: a seat comes free
            return []
        return ending

    def _offload_quiet(self) -> bool:
        """CPU offloading: whether the connector has nothing to do in a steady decode step."""
        offload = self.offload
        assert offload is not None
        if offload.jobs or self.holding or self.loaded or self.finished_since or self.deferred:
            return False
        tpc = offload.tpc
        states = offload.states
        return all(states[r.rid].next_stored >= r.num_prompt_tokens // tpc for r in self.running)

    def _head_stays_out(self, n_run: int) -> bool:
        """Whether the head of the queue is not admitted in a steady step, nor in the ones after
        it (they only take free blocks, and evict blocks that cannot lengthen its hit)."""
        cfg, head = self.cfg, self.waiting[0]
        if head.stale:
            return False
        budget = cfg.max_num_batched_tokens - n_run
        if cfg.enable_prefix_caching:
            if not cfg.scheduler_reserve_full_isl:
                return False  # a shorter hit can need fewer blocks for a budget-capped chunk
            hit = self._longest_hit(head)
            # the CPU's content does not change in the span: a deferred head lets the queue
            # behind it in; a load is admitted only if the whole sequence fits, as below
            if self.offload is not None and self.offload.lookup(head, len(hit) * self.bs) is None:
                return False
            return not self._fits(head, 0, hit, True)
        if self.offload is not None:
            return False
        n = min(head.num_tokens, budget)
        if 0 < cfg.long_prefill_token_threshold < n:
            n = cfg.long_prefill_token_threshold
        return not self._fits(head, n, (), cfg.scheduler_reserve_full_isl)

    def advance_decodes(
        self, run: SteadyDecodes, k: int, plan_times: Sequence[float], skip_step: bool = False
    ) -> tuple[list[int], list[int]]:
        """Apply ``k`` steps of ``run`` (at most ``run.steps``), as ``schedule()`` and ``update``
        would: step j (1-based) planned at ``plan_times[j - 1]``; sync, each step's output
        applied; async, the step in flight and steps 1..k-1 applied, step k in flight.
        ``skip_step`` (async, ``k == run.steps``, ``run.ending``): step k+1 too, which decodes
        all but ``run.ending``; steps k and k+1 are in flight.

        Only the steps where a request takes a block or caches one touch it (in running order,
        as ``schedule()``); the others just lengthen it. Returns the pool's free blocks and the
        blocks holding KV (held or cached) after each step's allocations."""
        sync = not self.cfg.async_scheduling
        reqs = run.reqs
        c0 = [r.num_computed for r in reqs]
        n0 = [r.num_tokens for r in reqs]
        # tokens whose blocks a step's allocation caches: sync, its own; async, the known ones
        x0 = c0 if sync else [n - 1 for n in n0]
        if skip_step:
            assert not sync and k == run.steps and run.ending, "no step after this run"
            ending = set(run.ending)
            ks = [k if r in ending else k + 1 for r in reqs]
        else:
            ks = [k] * len(reqs)
        counts = None
        if self.pool.caching_commutes:
            counts = self._decode_blocks_at_once(reqs, c0, x0, ks)
        if counts is None:
            counts = self._decode_blocks_by_step(reqs, c0, x0, ks, plan_times)
        if sync:
            for req, c, n in zip(reqs, c0, n0):
                req.num_computed, req.num_tokens = c + k, n + k
        else:  # step k is in flight now, one token of each (and step k+1, of the rest)
            sched = []
            for req, c, n, kr in zip(reqs, c0, n0, ks):
                req.num_computed, req.num_tokens = c + kr, n + k
                req.in_flight = req.placeholders = 1 + kr - k
                sched.append((req, 1, c + k - 1))
            self.in_flight[0] = StepPlan(sched, [], [])
            if skip_step:
                self.in_flight.append(
                    StepPlan([(r, 1, c0[i] + k) for i, r in enumerate(reqs) if ks[i] > k], [], [])
                )
        if self.defer_free:  # async: k steps planned, the one in flight before them and k - 1 run
            self.sched_seq += k
            self.processed_seq += k
            for req in reqs:
                req.last_seq = self.sched_seq
        self.now = plan_times[max(ks) - 1]
        return counts

    def _decode_blocks_by_step(
        self,
        reqs: list[Request],
        c0: list[int],
        x0: list[int],
        ks: list[int],
        plan_times: Sequence[float],
    ) -> tuple[list[int], list[int]]:
        """The blocks decode steps take and cache, step by step (request i decodes in the first
        ``ks[i]`` steps): only the steps where a request takes a block or caches one touch it (in
        running order, as ``schedule()``). Returns the pool's free blocks and the blocks holding
        KV after each step."""
        bs, pool = self.bs, self.pool
        k = max(ks)
        usable = pool.num_blocks - 1
        caching = self.cfg.enable_prefix_caching

        def next_event(i: int) -> int:  # the next step that takes a block or caches one
            r = reqs[i]
            take = len(r.blocks) * bs - c0[i] + 1
            return max(1, min(take, (r.num_cached + 1) * bs - x0[i]) if caching else take)

        events = [(next_event(i), i) for i in range(len(reqs))]
        heapq.heapify(events)
        free = [0] * k
        held = [0] * k
        done = 0  # steps whose counts are filled in
        while events and events[0][0] <= k:
            j = events[0][0]
            f, h = pool.num_free, usable - pool.num_free + pool.num_free_cached
            free[done : j - 1] = [f] * (j - 1 - done)
            held[done : j - 1] = [h] * (j - 1 - done)
            self.now = plan_times[j - 1]
            due = []
            while events and events[0][0] == j:
                i = heapq.heappop(events)[1]
                if j <= ks[i]:
                    due.append(i)
            for i in sorted(due):  # what _allocate(req, 1) does for a decode, without its checks
                req = reqs[i]
                if c0[i] + j > len(req.blocks) * bs:  # its token at c0 + j - 1 needs a block
                    req.blocks.extend(pool.allocate(1, self.now))  # free: steady_decodes counted
                self._cache(req, x0[i] + j)
                nxt = next_event(i)
                if nxt <= j:
                    raise AssertionError(f"{req.rid}: its blocks are behind its tokens at step {j}")
                heapq.heappush(events, (nxt, i))
            free[j - 1], held[j - 1] = pool.num_free, usable - pool.num_free + pool.num_free_cached
            done = j
        f, h = pool.num_free, usable - pool.num_free + pool.num_free_cached
        free[done:] = [f] * (k - done)
        held[done:] = [h] * (k - done)
        return free, held

    def _decode_blocks_at_once(
        self, reqs: list[Request], c0: list[int], x0: list[int], ks: list[int]
    ) -> tuple[list[int], list[int]] | None:
        """What ``_decode_blocks_by_step`` does, with one pass over the free queue and one
        caching call; None (nothing done) where that could differ from it.

        The blocks go to the requests in the order the steps take them (by step, then running
        order), one allocation each. Caching the blocks at the end leaves the map as step by
        step: a block being cached is held, so no allocation in the span evicts it, and
        a key already cached in another block stays found first either way. Only a key that two
        requests cache in the span could end up in another order: then None."""
        bs, pool = self.bs, self.pool
        new_keys: list[Hashable] = []
        # (request, its full blocks after the span, the key of its one new block if one)
        caching: list[tuple[Request, int, Hashable]] = []
        if self.cfg.enable_prefix_caching:
            for i, req in enumerate(reqs):
                full = (x0[i] + ks[i]) // bs
                if full == req.num_cached + 1:  # the common case: one block a span
                    key = req.block_key(req.num_cached)
                    new_keys.append(key)
                    caching.append((req, full, key))
                elif full > req.num_cached:
                    new_keys += self._keys(req, req.num_cached, full)
                    caching.append((req, full, None))
            if len(set(new_keys)) != len(new_keys):
                return None
        # (step, request) of each block taken, in the order the steps take them
        takes: list[tuple[int, int]] = []
        for i, req in enumerate(reqs):
            j = len(req.blocks) * bs - c0[i] + 1  # the step whose token needs a new block
            if j > ks[i]:
                continue  # none in the span (most requests)
            if j < 1:
                raise AssertionError(f"{req.rid}: its blocks are behind its tokens")
            while j <= ks[i]:
                takes.append((j, i))
                j += bs
        takes.sort()
        blocks, evicted = pool.take_each(len(takes))
        free, held = self._counts_after_takes(takes, evicted, max(ks))
        for (_, i), block in zip(takes, blocks):
            reqs[i].blocks.append(block)
        for req, full, key in caching:  # keys new to each other: their order does not matter
            first = req.num_cached
            if key is not None:
                pool.cache(req.blocks[first], key, first, self.now)
            else:
                self._cache_keys(req, first, full)
            req.num_cached = full
        return free, held

    def _counts_after_takes(
        self, takes: list[tuple[int, int]], evicted: list[bool], k: int
    ) -> tuple[list[int], list[int]]:
        """The pool's free blocks and blocks holding KV after each of ``k`` steps, from the counts
        now (after the takes): a block taken is one free fewer, and one more holding KV unless it
        held KV already (a cached block, evicted)."""
        pool = self.pool
        f = pool.num_free + len(takes)
        h = pool.num_blocks - 1 - pool.num_free + pool.num_free_cached
        h -= len(takes) - sum(evicted)
        free, held = [], []
        done = 0  # steps filled in
        for t, (j, _) in enumerate(takes):
            if j > done + 1:
                free += [f] * (j - 1 - done)
                held += [h] * (j - 1 - done)
                done = j - 1
            f -= 1
            h += not evicted[t]
            if t + 1 == len(takes) or takes[t + 1][0] != j:
                free.append(f)
                held.append(h)
                done = j
        free += [f] * (k - done)
        held += [h] * (k - done)
        return free, held

    # --- the KV cache manager ----------------------------------------------------------------

    def _longest_hit(self, req: Request) -> list[int]:
        """The cached blocks of the longest cached prefix, at most num_tokens - 1 tokens.

        A blocked head of the queue asks every step. Its last answer stands while no cached block
        was evicted (blocks only gain keys otherwise, and a key's first block stays first) and
        the next key of its chain is still not cached: then only that one lookup is made."""
        pool = self.pool
        memo = req.hit_memo
        if memo is not None and memo[1] == pool.evictions and memo[2] == req.num_tokens:
            out = memo[0]
        else:
            out = []
        for part in self._key_parts(req, len(out), (req.num_tokens - 1) // self.bs):
            got = pool.cached_prefix(part)
            out += got
            if len(got) < len(part):
                break
        req.hit_memo = (out, pool.evictions, req.num_tokens)
        return out

    def _blocks_needed(self, req: Request, tokens: int, hit_blocks: Sequence[int]) -> int:
        """New blocks for ``tokens`` slots, plus the hit blocks that sit in the free queue (taking
        them out uses free capacity too)."""
        new = max(cdiv(tokens, self.bs) - len(hit_blocks) - len(req.blocks), 0)
        return new + self.pool.count_free(hit_blocks) if hit_blocks else new

    def _fits(
        self,
        req: Request,
        n: int,
        hit_blocks: Sequence[int] = (),
        whole_sequence_must_fit: bool = False,
        ext: int = 0,
        reserved: int = 0,
    ) -> bool:
        """Whether ``_allocate`` would succeed (it changes nothing)."""
        free, model_len = self.pool.num_free, self.model_len
        if whole_sequence_must_fit:
            whole = min(req.num_tokens, model_len)
            if self._blocks_needed(req, whole, hit_blocks) > free:
                return False
        computed = min(req.num_computed + len(hit_blocks) * self.bs + ext, model_len)
        needed = self._blocks_needed(req, min(computed + n, model_len), hit_blocks)
        return needed <= free - reserved

    def _allocate(
        self,
        req: Request,
        n: int,
        hit_blocks: Sequence[int] = (),
        whole_sequence_must_fit: bool = False,
        ext: int = 0,
        reserved: int = 0,
    ) -> bool:
        """Blocks for ``n`` more tokens after the computed ones, the prefix hit and ``ext``
        tokens to load (whose blocks are cached once loaded, not now); ``reserved`` blocks must
        stay free."""
        if not self._fits(req, n, hit_blocks, whole_sequence_must_fit, ext, reserved):
            return False
        pool, bs, model_len = self.pool, self.bs, self.model_len
        computed = min(req.num_computed + len(hit_blocks) * bs + ext, model_len)
        slots = min(computed + n, model_len)
        if hit_blocks:
            pool.touch(hit_blocks, self.now)
            req.blocks.extend(hit_blocks)
            req.num_cached = len(req.blocks)
        more = cdiv(slots, bs) - len(req.blocks)
        if more > 0:
            new = pool.allocate(more, self.now)
            req.blocks.extend(new)
            if self.offload is not None:
                self.offload.allocated.update(new)
        if not ext:
            self._cache(req, min(computed + n, req.num_tokens))
        return True

    def _cache(self, req: Request, tokens: int) -> None:
        """Cache the full blocks of the first ``tokens`` tokens under their keys."""
        if not self.cfg.enable_prefix_caching:
            return
        full = tokens // self.bs
        first = req.num_cached
        if full <= first:
            return
        if full == first + 1:  # a decode's block
            self.pool.cache(req.blocks[first], req.block_key(first), first, self.now)
        else:
            self._cache_keys(req, first, full)
        req.num_cached = full

    def _cache_keys(self, req: Request, first: int, end: int) -> None:
        """Cache ``req``'s blocks first..end-1 under their keys, a part at a time."""
        for part in self._key_parts(req, first, end):
            self.pool.cache_blocks(req.blocks, first, part, self.now)
            first += len(part)

    @staticmethod
    def _keys(req: Request, first: int, end: int) -> Sequence[Hashable]:
        """The keys of ``req``'s blocks first..end-1."""
        if req.block_keys is not None:
            return req.block_keys(first, end)
        return [req.block_key(j) for j in range(first, end)]

    @classmethod
    def _key_parts(cls, req: Request, first: int, end: int) -> list[Sequence[Hashable]]:
        """The keys of ``req``'s blocks first..end-1 in parts (none if there are none)."""
        if req.key_parts is not None:
            return req.key_parts(first, end)
        return [cls._keys(req, first, end)] if first < end else []

    def _free(self, req: Request) -> None:
        blocks = req.blocks[::-1]  # the tail first: evicted first
        unkeyed = len(blocks) - req.num_cached
        # its cached blocks hold their keys, tail first too
        parts = [p[::-1] for p in reversed(self._key_parts(req, 0, req.num_cached))]
        if self.defer_free and req.last_seq > self.processed_seq:
            self.deferred.append((self.sched_seq, blocks, unkeyed, parts))
        else:
            self.pool.free_request(blocks, unkeyed, parts, self.now)
        req.blocks = []
        req.num_cached = 0

    def _finish(self, req: Request) -> None:
        if self.offload is not None:
            self.offload.request_finished(req)
            self.finished_since.append(req)
            self.prefilling.discard(req)
        self._free(req)
        if req.status == PREEMPTED:  # async: its last token arrived after it was preempted
            self.waiting.remove(req)
        req.status = FINISHED

    def _preempt(self, req: Request) -> None:
        self._free(req)
        self.prefilling.discard(req)
        req.preemptions += 1
        req.status = PREEMPTED
        req.num_computed = 0
        req.stale = req.in_flight  # async: still delivered, but not counted again
        req.placeholders = 0
        self.waiting.appendleft(req)
