"""One replica of a cluster: a full kvsim engine (``Scheduler``) whose turns come from the router,
stepped by the cluster's clock (``sim.cluster.shell``).

The replica runs the single engine's loop (``sim.engine``) as a state machine: an iteration is
planned (``loop_top``), runs, and is applied at its end (``finish_step``); after it, a decode span
may run to the *horizon* the cluster gives it (the next moment a turn could arrive anywhere), and
between iterations an idle replica waits for the router.

A session's KV on a replica is valid as a prefix of the conversation: a turn routed here finds
what this replica computed of the session, in whatever tier it is now; what later turns added on
other replicas was never computed here (``catch_up``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from costmodels import CostModel
from sim.arrivals import Arrivals
from sim.cluster.disagg import Pulls
from sim.config import EngineConfig, MemoryConfig
from sim.invariants import check_invariants
from sim.memory import CPU, DROPPED, GPU
from sim.scheduler import Scheduler
from sim.turns import Step
from sim.units import SessionKV
from traces.records import Session

_DROPPED_BYTE = bytes([DROPPED])

# What a router's ``cached_tokens`` reads of a session on a replica (``Replica.residency``).
Residency = tuple[int, int, int, int, int]


def cached_of(res: Residency | None, history: int) -> tuple[int, int]:
    """(GPU, CPU) tokens of a ``history`` a replica could reuse, from its ``residency``: all its
    tokens when the history is what it holds, less its partial last page when the history is
    longer (``Replica.catch_up`` drops that page)."""
    if res is None:
        return 0, 0
    tokens, g, c, cut_g, cut_c = res
    return (g, c) if tokens == history else (g - cut_g, c - cut_c)


class RoutedArrivals(Arrivals):
    """A replica's arrivals: the turns the router delivered (``deliver``); a session's next turn,
    which its completion here schedules, goes to the cluster's front end instead."""

    def __init__(self, to_front: Callable[[int, float], None]) -> None:
        super().__init__()
        self.to_front = to_front

    def schedule(self, session_index: int, t: float, order: int | None = None) -> None:
        self.to_front(session_index, t)

    def deliver(self, session_index: int, t: float, order: int) -> None:
        super().schedule(session_index, t, order)


