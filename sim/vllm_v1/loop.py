"""The engine loop around a vLLM-style scheduler: the clients, the clock, the model and the step log.

It plays what sits around vLLM's ``Scheduler`` in ``EngineCore``: the turns that have arrived are
added; ``schedule()``; the step is priced by kvsim's cost model from its exact batch and runs on
the GPU after the step before it; every request whose tokens it completes samples one token (the
model); ``update`` with the oldest step's output; a finished turn's successor arrives (closed
loop: its think time after the finish; open loop: its recorded time, never before the finish).

Synchronous scheduling (``EngineCore.step``) updates each step before planning the next. Async
scheduling (``step_with_batch_queue``, a queue of two) plans step k+1 while step k runs: after the
update of step k-1, at step k's start, so a turn that arrives while step k runs waits for k+2.

The scheduler behind it is either kvsim's (``KvsimSide``, ``sim.vllm_v1.scheduler``) or the real
vLLM one (``experiments.vllm_check``): the same loop drives both, so their step logs differ only
where their rules do.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, cast

import numpy as np

from costmodels import BatchShape, CostModel, attention_pairs
from sim.arrivals import next_arrival_s
from sim.prefix import prefix_keys
from sim.pricing import running_sum
from sim.vllm_v1.scheduler import Request, SteadyDecodes, VllmConfig, VllmScheduler
from sim.vllm_v1.tokens import SessionTokens
from traces.records import Session


@dataclass(slots=True)
class StepView:
    """One step as the step log records it (request ids, not objects)."""

    sched: list[tuple[str, int, int]]  # (id, tokens scheduled, computed before), in order
    admitted: list[str]  # new or resumed in this step
    preempted: list[str]
    free_blocks: int
    running: int
    waiting: int
    # CPU offloading: transfers started (job id, "load" or "store", request id, GPU blocks) and
    # jobs the worker must finish before this step runs
    jobs: list[tuple[int, str, str, int]] = field(default_factory=list)
    flush: list[int] = field(default_factory=list)


class Side(Protocol):
    """A scheduler the loop can drive."""

    def add(self, rid: str, tokens: SessionTokens, prompt_len: int, max_tokens: int) -> None: ...
    def schedule(self, now: float) -> StepView: ...
    def update(self, sampled: list[str], now: float, jobs_done: Sequence[int] = ()) -> list[str]:
        """The oldest step planned and not yet updated ran: ``sampled`` got a token each, and
        the worker reports the transfers ``jobs_done`` finished."""
        ...

    def has_requests(self) -> bool: ...


class StepPrices:
    """A step's duration from the cost model and its exact batch; runs of decode-only steps of
    an unchanged batch at once (to the last bit, the same durations). Subclasses book what they
    need of each step in ``__call__`` and ``book_decodes``."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost

    def __call__(self, shape: BatchShape) -> float:
        return self.cost.iteration(shape).total_s

    def decodes(self, lens: Sequence[int], steps: int) -> np.ndarray:
        """Durations of ``steps`` decode-only steps of requests whose contexts are ``lens`` in the
        first and one token longer in each step after it."""
        seqs = len(lens)
        if not self.cost.decode_lens_matter:
            return self.cost.decode_steps_s(seqs, sum(lens) + seqs * np.arange(steps))
        out = np.empty(steps)
        for j in range(steps):
            grown = tuple(c + j for c in lens)
            out[j] = self(BatchShape.decode(seqs, sum(grown), grown))
        return out

    def pricer(self, seqs: int) -> Callable[[int], float] | None:
        """The price of a decode-only step of ``seqs`` requests from their summed context, in
        plain floats (the same operations as ``decodes``: the same bits); None where each
        request's context counts."""
        return None if self.cost.decode_lens_matter else self.cost.decode_pricer(seqs)

    def book_decodes(self, durations: list[float], seqs: int, held: list[int]) -> None:
        """A run of decode steps priced by ``decodes`` ran (``held``: blocks holding KV in each)."""


