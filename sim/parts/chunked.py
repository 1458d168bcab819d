"""Chunked prefill (``engine.chunked_prefill``) as the engine's admission: prefills in progress
take the iteration's token budget first, in admission order; then waiting turns are admitted while
budget is left, each with as many of its prefill tokens as fit, the rest in later iterations
(``sim.chunks`` cuts the work; docs/semantics.md, "Chunked prefill")."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from sim.admission import Admission
from sim.chunks import PrefillJob, add_into, first_chunk
from sim.pricing import Prefill

if TYPE_CHECKING:
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun


class ChunkedPrefill(Admission):
    def __init__(self, core: Scheduler) -> None:
        super().__init__(core)
        # admitted turns whose prefill goes on, oldest first (not running: they decode nothing yet)
        self.jobs: deque[PrefillJob] = deque()

    @property
    def chunking(self) -> list[TurnRun]:
        return [job.run for job in self.jobs]

    def in_progress(self) -> bool:
        return bool(self.jobs)

    def admissible(self, run: TurnRun) -> bool:
        core = self.core
        if len(core.running) + len(self.jobs) >= core.cfg.max_running:
            return False
        _, _, fetch, unheld = self.need(run)
        if core.cfg.max_batch_tokens - core.dec_seqs <= 0:
            return False
        return self.room_for(run, fetch, unheld)

    def admit(self, now: float) -> tuple[list[TurnRun], Prefill, list[TurnRun], list[TurnRun]]:
        """(the turns whose prefill ends in this iteration, the iteration's prefill work, the turns
        admitted in it, the turn of each of the prefill's sequences)."""
        core, jobs = self.core, self.jobs
        pf = Prefill()
        runs: list[TurnRun] = []
        admitted: list[TurnRun] = []
        budget = core.cfg.max_batch_tokens - core.dec_seqs
        queued = list(jobs)
        jobs.clear()  # refilled in order: a partial chunk uses up the budget, so it is the last
        for job in queued:
            if budget > 0:
                budget -= self._schedule(job.run, job.rest, budget, pf, runs, admitted)
            else:
                jobs.append(job)
        fresh: list[TurnRun] = []
        waiting, running = core.waiting, core.running
        while budget > 0 and waiting and len(running) + len(jobs) < core.cfg.max_running:
            run = waiting[0]
            target, _, fetch, unheld = self.need(run)
            if not self.room_for(run, fetch, unheld):
                break  # no room now; it waits at the head of the queue
            waiting.popleft()
            work = Prefill()
            self.make_resident(run, target, fetch, now, work)
            work.seqs = 1
            del running[run.admit_seq]  # running again once its prefill ends
            fresh.append(run)
            budget -= self._schedule(run, work, budget, pf, runs, admitted)
        pf.seqs = len(pf.lens)
        return admitted, pf, fresh, runs

    def _schedule(
        self,
        run: TurnRun,
        work: Prefill,
        budget: int,
        pf: Prefill,
        runs: list[TurnRun],
        admitted: list[TurnRun],
    ) -> int:
        """Put as much of ``run``'s prefill ``work`` as ``budget`` allows into the iteration's
        ``pf`` (and ``run`` into ``runs``): all of it (the turn runs again and samples at the
        iteration's end), or a chunk (the rest waits in ``jobs``). The tokens scheduled."""
        runs.append(run)
        if work.tokens <= budget:
            add_into(pf, work)
            self.core.running[run.admit_seq] = run
            admitted.append(run)
            return work.tokens
        chunk, rest = first_chunk(work, budget)
        add_into(pf, chunk)
        self.jobs.append(PrefillJob(run, rest))
        return budget
