"""The event shell: turns the scheduler's iteration costs into simulated time.

The engine loop is a generator that yields how long to wait: one wait per iteration (never one per
token), or one per run of decode-only iterations between two events (``Scheduler.decode_span``:
each iteration still priced and recorded); between iterations it sleeps until the next arrival.
One engine is a single process with no other events, so ``Engine.run`` advances the clock itself,
``now + delay`` as a SimPy timeout would, without an event queue (SimPy cost 5 % of a run). A
cluster of engines runs on one SimPy clock of its own (``sim.cluster.shell``), which steps each
replica's scheduler as this loop does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sim.invariants import check_invariants
from sim.scheduler import Scheduler
from sim.turns import Step


class Clock:
    """The simulated time the engine loop reads (``now``), in seconds. It starts at the integer 0,
    as SimPy's does, so every time the loop computes is the float SimPy's clock would give."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now: float = 0


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
        clock = Clock()
        for delay in self._loop(clock):
            if delay < 0:  # as SimPy refuses a timeout into the past
                raise ValueError(f"Negative delay {delay}")
            clock.now = clock.now + delay

    def _loop(self, clock: Clock) -> Iterator[float]:
        sched = self.sched
        reported = 0
        idle_area = 0.0  # occupancy while idle, counted once a later iteration runs
        while True:
            sched.release(clock.now)
            step = sched.plan(clock.now)
            if step is not None and self.on_iteration is not None:
                self.on_iteration(sched, step, clock.now)
            used = sched.mem.used[0]
            if step is None:
                nxt = sched.next_arrival_s()
                if nxt is None:
                    if sched.waiting:
                        head = sched.waiting[0]
                        raise AssertionError(
                            f"deadlock at t={clock.now:.3f}s: {head.sess.session_id} "
                            f"turn {head.k} waits with nothing running"
                        )
                    break
                if self.start_s is not None:
                    idle_area += used * (nxt - clock.now)
                yield nxt - clock.now
                continue
            if self.start_s is None:
                self.start_s = clock.now
            # Simulated time runs from the first iteration to the last completion: idle spans
            # after it (arrivals that are all rejected) are not part of it.
            if sched.gpu_bounded:
                self.gpu_byte_seconds += idle_area + used * step.duration_s
            idle_area = 0.0
            yield step.duration_s
            sched.finish(step, clock.now)
            if self.debug:
                check_invariants(sched)
            if not self.decode_spans:
                self.end_s = clock.now
                continue
            span = sched.decode_span(clock.now, sched.next_arrival_s())
            if span.steps:
                if sched.gpu_bounded:
                    self.gpu_byte_seconds += span.gpu_byte_seconds
                yield span.duration_s
                if self.debug:
                    check_invariants(sched)
            self.end_s = clock.now
            if self.progress is not None and sched.completed - reported >= 256:
                self.progress(sched.completed - reported)
                reported = sched.completed
        if self.progress is not None and sched.completed > reported:
            self.progress(sched.completed - reported)