class Replica:
    def __init__(
        self,
        index: int,
        sessions: Sequence[Session],
        cost: CostModel,
        memory: MemoryConfig,
        engine: EngineConfig,
        policy: str,
        seed: int,
        to_front: Callable[[int, int, float], None],
        turn_ended: Callable[[int, int], None],
        decode_spans: bool = True,
        debug: bool = False,
    ) -> None:
        self.index = index
        sched = Scheduler(
            [], cost, memory, engine, policy, seed, clock=time.perf_counter_ns, fit_on=sessions
        )
        sched.sessions = [None] * len(sessions)  # a session's record, from its first turn here
        sched.arrivals = RoutedArrivals(lambda i, t: to_front(index, i, t))
        sched.on_turn_end = lambda i: turn_ended(index, i)
        for s in sessions:  # sharing starts as the single engine's does: before any arrival
            sched.share_if_hashed(s)
            if sched.share is not None:
                break
        self.sched = sched
        self.trace = sessions
        self.decode_spans = decode_spans
        # it writes to a shared store what it drops (``sim.cluster.store.DropWriting``): every
        # event of it may change the store, and its decode spans allow for that
        self.writes_on_drop = False
        # None, or what a decode span needs first: while the cluster keeps a step-by-step record of
        # a session held here for a router that sees the past, the span allocates its pages one
        # step at a time, each noted (``sim.cluster.kvevents``)
        self.before_span: Callable[[], None] | None = None
        self.debug = debug
        self.step: Step | None = None  # the iteration in flight
        self.after_step = False  # its last event applied an iteration (a span may follow)
        self.in_span = False  # a decode span is in flight
        self.idle = True  # nothing planned: waits for the router (or its own next arrival)
        self.next_s = math.inf  # when its next event is due (inf: idle until a delivery)
        # The single engine's accounting (``sim.engine.Engine``).
        self.gpu_byte_seconds = 0.0
        self.start_s: float | None = None
        self.end_s = 0.0
        self.idle_area = 0.0
        self.idle_since = 0.0
        self.idle_used = 0

    # -- turns from the router -------------------------------------------------------------------
    def deliver(self, i: int, k: int, history: int, t: float, order: int, now: float) -> int:
        """Turn k of session i, with ``history`` tokens of context, arrived at ``t``. Returns
        the tokens of that history this replica never computed."""
        sched = self.sched
        kv = sched.kv.get(i)
        if kv is None:
            s = self.trace[i]
            kv = sched.kv[i] = SessionKV(i, s.session_id, s.turns[0].priority)
            sched.sessions[i] = s
            if k > 0 and sched.share is not None:  # its prefix, placed as at a first turn
                sched.share.place(kv, s)
        missing = history - kv.tokens
        self.catch_up(kv, history, now)
        self.flush_drops()
        kv.next_turn = k
        sched.arrivals.deliver(i, t, order)  # type: ignore[attr-defined]
        if self.idle:
            self.wake(now)
        return missing

    def hold_for_transfer(self, i: int) -> None:
        """Session i's prefill part completed here and its decode replica will pull the pages:
        they stay pinned until then (vLLM's connector frees a request's blocks once sent)."""
        self.sched.mem.pin(self.sched.kv[i])
        self.sched.held_for_transfer.add(i)

    def transfer_done(self, i: int, now: float) -> None:
        """The decode replica has pulled session i's pages (or rejected its decode part): they
        are candidates again, freed at ``now``."""
        if i in self.sched.held_for_transfer:
            self.sched.held_for_transfer.discard(i)
            self.sched.mem.release(self.sched.kv[i], now)
            if self.idle and self.sched.waiting:  # the room may admit a waiting turn now
                self.next_s = min(self.next_s, now)

    def expect_transfer(self, i: int, source: SessionKV, context: int, sender_tp: int) -> None:
        """Session i's turn just delivered is a decode part of ``context`` tokens: what this
        replica lacks of it comes over the link at its first admission, and a readmission pulls
        again what the prefill replica's KV of it (``source``) then holds (``sim.cluster.disagg``).
        ``sender_tp``: the prefill replica's tensor-parallel degree."""
        recovery = self.sched.recovery
        assert isinstance(recovery, Pulls), "a decode part on a replica that does not decode"
        recovery.pending.add(i)
        recovery.sources[i] = (source, context)
        if sender_tp != self.sched.cost.tp:
            recovery.sender_tp[i] = sender_tp
        else:
            recovery.sender_tp.pop(i, None)

    def decode_part_over(self, i: int) -> None:
        """Session i's decode part here completed or was rejected: nothing more is pulled."""
        recovery = self.sched.recovery
        if isinstance(recovery, Pulls):
            recovery.sources.pop(i, None)
            recovery.sender_tp.pop(i, None)

    def catch_up(self, kv: SessionKV, history: int, now: float) -> None:
        """Extend the session's KV here to ``history`` tokens: the tokens added on other replicas
        were never computed here, so they are dropped pages (recomputed at admission), and so is
        a partial last page (the rest of it was computed elsewhere). A session unit is all or
        nothing: it is dropped whole."""
        if kv.tokens == history:
            return
        if kv.tokens > history:
            raise AssertionError(
                f"session {kv.session_id}: replica {self.index} holds {kv.tokens} tokens, more "
                f"than its history of {history}"
            )
        sched, mem = self.sched, self.sched.mem
        pages = sched.pages(history)
        sched.live_pages += pages - sched.pages(kv.tokens)
        sched.peak_live_pages = max(sched.peak_live_pages, sched.live_pages)
        if sched.per_session_unit:
            if kv.tier:
                mem.drop_from(kv, 0, now)
            else:
                kv.tier.extend(_DROPPED_BYTE)
            kv.tier_pages[DROPPED] += pages - kv.unit_pages
            kv.unit_pages = pages
        else:
            upp = sched.upp
            if kv.tokens % sched.bt:
                mem.drop_from(kv, (kv.tokens // sched.bt) * upp, now)
            count = pages * upp - len(kv.tier)
            kv.tier.extend(_DROPPED_BYTE * count)
            kv.tier_pages[DROPPED] += count
        kv.tokens = history

    def session_over(self, i: int) -> None:
        """Session i has no turn left (it ended on another replica): what this replica holds of
        it no longer counts as live demand, and its record is let go (its KV stays until
        evicted), as the single engine does when a session's last turn completes."""
        sched = self.sched
        kv = sched.kv.get(i)
        if kv is None or kv.done:
            return
        kv.done = True
        sched.live_pages -= sched.pages(kv.tokens)
        sched.sessions[i] = None
        if sched.share is not None:
            sched.share.forget(i)

    def may_raise_peak(self) -> bool:
        """Could a decode span from now raise this replica's peak demand? Not when every running
        turn's whole context (its history, prompt and output: at most what it holds at its end)
        would still leave the live pages at or under the peak."""
        sched = self.sched
        room = sched.peak_live_pages - sched.live_pages
        pages = sched.pages
        for run in sched.running.values():
            turn = run.turn
            room -= max(
                0,
                pages(run.history + turn.prompt_tokens + turn.output_tokens)
                - pages(run.sess.tokens),
            )
            if room < 0:
                return True
        return False

    def cached_tokens(self, i: int, history: int) -> tuple[int, int]:
        """(GPU, CPU) tokens of session i's ``history`` that this replica holds and could reuse,
        as its KV events tell a router: its own pages in each tier (a shared prefix's pages are
        the pool's, not counted), less what ``catch_up`` would drop."""
        return cached_of(self.residency(i), history)

    def residency(self, i: int) -> Residency | None:
        """What ``cached_tokens`` reads of session i here, whatever the history asked about:
        (tokens, GPU tokens, CPU tokens, and the GPU and CPU tokens to take off when the
        history asked about is longer than ``tokens``); None: nothing held."""
        sched = self.sched
        kv = sched.kv.get(i)
        if kv is None or not kv.tokens or not kv.tier:
            return None
        bt, tokens = sched.bt, kv.tokens
        if sched.per_session_unit:  # all or nothing, and nothing once it ran elsewhere
            if kv.tier[0] == DROPPED:
                return tokens, 0, 0, 0, 0
            if kv.tier[0] == GPU:
                return tokens, tokens, 0, tokens, 0
            return tokens, 0, tokens, 0, tokens
        if sched.upp > 1:  # per-layer units: pages of every layer, in proportion
            per = bt / sched.upp
            cut = bt if tokens % bt else 0
            return tokens, int(kv.tier_pages[GPU] * per), int(kv.tier_pages[CPU] * per), cut, 0
        g, c = kv.tokens_in(GPU, bt), kv.tokens_in(CPU, bt)
        part = tokens % bt  # its partial last page, dropped when a longer history arrives
        last = kv.tier[-1]
        return tokens, g, c, part if last == GPU else 0, part if last == CPU else 0

    def flush_drops(self) -> None:
        """Send the store what this replica dropped since its last flush (``DropWriting``)."""
        if self.writes_on_drop:
            self.sched.mem.flush()  # type: ignore[attr-defined]

    # -- the engine loop, one event at a time ----------------------------------------------------
    def event(self, now: float) -> None:
        """Its event due at ``now``: an iteration ends (applied), a decode span ends, or an idle
        replica's own next arrival (a prefetch) is due."""
        if self.step is not None:
            self.sched.finish(self.step, now)
            self.flush_drops()
            self.step = None
            self.after_step = True
            if self.debug:
                check_invariants(self.sched)
            self.end_s = now
        elif self.in_span:
            self.in_span = False
            self.end_s = now
        else:  # idle, its own next arrival due
            self.wake(now)

    def wake(self, now: float) -> None:
        """An idle replica has something to do at ``now``: its idle time ends."""
        if self.start_s is not None:
            self.idle_area += self.idle_used * (now - self.idle_since)
        self.idle = False
        self.next_s = now

    def advance(self, now: float, horizon: float) -> None:
        """Go on from ``now``: a decode span up to ``horizon`` right after an iteration, else plan
        the next iteration (or go idle)."""
        if self.after_step:
            self.after_step = False
            # With a turn waiting, a span's drops could write to the store what makes the turn
            # admissible before the span ends: the replica steps one iteration at a time then.
            if self.decode_spans and not (self.writes_on_drop and self.sched.waiting):
                if self.before_span is not None:
                    self.before_span()
                span = self.sched.decode_span(now, horizon)
                self.flush_drops()
                if span.steps:
                    if self.sched.gpu_bounded:
                        self.gpu_byte_seconds += span.gpu_byte_seconds
                    if self.debug:
                        check_invariants(self.sched)
                    self.in_span = True
                    self.next_s = now + span.duration_s
                    return
        self.loop_top(now)

    def loop_top(self, now: float) -> None:
        """Release what has arrived and plan the next iteration; none: go idle."""
        sched = self.sched
        sched.release(now)
        step = sched.plan(now)
        self.flush_drops()
        used = sched.mem.used[0]
        if step is None:
            nxt = sched.next_arrival_s()
            self.next_s = math.inf if nxt is None else nxt
            self.idle, self.idle_since, self.idle_used = True, now, used
            return
        if self.start_s is None:
            self.start_s = now
        if sched.gpu_bounded:
            self.gpu_byte_seconds += self.idle_area + used * step.duration_s
        self.idle_area = 0.0
        self.step = step
        self.next_s = now + step.duration_s
