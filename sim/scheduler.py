"""The synchronous core of the engine: admission, decode growth, preemption and completion.

``plan`` prepares an iteration at time ``now`` (memory for decodes, then FCFS admission of waiting
turns, each made wholly GPU-resident: GPU hits, CPU swap-ins, recompute of dropped units) and prices
it; ``finish`` applies it at its end time (tokens out, completions, the next turns' arrivals);
``decode_span`` runs the decode-only iterations up to the next event in one go. The jobs around it
live in their own modules: the KV memory and its evictions (``sim.memory``), arrivals and replay
(``sim.arrivals``), iteration pricing (``sim.pricing``), the ledger record (``sim.results``). The
SimPy shell in ``sim.engine`` only turns durations into timeouts.

Work per iteration is O(turns admitted, completed or growing a page), never O(batch): decoding
sequences are kept as running sums, and due dates (next page, completion) sit in step buckets.
"""
from __future__ import annotations

import heapq
import math
from array import array
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from costmodels import BatchShape, CostModel, attention_pairs
from sim.arrivals import Arrivals, next_arrival_s
from sim.config import EngineConfig, MemoryConfig
from sim.lifetime import fit_lifetime
from sim.memory import CPU, DROPPED, GPU, TieredMemory
from sim.policies import PolicyContext, make_policy, policy_class
from sim.pricing import Prefill, Pricer, recompute_pairs, running_sum
from sim.results import TurnRecord
from sim.units import SessionKV, UnitView, layer_codes, layer_split, uid_of
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
    layer_units: tuple[int, int, int] = (0, 0, 0)   # the history's (page, layer) pairs per tier
    copy_stall_s: float = 0.0    # copy time its admission iteration could not hide
    swap_in_bytes: int = 0
    prefetched_bytes: int = 0    # of swap_in_bytes, copied ahead of admission
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
                 engine: EngineConfig, policy: str, seed: int = 0,
                 clock: Callable[[], int] | None = None) -> None:
        self.cost, self.cfg = cost, engine
        self.bt = memory.block_tokens
        self.page_bytes = self.bt * cost.kv_bytes_per_token
        self.per_session_unit = memory.evict_unit == "session"
        self.layers = cost.model.num_layers
        self.upp = self.layers if memory.evict_unit == "layer_block" else 1   # units per page
        self.unit_bytes = self.page_bytes // self.upp      # one page of one unit's layers
        predictor = None
        if getattr(policy_class(policy), "needs_predictor", False):
            predictor = fit_lifetime(sessions)  # fitted on the trace's training split
        self.sessions = sessions
        self.kv = [SessionKV(i, s.session_id, s.turns[0].priority) for i, s in enumerate(sessions)]
        view = UnitView(self.kv, self.unit_bytes, layers=self.upp, per_session=self.per_session_unit)
        ctx = dict(block_tokens=self.bt, num_layers=cost.model.num_layers, view=view, cost=cost,
                   cpu_kv_bytes=MemoryConfig.capacity_bytes(memory.cpu_kv_gb), predictor=predictor)
        self.mem = TieredMemory(
            MemoryConfig.capacity_bytes(memory.gpu_kv_gb), MemoryConfig.capacity_bytes(memory.cpu_kv_gb),
            make_policy(policy, PolicyContext(tier=GPU, **ctx)),
            make_policy(policy, PolicyContext(tier=CPU, **ctx)), view,
            clock=clock or (lambda: 0))
        self.pricer = Pricer(cost, self.page_bytes, engine.pipelining, engine.async_save,
                             engine.fused_recompute)
        # Decode spans allocate their pages in one batch when that cannot change a decision.
        self._bulk = type(self.mem.policy[GPU]).grows_in_bulk and not self.per_session_unit
        self.arrivals = Arrivals()
        self.waiting: deque[TurnRun] = deque()
        self.running: dict[int, TurnRun] = {}                # admit_seq -> run, in admission order
        self._admit_seq = 0
        self.step = 0
        self._page_due: dict[int, list[tuple[TurnRun, int]]] = defaultdict(list)
        self._finish_due: dict[int, list[tuple[TurnRun, int]]] = defaultdict(list)
        self._finish_steps: list[int] = []                  # heap of the keys of _finish_due
        self._page_steps: list[int] = []                    # heap of the keys of _page_due
        self.dec_seqs = 0                                   # sequences decoding in the next step
        self.dec_ctx = 0                                    # their total context tokens
        self._d2h_mark = 0                                  # swap-out bytes already priced
        self.live_pages = 0                                 # pages of sessions not yet finished
        self.peak_live_pages = 0                            # the trace's peak KV demand
        self.ledger: list[TurnRecord] = []
        self.rejected_turns = 0
        self.preemptions = 0
        self.preempt_recompute_tokens = 0
        self.output_tokens = 0
        self.swap_in_bytes = 0
        self.completed = 0
        # Ahead-of-time swap-ins (engine.prefetch): due times, what each session got and when its
        # copy ends, and when the host-to-device stream is free of them.
        self._prefetch_due: list[tuple[float, int, int]] = []   # heap of (time, order, session)
        self._prefetch_order = 0
        self._prefetched: dict[int, tuple[np.ndarray, float]] = {}
        self.h2d_busy_until = 0.0
        self._dropped_memo: dict[int, tuple[tuple[int, int], int]] = {}   # see _dropped_tokens
        self.prefetch_bytes = 0
        self.step_s = array("d")                            # compact: one entry per decode step
        self.step_decode = array("l")
        for i, s in enumerate(sessions):
            self.arrivals.schedule(i, s.turns[0].arrival_s or 0.0)

    # -- arrivals --------------------------------------------------------------------------------
    def next_arrival_s(self) -> float | None:
        """The next arrival or ahead-of-time swap-in: the next event that can change a decision."""
        nxt = self.arrivals.next_s()
        if self._prefetch_due:
            t = self._prefetch_due[0][0]
            nxt = t if nxt is None else min(nxt, t)
        return nxt

    def release(self, now: float) -> None:
        """Move every turn that has arrived by ``now`` into the waiting queue."""
        for t, order, i in self.arrivals.pop_due(now):
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
                                        self.pricer.ideal_ttft_s(turn.prompt_tokens, history)))
            if self.cfg.prefetch != "off":
                self._schedule_prefetch(i, t)    # swap in while it waits in the queue

    # -- planning one iteration ------------------------------------------------------------------
    def plan(self, now: float) -> Step | None:
        """Prepare the next iteration; None when there is nothing to run."""
        if self._prefetch_due:
            self._run_prefetches(now)
        self._grow_decodes(now)
        admitted, prefill = self._admit(now)
        if not admitted and self.dec_seqs == 0:
            return None
        if not admitted:
            duration = self.pricer.iteration_s(BatchShape(), self.dec_seqs, self.dec_ctx,
                                               d2h_bytes=self._take_d2h())
            return Step(duration, admitted, self.dec_seqs)
        duration, stall = self.pricer.admission_s(prefill, self.dec_seqs, self.dec_ctx,
                                                  self._take_d2h(),
                                                  max(0.0, self.h2d_busy_until - now))
        for run in admitted:
            if run.admit_s == now:           # first admission (this iteration)
                run.copy_stall_s = stall
        return Step(duration, admitted, self.dec_seqs)

    # -- ahead-of-time swap-in -------------------------------------------------------------------
    def _schedule_prefetch(self, index: int, at: float) -> None:
        self._prefetch_order += 1
        heapq.heappush(self._prefetch_due, (at, self._prefetch_order, index))

    def _run_prefetches(self, now: float) -> None:
        """Swap in the CPU units of every session whose prefetch is due, all of a session's or
        none (when the GPU cannot make room without its own units); victims follow the policy.
        The copies queue on the host-to-device stream from ``now``."""
        due, mem = self._prefetch_due, self.mem
        while due and due[0][0] <= now:
            _, _, i = heapq.heappop(due)
            sess = self.kv[i]
            need = sess.tier_pages[CPU] * self.unit_bytes
            if sess.pinned or sess.done or not need \
                    or mem.reclaimable(GPU) - sess.tier_pages[GPU] * self.unit_bytes < need:
                continue
            mem.acquire(sess, now)
            if not mem.make_room(need, now):
                raise AssertionError(f"prefetch of {sess.session_id}: room was checked but "
                                     f"{need} bytes could not be reclaimed")
            idx = mem.swap_in_cpu_units(sess, now)
            mem.release(sess, now)
            nbytes = len(idx) * mem.unit_size(sess)
            copy = self.cost.copy_s("h2d", nbytes, nbytes // self.pricer.layer_page_bytes)
            start = max(now, self.h2d_busy_until)
            self.h2d_busy_until = start + copy
            prev = self._prefetched.get(i)
            if prev is not None:
                idx = np.union1d(prev[0], idx)
            self._prefetched[i] = (idx, start, self.h2d_busy_until)
            self.prefetch_bytes += nbytes
            self.swap_in_bytes += nbytes

    def _take_d2h(self) -> int:
        """Swap-out bytes not yet priced: the next iteration carries them (its D2H stream)."""
        d2h = self.mem.swap_out_bytes - self._d2h_mark
        self._d2h_mark = self.mem.swap_out_bytes
        return d2h

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
                self._due_page(self.step + self.bt, run, epoch)
        return True

    def _admit(self, now: float) -> tuple[list[TurnRun], Prefill]:
        """Admit waiting turns FCFS: (admitted, their prefill work and swap-ins)."""
        pf = Prefill()
        if self.upp > 1:
            pf.deep_tokens = np.zeros(self.layers, dtype=np.int64)
            pf.deep_pairs = np.zeros(self.layers)
            pf.h2d_units = np.zeros(self.layers, dtype=np.int64)
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
            self._make_resident(run, target, fetch, now, pf)
            budget -= new_tokens
            admitted.append(run)
        pf.seqs = len(admitted)
        return admitted, pf

    def _split(self, sess: SessionKV, as_cpu: np.ndarray | None = None) -> tuple[int, int, int]:
        """The session's tokens by where they are: (GPU hits, to swap in, to recompute). Units in
        ``as_cpu`` (prefetched: copied from the CPU ahead of admission) count as on the CPU."""
        bt = self.bt
        if as_cpu is not None and len(as_cpu):
            if self.per_session_unit:
                return 0, sess.tokens, 0
            codes = np.frombuffer(sess.tier, dtype=np.uint8).copy()
            codes[as_cpu] = 1
            return layer_split(codes.reshape(-1, self.upp)[:, ::-1], sess.tokens, bt)
        if self.upp > 1:
            return layer_split(layer_codes(sess, self.layers), sess.tokens, bt)
        return sess.tokens_in(GPU, bt), sess.tokens_in(CPU, bt), sess.tokens_in(DROPPED, bt)

    def _make_resident(self, run: TurnRun, target: int, fetch: int, now: float,
                       pf: Prefill) -> None:
        """Pin the session's units, reclaim room, swap in, recompute, and add the new pages; the
        work goes into ``pf``."""
        sess, mem, bt = run.sess, self.mem, self.bt
        old_tokens = sess.tokens
        ahead, prefetched = None, 0
        if self._prefetched:
            got = self._prefetched.pop(sess.index, None)
            if got is not None:
                idx, start_s, done_s = got
                ahead = idx[np.frombuffer(sess.tier, dtype=np.uint8)[idx] == 0]   # still there
                if len(ahead):
                    prefetched = len(ahead) * mem.unit_size(sess)
                if len(ahead) and done_s > now:
                    # Its copy is in flight, layer by layer: layer l is in at start + (l+1)/L.
                    L = self.layers
                    ready = start_s + (done_s - start_s) * np.arange(1, L + 1) / L - now
                    ready = np.maximum(ready, 0.0)
                    pf.ready_s = ready if pf.ready_s is None else np.maximum(pf.ready_s, ready)
        split = self._split(sess, ahead)
        per_unit = self.layers // self.upp
        tiers = list(sess.tier_pages)
        if prefetched:                         # its pages count where they came from
            moved = len(ahead) * (sess.unit_pages if self.per_session_unit else 1)
            tiers[GPU] -= moved
            tiers[CPU] += moved
        layer_units = tuple(n * per_unit for n in tiers)
        self._dropped_memo.pop(sess.index, None)     # recovery brings dropped units back
        for policy in mem.policy:
            policy.on_admit(sess, split, now)
        mem.acquire(sess, now)
        if not mem.make_room(fetch, now):
            raise AssertionError(f"admission of {sess.session_id} turn {run.k}: room was checked "
                                 f"but {fetch} bytes could not be reclaimed")
        new = max(1, target - 1 - old_tokens)
        new_pairs = attention_pairs(new, old_tokens)
        if self.upp > 1:
            got = mem.bring_layers_to_gpu(sess, now)
            swapped = 0
            if got is not None:
                swapped = got.swapped_units * self.unit_bytes
                pf.h2d_units += got.swapped_per_layer
                if len(got.recomputed_pages):
                    a = got.recomputed_pages * bt
                    n = np.minimum(old_tokens, a + bt) - a
                    np.add.at(pf.deep_tokens, got.depth, n)
                    np.add.at(pf.deep_pairs, got.depth, n * (a + n / 2.0))
                    pf.recompute_seqs += 1
            pf.tokens += new
            pf.pairs += new_pairs
        else:
            swapped, swapped_pages, recomputed = mem.bring_to_gpu(sess, now)
            redo = recompute_pairs(recomputed, sess.unit_pages if self.per_session_unit else 1,
                                   bt, old_tokens)
            pf.tokens += split[DROPPED] + new
            pf.pairs += redo + new_pairs
            pf.h2d_pages += swapped_pages
            if split[DROPPED]:
                pf.recompute_tokens += split[DROPPED]
                pf.recompute_pairs += redo
                pf.recompute_seqs += 1
        pf.h2d_bytes += swapped
        sess.last_access_s = now
        self._extend(sess, target, now)
        if not run.admitted_once:
            # First admission: the session holds exactly the history, H = g + c + d.
            run.gpu_hit, run.cpu_hit, run.recomputed = split
            run.layer_units = layer_units
            run.prefetched_bytes = prefetched
            run.swap_in_bytes += prefetched
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

    def _extend(self, sess: SessionKV, tokens: int, now: float) -> None:
        """Grow the session's KV to ``tokens``, placing new pages pinned on the GPU (room was made)."""
        pages = self._pages(tokens)
        self.live_pages += pages - self._pages(sess.tokens)
        self.peak_live_pages = max(self.peak_live_pages, self.live_pages)
        if self.per_session_unit:
            if pages != sess.unit_pages or not sess.tier:
                self.mem.grow_session_unit(sess, pages, now)
        elif pages * self.upp > len(sess.tier):
            self.mem.add_units(sess, pages - len(sess.tier) // self.upp, now)
        sess.tokens = tokens

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
        mem.release(sess, now)
        # units reaching past the history boundary hold this turn's own tokens: dropped
        if not self.per_session_unit:
            mem.drop_from(sess, boundary_page * self.upp, now)
        elif sess.unit_pages > boundary_page:
            mem.drop_from(sess, 0, now)
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
                self._due_page(first_page_step, run, run.epoch)
        self.step += 1

    def _due_page(self, step: int, run: TurnRun, epoch: int) -> None:
        if step not in self._page_due:
            heapq.heappush(self._page_steps, step)
        self._page_due[step].append((run, epoch))

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
        if self._bulk and self._decode_span_bulk(span, now, horizon, stop):
            return span
        t, used_gpu, pricer, seqs = now, self.mem.used, self.pricer, self.dec_seqs
        while self.step < stop and t < horizon:
            if self.step in self._page_due and not self._grow_decodes(t, preempt=False):
                break
            d2h = self._take_d2h()
            if d2h:                       # a demotion's copy: this step is priced on its own
                d = pricer.decode_with_d2h_s(seqs, self.dec_ctx, d2h)
                span.gpu_byte_seconds += used_gpu[GPU] * d
                self.step_s.append(d)
                n, t = 1, t + d
            else:
                # Up to the next page allocation only the context changes: one closed-form run.
                run = pricer.decode_run(seqs, self.dec_ctx,
                                        min(stop, self._next_page_step(self.step + 1)) - self.step,
                                        t, horizon, used_gpu[GPU], span.gpu_byte_seconds)
                self.step_s.extend(run.durations)
                n, t, span.gpu_byte_seconds = run.steps, run.end_s, run.gpu_byte_seconds
            span.steps += n
            self.step_decode.extend([seqs] * n)
            self.output_tokens += seqs * n
            self.dec_ctx += seqs * n
            self.step += n
        span.duration_s = t - now
        return span

    def _decode_span_bulk(self, span: DecodeSpan, now: float, horizon: float, stop: int) -> bool:
        """The whole span at once, when its page allocations can be made in one batch: the GPU
        policy's victims do not depend on pinned inserts and its demotions batch exactly
        (``grows_in_bulk``), every demotion's copy hides behind its step's compute, and the GPU can
        give every page the span needs without a preemption. Same ledger, memory and policy state as ``decode_span``'s loop
        (which runs instead, returning False here, when a condition fails)."""
        seqs, step0, mem, bt = self.dec_seqs, self.step, self.mem, self.bt
        if stop <= step0 or now >= horizon:
            return False                          # no step to run: the loop does nothing
        # Price the steps up to the horizon: a first guess of 64, doubled while it falls short.
        want = min(64, stop - step0)
        while True:
            d = self.cost.decode_steps_s(seqs, self.dec_ctx + seqs * np.arange(want))
            starts = running_sum(now, d)
            if starts[-1] >= horizon or want == stop - step0:
                break
            want = min(2 * want, stop - step0)
        n = max(1, int(np.searchsorted(starts[:-1], horizon, side="left")))
        end = step0 + n
        # Every page the span allocates: each live run's due steps below ``end``, one page each.
        growing, touched, total = [], [], 0
        for key in sorted(k for k in self._page_due if k < end):
            touched.append(key)
            for run, epoch in self._page_due[key]:
                if run.epoch == epoch and run.admit_seq in self.running:
                    count = (end - 1 - key) // bt + 1
                    growing.append((run, key, count))
                    total += count
        page, unit, upp = self.page_bytes, self.unit_bytes, self.upp
        if total * page > mem.reclaimable(GPU):
            return False                          # some step would preempt: step by step
        # Allocation k (1-based, in step order) of ``upp`` units evicts what the free room lacks:
        # max(0, k*upp - free) - max(0, (k-1)*upp - free) units (victims are whole units).
        free = mem.free(GPU)
        free_units = total * upp if math.isinf(free) else int(free // unit)
        k = np.arange(1, total + 1, dtype=np.int64) * upp
        evicted = np.maximum(k - free_units, 0) - np.maximum(k - upp - free_units, 0)
        evicts = total * upp > free_units
        demotes = evicts and mem.capacity[CPU] >= unit
        gpu_policy = mem.policy[GPU]
        ordered = gpu_policy.hears_pinned()
        # The step of every allocation, in the loop's order of runs.
        steps = [k for _, key, count in growing for k in range(key, key + count * bt, bt)]
        due = np.sort(np.asarray(steps, dtype=np.int64)) - step0     # relative, in step order
        if demotes:
            # Each demotion's copy rides on its allocation's step: step by step unless every such
            # copy hides behind its step's compute (never, when saves are synchronous).
            if not self.cfg.async_save:
                return False
            per_step = np.bincount(due, weights=evicted, minlength=n).astype(np.int64)
            layer_page = self.pricer.layer_page_bytes
            for j in np.flatnonzero(per_step).tolist():
                nbytes = int(per_step[j]) * unit
                if self.cost.copy_s("d2h", nbytes, nbytes // layer_page) > d[j]:
                    return False
        if evicts:
            mem.make_room(total * page, now)      # the victims of every single-page make_room
            self._d2h_mark = mem.swap_out_bytes   # their copies were priced in their own steps
        for key in touched:
            del self._page_due[key]
        order, uids = [], []
        for run, key, count in growing:
            sess = run.sess
            if ordered:                           # the policy hears of the units in the loop's order
                order.extend([run.admit_seq] * (count * upp))
                first = uid_of(sess.index, len(sess.tier))
                uids.extend(range(first, first + count * upp))
            mem.add_units(sess, count, now, insert=False)
            last_step = key + (count - 1) * bt
            sess.tokens = run.tokens_at(last_step) + 1
            self._due_page(last_step + bt, run, run.epoch)
        if ordered and uids:
            unit_steps = np.repeat(np.asarray(steps, dtype=np.int64), upp)
            rank = np.lexsort((np.asarray(order), unit_steps))
            gpu_policy.insert_many(np.asarray(uids)[rank].tolist(), now, True)
        self.live_pages += total
        self.peak_live_pages = max(self.peak_live_pages, self.live_pages)
        # GPU occupancy per step: each allocation adds its units less those it evicted.
        grown = np.cumsum(np.bincount(due, weights=upp - evicted, minlength=n)[:n]).astype(np.int64)
        used = (mem.used[GPU] - unit * int(grown[-1])) + unit * grown
        gbs = running_sum(span.gpu_byte_seconds, used * d[:n])
        span.gpu_byte_seconds = float(gbs[-1])
        self.step_s.extend(d[:n].tolist())
        span.steps = n
        self.step_decode.extend([seqs] * n)
        self.output_tokens += seqs * n
        self.dec_ctx += seqs * n
        self.step = end
        span.duration_s = float(starts[n]) - now
        return True

    def _next_page_step(self, after: int) -> int:
        """The first step >= ``after`` at which a decoding sequence needs a new page."""
        heap = self._page_steps
        while heap and heap[0] not in self._page_due:   # handled steps leave _page_due
            heapq.heappop(heap)
        if heap and heap[0] < after:
            raise AssertionError(f"page allocation of step {heap[0]} was not handled by step {after}")
        return heap[0] if heap else 1 << 62

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
        units = sess.tier_pages
        dropped = 0
        if units[DROPPED]:
            dropped = self._dropped_tokens(sess) if self.upp > 1 \
                else sess.tokens_in(DROPPED, self.bt)
        new_tokens = max(1, dropped + (target - 1 - sess.tokens))
        fetch = (units[CPU] + units[DROPPED] + self._pages(target) * self.upp - sum(units)) \
            * self.unit_bytes
        return target, new_tokens, fetch

    def _dropped_tokens(self, sess: SessionKV) -> int:
        """Tokens of pages with a dropped layer. The head of the queue is asked every iteration;
        until its admission a session's dropped units only grow (eviction never brings one back),
        so an unchanged count of dropped units is an unchanged set: the answer is remembered by
        that count (and the tokens) until the session is admitted."""
        key = (sess.tier_pages[DROPPED], sess.tokens)
        got = self._dropped_memo.get(sess.index)
        if got is None or got[0] != key:
            got = self._dropped_memo[sess.index] = (key, self._split(sess)[DROPPED])
        return got[1]

    def _room_for(self, run: TurnRun, fetch: int) -> bool:
        """Can the GPU make ``fetch`` bytes of room without the session's own (soon pinned) units?"""
        return self.mem.reclaimable(GPU) - run.sess.tier_pages[GPU] * self.unit_bytes >= fetch

    def _complete(self, run: TurnRun, tokens: int, now: float) -> None:
        sess, session = run.sess, self.sessions[run.sess.index]
        del self.running[run.admit_seq]
        sess.tokens = tokens
        sess.next_turn = run.k + 1
        next_s = math.inf
        if sess.next_turn < len(session.turns):
            next_s = next_arrival_s(session.turns[run.k], session.turns[sess.next_turn], now,
                                    self.cfg.replay)
            self.arrivals.schedule(sess.index, next_s)
        else:
            sess.done = True
            self.live_pages -= self._pages(tokens)
        sess.last_access_s = now
        sess.next_access_s = next_s
        self.mem.release(sess, now)
        if self.cfg.prefetch == "think" and next_s < math.inf:
            # The next turn's arrival is known (closed-loop think time, or the trace's timestamp):
            # start early enough to copy the whole session before it arrives.
            nbytes = self._pages(tokens) * self.page_bytes
            lead = self.cost.copy_s("h2d", nbytes, nbytes // self.pricer.layer_page_bytes)
            self._schedule_prefetch(sess.index, max(now, next_s - lead))
        self.completed += 1
        t = run.turn
        o = t.output_tokens
        self.ledger.append(TurnRecord(
            sess.session_id, run.k, t.priority, run.arrival_s, run.admit_s, run.first_token_s, now,
            t.prompt_tokens, o, run.history, run.gpu_hit, run.cpu_hit, run.recomputed,
            *run.layer_units, run.swap_in_bytes, run.copy_stall_s, run.prefetched_bytes,
            run.preemptions,
            run.preempt_recompute,
            run.first_token_s - run.arrival_s, run.ttft_ideal_s,
            (now - run.first_token_s) / (o - 1) if o > 1 else math.nan,
            now - run.arrival_s, run.admit_s - run.arrival_s))


@dataclass(slots=True)
class DecodeSpan:
    """Decode-only iterations run back to back (``Scheduler.decode_span``)."""

    duration_s: float = 0.0
    steps: int = 0
    gpu_byte_seconds: float = 0.0
