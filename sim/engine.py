"""The event shell: SimPy turns the scheduler's iteration costs into simulated time.

One SimPy process runs the engine loop: one timeout per iteration (never one per token), or one per
run of decode-only iterations between two events (``Scheduler.decode_span``: each iteration still
priced and recorded); between iterations it sleeps until the next arrival. A cluster of engines
runs on one clock of its own (``sim.cluster.shell``), which steps each replica's scheduler as this
loop does.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from sim.invariants import check_invariants
from sim.scheduler import Scheduler
from sim.turns import Step


class Engine:
    def __init__(
        self,
        scheduler: Scheduler,
        debug: bool = False,
        progress=None,
        decode_spans: bool = True,
        on_iteration: Callable[[Scheduler, Step, float], None] | None = None,
    ) -> None:
        self.sched = scheduler
        # False: strictly one event per iteration (for checks). ``on_iteration(scheduler, step,
        # now)`` hears of every iteration right after it is planned, so it turns decode spans off.
        self.decode_spans = decode_spans and on_iteration is None
        self.on_iteration = on_iteration
        self.debug = debug
        self.progress = progress
        # Integral of GPU KV occupancy over time, for utilization: kept for a bounded GPU KV only
        # (utilization is undefined without one, and decode spans then skip it).
        self.gpu_byte_seconds = 0.0
        self.start_s: float | None = None
        self.end_s = 0.0

    def run(self) -> None:
        env = simpy.Environment()
        env.process(self._loop(env))
        env.run()

    def _loop(self, env: simpy.Environment):
        sched = self.sched
        reported = 0
        idle_area = 0.0  # occupancy while idle, counted once a later iteration runs
        while True:
            sched.release(env.now)
            step = sched.plan(env.now)
            if step is not None and self.on_iteration is not None:
                self.on_iteration(sched, step, env.now)
            used = sched.mem.used[0]
            if step is None:
                nxt = sched.next_arrival_s()
                if nxt is None:
                    if sched.waiting:
                        head = sched.waiting[0]
                        raise AssertionError(
                            f"deadlock at t={env.now:.3f}s: {head.sess.session_id} "
                            f"turn {head.k} waits with nothing running"
                        )
                    break
                if self.start_s is not None:
                    idle_area += used * (nxt - env.now)
                yield env.timeout(nxt - env.now)
                continue
            if self.start_s is None:
                self.start_s = env.now
            # Simulated time runs from the first iteration to the last completion: idle spans
            # after it (arrivals that are all rejected) are not part of it.
            if sched.gpu_bounded:
                self.gpu_byte_seconds += idle_area + used * step.duration_s
            idle_area = 0.0
            yield env.timeout(step.duration_s)
            sched.finish(step, env.now)
            if self.debug:
                check_invariants(sched)
            if not self.decode_spans:
                self.end_s = env.now
                continue
            span = sched.decode_span(env.now, sched.next_arrival_s())
            if span.steps:
                if sched.gpu_bounded:
                    self.gpu_byte_seconds += span.gpu_byte_seconds
                yield env.timeout(span.duration_s)
                if self.debug:
                    check_invariants(sched)
            self.end_s = env.now
            if self.progress is not None and sched.completed - reported >= 256:
                self.progress(sched.completed - reported)
                reported = sched.completed
        if self.progress is not None and sched.completed > reported:
            self.progress(sched.completed - reported)
