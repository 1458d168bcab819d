"""KV events that reach the router late (``cluster.kv_events.delay_ms``).

A replica publishes its KV events (pages stored, moved, removed) and the router applies them
``delay`` later, so at time t it knows each replica's KV as it was at t - delay. Here: a turn
arriving at t is routed on each replica's KV of its session as a router with no delay would have
read it at the *view point* t - delay, that is, after the iterations that end then are applied and
the turns that arrive then are delivered, before any replica plans (docs/semantics.md, "What a
router sees"). Its in-flight counts are the router's own and are not delayed.

Two ways to know a session's KV at its view point, both exact:

* A view point not yet passed when the turn is put on the front end (its think time is longer than
  the delay) is a *view event*: at that moment the cluster reads every replica's KV of the session
  and keeps it for the turn. Decode spans do not cross a view event (it is on their horizon, as an
  arrival is), and one not yet known is at least the shortest such gap (think time less delay)
  after another replica's next event, so the replicas are then as iteration-by-iteration replay
  has them.
* A view point already passed (a think time no longer than the delay: the point falls before the
  turn's predecessor completed) is read from a *record*: the sessions that have such a turn
  (*watched*; every conversation under open-loop replay, where a later turn may be due when its
  predecessor completes) have their KV on each replica recorded after every one of its events,
  when it changed; a replica holding one runs its decode spans a page allocation at a time, each
  noted at its step's start (``span_steps``), so the record is the iteration-by-iteration one.
  Records older than the delay are let go.

With disaggregation each pool's router sees its own pool late: the prefill pool's router, which
the front end's turns reach, as above; the decode pool's router (``for_decode``) routes a decode
part the moment its prefill part completes, so its view point is always past and read from a
record: every conversation with two decode parts or more is watched on the decode replicas (the
first decode part finds nothing there; its record is let go at its last one).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sim.arrivals import next_arrival_s
from sim.cluster.replica import Residency, cached_of
from traces.records import Session

if TYPE_CHECKING:
    from sim.cluster.shell import Cluster, PoolView

# a think time within this of the delay is read from the record: its view point may be, after
# rounding, just before the predecessor's completion
_MARGIN_S = 1e-6

Key = tuple[float, int]  # (time, 0: its events and deliveries, 1: after the replicas planned)


class DelayedKV:
    def __init__(
        self,
        shell: Cluster,
        delay_s: float,
        sessions: Sequence[Session],
        replay: str,
        pool: PoolView | None = None,
    ) -> None:
        """The late view of ``pool``'s router (None: the front end's pool, ``shell.pool``)."""
        self.shell = shell
        self.delay_s = delay_s
        self.pool = shell.pool if pool is None else pool
        n = len(sessions)
        self.watched = [False] * n
        self.gap_s = math.inf  # a view event not yet known comes at least this after a completion
        for i, s in enumerate(sessions):
            for prev, turn in zip(s.turns, s.turns[1:]):
                if replay == "open-loop":  # a recorded arrival may be due at the completion
                    self.watched[i], self.gap_s = True, 0.0
                    continue
                think = next_arrival_s(prev, turn, 0.0, replay)
                if think <= delay_s + _MARGIN_S:
                    self.watched[i] = True
                if think > delay_s:
                    self.gap_s = min(self.gap_s, think - delay_s)
        # less a margin, so that no rounding puts a view point a hair before a span's horizon
        self.gap_s = max(0.0, self.gap_s - _MARGIN_S)
        self.last_part: list[int] | None = None  # the decode pool's: each session's last part
        count = len(shell.replicas)
        self.held: list[set[int]] = [set() for _ in range(count)]  # watched sessions held there
        self.records: list[dict[int, list[tuple[Key, Residency | None]]]] = [
            {} for _ in range(count)
        ]
        # each watched session's last fingerprint there (``record``)
        self.prints: list[dict[int, tuple[int, ...]]] = [{} for _ in range(count)]
        # what ``record`` must look at there besides: the watched sessions with a turn on the
        # replica at its last record or delivered since, and its (swap-out, dropped) byte counts
        # then (any victim moved since raises one of them)
        self.active: list[set[int]] = [set() for _ in range(count)]
        self.moved: list[tuple[int, int]] = [(-1, -1)] * count
        self.events: list[tuple[float, int, int]] = []  # (view point, order, session)
        self.order = 0
        self.pending: dict[int, int] = {}  # session -> the history of its turn's view event
        self.views: dict[int, list[tuple[int, int]]] = {}  # session -> each replica's (GPU, CPU)
        self.now = -math.inf  # the loop's current moment
        self.phase = 0  # 1 once the replicas have planned at it
        for r in self.pool_replicas():
            shell.replicas[r].before_span = self.span_steps(r)

    @classmethod
    def for_decode(
        cls, shell: Cluster, delay_s: float, sessions: Sequence[Session], pool: PoolView
    ) -> DelayedKV:
        """The decode pool's late view: no view events (a decode part is routed as its prefill
        part completes: its view point has passed), a record of every conversation with two
        decode parts or more (a turn of more than one output token)."""
        view = cls(shell, delay_s, [], "closed-loop", pool)
        view.watched = [sum(t.output_tokens > 1 for t in s.turns) > 1 for s in sessions]
        view.last_part = [
            max((k for k, t in enumerate(s.turns) if t.output_tokens > 1), default=-1)
            for s in sessions
        ]
        return view

    # -- the turns' view points ------------------------------------------------------------------
    def arriving(self, i: int, t: float, history: int, now: float) -> None:
        """Session i's turn, with ``history`` tokens, was put on the front end at ``now`` to arrive
        at ``t``: its view of the replicas' KV is as of ``t - delay``."""
        if not history:
            return  # a first turn: no replica holds any of it
        point = t - self.delay_s
        if point > now or (point == now and self.phase == 0):
            self.pending[i] = history
            heapq.heappush(self.events, (point, self.order, i))
            self.order += 1
            return
        if not self.watched[i]:
            raise AssertionError(
                f"session {i}: its view point {point} passed unrecorded (at {now})"
            )
        self.view_from_record(i, point, history)

    def handing_off(self, i: int, history: int, now: float) -> None:
        """Session i's decode part, with ``history`` tokens, is routed now (the decode pool's
        view): each decode replica's KV of it as of ``now - delay``, from the record. A session
        not watched has one decode part, this one: no decode replica holds any of it."""
        if not self.watched[i]:
            self.views[i] = [(0, 0)] * self.pool.replica_count
            return
        self.view_from_record(i, now - self.delay_s, history)

    def view_from_record(self, i: int, point: float, history: int) -> None:
        """Session i's view: each of its pool's replicas' KV of it at ``point``, as recorded."""
        self.views[i] = [
            cached_of(self.recorded(r, i, point), history) for r in self.pool_replicas()
        ]

    def handed_off(self, r: int, i: int, k: int, now: float) -> None:
        """Session i's decode part k went to replica r: recorded there, or, its last decode
        part, its records let go (no view will read them)."""
        self.routed(i)
        assert self.last_part is not None
        if k == self.last_part[i]:
            for q in self.pool_replicas():
                self.forget(q, i)
            return
        self.delivered(r, i)
        self.record(r, now)

    def next_s(self) -> float:
        """The next view event (inf: none)."""
        return self.events[0][0] if self.events else math.inf

    def view_due(self, now: float) -> None:
        """The view events at ``now``: read every replica's KV of those sessions."""
        events = self.events
        while events and events[0][0] <= now:
            _, _, i = heapq.heappop(events)
            history = self.pending.pop(i)
            replicas = self.shell.replicas
            self.views[i] = [replicas[r].cached_tokens(i, history) for r in self.pool_replicas()]

    def cached_tokens(self, replica: int, session: int, history: int) -> tuple[int, int]:
        """The router's view of ``replica``'s KV of the session's arriving turn."""
        if not history:
            return 0, 0
        return self.views[session][replica]

    def routed(self, session: int) -> None:
        """The session's turn has been routed: its view is spent."""
        self.views.pop(session, None)

    def pool_replicas(self) -> range:
        """The replicas its pool's router picks from, in its numbering's order."""
        return range(self.pool.first, self.pool.first + self.pool.replica_count)

    # -- the record of watched sessions ------------------------------------------------------------
    def begin(self, now: float) -> None:
        """The cluster's loop is at ``now``: its events and deliveries come first (phase 0; a
        second pass at the same moment counts as after the planning)."""
        if now != self.now:
            self.now, self.phase = now, 0

    def planning(self) -> None:
        """The replicas due now go on (phase 1)."""
        self.phase = 1

    def delivered(self, r: int, i: int) -> None:
        """Session i's turn went to replica r: a watched session's KV there is recorded."""
        if self.watched[i]:
            self.held[r].add(i)
            self.active[r].add(i)

    def record(self, r: int, now: float, phase: int | None = None) -> None:
        """Replica r's event at ``now`` is over (``phase``: the loop's, unless given): note the
        watched sessions' KV there that changed.

        Only some can have changed since its last record: a session with no turn on the replica
        (none running or waiting there) changes only when a turn of it is delivered there or when
        the replica's memory moves one of its pages as a victim (demoted to the CPU, dropped from
        either tier), and every such move raises the replica's swapped-out or dropped bytes. So
        while those counts stay as they were, the sessions looked at are the watched ones with a
        turn there now or at the last record, or delivered since; otherwise all of them."""
        held = self.held[r]
        if not held:
            return
        replica, records, prints = self.shell.replicas[r], self.records[r], self.prints[r]
        sched = replica.sched
        kvs, mem = sched.kv, sched.mem
        active = {run.sess.index for run in sched.running.values()}
        active.update(run.sess.index for run in sched.waiting)
        active &= held
        moved = (mem.swap_out_bytes, mem.dropped_bytes)
        if moved != self.moved[r]:
            self.moved[r] = moved
            look: set[int] = held
        else:
            look = active | self.active[r]
        self.active[r] = active
        key: Key = (now, self.phase if phase is None else phase)
        old = now - self.delay_s
        done = []
        for i in look:
            kv = kvs[i]
            if kv.done:  # no turn of it is left to route
                done.append(i)
                continue
            # what ``residency`` reads, cheaply: unchanged, so is it
            tier = kv.tier
            fp = (kv.tokens, *kv.tier_pages, tier[0], tier[-1]) if tier else (kv.tokens,)
            if prints.get(i) == fp:
                continue
            prints[i] = fp
            res = replica.residency(i)
            log = records.get(i)
            if log is None:
                records[i] = [(key, res)]
                continue
            last_key, last = log[-1]
            if last == res:
                continue
            key_i = max(key, last_key)  # (a moment's second pass counts as planned)
            if key_i == last_key:
                log[-1] = (key_i, res)
            else:
                log.append((key_i, res))
            # what no view point can read any more: all but the last record before now - delay
            while len(log) > 1 and log[1][0][0] < old:
                del log[0]
        for i in done:
            self.forget(r, i)

    def recorded(self, r: int, i: int, point: float) -> Residency | None:
        """Replica r's KV of session i at ``point`` (after its events and deliveries then)."""
        log = self.records[r].get(i)
        if not log:
            return None
        j = bisect_right(log, (point, 0), key=lambda rec: rec[0]) - 1
        return log[j][1] if j >= 0 else None

    def forget(self, r: int, i: int) -> None:
        """Session i has no turn left: replica r keeps no record of it."""
        self.held[r].discard(i)
        self.active[r].discard(i)
        self.records[r].pop(i, None)
        self.prints[r].pop(i, None)

    def span_steps(self, r: int) -> Callable[[], None]:
        """What replica r does before a decode span: while it holds a watched session, the span
        allocates its pages one step at a time, each step's allocations and evictions at that
        step's start (``sim.spans``' loop, not one batch), and each is noted in the record then,
        as the planning of that step would have noted it. An allocation is the only change a
        span makes to any session's KV (no turn is admitted or completes inside one), so the
        record is the iteration-by-iteration one. Without a watched session here, the span is
        the replica's own (in one batch where its policy allows)."""
        held = self.held[r]
        sched = self.shell.replicas[r].sched
        bulk, by_time = sched.grows_in_bulk, sched.grows_by_time
        grow = sched.grow_decodes

        def grow_noted(now: float, preempt: bool = True) -> bool:
            grown = grow(now, preempt)
            if held:  # a step's planning: its allocations count from its start
                self.record(r, now, 1)
            return grown

        sched.grow_decodes = grow_noted  # type: ignore[method-assign]

        def before_span() -> None:
            if held:
                kv = sched.kv
                for i in [i for i in held if kv[i].done]:
                    self.forget(r, i)
            sched.grows_in_bulk = bulk and not held
            sched.grows_by_time = by_time and not held

        return before_span
