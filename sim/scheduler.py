"""The synchronous core of the engine: one iteration of a continuous batch at a time.

``plan`` prepares an iteration at time ``now`` (memory for decodes, then FCFS admission of waiting
turns, each made wholly GPU-resident: GPU hits, CPU swap-ins, recompute of dropped units) and prices
it with the cost model; ``finish`` applies it at its end time (tokens out, completions, the next
turns' arrivals). The SimPy shell in ``sim.engine`` only turns ``Step.duration_s`` into timeouts.

Work per iteration is O(turns admitted, completed or growing a page), never O(batch): decoding
sequences are kept as running sums, and due dates (next page, completion) sit in step buckets.
"""
from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from dataclasses import dataclass

from costmodels import BatchShape, CostModel, attention_pairs
from sim.config import EngineConfig, MemoryConfig
from sim.memory import CPU, DROPPED, GPU, TieredMemory
from sim.lifetime import fit_lifetime
from sim.policies import PolicyContext, make_policy, policy_class
from sim.units import SessionKV, Unit
from traces.records import Session, Turn


@dataclass(slots=True, eq=False)
class TurnRun:
    """A turn in the system, from arrival to completion."""

    sess: SessionKV
    k: int
    turn: Turn
    history: int                 # H_k
    arrival_s: float
    order: int                   # FCFS position
    ttft_ideal_s: float
    admit_s: float = math.nan
    first_token_s: float = math.nan
    generated: int = 0
    base_tokens: int = 0         # session tokens at the start of step base_step (while decoding)
    base_step: int = 0
    epoch: int = 0               # bumped on preemption: stale bucket entries carry an older epoch
    admit_seq: int = 0           # admission order (preemption picks the newest)
    gpu_hit: int = 0
    cpu_hit: int = 0
    recomputed: int = 0
    swap_in_bytes: int = 0
    preemptions: int = 0
    preempt_recompute: int = 0
    admitted_once: bool = False

    def tokens_at(self, step: int) -> int:
        return self.base_tokens + (step - self.base_step)


@dataclass(slots=True)
class Step:
    """One planned iteration."""

    duration_s: float
    admitted: list[TurnRun]
    decode_seqs: int


