"""The scheduler's core: one iteration of the engine, from the waiting queue to completion.

``release`` moves arrived turns into the waiting queue; ``plan`` prepares an iteration at time
``now`` (a page for every decode that starts one, preempting the newest turn when the GPU cannot
give it, then the admission of waiting turns, each made wholly GPU-resident: ``sim.admission``)
and prices it; ``finish`` applies it at its end time (tokens
out, completions, the next turns' arrivals); ``decode_span`` runs the decode-only iterations up
to the next event in one go (``sim.spans``).

Every run has an admission (``sim.admission``: FCFS) and a recovery (``sim.recovery``: by page or
by layer). Serving features are parts (``sim.parts``), created only when the run asks for them:
chunked prefill (in place of the admission), token budgets, decode from CPU memory, prefetch,
prefix sharing and a streamed trace. The jobs around the core live in their own modules: KV
memory and its evictions (``sim.memory``), arrivals and replay (``sim.arrivals``), pricing
(``sim.pricing``), the ledger (``sim.results``); the SimPy shell in ``sim.engine`` only turns
durations into timeouts. docs/architecture.md draws them.

Work per iteration is O(turns admitted, completed or growing a page), never O(batch): decoding
sequences are kept as running sums, and due dates (next page, completion) sit in step buckets.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

from costmodels import BatchShape, CostModel
from sim.admission import Admission
from sim.arrivals import Arrivals, next_arrival_s
from sim.config import (
    BudgetConfig,
    EngineConfig,
    MemoryConfig,
    SparseConfig,
    combination_problems,
    raise_first,
)
from sim.lifetime import fit_lifetime
from sim.memory import CPU, GPU, SHARED, TieredMemory
from sim.parts.budget import TokenBudget
from sim.parts.sharing import POOL_INDEX, PrefixSharing
from sim.policies import PolicyContext, make_policy, policy_class
from sim.pricing import Pricer
from sim.recovery import LayerRecovery, PageRecovery
from sim.results import Ledger
from sim.samples import Samples
from sim.spans import DecodeSpan, decode_span
from sim.step_buckets import StepBuckets
from sim.turns import Step, TurnRun
from sim.units import SessionKV, SessionTable, UnitView
from traces.records import Session, Turn

if TYPE_CHECKING:  # parts imported where a run asks for them (sparse decode pulls in 560 lines)
    from sim.parts.offload import OffloadDecode
    from sim.parts.prefetch import Prefetch

__all__ = ["POOL_INDEX", "DecodeSpan", "Scheduler", "SessionTable", "Step", "TurnRun"]


class Scheduler:
    def __init__(
        self,
        sessions: Sequence[Session] | Iterable[Session],
        cost: CostModel,
        memory: MemoryConfig,
        engine: EngineConfig,
        policy: str,
        seed: int = 0,
        clock: Callable[[], int] | None = None,
        budget: BudgetConfig | None = None,
        sparse: SparseConfig | None = None,
        fit_on: Sequence[Session] | None = None,
        free_records: bool | None = None,
    ) -> None:
        """``sessions``: a list (any Sequence) of the whole trace, or a stream (any other iterable)
        of sessions in order of first arrival, each with turn 0's ``arrival_s`` (``sim.parts.
        stream``). Either way session i is the i-th of the trace. ``fit_on``: the trace a policy's
        lifetime predictor is fitted on, when it is not ``sessions`` (a cluster's replica starts
        with no session of its own). ``free_records``: let go of a session's records once it is
        finished and holds no KV in any tier, so that memory follows the live sessions rather
        than the sessions seen (default: on a stream. A list's trace is in memory anyway, and a
        cluster's router reads a replica's records of finished sessions)."""
        raise_first(combination_problems(memory, engine, budget, sparse))
        self.cost, self.cfg = cost, engine
        self.memory_cfg, self.budget_cfg, self.sparse_cfg = memory, budget, sparse
        streaming = not isinstance(sessions, Sequence)
        self.bt = memory.block_tokens
        self.page_bytes = self.bt * cost.kv_bytes_per_token
        self.per_session_unit = memory.evict_unit == "session"
        self.layers = cost.model.num_layers
        self.upp = self.layers if memory.evict_unit == "layer_block" else 1  # units per page
        self.unit_bytes = self.page_bytes // self.upp  # one page of one unit's layers
        self.frees_records = streaming if free_records is None else free_records
        # The sessions' records by index: a finished session's entry is set to None, or with
        # ``frees_records`` leaves (its KV record ``kv[i]`` leaves once its KV is gone).
        trace = [] if streaming else list(sessions)
        self.sessions: list[Session | None] | dict[int, Session | None] = (
            dict(enumerate(trace)) if self.frees_records or streaming else list(trace)
        )
        self.kv = SessionTable()
        for i, s in enumerate(trace):
            self.kv[i] = SessionKV(i, s.session_id, s.turns[0].priority)
        self.mem = self._tiered_memory(
            policy, sessions if fit_on is None else fit_on, streaming, clock
        )
        # Finished sessions whose KV is gone: let go at the next ``release``, so that whoever
        # follows the iteration (an ``on_iteration`` hook, a layout exporter) sees them go.
        self._gone: list[int] = []
        if self.frees_records:
            self.mem.on_gone = self._let_go
        self.pricer = Pricer(
            cost,
            self.page_bytes,
            engine.pipelining,
            engine.async_save,
            engine.fused_recompute,
            engine.swap_copies == "per_layer",
        )
        # How a session's history comes back at admission, by the eviction unit.
        self.recovery = LayerRecovery(self) if self.upp > 1 else PageRecovery(self)
        # The parts this run asks for (None: not asked).
        cap = budget.capacity if budget is not None else None
        self.cap = cap if cap is not None else 1 << 62  # tokens a session's KV may hold
        self.budget = TokenBudget(self, cap) if cap is not None else None
        # Which waiting turns join the batch: FCFS, or FCFS with prefills cut into chunks.
        self.admission = Admission(self)
        if engine.chunked_prefill:
            from sim.parts.chunked import ChunkedPrefill

            self.admission = ChunkedPrefill(self)
        self.offload: OffloadDecode | None = None
        if sparse is not None and sparse.enabled:
            from sim.parts.offload import OffloadDecode

            self.offload = OffloadDecode(self, sparse)
        self.prefetch: Prefetch | None = None
        if engine.prefetch != "off":
            from sim.parts.prefetch import Prefetch

            self.prefetch = Prefetch(self, engine.prefetch)
        self.share: PrefixSharing | None = None  # started by the first session that shares
        # Decode spans allocate their pages in one batch when that cannot change a decision (every
        # page step of an offloading run moves a page: those go step by step).
        bulk = not self.per_session_unit and self.offload is None
        self.grows_in_bulk = bulk and type(self.mem.policy[GPU]).grows_in_bulk
        # ... or, for an order that reads the clock, where their victims are dropped
        self.grows_by_time = bulk and type(self.mem.policy[GPU]).grows_by_time
        # GPU occupancy over time is integrated (for utilization) only under a finite GPU KV.
        self.gpu_bounded = not math.isinf(self.mem.capacity[GPU])
        self.arrivals = Arrivals()
        self.waiting: deque[TurnRun] = deque()
        self.running: dict[int, TurnRun] = {}  # admit_seq -> run, in admission order
        self.admit_seq = 0  # admissions so far (a turn's number orders preemption)
        self.step = 0
        self.page_due = StepBuckets()  # decoding runs by the step they start a page
        self.finish_due = StepBuckets()  # ... by the step they complete
        self.dec_seqs = 0  # sequences decoding in the next step
        self.dec_ctx = 0  # their total context tokens
        self.dec_grow = 0  # of them, those below their cap
        self.d2h_mark = 0  # swap-out bytes already priced
        self.live_pages = 0  # pages of sessions not yet finished
        self.peak_live_pages = 0  # the trace's peak KV demand
        self.ledger = Ledger()
        self.rejected_turns = 0
        self.preemptions = 0
        self.preempt_recompute_tokens = 0
        self.output_tokens = 0
        self.swap_in_bytes = 0
        self.completed = 0
        # Hears of each turn that ends, completed or rejected, by its session index (a cluster's
        # router counts its in-flight turns).
        self.on_turn_end: Callable[[int], None] | None = None
        # Sessions whose KV is pinned with no turn running: a cluster's prefill replica holds a
        # turn's pages until its decode replica has pulled them.
        self.held_for_transfer: set[int] = set()
        # Each decode step's duration and sequences (TBT), appended to in place; compacted as
        # turns complete, so that a long run's record stops growing (sim.samples).
        self.tbt = Samples(weighted=True)
        assert self.tbt.weights is not None
        self.step_s = cast("array[float]", self.tbt.values)
        self.step_decode = self.tbt.weights
        if memory.prefix_sharing:
            for s in trace:
                self.share_if_hashed(s)
        self.arrivals.schedule_all([s.turns[0].arrival_s or 0.0 for s in trace])
        self.stream = None
        if streaming:
            from sim.parts.stream import StreamIntake

            self.stream = StreamIntake(self, sessions, POOL_INDEX)

    def _tiered_memory(
        self,
        policy: str,
        sessions: Sequence[Session] | Iterable[Session],
        streaming: bool,
        clock: Callable[[], int] | None,
    ) -> TieredMemory:
        """The GPU and CPU tiers, each with its instance of the policy."""
        memory, cost = self.memory_cfg, self.cost
        predictor = None
        if getattr(policy_class(policy), "needs_predictor", False):
            if streaming:
                raise ValueError(
                    f"policy {policy!r} fits its lifetime predictor on the whole "
                    f"trace before the run: it needs a list of sessions, not a "
                    f"stream (read the trace whole, e.g. with traces.read_jsonl)"
                )
            assert isinstance(sessions, Sequence)
            predictor = fit_lifetime(sessions)  # fitted on the trace's training split
        view = UnitView(
            self.kv, self.unit_bytes, layers=self.upp, per_session=self.per_session_unit
        )
        # The cost model prices one GPU of a tensor-parallel group and its pages are that GPU's
        # shard, so the capacities are its 1/tp of the group's (exact at tp = 1).
        gpu_kv_bytes = MemoryConfig.capacity_bytes(memory.gpu_kv_gb / cost.tp)
        cpu_kv_bytes = MemoryConfig.capacity_bytes(memory.cpu_kv_gb / cost.tp)

        def context(tier: int) -> PolicyContext:
            return PolicyContext(
                tier=tier,
                block_tokens=self.bt,
                num_layers=cost.model.num_layers,
                view=view,
                cost=cost,
                cpu_kv_bytes=cpu_kv_bytes,
                predictor=predictor,
            )

        return TieredMemory(
            gpu_kv_bytes,
            cpu_kv_bytes,
            make_policy(policy, context(GPU)),
            make_policy(policy, context(CPU)),
            view,
            clock=clock or (lambda: 0),
        )

    # -- intake ----------------------------------------------------------------------------------
    def share_if_hashed(self, session: Session) -> None:
        """Start prefix sharing at the first session that shares a prefix (sharing on, and its
        first turn names hashed blocks)."""
        if (
            self.share is None
            and self.memory_cfg.prefix_sharing
            and session.turns[0].prefix_hashes
            and session.block_tokens
        ):
            self.share = PrefixSharing(self)

    def next_arrival_s(self) -> float | None:
        """The next arrival or ahead-of-time swap-in: the next event that can change a decision."""
        nxt = self.arrivals.next_s()
        if self.prefetch is not None and self.prefetch.due:
            t = self.prefetch.due[0][0]
            nxt = t if nxt is None else min(nxt, t)
        return nxt

    def release(self, now: float) -> None:
        """Move every turn that has arrived by ``now`` into the waiting queue."""
        if self._gone:
            self._drop_gone_records()
        for t, order, i in self.arrivals.pop_due(now):
            if self.stream is not None:
                self.stream.arrived(i)  # the next session's first arrival (popped here if due)
            kv, session = self.kv[i], self.sessions[i]
            assert session is not None
            k = kv.next_turn
            turn = session.turns[k]
            history = kv.tokens
            if (
                self.pages(self._peak_tokens(history, turn)) * self.page_bytes
                > self.mem.capacity[GPU]
            ):
                # Longer than the whole GPU KV: a server rejects it (max_model_len); so do we,
                # with the rest of its session.
                self.rejected_turns += len(session.turns) - k
                kv.done = True
                self._finished(i)
                if self.frees_records:  # (no eviction visits one with nothing cached)
                    self.mem.forget_if_gone(kv)
                if self.on_turn_end is not None:
                    self.on_turn_end(i)
                continue
            self.waiting.append(
                TurnRun(
                    kv,
                    k,
                    turn,
                    history,
                    t,
                    order,
                    self.pricer.ideal_ttft_s(turn.prompt_tokens, history),
                    true_history=history + kv.pruned,
                    cap=self.cap,
                )
            )
            if k == 0 and self.share is not None:
                self.share.place(kv, session)
            if self.prefetch is not None:
                self.prefetch.schedule(i, t)  # swap in while it waits in the queue

    def _peak_tokens(self, history: int, turn: Turn) -> int:
        """The most KV tokens the turn holds: its unpruned prefill (with the first output token),
        or its decode, which a budget caps."""
        prefill = history + turn.prompt_tokens + 1
        return max(prefill, min(self.cap, history + turn.prompt_tokens + turn.output_tokens))

    def _finished(self, i: int) -> None:
        """Session i has no turn left: let go of its records (its KV stays until evicted)."""
        if self.frees_records:
            del self.sessions[i]
        else:
            self.sessions[i] = None
        if self.share is not None:
            self.share.forget(i)
        if self.prefetch is not None:
            self.prefetch.forget(i)

    def _let_go(self, sess: SessionKV) -> None:
        """(``TieredMemory.on_gone``) A finished session's KV is gone from every tier (its uids
        from every policy's live structures; ghost lists keep uids as names, never reading them
        here): its record goes, at the next ``release``."""
        self._gone.append(sess.index)

    def _drop_gone_records(self) -> None:
        kv = self.kv
        for i in self._gone:
            del kv[i]
        self._gone.clear()

    # -- planning one iteration ------------------------------------------------------------------
    def plan(self, now: float) -> Step | None:
        """Prepare the next iteration; None when there is nothing to run."""
        if self.prefetch is not None and self.prefetch.due:
            self.prefetch.run_due(now)
        self.grow_decodes(now)
        admitted, prefill, fresh, runs = self.admission.admit(now)
        if not prefill.lens and self.dec_seqs == 0:
            return None
        off = self.offload
        if not prefill.lens:
            if off is not None:
                duration = off.decode_step_s(self.dec_seqs, self.dec_ctx, self.take_d2h())
                return Step(duration, admitted, self.dec_seqs)
            duration = self.pricer.iteration_s(
                BatchShape(),
                self.dec_seqs,
                self.dec_ctx,
                d2h_bytes=self.take_d2h(),
                dec_lens=self._decode_lens(admitted) if self.cost.wants_decode_lens else None,
            )
            return Step(duration, admitted, self.dec_seqs)
        h2d_wait = max(0.0, self.prefetch.h2d_busy_until - now) if self.prefetch else 0.0
        if off is not None:
            duration, stall = off.admission_s(prefill, self.dec_seqs, self.dec_ctx, h2d_wait)
            duration = self.pricer.with_d2h_s(duration, self.take_d2h())
        else:
            duration, stall = self.pricer.admission_s(
                prefill,
                self.dec_seqs,
                self.dec_ctx,
                self.take_d2h(),
                h2d_wait,
                self._decode_lens(admitted) if self.cost.wants_decode_lens else None,
            )
        for run in fresh:
            if run.admit_s == now:  # first admission (this iteration)
                run.copy_stall_s = stall
        return Step(duration, admitted, self.dec_seqs, prefill.lens, runs)

    @property
    def chunking(self) -> list[TurnRun]:
        """Turns in the middle of a chunked prefill, oldest first (admitted, not yet running)."""
        return self.admission.chunking

    def _decode_lens(self, admitted: list[TurnRun]) -> tuple[int, ...]:
        """Each decoding sequence's context this step, in admission order (the decoders are the
        running turns not admitted in this step)."""
        new = {run.admit_seq for run in admitted}
        step = self.step
        lens = tuple(r.tokens_at(step) for s, r in self.running.items() if s not in new)
        if len(lens) != self.dec_seqs or sum(lens) != self.dec_ctx:  # the totals are the truth
            raise AssertionError(
                f"decode lengths {len(lens)} seqs / {sum(lens)} tokens disagree with the "
                f"running totals {self.dec_seqs} / {self.dec_ctx}"
            )
        return lens

    def take_d2h(self) -> int:
        """Swap-out bytes not yet priced: the next iteration carries them (its D2H stream)."""
        d2h = self.mem.swap_out_bytes - self.d2h_mark
        self.d2h_mark = self.mem.swap_out_bytes
        return d2h

    def grow_decodes(self, now: float, preempt: bool = True) -> bool:
        """Give every decoding sequence that starts a new page this step its page, or preempt.

        With ``preempt=False`` nothing changes (and False is returned) unless every page fits.
        """
        due = self.page_due.due.get(self.step)
        if not due:
            return True
        live = [
            (run, epoch)
            for run, epoch in due
            if run.epoch == epoch and run.admit_seq in self.running
        ]
        off = self.offload
        extra = off.meta_page if off is not None else 0
        if not preempt and not self.mem.reclaimable(GPU) >= len(live) * (self.page_bytes + extra):
            return False
        del self.page_due.due[self.step]
        live.sort(key=lambda e: e[0].admit_seq)  # oldest first: the newest is preempted first
        for run, epoch in live:
            if run.epoch != epoch or run.admit_seq not in self.running:
                continue
            # An offloading sequence also holds the metadata of the page it offloads.
            need = self.page_bytes + (extra if run.cpu_pages >= 0 else 0)
            while not self.mem.make_room(need, now):
                victim = self.running[next(reversed(self.running))]
                self._preempt(victim, now)
                if victim is run:
                    break
            else:
                tokens = run.tokens_at(self.step)
                self.extend(run.sess, tokens + 1, now)
                if off is not None and run.cpu_pages >= 0:
                    off.page_filled(run, tokens // self.bt - 1, now)
                if tokens + self.bt < run.cap:
                    self.page_due.add(self.step + self.bt, run, epoch)
        return True

    def split(self, sess: SessionKV) -> tuple[int, int, int]:
        """The session's tokens by where they are: (GPU hits, to swap in, to recompute)."""
        return self.recovery.split(sess)

    def extend(self, sess: SessionKV, tokens: int, now: float) -> None:
        """Grow the session's KV to ``tokens``, placing new pages pinned on the GPU (room was made)."""
        pages = self.pages(tokens)
        self.live_pages += pages - self.pages(sess.tokens)
        self.peak_live_pages = max(self.peak_live_pages, self.live_pages)
        if self.per_session_unit:
            if pages != sess.unit_pages or not sess.tier:
                self.mem.grow_session_unit(sess, pages, now)
        elif pages * self.upp > len(sess.tier):
            self.mem.add_units(sess, pages - len(sess.tier) // self.upp, now)
        sess.tokens = tokens

    def pages(self, tokens: int) -> int:
        return -(-tokens // self.bt)

    # -- preemption ------------------------------------------------------------------------------
    def _preempt(self, run: TurnRun, now: float) -> None:
        """Recompute-style preemption (vLLM's default): drop this turn's own KV, requeue it first."""
        sess, mem = run.sess, self.mem
        del self.running[run.admit_seq]
        tokens = run.tokens_at(self.step)
        self.dec_seqs -= 1  # only decoding turns are preempted (at the start of a step)
        self.dec_ctx -= tokens
        self._stop_decoding(run)
        run.generated = run.generated_at(self.step)
        run.epoch += 1
        run.preemptions += 1
        self.preemptions += 1
        sess.tokens = tokens
        boundary_page = run.history // self.bt
        if self.share is not None and sess.tier_pages[SHARED]:  # the prefix, then its own
            self.share.release(sess.index, now)
        mem.release(sess, now)
        # units reaching past the history boundary hold this turn's own tokens: dropped
        if not self.per_session_unit:
            mem.drop_from(sess, boundary_page * self.upp, now)
        elif sess.unit_pages > boundary_page:
            mem.drop_from(sess, 0, now)
        self.waiting.appendleft(run)

    def _stop_decoding(self, run: TurnRun) -> None:
        self.stop_growing(run)
        if self.offload is not None:
            self.offload.end(run)

    def stop_growing(self, run: TurnRun) -> None:
        if run.growing:
            run.growing = False
            self.dec_grow -= 1

    # -- applying one iteration ------------------------------------------------------------------
    def finish(self, step: Step, now: float) -> None:
        """Apply the iteration that ends at ``now``."""
        # Every sequence that decoded this step appended one token (below its cap; at the cap
        # the token leaving the window replaced one).
        self.dec_ctx += self.dec_grow
        self.output_tokens += self.dec_seqs + len(step.admitted)
        if step.decode_seqs:
            self.step_s.append(step.duration_s)
            self.step_decode.append(step.decode_seqs)
        for run, epoch in self.finish_due.due.pop(self.step, ()):
            if run.epoch == epoch and run.admit_seq in self.running:
                tokens = run.tokens_at(self.step + 1)
                self.dec_seqs -= 1
                self.dec_ctx -= tokens
                self._stop_decoding(run)
                self._complete(run, tokens, run.generated_at(self.step + 1), now)
        if self.budget is not None:
            self.budget.reach(self.step)
        for run in step.admitted:
            run.first_token_s = run.first_token_s if run.first_token_s == run.first_token_s else now
            run.generated += 1
            remaining = run.turn.output_tokens - run.generated
            if self.budget is not None and run.sess.tokens > run.cap:
                self.budget.prune(run.sess, now)  # the bulk prune after prefill
            tokens = run.sess.tokens
            if remaining <= 0:
                self._complete(run, tokens, run.generated, now)
                continue
            run.base_tokens, run.base_step = tokens, self.step + 1
            self.dec_seqs += 1
            self.dec_ctx += tokens
            if self.offload is not None:
                self.offload.start(run, now)
            self.finish_due.add(self.step + remaining, run, run.epoch)
            if tokens < run.cap:
                run.growing = True
                self.dec_grow += 1
                if self.budget is not None:
                    self.budget.on_decode(run, tokens, remaining)
            first_page_step = self.step + 1 + (-tokens) % self.bt
            if (
                first_page_step <= self.step + remaining
                and run.tokens_at(first_page_step) < run.cap
            ):
                self.page_due.add(first_page_step, run, run.epoch)
        self.step += 1

    def _complete(self, run: TurnRun, tokens: int, generated: int, now: float) -> None:
        sess, session = run.sess, self.sessions[run.sess.index]
        assert session is not None
        del self.running[run.admit_seq]
        # What the turn added beyond the ``tokens`` its KV holds, a budget pruned.
        sess.pruned += run.history + run.turn.prompt_tokens + generated - tokens
        sess.tokens = tokens
        sess.next_turn = run.k + 1
        next_s = math.inf
        if sess.next_turn < len(session.turns):
            next_s = next_arrival_s(
                session.turns[run.k], session.turns[sess.next_turn], now, self.cfg.replay
            )
            self.arrivals.schedule(sess.index, next_s)
        else:
            sess.done = True
            self.live_pages -= self.pages(tokens)
        sess.last_access_s = now
        sess.next_access_s = next_s
        if self.share is not None and sess.tier_pages[SHARED]:  # the prefix, then its own
            self.share.release(sess.index, now)
        if sess.done:
            self._finished(sess.index)
        self.mem.release(sess, now)
        if sess.done and self.frees_records:  # (no eviction visits one with nothing cached)
            self.mem.forget_if_gone(sess)
        if self.prefetch is not None:
            self.prefetch.after_turn(sess, tokens, next_s, now)
        self.completed += 1
        self.tbt.compact()
        self.mem.evict_samples.compact()
        self.ledger.append(*run.ledger_row(now))
        if self.on_turn_end is not None:
            self.on_turn_end(sess.index)

    # -- runs of decode-only iterations ----------------------------------------------------------
    def decode_span(self, now: float, next_arrival_s: float | None) -> DecodeSpan:
        """The decode-only iterations that follow ``now`` up to the next event, in one go
        (``sim.spans``)."""
        return decode_span(self, now, next_arrival_s)

    def next_page_step(self, after: int) -> int:
        """The first step >= ``after`` at which a decoding sequence needs a new page."""
        step = self.page_due.next_step()
        if step < after:
            raise AssertionError(f"page allocation of step {step} was not handled by step {after}")
        return step
