"""Runs of decode-only iterations, taken in one go (``decode_span``).

Between an arrival, a completion and a preemption nothing the scheduler decides can change: the
batch is the same sequences, the head of the queue stays blocked (memory only gets scarcer, the
token budget and max_running stay), so planning would admit nothing. Each iteration is still priced
(its context grows by one token per sequence) and recorded, and its page allocations and evictions
happen at its own start time; the span stops before an iteration that would need a preemption,
complete a turn, or start at or after the next arrival. The ledger is the one that
iteration-by-iteration replay gives (docs/semantics.md, section 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.memory import CPU, GPU
from sim.pricing import running_sum
from sim.units import uid_of

if TYPE_CHECKING:
    from sim.scheduler import Scheduler


@dataclass(slots=True)
class DecodeSpan:
    """Decode-only iterations run back to back."""

    duration_s: float = 0.0
    steps: int = 0
    gpu_byte_seconds: float = 0.0


def decode_span(core: Scheduler, now: float, next_arrival_s: float | None) -> DecodeSpan:
    """Run the decode-only iterations that follow ``now`` up to the next event, in one go."""
    span = DecodeSpan()
    if (
        core.dec_seqs == 0
        or core.admission.in_progress()
        or (core.waiting and core.admission.admissible(core.waiting[0]))
    ):
        return span  # (a prefill in progress goes on in the next iteration)
    horizon = math.inf if next_arrival_s is None else next_arrival_s
    # A completion, or a run reaching its cap (it stops growing after that step), ends the span.
    stop = core.finish_due.next_step()
    if core.budget is not None:
        stop = min(stop, core.budget.next_step() + 1)
    if core.grows_in_bulk and bulk_span(core, span, now, horizon, stop):
        if core.budget is not None:
            core.budget.reach(core.step - 1)
        return span
    t, used_gpu, pricer, seqs = now, core.mem.used, core.pricer, core.dec_seqs
    grow, off = core.dec_grow, core.offload
    while core.step < stop and t < horizon:
        if core.step in core.page_due.due and not core.grow_decodes(t, preempt=False):
            break
        d2h = core.take_d2h()
        if off is not None:  # sparse decode: its own price, step by step to a page
            n = min(stop, core.next_page_step(core.step + 1)) - core.step
            run = off.decode_run(
                seqs, core.dec_ctx, n, t, horizon, used_gpu[GPU], span.gpu_byte_seconds, grow, d2h
            )
            core.step_s.extend(run.durations)
            n, t, span.gpu_byte_seconds = run.steps, run.end_s, run.gpu_byte_seconds
        elif d2h:  # a demotion's copy: this step is priced on its own
            d = pricer.decode_with_d2h_s(seqs, core.dec_ctx, d2h)
            span.gpu_byte_seconds += used_gpu[GPU] * d
            core.step_s.append(d)
            n, t = 1, t + d
        else:
            # Up to the next page allocation only the context changes: one closed-form run.
            run = pricer.decode_run(
                seqs,
                core.dec_ctx,
                min(stop, core.next_page_step(core.step + 1)) - core.step,
                t,
                horizon,
                used_gpu[GPU],
                span.gpu_byte_seconds,
                grow,
            )
            core.step_s.extend(run.durations)
            n, t, span.gpu_byte_seconds = run.steps, run.end_s, run.gpu_byte_seconds
        span.steps += n
        core.step_decode.extend([seqs] * n)
        core.output_tokens += seqs * n
        core.dec_ctx += grow * n
        core.step += n
    span.duration_s = t - now
    if core.budget is not None:
        core.budget.reach(core.step - 1)
    return span


def bulk_span(core: Scheduler, span: DecodeSpan, now: float, horizon: float, stop: int) -> bool:
    """The whole span at once, when its page allocations can be made in one batch: the GPU
    policy's victims do not depend on pinned inserts and its demotions batch exactly
    (``grows_in_bulk``), every demotion's copy hides behind its step's compute, and the GPU can
    give every page the span needs without a preemption. Same ledger, memory and policy state as
    ``decode_span``'s loop (which runs instead, returning False here, when a condition fails)."""
    seqs, step0, mem, bt = core.dec_seqs, core.step, core.mem, core.bt
    grow = core.dec_grow
    if stop <= step0 or now >= horizon:
        return False  # no step to run: the loop does nothing
    # Price the steps up to the horizon: a first guess of 64, doubled while it falls short.
    want = min(64, stop - step0)
    while True:
        d = core.cost.decode_steps_s(seqs, core.dec_ctx + grow * np.arange(want))
        starts = running_sum(now, d)
        if starts[-1] >= horizon or want == stop - step0:
            break
        want = min(2 * want, stop - step0)
    n = max(1, int(np.searchsorted(starts[:-1], horizon, side="left")))
    end = step0 + n
    # Every page the span allocates: each live run's due steps below ``end``, one page each.
    page_due = core.page_due.due
    growing, touched, total = [], [], 0
    for key in sorted(k for k in page_due if k < end):
        touched.append(key)
        for run, epoch in page_due[key]:
            if run.epoch == epoch and run.admit_seq in core.running:
                count = (end - 1 - key) // bt + 1
                # pages while below the cap: the one at step key + i*bt holds token T0 + i*bt
                count = min(count, -(-(run.cap - run.tokens_at(key)) // bt))
                growing.append((run, key, count))
                total += count
    page, unit, upp = core.page_bytes, core.unit_bytes, core.upp
    if total * page > mem.reclaimable(GPU):
        return False  # some step would preempt: step by step
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
    due = np.sort(np.asarray(steps, dtype=np.int64)) - step0  # relative, in step order
    if demotes:
        # Each demotion's copy rides on its allocation's step: step by step unless every such
        # copy hides behind its step's compute (never, when saves are synchronous).
        if not core.cfg.async_save:
            return False
        per_step = np.bincount(due, weights=evicted, minlength=n).astype(np.int64)
        for j in np.flatnonzero(per_step).tolist():
            nbytes = int(per_step[j]) * unit
            if core.pricer.copy_s("d2h", nbytes) > d[j]:
                return False
    if evicts:
        mem.make_room(total * page, now)  # the victims of every single-page make_room
        core.d2h_mark = mem.swap_out_bytes  # their copies were priced in their own steps
    for key in touched:
        del page_due[key]
    order: list[int] = []
    uids: list[int] = []
    for run, key, count in growing:
        sess = run.sess
        if ordered:  # the policy hears of the units in the loop's order
            order.extend([run.admit_seq] * (count * upp))
            first = uid_of(sess.index, len(sess.tier))
            uids.extend(range(first, first + count * upp))
        mem.add_units(sess, count, now, insert=False)
        last_step = key + (count - 1) * bt
        sess.tokens = run.tokens_at(last_step) + 1
        if run.tokens_at(last_step + bt) < run.cap:
            core.page_due.add(last_step + bt, run, run.epoch)
    if ordered and uids:
        unit_steps = np.repeat(np.asarray(steps, dtype=np.int64), upp)
        rank = np.lexsort((np.asarray(order), unit_steps))
        gpu_policy.insert_many(np.asarray(uids)[rank].tolist(), now, True)
    core.live_pages += total
    core.peak_live_pages = max(core.peak_live_pages, core.live_pages)
    # GPU occupancy per step: each allocation adds its units less those it evicted.
    grown = np.cumsum(np.bincount(due, weights=upp - evicted, minlength=n)[:n]).astype(np.int64)
    used = (mem.used[GPU] - unit * int(grown[-1])) + unit * grown
    gbs = running_sum(span.gpu_byte_seconds, used * d[:n])
    span.gpu_byte_seconds = float(gbs[-1])
    core.step_s.extend(d[:n].tolist())
    span.steps = n
    core.step_decode.extend([seqs] * n)
    core.output_tokens += seqs * n
    core.dec_ctx += grow * n
    core.step = end
    span.duration_s = float(starts[n]) - now
    return True
