"""Ahead-of-time swap-ins (``engine.prefetch``): a waiting turn's CPU units are copied to the GPU
while it waits in the queue (``queue``), or a session's before its next turn arrives when the
arrival is known (``think``: closed-loop think time, or the trace's timestamp). The copies queue
on the host-to-device stream; admission finds the units on the GPU, in flight layer by layer
until the copy ends (docs/semantics.md, section 4)."""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from sim.memory import CPU, GPU
from sim.pricing import Prefill
from sim.units import SessionKV, layer_split

if TYPE_CHECKING:
    from sim.scheduler import Scheduler


class Prefetch:
    def __init__(self, core: Scheduler, mode: str) -> None:
        self.core = core
        self.think = mode == "think"
        self.due: list[tuple[float, int, int]] = []  # heap of (time, order, session)
        self._order = 0
        # session -> (its prefetched units, start and end of their copy)
        self._got: dict[int, tuple[np.ndarray, float, float]] = {}
        self.h2d_busy_until = 0.0  # when the host-to-device stream is free of prefetches
        self.bytes = 0

    def schedule(self, index: int, at: float) -> None:
        self._order += 1
        heapq.heappush(self.due, (at, self._order, index))

    def forget(self, index: int) -> None:
        """Session ``index`` has no turn left: what it prefetched is never taken."""
        self._got.pop(index, None)

    def next_s(self) -> float | None:
        return self.due[0][0] if self.due else None

    def after_turn(self, sess: SessionKV, tokens: int, next_s: float, now: float) -> None:
        """With ``think``: the session's next turn arrives at ``next_s``; start early enough to
        copy the whole session before it does."""
        if self.think and next_s < math.inf:
            core = self.core
            lead = core.pricer.copy_s("h2d", core.pages(tokens) * core.page_bytes)
            self.schedule(sess.index, max(now, next_s - lead))

    def run_due(self, now: float) -> None:
        """Swap in the CPU units of every session whose prefetch is due, all of a session's or
        none (when the GPU cannot make room without its own units); victims follow the policy.
        The copies queue on the host-to-device stream from ``now``."""
        due, core = self.due, self.core
        mem = core.mem
        while due and due[0][0] <= now:
            _, _, i = heapq.heappop(due)
            sess = core.kv.get(i)  # (None: finished, its record gone)
            if sess is None:
                continue
            need = sess.tier_pages[CPU] * core.unit_bytes
            if (
                sess.pinned
                or sess.done
                or not need
                or mem.reclaimable(GPU) - sess.tier_pages[GPU] * core.unit_bytes < need
            ):
                continue
            mem.acquire(sess, now)
            if not mem.make_room(need, now):
                raise AssertionError(
                    f"prefetch of {sess.session_id}: room was checked but "
                    f"{need} bytes could not be reclaimed"
                )
            idx = mem.swap_in_cpu_units(sess, now)
            mem.release(sess, now)
            nbytes = len(idx) * mem.unit_size(sess)
            copy = core.pricer.copy_s("h2d", nbytes)
            start = max(now, self.h2d_busy_until)
            self.h2d_busy_until = start + copy
            prev = self._got.get(i)
            if prev is not None:
                idx = np.union1d(prev[0], idx)
            self._got[i] = (idx, start, self.h2d_busy_until)
            self.bytes += nbytes
            core.swap_in_bytes += nbytes

    def take(self, sess: SessionKV, now: float, pf: Prefill) -> tuple[np.ndarray | None, int]:
        """At the session's admission: (its prefetched units still on the GPU, their bytes). A
        copy still in flight delays the prefill's layers (``pf.ready_s``): layer l is in at
        start + (l+1)/L of the copy."""
        got = self._got.pop(sess.index, None)
        if got is None:
            return None, 0
        idx, start_s, done_s = got
        ahead = idx[np.frombuffer(sess.tier, dtype=np.uint8)[idx] == 0]  # still there
        prefetched = len(ahead) * self.core.mem.unit_size(sess) if len(ahead) else 0
        if len(ahead) and done_s > now:
            L = self.core.layers
            ready = start_s + (done_s - start_s) * np.arange(1, L + 1) / L - now
            ready = np.maximum(ready, 0.0)
            pf.ready_s = ready if pf.ready_s is None else np.maximum(pf.ready_s, ready)
        return ahead, prefetched

    def split_before(self, sess: SessionKV, ahead: np.ndarray) -> tuple[int, int, int]:
        """The session's tokens by where they were before its prefetch: (GPU hits, to swap in, to
        recompute), its prefetched units ``ahead`` counted on the CPU, where they came from."""
        core = self.core
        if core.per_session_unit:
            return 0, sess.tokens, 0
        codes = np.frombuffer(sess.tier, dtype=np.uint8).copy()
        codes[ahead] = 1
        return layer_split(codes.reshape(-1, core.upp)[:, ::-1], sess.tokens, core.bt)
