"""The step log of kvsim's own engine: one entry per iteration, in the format of vLLM's
(``sim.vllm_v1.loop``; docs/semantics.md, "The step log"), so that the two engines' logs read alike.

An iteration's entry is complete only once the next one is planned (``done`` lists the turns that
the iteration finished), so each entry is emitted one iteration late, and the last by ``close``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sim.scheduler import Scheduler
from sim.turns import Step, TurnRun


def _rid(run: TurnRun) -> str:
    return f"{run.sess.session_id}/{run.k}"


class KvsimStepLog:
    """``on_iteration`` hook for ``sim.simulate`` that emits step-log entries.

    A decoding turn's entry is ``[id, 1, context]`` (the tokens its KV holds at the step's start);
    an admitted turn's is ``[id, new tokens, cached tokens]`` as its prefill is priced (at
    ``evict_unit: layer_block`` a page recomputed in some layers only is not among the new
    tokens). Decodes come first, in admission order, then the prefills in theirs: with chunked
    prefill, the chunks of prefills in progress, then the admissions."""

    def __init__(self, emit: Callable[[dict], None]) -> None:
        self.emit = emit
        self.pending: dict | None = None
        self.sched: Scheduler | None = None
        self.runs: dict[int, TurnRun] = {}  # the turns running after the last step, by id()
        self.chunking: set[int] = set()  # of them, those in the middle of a chunked prefill

    def __call__(self, sched: Scheduler, step: Step, now: float) -> None:
        self.sched = sched
        self._finish()
        prefilling = step.prefilling
        new = {id(r) for r in prefilling}
        sched_rows = [
            [_rid(r), 1, r.tokens_at(sched.step)]
            for r in sched.running.values()
            if id(r) not in new
        ]
        sched_rows += [[_rid(r), n, c] for r, (n, c) in zip(prefilling, step.prefill_lens)]
        # a turn is admitted (and hits) in the iteration of its first chunk
        hit = {
            _rid(r): c
            for r, (_, c) in zip(prefilling, step.prefill_lens)
            if id(r) not in self.chunking
        }
        cap, used = sched.mem.capacity[0], sched.mem.used[0]
        self.pending = {
            "step": sched.step,
            "t": float(now),
            "dur": step.duration_s,
            "sched": sched_rows,
            "hit": hit,
            "preempted": sorted(_rid(r) for r in sched.waiting if id(r) in self.runs),
            "free_blocks": None if math.isinf(cap) else int((cap - used) // sched.page_bytes),
            "running": len(sched.running) + len(sched.chunking),
            "waiting": len(sched.waiting),
            "done": [],
        }
        chunking = sched.chunking
        self.chunking = {id(r) for r in chunking}
        self.runs = {id(r): r for r in [*sched.running.values(), *chunking]}

    def _finish(self) -> None:
        """The last entry's ``done``: turns running after it that are neither running nor
        waiting now."""
        if self.pending is None:
            return
        sched = self.sched
        assert sched is not None  # set with the entry
        running = {id(r) for r in sched.running.values()}
        running.update(map(id, sched.chunking))
        waiting = {id(r) for r in sched.waiting}
        gone = [r for i, r in self.runs.items() if i not in running and i not in waiting]
        self.pending["done"] = sorted(_rid(r) for r in gone)
        self.emit(self.pending)
        self.pending = None

    def close(self) -> None:
        """After the run: the last entry, whose turns all finished."""
        self._finish()
