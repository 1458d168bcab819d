"""Routers: which replica an arriving turn goes to.

A router is a small plug-in, as a policy is: a class with ``route(arrival, view) -> replica``,
built from the replica count and its YAML parameters; a user names their own as ``module:Class``.
It sees what a real router sees (``RouterView``): its own count of the turns it sent to each
replica that have not ended yet (and their tokens), the fleet's configuration (each replica's GPU
KV and its cost model's prefill and decode step times, as profiling each kind of GPU gives them),
and, for a KV-aware router, each replica's KV of the session as the replica's KV events report it
(applied at once, or ``cluster.kv_events.delay_ms`` late: ``sim.cluster.kvevents``). It never
sees queues, batches or policies inside a replica.

Ties go round robin: to the first tied replica at or after the one after the last pick, so an
idle cluster spreads new conversations and a run stays deterministic.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol


@dataclass(frozen=True, slots=True)
class Arrival:
    """A turn at the router: its session (index in the trace), turn index, the context it brings
    (history tokens H_k, then its new prompt) and when it arrived."""

    session: int
    k: int
    history_tokens: int
    prompt_tokens: int
    time_s: float

    @property
    def tokens(self) -> int:
        return self.history_tokens + self.prompt_tokens


class RouterView(Protocol):
    """What a router may read about the replicas."""

    @property
    def replica_count(self) -> int: ...

    @property
    def kv_capacity_tokens(self) -> float:
        """The pool's first replica's GPU KV, in tokens (every replica's in a fleet of one kind)."""
        ...

    def replica_kv_capacity_tokens(self, replica: int) -> float:
        """``replica``'s own GPU KV, in tokens (groups of replicas may differ)."""
        ...

    def replica_prefill_s(self, replica: int, tokens: int, context: int = 0) -> float:
        """``replica``'s own cost model's time for a lone prefill of ``tokens`` new tokens after
        ``context`` cached ones (groups of replicas may run on different GPUs)."""
        ...

    def replica_decode_s(self, replica: int, seqs: int, context: int) -> float:
        """``replica``'s own cost model's time for one decode step of ``seqs`` sequences over
        ``context`` tokens of context in all (a decode step is bound by HBM bandwidth, a prefill
        by compute: GPUs rank differently in each)."""
        ...

    def inflight_turns(self, replica: int) -> int:
        """Turns routed to ``replica`` that have not completed (queued or running)."""
        ...

    def inflight_tokens(self, replica: int) -> int:
        """Their context tokens (history + prompt, as routed)."""
        ...

    def cached_tokens(self, replica: int, arrival: Arrival) -> tuple[int, int]:
        """(GPU, CPU) tokens of the arrival's history that ``replica`` holds and could reuse (as
        of the KV events' delay ago)."""
        ...


class Router:
    """Base class: ``params`` are the YAML's ``router_params``; unknown ones are an error."""

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, float]] = {}

    def __init__(self, replicas: int, params: Mapping[str, Any] | None = None) -> None:
        if replicas < 1:
            raise ValueError(f"cluster.replicas: must be >= 1, got {replicas}")
        self.replicas = replicas
        params = dict(params or {})
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            known = ", ".join(sorted(self.defaults)) or "none"
            raise ValueError(
                f"cluster.router_params: {', '.join(unknown)} not a parameter of router "
                f"{self.name!r} (its parameters: {known})"
            )
        self.params = {**self.defaults, **params}
        self.after_last = 0  # where the next tie-break starts: the replica after the last pick
        for key, value in self.params.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"cluster.router_params.{key}: must be a number >= 0, got {value!r}"
                )

    def route(self, arrival: Arrival, view: RouterView) -> int:
        raise NotImplementedError

    def turn_ended(self, arrival: Arrival, replica: int) -> None:
        """The turn routed to ``replica`` completed (or was rejected); nothing by default."""

    def lowest(self, costs: list[float]) -> int:
        """The replica of the lowest cost; among tied ones the first at or after the replica
        after the last pick (round robin among ties)."""
        best = min(costs)
        n = len(costs)
        for j in range(n):
            r = (self.after_last + j) % n
            if costs[r] == best:
                self.after_last = (r + 1) % n
                return r
        raise AssertionError("no replica has the lowest cost")  # pragma: no cover

    @staticmethod
    def capacity_tokens(view: RouterView, replica: int) -> float:
        """``replica``'s own GPU KV in tokens; a view written before fleets of groups (it gives
        one replica's size for all) answers with that."""
        own = getattr(view, "replica_kv_capacity_tokens", None)
        return view.kv_capacity_tokens if own is None else own(replica)

    @staticmethod
    def seconds_per_token(view: RouterView, replica: int, tokens: int) -> float:
        """``replica``'s prefill seconds per token at a prefill of ``tokens``: its speed; a view
        written before the views told it (none has ``replica_prefill_s``) gives 1.0 for all."""
        prefill_s = getattr(view, "replica_prefill_s", None)
        return 1.0 if prefill_s is None else prefill_s(replica, tokens) / tokens

    def least_loaded(self, view: RouterView) -> int:
        """The replica with the fewest in-flight tokens (ties round robin)."""
        return self.lowest([view.inflight_tokens(r) for r in range(view.replica_count)])


