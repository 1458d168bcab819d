"""Admission: which waiting turns join the batch, and making each wholly GPU-resident.

``Admission`` is vLLM's default first-come, first-served policy: turns are taken from the head of
the waiting queue while the batch has a sequence slot, the iteration's token budget holds the
turn's prefill (a turn longer than the budget starts alone) and the GPU can make room for its
history and new pages without evicting its own units; the first turn that does not fit blocks
the queue. ``sim.parts.chunked.ChunkedPrefill`` replaces it when prefills are cut into chunks.

A turn admitted is made resident (``make_resident``): its units are pinned, room is made (the
policy's victims), its CPU units are swapped in and its dropped ones recomputed with its prompt
(``sim.recovery``), and its new pages are placed. What it found where is recorded on the turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.memory import CPU, DROPPED, GPU, SHARED
from sim.pricing import Prefill

if TYPE_CHECKING:
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun


class Admission:
    def __init__(self, core: Scheduler) -> None:
        self.core = core

    @property
    def chunking(self) -> list[TurnRun]:
        """Turns in the middle of a prefill (none: a prefill here ends in its iteration)."""
        return []

    def in_progress(self) -> bool:
        """Is a prefill going on into the next iteration?"""
        return False

    def admit(
        self, now: float
    ) -> tuple[list[TurnRun], Prefill, list[TurnRun], list[TurnRun] | None]:
        """Admit waiting turns FCFS: (the turns whose prefill ends in this iteration, the
        iteration's prefill work, the turns admitted in it, the turn of each prefill's sequence
        where it differs from the first)."""
        core = self.core
        pf = core.recovery.prefill()
        admitted: list[TurnRun] = []
        budget = core.cfg.max_batch_tokens - core.dec_seqs
        waiting = core.waiting
        while waiting and len(core.running) < core.cfg.max_running:
            run = waiting[0]
            target, new_tokens, fetch, unheld = self.need(run)
            if new_tokens > budget and (admitted or core.dec_seqs):
                break  # head-of-line blocking, as vLLM's FCFS scheduler
            if not self.room_for(run, fetch, unheld):
                break  # no room now; it waits at the head of the queue
            waiting.popleft()
            self.make_resident(run, target, fetch, now, pf)
            budget -= new_tokens
            admitted.append(run)
        pf.seqs = len(admitted)
        return admitted, pf, admitted, None

    def admissible(self, run: TurnRun) -> bool:
        """Would ``admit`` take this head-of-queue turn now (given room and limits)?"""
        core = self.core
        if len(core.running) >= core.cfg.max_running:
            return False
        _, new_tokens, fetch, unheld = self.need(run)
        if new_tokens > core.cfg.max_batch_tokens - core.dec_seqs and core.dec_seqs:
            return False
        return self.room_for(run, fetch, unheld)

    def need(self, run: TurnRun) -> tuple[int, int, int, int]:
        """(context tokens after the prefill, prefill tokens, GPU bytes to fetch, GPU pages of its
        shared prefix that no turn holds) to admit ``run``.

        O(1) from the session's per-tier page counts (and its prefix's, counted once here). A fully
        cached prompt still computes its last token for the logits (as vLLM does).
        """
        core = self.core
        sess = run.sess
        target = run.history + run.turn.prompt_tokens + run.generated + 1
        units = sess.tier_pages
        dropped = core.recovery.dropped_tokens(sess) if units[DROPPED] else 0
        fetch = (
            units[CPU] + units[DROPPED] + core.pages(target) * core.upp - sum(units)
        ) * core.unit_bytes
        unheld = 0
        if core.share is not None and units[SHARED]:  # the prefix's pages not on the GPU too
            _, on_cpu, gone, unheld = core.share.counts(sess.index)
            dropped += (gone - core.recovery.shared_from_outside(sess)) * core.bt
            fetch += (on_cpu + gone) * core.page_bytes
        new_tokens = max(1, dropped + (target - 1 - sess.tokens))
        return target, new_tokens, fetch, unheld

    def room_for(self, run: TurnRun, fetch: int, unheld: int) -> bool:
        """Can the GPU make ``fetch`` bytes of room without the session's own (soon pinned) units,
        nor the ``unheld`` GPU pages of its prefix that no other turn holds?"""
        core = self.core
        held = run.sess.tier_pages[GPU] * core.unit_bytes + unheld * core.page_bytes
        return core.mem.reclaimable(GPU) - held >= fetch

    def make_resident(self, run: TurnRun, target: int, fetch: int, now: float, pf: Prefill) -> None:
        """Pin the session's units, reclaim room, swap in, recompute, and add the new pages; the
        work goes into ``pf``."""
        core = self.core
        sess, mem = run.sess, core.mem
        old_tokens = sess.tokens
        ahead, prefetched = core.prefetch.take(sess, now, pf) if core.prefetch else (None, 0)
        split, layer_units, found = self._history_where(run, ahead)
        for policy in mem.policy:
            policy.on_admit(sess, split, now)
        mem.acquire(sess, now)
        share = core.share if found is not None else None
        if share is not None:
            share.hold(sess.index, now)  # before room is made: no eviction takes it
        if not mem.make_room(fetch, now):
            raise AssertionError(
                f"admission of {sess.session_id} turn {run.k}: room was checked "
                f"but {fetch} bytes could not be reclaimed"
            )
        new = max(1, target - 1 - old_tokens)
        swapped, prompt_redo = core.recovery.bring_in(
            run, share, split[DROPPED], new, old_tokens, now, pf
        )
        pf.h2d_bytes += swapped
        sess.last_access_s = now
        core.extend(sess, target, now)
        if not run.admitted_once:
            # First admission: the session holds exactly the history, H = g + c + d.
            run.gpu_hit, run.cpu_hit, run.recomputed = split
            if found is not None and run.k == 0:
                run.shared_hit, run.shared_cpu = found[GPU] * core.bt, found[CPU] * core.bt
            run.layer_units = layer_units
            run.prefetched_bytes = prefetched
            run.swap_in_bytes += prefetched
            run.admit_s = now
            run.admitted_once = True
        else:
            redo = split[DROPPED] + (target - 1 - old_tokens) + prompt_redo
            run.preempt_recompute += redo
            core.preempt_recompute_tokens += redo
        run.swap_in_bytes += swapped
        core.swap_in_bytes += swapped
        core.admit_seq += 1
        run.admit_seq = core.admit_seq
        core.running[run.admit_seq] = run

    def _history_where(
        self, run: TurnRun, ahead: np.ndarray | None
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, ...] | None]:
        """Where the history is at admission: its tokens (GPU hits, to swap in, to recompute),
        its (page, layer) pairs per tier, and its shared prefix's pages per tier (None: no
        prefix). Prefetched units (``ahead``) count on the CPU, where they came from; a shared
        prefix counts as history from the second turn on."""
        core = self.core
        sess, bt = run.sess, core.bt
        if ahead is not None and len(ahead):
            assert core.prefetch is not None
            split = core.prefetch.split_before(sess, ahead)
            g, c, d = split  # (the dropped pages a source outside sends are not recomputed)
            split = g, c, d - core.recovery.outside_tokens(sess)
        else:
            split = core.split(sess)
        tiers = sess.tier_pages[:3]
        found = None
        if core.share is not None and sess.tier_pages[SHARED]:
            found = core.share.counts(sess.index)[:3]  # the prefix, by its pages' tiers
            if run.k > 0:  # it is history: g, c, d as the own pages (d: what is computed)
                g, c, d = (a + n * bt for a, n in zip(split, found, strict=True))
                split = g, c, d - core.recovery.shared_from_outside(sess) * bt
                tiers = [a + n for a, n in zip(tiers, found, strict=True)]
        if ahead is not None and len(ahead):  # its pages count where they came from
            moved = len(ahead) * (sess.unit_pages if core.per_session_unit else 1)
            tiers[GPU] -= moved
            tiers[CPU] += moved
        per_unit = core.layers // core.upp
        return (
            split,
            (tiers[GPU] * per_unit, tiers[CPU] * per_unit, tiers[DROPPED] * per_unit),
            found,
        )
