"""Token budgets (``budget.kind`` streamingllm or smartkv): a session's KV is capped at S + W + B
tokens per layer. After its prefill a turn's KV is pruned to the cap at once; while it decodes
below the cap it grows a token a step, and from the step it reaches the cap it stays there (the
token leaving the window makes room for the new one). docs/semantics.md, section 8."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from sim.step_buckets import StepBuckets
from sim.units import SessionKV

if TYPE_CHECKING:
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun


class TokenBudget:
    def __init__(self, core: Scheduler, capacity: int) -> None:
        self.core = core
        self.capacity = capacity
        self._reach = StepBuckets()  # decoding runs by the step their KV reaches the cap

    def on_decode(self, run: TurnRun, tokens: int, remaining: int) -> None:
        """``run`` starts decoding with ``tokens`` of KV and ``remaining`` tokens to generate."""
        if tokens < run.cap and run.cap - tokens < remaining:  # it reaches the cap first
            self._reach.add(self.core.step + run.cap - tokens, run, run.epoch)

    def reach(self, through: int) -> None:
        """Decoding runs whose KV reached its cap in step ``through`` or before stop growing."""
        heap, due, core = self._reach.steps, self._reach.due, self.core
        while heap and heap[0] <= through:
            for run, epoch in due.pop(heapq.heappop(heap), ()):
                if run.epoch == epoch and run.admit_seq in core.running:
                    core.stop_growing(run)

    def next_step(self) -> int:
        """The first step at which a decoding run reaches its cap (NEVER: none)."""
        return self._reach.next_step()

    def prune(self, sess: SessionKV, now: float) -> None:
        """Keep ``capacity`` tokens of the session's KV (sink, window and the best-scored): the
        rest are gone for good, so its KV shrinks to the pages of the cap."""
        core, cap = self.core, self.capacity
        pages = core.pages(cap)
        core.live_pages -= core.pages(sess.tokens) - pages
        core.mem.truncate(sess, pages, now)
        sess.tokens = cap
