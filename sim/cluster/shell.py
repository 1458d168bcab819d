"""The cluster on one clock: replicas, the router between them and the front end's arrivals.

One SimPy process steps every replica. At each moment that something is due (an iteration or a
decode span ends, a turn arrives):

1. the replicas' iterations that end now are applied (completions schedule the sessions' next
   turns at the front end);
2. the turns that arrive now are routed, in arrival order, each seeing the replicas as step 1
   left them, and delivered;
3. each replica due now goes on: one that was idle, or ended a span, plans its next iteration;
   one that ended an iteration may first run a decode span, up to the *horizon*: the next
   arrival at the front end, or the earliest moment another replica's completion could add one
   (its next event, plus the trace's shortest think time; a prefill replica's hands a decode
   replica its part with none, and an idle prefill replica with a turn waiting for the room its
   held pages take wakes at another decode replica's next event, where a pull may free them).

A replica's decisions depend on the others only through the turns routed to it and, with a shared
store, through what the store holds of a waiting turn's session; while that turn waits its session
writes nothing at completions (its previous turn has completed), so the store can only lose its
chunks, which never makes a turn that could not be admitted admissible. A store written as
replicas drop KV (``write: eviction``) changes at any replica's event: there a span ends at every
other replica's next event, and a replica with a turn waiting runs none (its own drops may write
what that turn needs). No turn can arrive inside a span, so the
spans change nothing: the run is the one that stepping every
iteration of every replica in time order gives. With one replica it is the single engine's run.
A router that sees the replicas' KV late (``sim.cluster.kvevents``) reads it at view points that
are on the horizon too, or from a record that a span keeps step by step, so neither does it see
anything a span would not have shown step by step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import simpy

from sim.arrivals import Arrivals, next_arrival_s
from sim.cluster.kvevents import DelayedKV
from sim.cluster.replica import Replica
from sim.cluster.routers import Arrival, Router
from sim.cluster.store import SharedStore
from traces.records import Session


class Cluster:
    def __init__(
        self,
        sessions: Sequence[Session],
        make_replica: Callable[[int, Cluster], Replica],
        router: Router,
        replay: str,
        progress: Callable[[int], None] | None = None,
        decode_router: Router | None = None,
        kv_delay_s: float = 0.0,
    ) -> None:
        self.sessions = sessions
        count = router.replicas + (decode_router.replicas if decode_router else 0)
        # built here, since each replica calls back into the cluster
        self.replicas = [make_replica(r, self) for r in range(count)]
        # Turns from the front end go to the first pool (every replica, or the prefill pool);
        # with disaggregation, decode parts go to the second.
        self.pool = PoolView(self, router, 0)
        self.decode_pool = (
            None if decode_router is None else PoolView(self, decode_router, router.replicas)
        )
        self.handoffs: list[tuple[int, int, int]] = []  # (session, turn, context) to decode
        self.handoff_order = 0
        self.handed_off = 0  # prefill parts handed to decode (their first token is discarded)
        self.sender: dict[int, int] = {}  # session -> the prefill replica holding its pages
        self.replay = replay
        self.front = Arrivals()  # turns not yet routed
        self.next_k = [0] * len(sessions)  # each session's next turn
        self.history = [0] * len(sessions)  # ... and the context it brings
        self.routed: dict[int, tuple[int, Arrival]] = {}  # session -> (replica, its turn there)
        # each replica's sessions whose last turn runs there: its completion ends the session on
        # every replica (``Replica.session_over``)
        self.last_turns_on: list[set[int]] = [set() for _ in range(count)]
        self.turns_in = [0] * count  # the routers' in-flight count per replica
        self.tokens_in = [0] * count
        self.min_think_s = shortest_think_s(sessions, replay)
        self.progress = progress
        self.ended = 0  # turns completed, not yet reported to ``progress``
        # (session, turn) -> history tokens its replica never computed (they ran elsewhere)
        self.elsewhere: dict[tuple[int, int], int] = {}
        self.store: SharedStore | None = None  # a shared KV store the replicas write to
        self.now = 0.0
        # each replica's GPU KV in tokens (a fleet of groups holds several sizes)
        self.kv_capacity = [
            r.sched.mem.capacity[0] / r.sched.page_bytes * r.sched.bt for r in self.replicas
        ]
        for i, s in enumerate(sessions):
            self.front.schedule(i, s.turns[0].arrival_s or 0.0)
        # the router's view of the replicas' KV as of kv_delay_s ago (None: no delay), and the
        # decode pool's router's (None: no delay, or colocated)
        self.delayed = DelayedKV(self, kv_delay_s, sessions, replay) if kv_delay_s > 0 else None
        self.decode_delayed = (
            DelayedKV.for_decode(self, kv_delay_s, sessions, self.decode_pool)
            if kv_delay_s > 0 and self.decode_pool is not None
            else None
        )
        self.pool.late = self.delayed
        if self.decode_pool is not None:
            self.decode_pool.late = self.decode_delayed
        # both late views, each recording its pool's replicas
        self.late = [d for d in (self.delayed, self.decode_delayed) if d is not None]

    def is_prefill(self, replica: int) -> bool:
        """Does ``replica`` run prefill parts only (a disaggregated cluster's prefill pool)?"""
        return self.decode_pool is not None and replica < self.decode_pool.first

    def hands_off(self, replica: int, i: int, k: int) -> bool:
        """Does turn k of session i, completed on ``replica``, go on to a decode replica?"""
        return self.is_prefill(replica) and self.sessions[i].turns[k].output_tokens > 1

    # -- the front end ---------------------------------------------------------------------------
    def next_turn(self, replica: int, i: int, t: float) -> None:
        """Session i's turn completed on ``replica``; its next turn arrives at ``t``."""
        kv = self.replicas[replica].sched.kv[i]
        if self.hands_off(replica, i, kv.next_turn - 1):
            return  # a prefill part: the turn goes on to decode, whose completion schedules this
        self.next_k[i] = kv.next_turn
        self.history[i] = kv.tokens
        self.front.schedule(i, t)
        if self.delayed is not None:
            self.delayed.arriving(i, t, kv.tokens, self.now)

    def turn_ended(self, replica: int, i: int) -> None:
        """Session i's turn on ``replica`` completed or was rejected."""
        r, arrival = self.routed.pop(i)
        assert r == replica
        self.last_turns_on[r].discard(i)
        self.turns_in[r] -= 1
        self.tokens_in[r] -= arrival.tokens
        pool = self.decode_pool if self.decode_pool and r >= self.decode_pool.first else self.pool
        pool.router.turn_ended(arrival, r - pool.first)
        if pool is self.decode_pool:
            self.replicas[r].decode_part_over(i)
        kv = self.replicas[r].sched.kv[i]
        completed = kv.next_turn > arrival.k  # (a rejected turn is not)
        store = self.store
        if completed and store is not None and store.cfg.on_completion:  # its context is all on
            store.write(i, kv.tokens, self.now)  # the replica's GPU now
        if completed and self.hands_off(r, i, arrival.k):
            self.handoffs.append((i, arrival.k, arrival.tokens))
            self.handed_off += 1
            self.replicas[r].hold_for_transfer(i)
            self.sender[i] = r
            return  # the turn is not over: its decode part is
        if not completed and i in self.sender:  # a decode part rejected: nothing will be pulled
            self.pulled(i, self.now)
        self.ended += completed
        if self.progress is not None and self.ended >= 256:
            self.progress(self.ended)
            self.ended = 0
        if kv.done:  # its last turn, or the rest of it rejected
            for other in self.replicas:
                if other is not self.replicas[r]:
                    other.session_over(i)

    def pulled(self, i: int, now: float) -> None:
        """Session i's decode replica has pulled its pages: its prefill replica frees them."""
        self.replicas[self.sender.pop(i)].transfer_done(i, now)

    def route_due(self, now: float) -> None:
        """Route the decode parts handed off now (in the order their prefills completed), then
        the turns arriving at the front end now."""
        if self.handoffs:
            assert self.decode_pool is not None
            late = self.decode_delayed
            for i, k, context in self.handoffs:
                arrival = Arrival(i, k, context, 0, now)
                if late is not None:
                    late.handing_off(i, context, now)
                r = self.send(self.decode_pool, arrival)
                self.handoff_order += 1
                self.replicas[r].deliver(i, k, context, now, self.handoff_order, now)
                sender = self.replicas[self.sender[i]].sched
                self.replicas[r].expect_transfer(i, sender.kv[i], context, sender.cost.tp)
                if late is not None:
                    late.handed_off(r, i, k, now)
            self.handoffs.clear()
        for t, order, i in self.front.pop_due(now):
            k = self.next_k[i]
            arrival = Arrival(i, k, self.history[i], self.sessions[i].turns[k].prompt_tokens, t)
            r = self.send(self.pool, arrival)
            missing = self.replicas[r].deliver(i, k, arrival.history_tokens, t, order, now)
            if missing:
                self.elsewhere[i, k] = missing
            if self.delayed is not None:
                self.delayed.routed(i)
                self.delayed.delivered(r, i)
                self.delayed.record(r, now)

    def send(self, pool: PoolView, arrival: Arrival) -> int:
        """The replica ``pool``'s router picks for ``arrival``, counted in flight there."""
        r = pool.router.route(arrival, pool)
        if not 0 <= r < pool.replica_count:
            raise ValueError(
                f"router {type(pool.router).__name__} sent a turn to replica {r} of "
                f"{pool.replica_count}"
            )
        r += pool.first
        self.routed[arrival.session] = (r, arrival)
        if arrival.k == len(self.sessions[arrival.session].turns) - 1:
            self.last_turns_on[r].add(arrival.session)
        self.turns_in[r] += 1
        self.tokens_in[r] += arrival.tokens
        return r

    # -- the clock -------------------------------------------------------------------------------
    def run(self) -> None:
        env = simpy.Environment()
        env.process(self._loop(env))
        env.run()

    def _loop(self, env: simpy.Environment):
        replicas, delayed, late = self.replicas, self.delayed, self.late
        while True:
            nxt = self.front.next_s()
            now = min(min(r.next_s for r in replicas), math.inf if nxt is None else nxt)
            if delayed is not None:
                now = min(now, delayed.next_s())
            if now == math.inf:
                break
            if now > env.now:
                yield env.timeout(now - env.now)
            self.now = now
            for d in late:
                d.begin(now)
            due = [r for r in replicas if r.next_s == now]
            for r in due:
                r.event(now)
                for d in late:
                    d.record(r.index, now)
            self.route_due(now)
            if delayed is not None:
                delayed.view_due(now)  # the view points at now: after steps 1 and 2
            for d in late:
                d.planning()
            due = [r for r in replicas if r.next_s == now]  # with those woken by a delivery
            spans = [r for r in due if r.after_step]
            for r in due:
                if not r.after_step:
                    r.loop_top(now)
                    for d in late:
                        d.record(r.index, now)
            for r in spans:
                r.advance(now, self.horizon(r, now))
                for d in late:
                    d.record(r.index, now)
        if self.progress is not None and self.ended:
            self.progress(self.ended)
        for r in replicas:
            if r.sched.waiting:
                head = r.sched.waiting[0]
                raise AssertionError(
                    f"deadlock on replica {r.index}: {head.sess.session_id} turn {head.k} "
                    f"waits with nothing running"
                )

    def horizon(self, replica: Replica, now: float) -> float:
        """How far ``replica`` may run a decode span from ``now``: no turn can arrive before
        (nor, with disaggregation, a decode part: a prefill replica's next event, or for an idle
        one waiting on the pages it holds for a transfer, the next pull that may free them)."""
        t = replica.sched.next_arrival_s()
        nxt = self.front.next_s()
        h = min(math.inf if t is None else t, math.inf if nxt is None else nxt)
        # a prefill replica's completion hands a decode replica its turn at once, no think time
        to_decode = self.decode_pool is not None and not self.is_prefill(replica.index)
        delayed = self.delayed
        if delayed is not None:  # nor a view point of a delayed router (``sim.cluster.kvevents``)
            h = min(h, delayed.next_s())
        may_peak = replica.may_raise_peak()
        for q in self.replicas:
            if q is not replica:
                # a replica still to go on now has no next event yet: its completions come later
                busy_until = now if q.after_step else q.next_s
                if to_decode and q.idle and q.sched.waiting and q.sched.held_for_transfer:
                    # an idle prefill replica whose waiting turn needs the room its held pages
                    # take wakes when another decode replica pulls them, at that one's event
                    # (``Replica.transfer_done``): its prefill may then hand this replica a part
                    busy_until = min(busy_until, self.pull_s(replica, now))
                # a replica that writes what it drops changes the store at any of its events; one
                # that completes the last turn of a session this replica holds ends it here too
                instant = (
                    (to_decode and self.is_prefill(q.index))
                    or q.writes_on_drop
                    or (may_peak and self.ends_a_session_of(q, replica))
                )
                gap = 0.0 if instant else self.min_think_s
                if delayed is not None:
                    gap = min(gap, delayed.gap_s)
                h = min(h, busy_until + gap)
        return h

    def ends_a_session_of(self, q: Replica, replica: Replica) -> bool:
        """Does ``q`` run the last turn of a session ``replica`` holds? Its completion, at one of
        ``q``'s events, takes the session's KV out of ``replica``'s live demand at that moment
        (``Replica.session_over``): a span that ran past it would count the pages it adds after
        as if the session were still live, and may raise the peak demand with them (the ledger
        is the same either way)."""
        kv = replica.sched.kv
        for i in self.last_turns_on[q.index]:
            held = kv.get(i)
            if held is not None and not held.done:
                return True
        return False

    def pull_s(self, replica: Replica, now: float) -> float:
        """The earliest moment a decode replica other than ``replica`` may pull a prefill
        replica's held pages: its next event (a pull comes with an admission, at the planning
        of an iteration; a replica still to go on now plans now)."""
        assert self.decode_pool is not None
        return min(
            (
                now if q.after_step else q.next_s
                for q in self.replicas[self.decode_pool.first :]
                if q is not replica
            ),
            default=math.inf,
        )

    def turn_column(self, turns, values: dict[tuple[int, int], int]) -> np.ndarray:
        """A ledger column from ``values`` by (session index, turn), 0 where it has none."""
        index = {s.session_id: i for i, s in enumerate(self.sessions)}
        get = values.get
        return np.fromiter(
            (get((index[sid], k), 0) for sid, k in zip(turns["session_id"], turns["turn"])),
            dtype=np.int64,
            count=len(turns),
        )


class PoolView:
    """What a pool's router sees (``sim.cluster.RouterView``): the replicas ``first`` ..
    ``first + router.replicas - 1`` as 0, 1, ..."""

    def __init__(self, shell: Cluster, router: Router, first: int) -> None:
        self.shell = shell
        self.router = router
        self.first = first
        self.late: DelayedKV | None = None  # its router's view of the KV as of a delay ago
        self.prefill_s: dict[tuple[int, int, int], float] = {}  # (replica, tokens, context)

    @property
    def replica_count(self) -> int:
        return self.router.replicas

    @property
    def kv_capacity_tokens(self) -> float:
        return self.shell.kv_capacity[self.first]

    def replica_kv_capacity_tokens(self, replica: int) -> float:
        return self.shell.kv_capacity[self.first + replica]

    def replica_prefill_s(self, replica: int, tokens: int, context: int = 0) -> float:
        key = (self.first + replica, tokens, context)
        t = self.prefill_s.get(key)
        if t is None:  # a replica's cost model does not change: each price once
            cost = self.shell.replicas[key[0]].sched.cost
            t = self.prefill_s[key] = cost.lone_prefill_s(tokens, context)
        return t

    def replica_decode_s(self, replica: int, seqs: int, context: int) -> float:
        return self.shell.replicas[self.first + replica].sched.cost.decode_step_s(seqs, context)

    def inflight_turns(self, replica: int) -> int:
        return self.shell.turns_in[self.first + replica]

    def inflight_tokens(self, replica: int) -> int:
        return self.shell.tokens_in[self.first + replica]

    def cached_tokens(self, replica: int, arrival: Arrival) -> tuple[int, int]:
        if self.late is not None:  # as of the delay ago
            return self.late.cached_tokens(replica, arrival.session, arrival.history_tokens)
        held = self.shell.replicas[self.first + replica]
        return held.cached_tokens(arrival.session, arrival.history_tokens)


def shortest_think_s(sessions: Sequence[Session], replay: str) -> float:
    """A lower bound on the gap from a turn's completion to its session's next arrival (open
    loop: none, a recorded arrival may be due already)."""
    if replay == "open-loop":
        return 0.0
    gap = math.inf
    for s in sessions:
        for prev, turn in zip(s.turns, s.turns[1:]):
            gap = min(gap, next_arrival_s(prev, turn, 0.0, replay))
    return gap  # inf: no session has a second turn, so no completion adds an arrival