class Scheduler:
    def __init__(self, sessions: list[Session], cost: CostModel, memory: MemoryConfig,
                 engine: EngineConfig, policy: str, seed: int = 0) -> None:
        if memory.evict_unit == "layer_block":
            raise ValueError("memory.evict_unit: layer_block (the per-layer checkerboard) is not "
                             "implemented yet; use session or block")
        self.cost, self.cfg = cost, engine
        self.bt = memory.block_tokens
        self.page_bytes = self.bt * cost.kv_bytes_per_token
        self.per_session_unit = memory.evict_unit == "session"
        predictor = None
        if getattr(policy_class(policy), "needs_predictor", False):
            predictor = fit_lifetime(sessions)  # fitted on the trace's training split
        ctx = dict(block_tokens=self.bt, num_layers=cost.model.num_layers, seed=seed, cost=cost,
                   cpu_kv_bytes=MemoryConfig.capacity_bytes(memory.cpu_kv_gb), predictor=predictor)
        self.mem = TieredMemory(
            MemoryConfig.capacity_bytes(memory.gpu_kv_gb), MemoryConfig.capacity_bytes(memory.cpu_kv_gb),
            make_policy(policy, PolicyContext(tier=GPU, **ctx)),
            make_policy(policy, PolicyContext(tier=CPU, **ctx)))
        self.sessions = sessions
        self.kv = [SessionKV(i, s.session_id, s.turns[0].priority) for i, s in enumerate(sessions)]
        self._arrivals: list[tuple[float, int, int]] = []   # (time, order, session index)
        self._order = 0
        self.waiting: deque[TurnRun] = deque()
        self.running: dict[int, TurnRun] = {}                # admit_seq -> run, in admission order
        self._admit_seq = 0
        self.step = 0
        self._page_due: dict[int, list[tuple[TurnRun, int]]] = defaultdict(list)
        self._finish_due: dict[int, list[tuple[TurnRun, int]]] = defaultdict(list)
        self._finish_steps: list[int] = []                  # heap of the keys of _finish_due
        self.dec_seqs = 0                                   # sequences decoding in the next step
        self.dec_ctx = 0                                    # their total context tokens
        self._next_key = 0
        self._d2h_mark = 0                                  # swap-out bytes already priced
        self.live_pages = 0                                 # pages of sessions not yet finished
        self.peak_live_pages = 0                            # the trace's peak KV demand
        self.ledger: list[tuple] = []
        self.rejected_turns = 0
        self.preemptions = 0
        self.preempt_recompute_tokens = 0
        self.output_tokens = 0
        self.swap_in_bytes = 0
        self.completed = 0
        self.step_s: list[float] = []
        self.step_decode: list[int] = []
        for i, s in enumerate(sessions):
            self._schedule(i, s.turns[0].arrival_s or 0.0)

    # -- arrivals --------------------------------------------------------------------------------
    def _schedule(self, index: int, t: float) -> None:
        heapq.heappush(self._arrivals, (t, self._order, index))
        self._order += 1

    def next_arrival_s(self) -> float | None:
        return self._arrivals[0][0] if self._arrivals else None

    def release(self, now: float) -> None:
        """Move every turn that has arrived by ``now`` into the waiting queue."""
        while self._arrivals and self._arrivals[0][0] <= now:
            t, order, i = heapq.heappop(self._arrivals)
            kv, session = self.kv[i], self.sessions[i]
            k = kv.next_turn
            turn = session.turns[k]
            history = kv.tokens
            if self._pages(history + turn.prompt_tokens + turn.output_tokens) * self.page_bytes \
                    > self.mem.capacity[GPU]:
                # Longer than the whole GPU KV: a server rejects it (max_model_len); so do we,
                # with the rest of its session.
                self.rejected_turns += len(session.turns) - k
                kv.done = True
                continue
            self.waiting.append(TurnRun(kv, k, turn, history, t, order,
                                        self._ideal_ttft(turn.prompt_tokens, history)))

    def _ideal_ttft(self, prompt: int, history: int) -> float:
        return self.cost.iteration(BatchShape.prefill(max(prompt, 1), history)).total_s

    # -- planning one iteration ------------------------------------------------------------------
    def plan(self, now: float) -> Step | None:
        """Prepare the next iteration; None when there is nothing to run."""
        self._grow_decodes(now)
        admitted, prefill, h2d_bytes, h2d_pages = self._admit(now)
        if not admitted and self.dec_seqs == 0:
            return None
        layers = self.cost.model.num_layers
        cost = self.cost.iteration(
            prefill + BatchShape.decode(self.dec_seqs, self.dec_ctx),
            h2d_bytes=h2d_bytes, h2d_copies=h2d_pages * layers,
            d2h_bytes=self.mem.swap_out_bytes - self._d2h_mark,
            d2h_copies=(self.mem.swap_out_bytes - self._d2h_mark) // self.page_bytes * layers,
            pipelining=self.cfg.pipelining)
        self._d2h_mark = self.mem.swap_out_bytes
        return Step(cost.total_s, admitted, self.dec_seqs)

    def _grow_decodes(self, now: float, preempt: bool = True) -> bool:
        """Give every decoding sequence that starts a new page this step its page, or preempt.

        With ``preempt=False`` nothing changes (and False is returned) unless every page fits.
        """
        due = self._page_due.get(self.step)
        if not due:
            return True
        live = [(run, epoch) for run, epoch in due
                if run.epoch == epoch and run.admit_seq in self.running]
        if not preempt and not self.mem.reclaimable(GPU) >= len(live) * self.page_bytes:
            return False
        del self._page_due[self.step]
        live.sort(key=lambda e: e[0].admit_seq)  # oldest first: the newest is preempted first
        for run, epoch in live:
            if run.epoch != epoch or run.admit_seq not in self.running:
                continue
            while not self.mem.make_room(self.page_bytes, now):
                victim = self.running[next(reversed(self.running))]
                self._preempt(victim, now)
                if victim is run:
                    break
            else:
                tokens = run.tokens_at(self.step)
                self._extend(run.sess, tokens + 1, now)
                self._page_due[self.step + self.bt].append((run, epoch))
        return True

    def _admit(self, now: float) -> tuple[list[TurnRun], BatchShape, int, int]:
        """Admit waiting turns FCFS: (admitted, their prefill shape, H2D bytes, H2D pages)."""
        tokens, pairs, h2d_bytes, h2d_pages = 0, 0.0, 0, 0
        admitted: list[TurnRun] = []
        budget = self.cfg.max_batch_tokens - self.dec_seqs
        while self.waiting and len(self.running) < self.cfg.max_running:
            run = self.waiting[0]
            target, new_tokens, fetch = self._need(run)
            if new_tokens > budget and (admitted or self.dec_seqs):
                break  # head-of-line blocking, as vLLM's FCFS scheduler
            if not self._room_for(run, fetch):
                break  # no room now; it waits at the head of the queue
            self.waiting.popleft()
            run_pairs, swapped, swapped_pages = self._make_resident(run, target, fetch, now)
            tokens += new_tokens
            pairs += run_pairs
            h2d_bytes += swapped
            h2d_pages += swapped_pages
            budget -= new_tokens
            admitted.append(run)
        prefill = BatchShape(prefill_tokens=tokens, prefill_pairs=pairs, prefill_seqs=len(admitted))
        return admitted, prefill, h2d_bytes, h2d_pages

    def _make_resident(self, run: TurnRun, target: int, fetch: int, now: float):
        """Pin the session's units, reclaim room, swap in, recompute, and add the new pages."""
        sess, mem, bt = run.sess, self.mem, self.bt
        old_tokens = sess.tokens
        split = (sess.tokens_in(GPU, bt), sess.tokens_in(CPU, bt), sess.tokens_in(DROPPED, bt))
        for policy in mem.policy:
            policy.on_admit(sess, split, now)
        mem.acquire(sess.units, now)
        if not mem.make_room(fetch, now):
            raise AssertionError(f"admission of {sess.session_id} turn {run.k}: room was checked "
                                 f"but {fetch} bytes could not be reclaimed")
        swapped = swapped_pages = 0
        pairs = 0.0
        dropped = []
        for u in sess.units:
            if u.tier == CPU:
                swapped += u.size
                swapped_pages += u.pages
                if dropped:  # keep tier entries in page order (FIFO order, tie-breaks)
                    mem.recompute_on_gpu(dropped, now)
                    dropped = []
                mem.place(u, GPU, now)
            elif u.tier == DROPPED:
                # Recomputed in this prefill, after the tokens before it (DESIGN.md 3 physics):
                # n tokens starting at position a attend to n*(a + n/2) keys.
                a = u.first_page * bt
                n = min(old_tokens, a + u.pages * bt) - a
                pairs += n * (a + n / 2.0)
                dropped.append(u)
            u.last_access_s = now
            u.hits += 1
        mem.recompute_on_gpu(dropped, now)
        pairs += attention_pairs(max(1, target - 1 - old_tokens), old_tokens)
        self._extend(sess, target, now)
        if not run.admitted_once:
            # First admission: the session holds exactly the history, H = g + c + d.
            run.gpu_hit, run.cpu_hit, run.recomputed = split
            run.admit_s = now
            run.admitted_once = True
        else:
            redo = split[DROPPED] + (target - 1 - old_tokens)
            run.preempt_recompute += redo
            self.preempt_recompute_tokens += redo
        run.swap_in_bytes += swapped
        self.swap_in_bytes += swapped
        self._admit_seq += 1
        run.admit_seq = self._admit_seq
        self.running[run.admit_seq] = run
        return pairs, swapped, swapped_pages

    def _extend(self, sess: SessionKV, tokens: int, now: float) -> None:
        """Grow the session's KV to ``tokens``, placing new pages pinned on the GPU (room was made)."""
        pages = self._pages(tokens)
        self.live_pages += pages - self._pages(sess.tokens)
        self.peak_live_pages = max(self.peak_live_pages, self.live_pages)
        if self.per_session_unit:
            if not sess.units:
                sess.units.append(self._new_unit(sess, 0, 0, now))
            unit = sess.units[0]
            if pages != unit.pages:
                self.mem.resize(unit, pages, pages * self.page_bytes)
        else:
            while len(sess.units) < pages:
                unit = self._new_unit(sess, len(sess.units), self.page_bytes, now)
                sess.units.append(unit)
        sess.tokens = tokens

    def _new_unit(self, sess: SessionKV, page: int, size: int, now: float) -> Unit:
        self._next_key += 1
        unit = Unit(self._next_key, sess, page, 1 if size else 0, size, pinned=True,
                    created_s=now, last_access_s=now, hits=1)
        sess.tier_pages[DROPPED] += unit.pages  # born DROPPED (nothing computed), placed at once
        self.mem.place(unit, GPU, now)
        return unit

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.bt)

    # -- preemption ------------------------------------------------------------------------------
    def _preempt(self, run: TurnRun, now: float) -> None:
        """Recompute-style preemption (vLLM's default): drop this turn's own KV, requeue it first."""
        sess, mem = run.sess, self.mem
        del self.running[run.admit_seq]
        tokens = run.tokens_at(self.step)
        self.dec_seqs -= 1  # only decoding turns are preempted (at the start of a step)
        self.dec_ctx -= tokens
        run.generated = tokens - run.history - run.turn.prompt_tokens
        run.epoch += 1
        run.preemptions += 1
        self.preemptions += 1
        sess.tokens = tokens
        boundary_page = run.history // self.bt
        mem.release(sess.units, now)
        for u in sess.units:
            if u.first_page + u.pages > boundary_page and u.tier != DROPPED:
                mem.drop(u, now)
        self.waiting.appendleft(run)

    # -- applying one iteration ------------------------------------------------------------------
    def finish(self, step: Step, now: float) -> None:
        """Apply the iteration that ends at ``now``."""
        # Every sequence that decoded this step appended one token.
        self.dec_ctx += self.dec_seqs
        self.output_tokens += self.dec_seqs + len(step.admitted)
        if step.decode_seqs:
            self.step_s.append(step.duration_s)
            self.step_decode.append(step.decode_seqs)
        for run in self._finish_due.pop(self.step, ()):
            run, epoch = run
            if run.epoch == epoch and run.admit_seq in self.running:
                tokens = run.tokens_at(self.step + 1)
                self.dec_seqs -= 1
                self.dec_ctx -= tokens
                self._complete(run, tokens, now)
        for run in step.admitted:
            run.first_token_s = run.first_token_s if run.first_token_s == run.first_token_s else now
            run.generated += 1
            remaining = run.turn.output_tokens - run.generated
            tokens = run.sess.tokens
            if remaining <= 0:
                self._complete(run, tokens, now)
                continue
            run.base_tokens, run.base_step = tokens, self.step + 1
            self.dec_seqs += 1
            self.dec_ctx += tokens
            self._due_finish(self.step + remaining, run)
            first_page_step = self.step + 1 + (-tokens) % self.bt
            if first_page_step <= self.step + remaining:
                self._page_due[first_page_step].append((run, run.epoch))
        self.step += 1

    def _due_finish(self, step: int, run: TurnRun) -> None:
        if step not in self._finish_due:
            heapq.heappush(self._finish_steps, step)
        self._finish_due[step].append((run, run.epoch))

    def _next_finish_step(self) -> int:
        heap = self._finish_steps
        while heap and heap[0] not in self._finish_due:
            heapq.heappop(heap)
        return heap[0] if heap else 1 << 62

    # -- runs of decode-only iterations ----------------------------------------------------------
    def decode_span(self, now: float, next_arrival_s: float | None) -> DecodeSpan:
        """Run the decode-only iterations that follow ``now`` up to the next event, in one go.

        Between an arrival, a completion and a preemption nothing the scheduler decides can
        change: the batch is the same sequences, the head of the queue stays blocked (memory only
        gets scarcer, the token budget and max_running stay), so ``plan`` would admit nothing. Each
        iteration is still priced (its context grows by one token per sequence) and recorded, and
        its page allocations and evictions happen at its own start time; the span stops before an
        iteration that would need a preemption, complete a turn, or start at or after the next
        arrival. The ledger is the one that iteration-by-iteration replay gives.
        """
        span = DecodeSpan()
        if self.dec_seqs == 0 or (self.waiting and self._admissible(self.waiting[0])):
            return span
        horizon = math.inf if next_arrival_s is None else next_arrival_s
        stop = self._next_finish_step()
        t, used_gpu = now, self.mem.used
        cost, pipelining, layers = self.cost, self.cfg.pipelining, self.cost.model.num_layers
        while self.step < stop and t < horizon:
            if self.step in self._page_due and not self._grow_decodes(t, preempt=False):
                break
            d2h = self.mem.swap_out_bytes - self._d2h_mark
            if d2h:
                self._d2h_mark = self.mem.swap_out_bytes
                d = cost.iteration(BatchShape.decode(self.dec_seqs, self.dec_ctx), d2h_bytes=d2h,
                                   d2h_copies=d2h // self.page_bytes * layers,
                                   pipelining=pipelining).total_s
            else:
                d = cost.decode_step_s(self.dec_seqs, self.dec_ctx)
            span.gpu_byte_seconds += used_gpu[GPU] * d
            t += d
            span.steps += 1
            self.step_s.append(d)
            self.step_decode.append(self.dec_seqs)
            self.output_tokens += self.dec_seqs
            self.dec_ctx += self.dec_seqs
            self.step += 1
        span.duration_s = t - now
        return span

    def _admissible(self, run: TurnRun) -> bool:
        """Would ``_admit`` take this head-of-queue turn now (given room and limits)?"""
        if len(self.running) >= self.cfg.max_running:
            return False
        _, new_tokens, fetch = self._need(run)
        if new_tokens > self.cfg.max_batch_tokens - self.dec_seqs and self.dec_seqs:
            return False
        return self._room_for(run, fetch)

    def _need(self, run: TurnRun) -> tuple[int, int, int]:
        """(context tokens after the prefill, prefill tokens, GPU bytes to fetch) to admit ``run``.

        O(1) from the session's per-tier page counts. A fully cached prompt still computes its last
        token for the logits (as vLLM does).
        """
        sess = run.sess
        target = run.history + run.turn.prompt_tokens + run.generated + 1
        new_tokens = max(1, sess.tokens_in(DROPPED, self.bt) + (target - 1 - sess.tokens))
        pages = sess.tier_pages
        fetch = (pages[CPU] + pages[DROPPED] + self._pages(target) - sum(pages)) * self.page_bytes
        return target, new_tokens, fetch

    def _room_for(self, run: TurnRun, fetch: int) -> bool:
        """Can the GPU make ``fetch`` bytes of room without the session's own (soon pinned) units?"""
        return self.mem.reclaimable(GPU) - run.sess.tier_pages[GPU] * self.page_bytes >= fetch

    def _complete(self, run: TurnRun, tokens: int, now: float) -> None:
        sess, session = run.sess, self.sessions[run.sess.index]
        del self.running[run.admit_seq]
        sess.tokens = tokens
        sess.next_turn = run.k + 1
        next_s = math.inf
        if sess.next_turn < len(session.turns):
            next_s = self._next_arrival(session.turns[run.k], session.turns[sess.next_turn], now)
            self._schedule(sess.index, next_s)
        else:
            sess.done = True
            self.live_pages -= self._pages(tokens)
        for u in sess.units:
            u.last_access_s = now
            u.next_access_s = next_s
        self.mem.release(sess.units, now)
        self.completed += 1
        t = run.turn
        o = t.output_tokens
        self.ledger.append((
            sess.session_id, run.k, t.priority, run.arrival_s, run.admit_s, run.first_token_s, now,
            t.prompt_tokens, o, run.history, run.gpu_hit, run.cpu_hit, run.recomputed,
            run.swap_in_bytes, run.preemptions, run.preempt_recompute,
            run.first_token_s - run.arrival_s, run.ttft_ideal_s,
            (now - run.first_token_s) / (o - 1) if o > 1 else math.nan,
            now - run.arrival_s, run.admit_s - run.arrival_s))

    def _next_arrival(self, prev: Turn, nxt: Turn, now: float) -> float:
        """When the next turn arrives, given the replay mode (DESIGN.md 3)."""
        if self.cfg.replay == "open-loop":
            if nxt.arrival_s is not None:
                return max(nxt.arrival_s, now)  # never before its predecessor completes
            return now + (nxt.think_s or 0.0)
        if nxt.think_s is not None:
            return now + nxt.think_s
        # Closed loop on a trace with only absolute times: the recorded gap stands in for think time.
        return now + max(0.0, nxt.arrival_s - (prev.arrival_s or 0.0))


@dataclass(slots=True)
class DecodeSpan:
    """Decode-only iterations run back to back (``Scheduler.decode_span``)."""

    duration_s: float = 0.0
    steps: int = 0
    gpu_byte_seconds: float = 0.0