class KvsimSide:
    """kvsim's vLLM v1 scheduler behind the ``Side`` interface."""

    def __init__(self, sched: VllmScheduler | VllmConfig) -> None:
        self.sched = sched if isinstance(sched, VllmScheduler) else VllmScheduler(sched)
        self.requests: dict[str, Request] = {}

    def add(self, rid: str, tokens: SessionTokens, prompt_len: int, max_tokens: int) -> None:
        req = Request(
            rid, prompt_len, max_tokens, tokens.block_key, tokens.block_keys, tokens.block_key_parts
        )
        self.requests[rid] = req
        self.sched.add(req)

    def schedule(self, now: float) -> StepView:
        plan = self.sched.schedule(now)
        s = self.sched
        return StepView(
            [(r.rid, n, c) for r, n, c in plan.sched],
            [r.rid for r in plan.admitted],
            sorted(r.rid for r in plan.preempted),
            s.pool.num_free,
            len(s.running),
            len(s.waiting) + len(s.holding),
            [(j.job_id, j.kind, j.rid, len(j.blocks)) for j in plan.jobs],
            plan.flush,
        )

    def update(self, sampled: list[str], now: float, jobs_done: Sequence[int] = ()) -> list[str]:
        reqs = self.requests
        done = self.sched.update(set(filter(None, map(reqs.get, sampled))), now)
        for r in done:
            del self.requests[r.rid]
        if jobs_done:
            self.sched.complete_jobs(jobs_done)
        return sorted(r.rid for r in done)

    def has_requests(self) -> bool:
        return self.sched.has_requests()

    def steady_decodes(self) -> SteadyDecodes | None:
        return self.sched.steady_decodes()

    def advance_decodes(
        self, run: SteadyDecodes, k: int, plan_times: Sequence[float], skip_step: bool = False
    ) -> tuple[list[int], list[int]]:
        return self.sched.advance_decodes(run, k, plan_times, skip_step)

    def waiting_count(self) -> int:
        return len(self.sched.waiting) + len(self.sched.holding)


@dataclass(slots=True)
class TurnState:
    session: int
    k: int
    rid: str
    prompt_len: int  # the whole context sent: history and the new prompt
    max_tokens: int
    arrival_s: float
    num_tokens: int = 0  # prompt + sampled so far, tokens in flight included
    admit_s: float = math.nan  # start of the step that first scheduled it
    first_token_s: float = math.nan
    finish_s: float = math.nan
    hit: int = -1  # prefix-hit tokens at first admission
    computed: int = 0  # tokens whose KV it has (after the last step that scheduled it)
    preemptions: int = 0
    preempt_recompute: int = 0  # tokens computed again after its preemptions
    loaded: int = 0  # CPU offloading: tokens loaded from the CPU for its first admission


@dataclass(slots=True)
class Replay:
    """What a replay produced: the step log (if asked) and each finished turn."""

    steps: list[dict] = field(default_factory=list)  # with log_steps
    turns: list[TurnState] = field(default_factory=list)  # in order of completion
    rejected_turns: int = 0  # turns longer than max_model_len, with the rest of their session
    end_s: float = 0.0
    num_steps: int = 0
    # the most blocks the conversations in progress need at once, each at its current turn's full
    # length (prompt and every output): from a turn's arrival to its session's last completion
    peak_demand_blocks: int = 0
    loaded_blocks: int = 0  # CPU offloading: GPU blocks loaded from the CPU
    stored_blocks: int = 0  # ... and stored to it