class RoundRobin(Router):
    """Replica 0, 1, ..., R-1, 0, ... in order of arrival, whatever the session."""

    name = "round-robin"

    def __init__(self, replicas: int, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(replicas, params)
        self.next = 0

    def route(self, arrival: Arrival, view: RouterView) -> int:
        r = self.next
        self.next = (r + 1) % self.replicas
        return r


class LeastLoaded(Router):
    """The replica with the fewest in-flight tokens (running and waiting, as routed)."""

    name = "least-loaded"

    def route(self, arrival: Arrival, view: RouterView) -> int:
        return self.least_loaded(view)


class SessionAffinity(Router):
    """A conversation stays on the replica its first turn went to (the least loaded then). When
    that replica is overloaded, its in-flight tokens with this turn above ``overload`` times its
    own GPU KV, the turn goes to the least loaded replica, which becomes its home."""

    name = "session-affinity"
    defaults: ClassVar[dict[str, float]] = {"overload": 1.0}

    def __init__(self, replicas: int, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(replicas, params)
        self.home: dict[int, int] = {}

    def route(self, arrival: Arrival, view: RouterView) -> int:
        home = self.home.get(arrival.session)
        if home is None:
            home = self.home[arrival.session] = self.least_loaded(view)
        elif view.inflight_tokens(home) + arrival.tokens > self.overload_tokens(view, home):
            best = self.least_loaded(view)
            # it moves only to a replica less loaded than its home
            if view.inflight_tokens(best) < view.inflight_tokens(home):
                home = self.home[arrival.session] = best
        return home

    def overload_tokens(self, view: RouterView, home: int) -> float:
        """In-flight tokens above which ``home`` is overloaded: ``overload`` times its GPU KV."""
        return self.params["overload"] * self.capacity_tokens(view, home)


class KVAware(Router):
    """The replica with the lowest cost: the tokens it would prefill for this turn, weighted,
    plus its in-flight tokens, weighted (as Dynamo's KV router and llm-d's precise prefix-cache
    scorer weigh overlap against load):

        cost = prefill_weight * (H + p - g - cpu_hit_value * c) + load_weight * in-flight tokens

    where g and c are the history tokens the replica holds on its GPU and CPU."""

    name = "kv-aware"
    defaults: ClassVar[dict[str, float]] = {
        "prefill_weight": 1.0,
        "cpu_hit_value": 0.5,
        "load_weight": 1.0,
    }

    def route(self, arrival: Arrival, view: RouterView) -> int:
        return self.lowest(self.token_costs(arrival, view))

    def token_costs(self, arrival: Arrival, view: RouterView) -> list[float]:
        """Each replica's cost in tokens: the turn's prefill there, weighed against its load."""
        p = self.params
        costs = []
        for r in range(view.replica_count):
            g, c = view.cached_tokens(r, arrival) if arrival.history_tokens else (0, 0)
            prefill = arrival.tokens - g - p["cpu_hit_value"] * c
            costs.append(p["prefill_weight"] * prefill + p["load_weight"] * view.inflight_tokens(r))
        return costs


class LeastTime(KVAware):
    """kv-aware's cost in tokens, in seconds at each replica's speed, plus, weighted, the turn's
    decode there: the lowest

        s_r * (prefill_weight * (H + p - g - cpu_hit_value * c) + load_weight * in-flight tokens)
          + decode_weight * decode_tokens * step_r

    where s_r is the replica's prefill seconds per token, its cost model's lone prefill of
    ``speed_tokens`` tokens over that count, and step_r its cost model's decode step of the batch
    the turn would join: its in-flight turns and this one, over their tokens and this turn's. So
    the turn's own prefill and the work queued ahead of it are both counted in time: a slower GPU
    with as many tokens in flight costs more; and with ``decode_weight`` > 0 an assumed output of
    ``decode_tokens`` at the replica's decode speed, which ranks GPUs apart from their prefill
    speed (decode is bound by HBM bandwidth). With ``decode_weight`` 0 (the default) no decode
    term is added; with every replica alike, s_r is one number and the order of the costs is
    kv-aware's (with ``prefill_weight`` 0, least-loaded's)."""

    name = "least-time"
    defaults: ClassVar[dict[str, float]] = {
        **KVAware.defaults,
        "speed_tokens": 2048,
        "decode_weight": 0.0,
        "decode_tokens": 256,
    }

    def __init__(self, replicas: int, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(replicas, params)
        tokens = self.params["speed_tokens"]
        if tokens < 1 or tokens != int(tokens):
            raise ValueError(
                f"cluster.router_params.speed_tokens: must be an integer >= 1, got {tokens!r}"
            )
        self.speed_tokens = int(tokens)
        self.decode_s = self.params["decode_weight"] * self.params["decode_tokens"]

    def route(self, arrival: Arrival, view: RouterView) -> int:
        # one factor on kv-aware's cost: among replicas alike, the same order and ties
        speed = self.speed_tokens
        costs = self.token_costs(arrival, view)
        costs = [self.seconds_per_token(view, r, speed) * t for r, t in enumerate(costs)]
        if self.decode_s:  # (none added at weight 0: the costs are the prefill's to the bit)
            for r in range(len(costs)):
                batch = view.inflight_turns(r) + 1
                context = view.inflight_tokens(r) + arrival.tokens
                costs[r] += self.decode_s * view.replica_decode_s(r, batch, context)
        return self.lowest(costs)


ROUTERS: dict[str, type[Router]] = {
    cls.name: cls for cls in (RoundRobin, LeastLoaded, SessionAffinity, KVAware, LeastTime)
}


def router_class(name: str) -> type[Router]:
    """A built-in router's name, or ``package.module:Class`` for a user's Router subclass."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(
                f"cluster.router {name!r}: cannot import {attr} from {module_name}: {exc}"
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, Router)):
            raise ValueError(f"cluster.router {name!r}: not a sim.cluster.Router subclass")
        return cls
    try:
        return ROUTERS[name]
    except KeyError:
        close = difflib.get_close_matches(name, ROUTERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"cluster.router: unknown router {name!r}{hint}; built in: {', '.join(ROUTERS)}"
        ) from None


def make_router(name: str, replicas: int, params: Mapping[str, Any] | None = None) -> Router:
    return router_class(name)(replicas, params)
