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
from array import array
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from sim.memory import CPU, GPU
from sim.pricing import running_sum
from sim.units import UNIT_BITS

if TYPE_CHECKING:
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun


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
    if (core.grows_in_bulk or core.grows_by_time) and bulk_span(core, span, now, horizon, stop):
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
        record_decodes(core, seqs, n)
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
    give every page the span needs without a preemption (a policy that ``plans_pinned`` is told
    first where each new page enters among the victims). A policy whose order reads the clock
    (``grows_by_time``) takes the batch where its victims are dropped, each allocation's chosen
    at its step's start. Same ledger, memory and policy state as
    ``decode_span``'s loop (which runs instead, returning False here, when a condition fails).

    When the GPU's free room holds every page of the span (an unbounded GPU KV, or room enough),
    nothing is evicted (``fits_free_room``). Otherwise each allocation evicts what the free room
    lacks; the occupancy integral over a span of more than ``SCALAR_STEPS`` steps is taken in
    numpy, over a shorter one in plain Python (numpy's calls cost more than its few steps)."""
    step0, mem = core.step, core.mem
    if stop <= step0 or now >= horizon:
        return False  # no step to run: the loop does nothing
    durations, end_s = price_steps(core, now, horizon, stop - step0)
    n = len(durations)
    growing, touched, total = pages_due(core, step0 + n)
    if total * core.page_bytes > mem.reclaimable(GPU):
        return False  # some step would preempt: step by step
    uids = None  # the new units in the loop's order, where the policy was told them first
    if fits_free_room(core, total):
        grow_pages(core, growing, touched, None, total, now)
        if core.gpu_bounded:  # (an unbounded GPU KV has no utilization to integrate for)
            due = sorted(allocation_steps(core, growing))
            span.gpu_byte_seconds = span_byte_seconds(
                core, span.gpu_byte_seconds, due, [0] * total, as_list(durations)
            )
    else:
        steps = allocation_steps(core, growing)
        due = sorted(steps)  # absolute steps, in step order
        evicted = evicted_units(core, total)
        if core.grows_in_bulk:
            if not demotions_hide(core, due, evicted, durations):
                return False
            gpu_policy = mem.policy[GPU]
            if gpu_policy.plans_pinned:  # allocation k's page enters after its victims
                uids = pinned_in_order(core, growing, steps)
                upp = core.upp
                before = list(accumulate(evicted))
                if upp > 1:
                    before = [c for c in before for _ in range(upp)]
                gpu_policy.plan_pinned(uids, before)
            mem.make_room(total * core.page_bytes, now)  # every single-page make_room's victims
            core.d2h_mark = mem.swap_out_bytes  # their copies were priced in their own steps
        else:  # the order reads the clock: each allocation's victims at its step's start
            if not mem.drops_victims():
                return False  # a demotion's place in the CPU tier has its own time: step by step
            starts = step_starts(now, durations)
            unit = core.unit_bytes
            mem.drop_at(
                [(starts[j - step0], e * unit) for j, e in zip(due, evicted, strict=True) if e]
            )
        grow_pages(core, growing, touched, steps, total, now, uids)
        if n <= SCALAR_STEPS:
            span.gpu_byte_seconds = span_byte_seconds(
                core, span.gpu_byte_seconds, due, evicted, as_list(durations)
            )
        else:
            span.gpu_byte_seconds = evicting_byte_seconds(
                core,
                span.gpu_byte_seconds,
                np.asarray(due, dtype=np.int64) - step0,
                np.asarray(evicted, dtype=np.int64),
                np.asarray(durations),
            )
    if isinstance(durations, list):
        core.step_s.fromlist(durations)
    else:  # (a numpy span's doubles, copied as they are)
        core.step_s.frombytes(durations.astype(np.float64, copy=False).tobytes())
    span.steps = n
    seqs = core.dec_seqs
    record_decodes(core, seqs, n)
    core.output_tokens += seqs * n
    core.dec_ctx += core.dec_grow * n
    core.step = step0 + n
    span.duration_s = end_s - now
    return True


def record_decodes(core: Scheduler, seqs: int, n: int) -> None:
    """The TBT record's weights of ``n`` decode steps of ``seqs`` sequences each (an array
    repeated: no list of n numbers built and converted)."""
    core.step_decode.extend(array("q", (seqs,)) * n)


def allocation_steps(core: Scheduler, growing: list[tuple[TurnRun, int, int]]) -> list[int]:
    """The step of every allocation of ``pages_due``'s runs, in the loop's order of runs."""
    bt = core.bt
    return [k for _, key, count in growing for k in range(key, key + count * bt, bt)]


def as_list(durations: list[float] | np.ndarray) -> list[float]:
    """``price_steps``' durations as a list (a long span's come as an array)."""
    return durations if isinstance(durations, list) else durations.tolist()


def step_starts(now: float, durations: list[float] | np.ndarray) -> list[float]:
    """Each step's start: the sums ``running_sum`` takes, in order (numpy's for a long span)."""
    if len(durations) > SCALAR_STEPS:
        return running_sum(now, np.asarray(durations)).tolist()
    return list(accumulate(durations, initial=now))


# Spans of at most this many steps are priced, and their evictions' occupancy summed, one step at
# a time: numpy's per-call overhead costs more than a Python loop below about this many (most
# spans of a lightly loaded engine, and of a full GPU, are shorter).
SCALAR_STEPS = 48


def price_steps(
    core: Scheduler, now: float, horizon: float, most: int
) -> tuple[list[float] | np.ndarray, float]:
    """The durations of the span's steps and the end of the last: the first step always runs,
    each later one (up to ``most``) if it starts before ``horizon``. Bit for bit what pricing the
    whole run with ``decode_steps_s`` and cutting it gives: the scalar and vector prices are the
    same operations, and the start times are sums taken in order either way. A list, or for a
    span of more than ``SCALAR_STEPS`` steps priced in numpy an array (no list to build and
    convert back: the TBT record takes its bytes)."""
    seqs, ctx, grow = core.dec_seqs, core.dec_ctx, core.dec_grow
    price = core.pricer.decode_pricer(seqs)
    first = price(ctx)
    # A step costs no less than the one before it (its context is no shorter): at the first
    # step's price the horizon bounds the span's length.
    reach = (horizon - now) / first if first > 0 else math.inf
    guess = most if reach >= most else max(1, math.ceil(reach))
    if guess > SCALAR_STEPS:
        return price_steps_numpy(core, now, horizon, most, guess)
    durations = [first]
    t = now + first
    while t < horizon and len(durations) < most:
        ctx += grow
        d = price(ctx)
        durations.append(d)
        t += d
    return durations, t


def price_steps_numpy(
    core: Scheduler, now: float, horizon: float, most: int, guess: int
) -> tuple[list[float] | np.ndarray, float]:
    """``price_steps`` in numpy for a long span: ``guess`` steps first, doubled while they end
    before the horizon."""
    seqs, ctx, grow = core.dec_seqs, core.dec_ctx, core.dec_grow
    want = min(guess, most)
    while True:
        if grow:  # each step's context: one arange, the same integers as ctx + grow * i
            contexts = np.arange(ctx, ctx + grow * want, grow)
        else:
            contexts = np.full(want, ctx)
        d = core.cost.decode_steps_s(seqs, contexts)
        starts = running_sum(now, d)
        if starts[-1] >= horizon or want == most:
            break
        want = min(2 * want, most)
    n = max(1, int(starts[:-1].searchsorted(horizon, side="left")))
    return (d[:n] if n > SCALAR_STEPS else d[:n].tolist()), float(starts[n])


def pages_due(core: Scheduler, end: int) -> tuple[list[tuple[TurnRun, int, int]], list[int], int]:
    """Every page the span allocates before step ``end``: each live run's due steps, one page
    each, as (run, first due step, pages); the page_due keys they were filed under; their total."""
    page_due, bt = core.page_due.due, core.bt
    running, capped = core.running, core.budget is not None  # (no cap without a budget)
    growing: list[tuple[TurnRun, int, int]] = []
    touched = [k for k in page_due if k < end]
    touched.sort()
    total = 0
    for key in touched:
        most = (end - 1 - key) // bt + 1
        for run, epoch in page_due[key]:
            if run.epoch == epoch and run.admit_seq in running:
                count = most
                if capped:  # pages while below the cap: step key + i*bt's holds token T0 + i*bt
                    count = min(most, -(-(run.cap - run.tokens_at(key)) // bt))
                growing.append((run, key, count))
                total += count
    return growing, touched, total


def fits_free_room(core: Scheduler, pages: int) -> bool:
    """Does the GPU's free room take ``pages`` new pages, so that no allocation evicts?"""
    free = core.mem.free(GPU)
    return math.isinf(free) or pages * core.upp <= int(free // core.unit_bytes)


def evicted_units(core: Scheduler, total: int) -> list[int]:
    """Units each of the span's ``total`` allocations evicts, in step order. Allocation k
    (1-based) of ``upp`` units evicts what the free room lacks: max(0, k*upp - free) -
    max(0, (k-1)*upp - free) units (victims are whole units): none while the free room holds
    whole allocations, then what it lacks of one, then all of each."""
    upp = core.upp
    whole, rest = divmod(int(core.mem.free(GPU) // core.unit_bytes), upp)
    if whole >= total:
        return [0] * total
    return [0] * whole + [upp - rest] + [upp] * (total - whole - 1)


def demotions_hide(
    core: Scheduler, due: list[int], evicted: list[int], durations: list[float] | np.ndarray
) -> bool:
    """Does every demotion's copy hide behind its step's compute (each rides on its allocation's
    step)? Trivially so without a CPU tier; never when saves are synchronous. ``due``: each
    allocation's step, in order."""
    unit = core.unit_bytes
    if core.mem.capacity[CPU] < unit:
        return True  # victims are dropped: nothing is copied
    if not core.cfg.async_save:
        return False
    per_step: dict[int, int] = {}  # units a step demotes
    for j, e in zip(due, evicted, strict=True):
        if e:
            per_step[j] = per_step.get(j, 0) + e
    step0, copy_s = core.step, core.pricer.copy_s
    return all(copy_s("d2h", units * unit) <= durations[j - step0] for j, units in per_step.items())


def pinned_in_order(
    core: Scheduler, growing: list[tuple[TurnRun, int, int]], steps: list[int]
) -> list[int]:
    """The span's new units (not added yet) in the step-by-step loop's order: by step, then by
    admission within a step, a page's units in order. ``steps``: ``allocation_steps``.

    Where every run's first page is due within ``bt`` steps of every other's (always, in the
    engine: a run's next page is due within bt steps), the runs' i-th pages all come before any
    (i+1)-th: the order is the runs' order by (first due step, admission), round after round, a
    Python sort of the runs (a span's pages are few: a median of 6 in the bounded bench)."""
    if not steps:
        return []
    upp, bt = core.upp, core.bt
    runs: list[tuple[int, int, int, int, int]] = []  # (first due step, admission, place in
    # the list, first new uid, pages)
    added: dict[int, int] = {}  # units an earlier run of the list gives the same session
    one_each = upp == 1
    for run, key, count in growing:
        sess = run.sess
        index = sess.index
        before = added.get(index, 0)
        runs.append(
            (key, run.admit_seq, len(runs), (index << UNIT_BITS) | (len(sess.tier) + before), count)
        )
        added[index] = before + count * upp
        if count != 1:
            one_each = False
    runs.sort()
    if runs[-1][0] - runs[0][0] >= bt:
        runs.sort(key=itemgetter(2))  # (back in the list's order)
        return _in_step_order(growing, [r[3] for r in runs], steps, upp)
    if one_each:
        return [r[3] for r in runs]
    out: list[int] = []
    live, i = [r for r in runs if r[4] > 0], 0  # the runs with an i-th page
    while live:
        offset = i * upp
        if upp == 1:
            out += [r[3] + offset for r in live]
        else:
            for r in live:
                first = r[3] + offset
                out += range(first, first + upp)
        i += 1
        live = [r for r in live if r[4] > i]
    return out


def _in_step_order(
    growing: list[tuple[TurnRun, int, int]], firsts: list[int], steps: list[int], upp: int
) -> list[int]:
    """``pinned_in_order`` of any runs (``firsts``: each one's first new uid), every page sorted
    by (step, admission) in numpy."""
    counts = np.fromiter((count for _, _, count in growing), np.int64, len(growing))
    run_start = np.repeat(np.cumsum(counts) - counts, counts)
    page_first = np.repeat(np.asarray(firsts, dtype=np.int64), counts) + upp * (
        np.arange(len(steps), dtype=np.int64) - run_start
    )
    admitted = np.repeat(np.fromiter((run.admit_seq for run, _, _ in growing), np.int64), counts)
    firsts_in_order = page_first[np.lexsort((admitted, np.asarray(steps, dtype=np.int64)))]
    if upp == 1:
        return firsts_in_order.tolist()
    return (firsts_in_order[:, None] + np.arange(upp, dtype=np.int64)).ravel().tolist()


def grow_pages(
    core: Scheduler,
    growing: list[tuple[TurnRun, int, int]],
    touched: list[int],
    steps: list[int] | None,
    total: int,
    now: float,
    uids: list[int] | None = None,
) -> None:
    """Give each growing run its pages (room was made) and file its next page's step; the GPU
    policy hears of the new units in the step-by-step loop's order when it tracks pinned ones
    (``uids``: that order, taken before the pages were added; ``steps``: ``allocation_steps``,
    None where the caller has not listed them)."""
    mem, bt, page_due = core.mem, core.bt, core.page_due
    gpu_policy = mem.policy[GPU]
    if uids is None and gpu_policy.hears_pinned():
        if steps is None:
            steps = allocation_steps(core, growing)
        uids = pinned_in_order(core, growing, steps)
    for key in touched:
        del page_due.due[key]
    mem.add_pages((run.sess, count) for run, _, count in growing)
    capped = core.budget is not None  # (no cap without a budget)
    for run, key, count in growing:
        last_step = key + (count - 1) * bt
        run.sess.tokens = run.tokens_at(last_step) + 1
        if not capped or run.tokens_at(last_step + bt) < run.cap:
            page_due.add(last_step + bt, run, run.epoch)
    if uids:
        gpu_policy.insert_many(uids, now, True)
    core.live_pages += total
    core.peak_live_pages = max(core.peak_live_pages, core.live_pages)


def span_byte_seconds(
    core: Scheduler, gbs: float, due: list[int], evicted: list[int], durations: list[float]
) -> float:
    """``gbs`` plus the GPU occupancy integral over the span (its pages are in): step j holds
    what the GPU held before the span and each allocation at or before it, less what each
    evicted (``due``: each allocation's step, in order). The sums ``evicting_byte_seconds``
    takes, in the same order, on Python numbers: the occupancy changes only at an allocation,
    so the steps between two are summed in a plain loop."""
    unit, upp, step0 = core.unit_bytes, core.upp, core.step
    held = core.mem.used[GPU] - unit * (upp * len(due) - sum(evicted))  # before the span's pages
    done = 0  # steps summed
    for j, e in zip(due, evicted, strict=True):
        j -= step0
        if j > done:
            for d in durations[done:j]:
                gbs += held * d
            done = j
        held += unit * (upp - e)
    for d in durations[done:]:
        gbs += held * d
    return gbs


def evicting_byte_seconds(
    core: Scheduler, gbs: float, due: np.ndarray, evicted: np.ndarray, d: np.ndarray
) -> float:
    """``gbs`` plus the GPU occupancy integral over the span (its pages are in): each allocation
    adds its units less those it evicted."""
    unit, upp, n, used = core.unit_bytes, core.upp, len(d), core.mem.used[GPU]
    grown = np.cumsum(np.bincount(due, weights=upp - evicted, minlength=n)[:n]).astype(np.int64)
    return float(running_sum(gbs, ((used - unit * int(grown[-1])) + unit * grown) * d)[-1])