def replay(
    sessions: Sequence[Session],
    side: Side,
    price: Callable[[BatchShape], float],
    block_size: int,
    max_model_len: int,
    replay_mode: str = "closed-loop",
    log_steps: bool = False,
    on_step: Callable[[dict], None] | None = None,
    on_turn: Callable[[TurnState], None] | None = None,
    async_scheduling: bool = False,
    decode_spans: bool = True,
    transfer_s: Callable[[str, int], float] | None = None,
) -> Replay:
    """Run ``sessions`` through ``side``; ``price(batch)`` is a step's duration in seconds.

    Each step's log entry (docs/semantics.md, "The step log") goes to ``on_step``, or is kept in
    ``Replay.steps`` with ``log_steps``; each finished turn goes to ``on_turn``, or is kept in
    ``Replay.turns`` when there is no ``on_turn``.

    With kvsim's scheduler and ``StepPrices``, runs of steady decode steps (nothing but the
    running requests' lengths changes, up to the next arrival, finish or preemption) are taken in
    one go, to the same log and clock as step by step (``decode_spans=False``).

    CPU offloading: ``transfer_s(kind, blocks)`` prices a job's copy. A load starts with its
    step, a store when its step ends (its tokens' KV exists then), each on its own copy stream in
    order; the worker reports a job with the output of the first step that ends after it (a step
    that flushes a job waits for it first). A step that schedules nothing while copies are in
    flight lasts until the next one ends."""
    spans = decode_spans and isinstance(side, KvsimSide) and isinstance(price, StepPrices)
    kv_side, prices = cast(KvsimSide, side), cast(StepPrices, price)  # read only when spans
    out = Replay()
    if log_steps:
        on_step = out.steps.append
    if on_turn is None:
        on_turn = out.turns.append
    tokens = [
        SessionTokens(i, prefix_keys(s, block_size), block_size) for i, s in enumerate(sessions)
    ]
    arrivals: list[tuple[float, int, int, int]] = []  # (time, order, session, turn)
    order = 0
    for i, s in enumerate(sessions):
        heapq.heappush(arrivals, (s.start_s, order, i, 0))
        order += 1
    live: dict[str, TurnState] = {}
    demand: dict[int, int] = {}  # session -> blocks of its current turn, whole
    demand_sum = 0
    depth = 2 if async_scheduling else 1  # steps planned and not yet updated, at most
    queue: deque[_Planned] = deque()  # oldest first
    now = arrivals[0][0] if arrivals else 0.0
    gpu_free = now  # when the GPU finishes the last step planned
    step = 0
    pending: dict[int, float] = {}  # CPU offloading: job -> when its copy ends
    copy_free = {"load": now, "store": now}  # when each copy stream is free
    while arrivals or queue or side.has_requests() or pending:
        while arrivals and arrivals[0][0] <= now:
            t, _, i, k = heapq.heappop(arrivals)
            s = sessions[i]
            turn = s.turns[k]
            prompt = s.history_tokens(k) + turn.prompt_tokens
            if not _joins(s, k, max_model_len):  # as a server refuses it
                out.rejected_turns += len(s.turns) - k
                demand_sum -= demand.pop(i, 0)  # the conversation ends here
                continue
            rid = f"{s.session_id}/{k}"
            blocks = -(-(prompt + turn.output_tokens) // block_size)
            demand_sum += blocks - demand.get(i, 0)
            demand[i] = blocks
            out.peak_demand_blocks = max(out.peak_demand_blocks, demand_sum)
            st = TurnState(i, k, rid, prompt, turn.output_tokens, t, num_tokens=prompt)
            live[rid] = st
            side.add(rid, tokens[i], prompt, turn.output_tokens)
        # (a run of decodes can leave the queue full: then the oldest step's output comes first)
        if (side.has_requests() or pending) and len(queue) < depth:
            if spans and len(queue) == depth - 1 and not pending:
                run = kv_side.steady_decodes()
                if run is not None:
                    # an arrival ends the run, unless it can only join the queue behind its head
                    horizon = arrivals[0][0] if arrivals and not run.closed else math.inf
                    joined = None
                    if run.closed and on_step is not None:  # the log counts who waits
                        joined = partial(_joining, arrivals, sessions, max_model_len)
                    now, gpu_free, step = _decode_span(
                        run,
                        kv_side,
                        prices,
                        queue,
                        live,
                        now,
                        gpu_free,
                        step,
                        horizon,
                        on_step,
                        joined,
                    )
                    continue
            view = side.schedule(now)
            start = max(now, gpu_free)
            if view.flush:  # the worker finishes these copies first
                start = max([start] + [pending[j] for j in view.flush])
            planned = _plan(view, live, start, step, price)
            for job_id, kind, rid, blocks in view.jobs:
                assert transfer_s is not None, "a side started transfers: replay needs transfer_s"
                begin = max(copy_free[kind], planned.start if kind == "load" else planned.end)
                copy_free[kind] = pending[job_id] = begin + transfer_s(kind, blocks)
                if kind == "load":
                    out.loaded_blocks += blocks
                    st = live[rid]
                    if st.hit < 0:
                        st.loaded += blocks * block_size
                else:
                    out.stored_blocks += blocks
            if view.sched or view.jobs or view.flush or view.preempted:
                gpu_free = planned.end
                step += 1
            elif pending:  # nothing to run: wait for the next copy to end
                planned.dur = max(0.0, min(pending.values()) - start)
            elif not any(p.view.sched or p.view.preempted for p in queue):
                raise AssertionError(
                    f"step {step} at t={now:.6f}s: nothing scheduled with {planned.view.running} "
                    f"running and {planned.view.waiting} waiting (a request that can never fit?)"
                )
            queue.append(planned)
            if len(queue) < depth:
                continue  # plan the next step before this one's output is back
        elif not queue:
            if arrivals:
                now = max(now, arrivals[0][0])
            continue
        planned = queue.popleft()
        now = max(now, planned.end)
        jobs_done: list[int] = []
        if pending:
            flushed = set(planned.view.flush)
            jobs_done = sorted(j for j, t in pending.items() if t <= now or j in flushed)
            for j in jobs_done:
                del pending[j]
        done = side.update(planned.sampled, now, jobs_done)
        for rid in planned.sampled:
            st = live[rid]
            if math.isnan(st.first_token_s):
                st.first_token_s = now
        v = planned.view
        if on_step is not None and (v.sched or v.jobs or v.flush or v.preempted):
            on_step(planned.log_entry(done))
        for rid in done:
            st = live.pop(rid)
            st.finish_s = now
            on_turn(st)
            s = sessions[st.session]
            if st.k + 1 < len(s.turns):
                nxt = next_arrival_s(s.turns[st.k], s.turns[st.k + 1], now, replay_mode)
                heapq.heappush(arrivals, (nxt, order, st.session, st.k + 1))
                order += 1
            else:
                demand_sum -= demand.pop(st.session)
    out.end_s = now
    out.num_steps = step
    return out


def _joins(s: Session, k: int, max_model_len: int) -> bool:
    """Whether turn ``k`` of ``s`` joins the queue when it arrives (a server refuses a request
    longer than the model's context)."""
    turn = s.turns[k]
    return s.history_tokens(k) + turn.prompt_tokens + turn.output_tokens <= max_model_len


def _joining(
    arrivals: list[tuple[float, int, int, int]],
    sessions: Sequence[Session],
    max_model_len: int,
    t_end: float,
) -> list[float]:
    """The times of the arrivals up to ``t_end`` that will join the queue, in order (the heap
    is left as it was: its entries are distinct, so it pops them in the same order)."""
    taken = []
    while arrivals and arrivals[0][0] <= t_end:
        taken.append(heapq.heappop(arrivals))
    for a in taken:
        heapq.heappush(arrivals, a)
    return [t for t, _, i, k in taken if _joins(sessions[i], k, max_model_len)]


@dataclass(slots=True)
class _Planned:
    """A step planned and priced, waiting for its output."""

    view: StepView
    step: int
    start: float
    dur: float
    sampled: list[str]  # requests that sample a token at its end

    @property
    def end(self) -> float:
        return self.start + self.dur

    def log_entry(self, done: list[str]) -> dict:
        v = self.view
        admitted = set(v.admitted)
        entry = {
            "step": self.step,
            "t": self.start,
            "dur": self.dur,
            "sched": [list(e) for e in v.sched],
            "hit": {rid: c for rid, _, c in v.sched if rid in admitted},
            "preempted": v.preempted,
            "free_blocks": v.free_blocks,
            "running": v.running,
            "waiting": v.waiting,
            "done": done,
        }
        if v.jobs or v.flush:  # CPU offloading
            entry["jobs"] = [list(j) for j in v.jobs]
            entry["flush"] = v.flush
        return entry


def _plan(
    view: StepView,
    live: dict[str, TurnState],
    start: float,
    step: int,
    price: Callable[[BatchShape], float],
) -> _Planned:
    """Book one scheduled step into the turns' states (admissions, preemptions, what each has
    computed, which sample) and price it; it starts at ``start``, when the GPU is free.

    The step's batch: a request scheduling its one newest token with output behind it is a
    decode; every other (a prompt chunk, a resumed request's recompute) is a prefill chunk of
    ``n`` tokens after ``computed`` cached ones."""
    if not view.sched:
        return _Planned(view, step, start, 0.0, [])
    admitted = set(view.admitted)
    for rid in view.preempted:  # before this step's schedule: it may readmit them
        live[rid].preemptions += 1
    chunks: list[tuple[int, int]] = []
    dec: list[int] = []
    tokens = 0
    pairs: float = 0
    sampled = []
    for rid, n, c in view.sched:
        st = live[rid]
        if admitted and rid in admitted:
            if st.hit < 0:
                st.hit = c
                st.admit_s = start
            else:  # a resume: what it had computed and did not hit is computed again
                st.preempt_recompute += max(0, st.computed - c)
        st.computed = c + n
        num_tokens = st.num_tokens
        if n == 1 and c + 1 == num_tokens and num_tokens > st.prompt_len:
            dec.append(c + 1)
        else:
            chunks.append((n, c))
            tokens += n
            pairs += attention_pairs(n, c)
        if c + n >= num_tokens:  # the step completes it: the model samples its next token
            st.num_tokens = num_tokens + 1
            sampled.append(rid)
    shape = BatchShape(
        prefill_tokens=tokens,
        prefill_pairs=pairs,
        prefill_seqs=len(chunks),
        decode_seqs=len(dec),
        decode_ctx_tokens=sum(dec),
        prefill_lens=tuple(chunks) if chunks else None,
        decode_lens=tuple(dec) if dec else None,
    )
    dur = price(shape)
    return _Planned(view, step, start, dur, sampled)


def _decode_span(
    run: SteadyDecodes,
    side: KvsimSide,
    prices: StepPrices,
    queue: deque[_Planned],
    live: dict[str, TurnState],
    now: float,
    gpu_free: float,
    step: int,
    horizon: float,
    on_step: Callable[[dict], None] | None,
    joined: Callable[[float], list[float]] | None = None,
) -> tuple[float, float, int]:
    """Steady decode steps in one go: as many of ``run``'s as are planned before ``horizon`` (the
    next arrival that could change them; the first always is). Step j is planned at the end of
    step j-1 (sync) or j-2 (async: the queue holds step 0, in flight), and starts when the GPU is
    free. Returns the loop's ``now``, ``gpu_free`` and ``step`` after it; async, the last step
    stays in flight. ``joined(t)``: the times of the arrivals up to ``t`` that join the queue
    during the run (it only lengthens the queue: the log's count of who waits).

    Async, when the run reaches its end (``run.ending``'s last tokens) before ``horizon``, the
    step after it, planned while that step is in flight, skips them and decodes the rest: it is
    taken too, and both steps stay in flight (the older one's output finishes them)."""
    reqs = run.reqs
    lens = [r.num_computed + 1 for r in reqs]  # each decode's context in the first step
    sync = not queue
    start = max(now, gpu_free)
    got = _span_prices(prices, lens, run.steps, start, now, None if sync else gpu_free, horizon)
    durs, ends, plans = got
    k = len(durs)
    keep: list[int] = []  # the step after the run: who it decodes
    if not sync and run.ending and k == run.steps:
        after = ends[k - 2] if k > 1 else gpu_free  # planned when step k - 1 ended
        if after < horizon:
            ending = set(run.ending)
            keep = [i for i, r in enumerate(reqs) if r not in ending]
    if keep:
        kept = [lens[i] + k for i in keep]
        price = prices.pricer(len(kept))
        last = [price(sum(kept))] if price is not None else prices.decodes(kept, 1).tolist()
        ends.append(ends[-1] + last[0])
        plans.append(after)
    free, held = side.advance_decodes(run, k, plans, skip_step=bool(keep))
    prices.book_decodes(durs, len(reqs), held[:k])
    rids = [r.rid for r in reqs]
    for rid, c in zip(rids, lens, strict=True):
        st = live[rid]
        st.num_tokens += k
        st.computed = c - 1 + k
    if keep:
        prices.book_decodes(last, len(keep), held[k:])
        for i in keep:
            st = live[rids[i]]
            st.num_tokens += 1
            st.computed += 1
    starts = [start] + ends[: len(plans) - 1]
    waiting = side.waiting_count()
    arrived = joined(plans[-1]) if joined is not None else []

    def view(j: int) -> StepView:  # step j of the span, 1-based
        sched = [(rid, 1, c + j - 2) for rid, c in zip(rids, lens, strict=True)]
        queued = waiting + bisect.bisect_right(arrived, plans[j - 1]) if arrived else waiting
        return StepView(sched, [], [], free[j - 1], len(rids), queued)

    if not sync:
        pending = queue.popleft()
        for rid in pending.sampled:  # its output arrives in the span
            st = live[rid]
            if math.isnan(st.first_token_s):
                st.first_token_s = gpu_free
        if on_step is not None:
            on_step(pending.log_entry([]))
        queue.append(_Planned(view(k), step + k - 1, starts[k - 1], durs[k - 1], rids))
        if keep:
            sched = [(rids[i], 1, lens[i] + k - 1) for i in keep]
            queued = waiting + bisect.bisect_right(arrived, plans[k]) if arrived else waiting
            view_after = StepView(sched, [], [], free[k], len(rids), queued)
            dur_after = last[0]
            queue.append(
                _Planned(view_after, step + k, starts[k], dur_after, [e[0] for e in sched])
            )
    if on_step is not None:
        for j in range(1, k + 1 if sync else k):
            on_step(_Planned(view(j), step + j - 1, starts[j - 1], durs[j - 1], rids).log_entry([]))
    end = ends[len(plans) - 1]
    if keep:
        return plans[k], end, step + k + 1
    return (end if sync else ends[k - 2] if k > 1 else gpu_free), end, step + k


_SCALAR_STEPS = 16  # spans priced step by step up to this length; longer ones in numpy


def _span_prices(
    prices: StepPrices,
    lens: list[int],
    most: int,
    start: float,
    now: float,
    in_flight_end: float | None,
    horizon: float,
) -> tuple[list[float], list[float], list[float]]:
    """The durations, ends and planning times of a run's steps: the first always, each later
    one (up to ``most``) if it is planned before ``horizon``. Step j is planned when step j-1
    ends (sync), or j-2 (async: step 0, in flight, ends at ``in_flight_end``); they run back to
    back from ``start``. Short runs in plain floats (the same bits as numpy: the same operations,
    and the ends summed in order either way)."""
    seqs, ctx = len(lens), sum(lens)
    price = prices.pricer(seqs)
    if price is None:
        return _span_prices_numpy(prices, lens, most, start, now, in_flight_end, horizon)
    durs: list[float] = []
    ends: list[float] = []
    plans = [now]
    t = start
    while True:
        d = price(ctx + seqs * len(durs))
        durs.append(d)
        t += d
        ends.append(t)
        j = len(durs)  # steps priced
        if j == most:
            break
        if j == _SCALAR_STEPS:
            return _span_prices_numpy(prices, lens, most, start, now, in_flight_end, horizon)
        plan = t if in_flight_end is None else ends[j - 2] if j > 1 else in_flight_end
        if plan >= horizon:
            break
        plans.append(plan)
    return durs, ends, plans


def _span_prices_numpy(
    prices: StepPrices,
    lens: list[int],
    most: int,
    start: float,
    now: float,
    in_flight_end: float | None,
    horizon: float,
) -> tuple[list[float], list[float], list[float]]:
    """``_span_prices`` for a long run (or one whose requests' contexts count): 64 steps priced
    at once, doubled while all are planned before ``horizon``."""
    want = min(64, most)
    while True:
        dur = prices.decodes(lens, want)
        ends = running_sum(start, dur)[1:]  # step j ends at ends[j - 1]
        if in_flight_end is None:
            plan = np.concatenate(([now], ends[:-1]))
        else:  # planned when step j - 2 ended (step 0, in flight, ends at in_flight_end)
            plan = np.concatenate(([now, in_flight_end], ends[:-2]))[:want]
        k = int(np.searchsorted(plan[1:], horizon, side="left")) + 1
        if k < want or want == most:
            break
        want = min(2 * want, most)
    return dur[:k].tolist(), ends[:k].tolist(), plan[:k].tolist()
