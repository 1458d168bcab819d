"""``simulate_cluster``: one trace on a cluster of replicas behind a router -> a ClusterResult.

Each replica is a full kvsim engine (its own GPU and CPU tiers, policy instances and cost model);
the router assigns every arriving turn to one (``sim.cluster.routers``); one clock steps them all
(``sim.cluster.shell``). The ledger is the single engine's, with the replica each turn ran on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from costmodels import CostModel
from sim.cluster.disagg import (
    DecodeLayerRecovery,
    DecodeRecovery,
    DisaggConfig,
    decode_part,
    merge_parts,
    prefill_part,
)
from sim.cluster.groups import (
    ReplicaGroup,
    check_groups,
    check_pages_cross,
    fleet_label,
    page_bytes_of,
    replica_setups,
)
from sim.cluster.replica import Replica
from sim.cluster.routers import make_router
from sim.cluster.shell import Cluster
from sim.cluster.store import (
    DropWriting,
    SharedStore,
    StoreConfig,
    StoreLayerRecovery,
    StoreRecovery,
    StoreStats,
    check_number,
)
from sim.config import EngineConfig, MemoryConfig
from sim.lifetime import fit_lifetime
from sim.policies import policy_class
from sim.results import EngineStats, SimResult, ledger_frame, run_labels
from sim.run import engine_stats, gc_paused
from sim.samples import Samples
from traces.records import Session


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    replicas: int = 1  # serving instances, each with the memory and engine of the run
    router: str = "round-robin"  # a built-in router's name, or module:Class
    # the router's parameters (a mapping; kept as sorted pairs, so the config is hashable)
    router_params: Any = ()
    store: StoreConfig | None = None  # a shared KV store behind every replica
    disaggregation: DisaggConfig | None = None  # prefill and decode pools (None: colocated)
    # how late the router applies the replicas' KV events, ms (``sim.cluster.kvevents``)
    kv_events_delay_ms: float = 0.0
    # groups of replicas with their own hardware, KV and policy, in replica order (a
    # ``ReplicaGroup`` or a mapping of its keys each; ``sim.cluster.groups``); (): all alike
    groups: Any = ()

    def __post_init__(self) -> None:
        params = self.router_params
        pairs = params.items() if isinstance(params, Mapping) else params
        object.__setattr__(self, "router_params", tuple(sorted(pairs)))
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int):
            raise ValueError(f"cluster.replicas: must be an integer, got {self.replicas!r}")
        if self.replicas < 1:
            raise ValueError(f"cluster.replicas: must be >= 1, got {self.replicas}")
        object.__setattr__(self, "groups", tuple(as_group(g, i) for i, g in enumerate(self.groups)))
        check_groups(self.groups, self.replicas)
        if self.disaggregation is not None:
            self.disaggregation.check(self.replicas)
        check_number("cluster.kv_events.delay_ms", self.kv_events_delay_ms, at_least=0)


def as_group(group: ReplicaGroup | Mapping[str, Any], index: int) -> ReplicaGroup:
    """A group given as a mapping of its keys, as a ReplicaGroup; a key it does not have is an
    error naming it."""
    if isinstance(group, ReplicaGroup):
        return group
    if not isinstance(group, Mapping):
        raise ValueError(f"cluster.groups[{index}]: must be a mapping of group keys, got {group!r}")
    known = ReplicaGroup.__dataclass_fields__
    for key in group:
        if key not in known:
            raise ValueError(
                f"cluster.groups[{index}].{key}: not a group key (a group's keys: "
                f"{', '.join(known)})"
            )
    return ReplicaGroup(**group)


@dataclass(frozen=True, slots=True)
class ClusterResult:
    """The cluster's ledger (the single engine's columns, ``replica`` and ``elsewhere_tokens``,
    and ``store_tokens`` with a store), each replica's run (its own ledger and engine statistics)
    and the store's traffic (None without one)."""

    turns: pd.DataFrame
    replicas: tuple[SimResult, ...]
    labels: dict = field(default_factory=dict)
    wall_s: float = 0.0
    active: tuple[tuple[float, float], ...] = ()  # each replica's first and last iteration time
    store: StoreStats | None = None
    discarded_tokens: int = 0  # first tokens of prefill parts, emitted again by the decode part
    # turns whose prefill part ran but whose decode part was rejected (longer than a decode
    # replica's GPU KV): not in the ledger, counted in the decode replica's rejected_turns
    decode_rejected: int = 0

    def merged(self) -> SimResult:
        """The cluster as one run (``sim.metrics.summarize`` reads it): the whole ledger, and
        the replicas' statistics added up (docs/semantics.md, "Clusters")."""
        stats = cluster_stats(self.replicas, self.active, self.wall_s)
        if self.discarded_tokens:
            stats = replace(stats, output_tokens=stats.output_tokens - self.discarded_tokens)
        return SimResult(self.turns, stats, self.labels)


def cluster_stats(
    replicas: Sequence[SimResult], active: Sequence[tuple[float, float]], wall_s: float
) -> EngineStats:
    """Counts and capacities are sums over replicas (peaks: the sum of each replica's own);
    simulated time runs from the first replica's first iteration to the last one's last; GPU
    utilization is the replicas' KV byte-seconds over the cluster's capacity in that time; the
    TBT and eviction-time samples are pooled."""
    stats = [r.stats for r in replicas]
    busy = [span for r, span in zip(replicas, active, strict=True) if r.stats.steps]
    start = min((a for a, _ in busy), default=0.0)
    sim_time = max((b for _, b in busy), default=0.0) - start
    gpu_cap = sum(s.gpu_capacity_bytes for s in stats)
    byte_s = sum(s.gpu_util * s.gpu_capacity_bytes * s.sim_time_s for s in stats if s.steps)
    util = byte_s / (gpu_cap * sim_time) if sim_time > 0 and math.isfinite(gpu_cap) else math.nan

    def total(name: str):
        return sum(getattr(s, name) for s in stats)

    return EngineStats(
        sim_time_s=sim_time,
        steps=total("steps"),
        output_tokens=total("output_tokens"),
        gpu_capacity_bytes=gpu_cap,
        cpu_capacity_bytes=total("cpu_capacity_bytes"),
        gpu_util=util,
        gpu_peak_bytes=total("gpu_peak_bytes"),
        peak_demand_bytes=total("peak_demand_bytes"),
        swap_in_bytes=total("swap_in_bytes"),
        swap_out_bytes=total("swap_out_bytes"),
        dropped_bytes=total("dropped_bytes"),
        preemptions=total("preemptions"),
        preempt_recompute_tokens=total("preempt_recompute_tokens"),
        rejected_turns=total("rejected_turns"),
        policy_metrics=stats[0].policy_metrics if len(stats) == 1 else (),
        wall_s=wall_s,
        evict_ns=pooled([s.evict_ns for s in stats]),
        tbt=pooled([s.tbt for s in stats]),
    )


def pooled(parts: Sequence[Samples]) -> Samples:
    """One Samples holding every part's samples: exact while every part is and their total
    stays under the exact limit, else folded into the histogram."""
    first = parts[0]
    out = Samples(
        weighted=first.weights is not None,
        typecode=first.values.typecode,
        rel_accuracy=first.rel_accuracy,
    )
    for part in parts:
        if part.exact:
            out.values.extend(part.values)
            if out.weights is not None and part.weights is not None:
                out.weights.extend(part.weights)
            out.compact()
        else:
            out.merge(part)
    return out


def simulate_cluster(
    sessions: Sequence[Session],
    cost: CostModel,
    memory: MemoryConfig,
    engine: EngineConfig | None = None,
    policy: str = "lru",
    seed: int = 0,
    cluster: ClusterConfig | None = None,
    debug: bool = False,
    decode_spans: bool = True,
    progress: Callable[[int], None] | None = None,
) -> ClusterResult:
    """Replay ``sessions`` (a list: the router needs the whole trace's sessions by index) on
    ``cluster.replicas`` replicas. ``debug`` checks every replica's invariants after each
    iteration; ``decode_spans=False`` steps every iteration (the same ledger); ``progress(n)``
    hears of every n turns completed, 256 at a time."""
    engine = engine or EngineConfig()
    cluster = cluster or ClusterConfig()
    if engine.kind != "kvsim":
        raise ValueError(f"cluster: engine.kind {engine.kind!r} is not supported (kvsim only)")
    if policy_class(policy).offline:
        raise ValueError(
            f"cluster: policy {policy!r} reads each session's next access, which depends on "
            f"where the router sends it: offline bounds run on one engine only"
        )
    setups = replica_setups(cluster.groups, cluster.replicas, cost, memory, policy)
    if not isinstance(sessions, Sequence):
        raise ValueError("cluster: sessions must be a list (the whole trace), not a stream")
    if cluster.store is not None:
        check_pages_cross([s.cost for s in setups], memory.block_tokens, "cluster.store")
    if cluster.disaggregation is not None:
        check_pages_cross([s.cost for s in setups], memory.block_tokens, "cluster.disaggregation")
    wall0 = time.perf_counter()
    params = dict(cluster.router_params)
    disagg = cluster.disaggregation
    if disagg is None:
        router, decode_router, first_decode = (
            make_router(cluster.router, cluster.replicas, params),
            None,
            cluster.replicas,
        )
        views: tuple[Sequence[Session], ...] = (sessions,)
    else:  # each pool has its own instance of the router
        first_decode = disagg.prefill_replicas
        router = make_router(cluster.router, first_decode, params)
        decode_router = make_router(cluster.router, cluster.replicas - first_decode, params)
        views = ([prefill_part(s) for s in sessions], [decode_part(s) for s in sessions])
    store: SharedStore | None = None
    store_hits: dict[tuple[int, int], int] = {}  # (session, turn) -> history tokens from the store
    transfers: dict[tuple[int, int], tuple[int, int]] = {}  # (session, turn) -> (tokens, bytes)

    def replica(r: int, shell: Cluster) -> Replica:
        nonlocal store
        decodes = r >= first_decode
        setup = setups[r]
        rep = Replica(
            r,
            views[-1] if decodes else views[0],
            setup.cost,
            setup.memory,
            engine,
            setup.policy,
            seed,
            to_front=shell.next_turn,
            turn_ended=shell.turn_ended,
            decode_spans=decode_spans,
            debug=debug,
        )
        sched = rep.sched
        if cluster.store is not None and store is None:
            store = SharedStore(
                cluster.store,
                page_bytes_of(sched.cost, sched.bt),  # a page of the whole model
                sched.bt,
                store_predictor(cluster, sessions),
            )
        if decodes:
            assert disagg is not None
            pulls = (DecodeLayerRecovery if sched.upp > 1 else DecodeRecovery)(sched, transfers)
            pulls.pulled = shell.pulled
            sched.recovery = pulls
            sched.pricer.remote_link = disagg.remote_link
        elif store is not None and cluster.store is not None:
            loads = StoreLayerRecovery if sched.upp > 1 else StoreRecovery
            sched.recovery = loads(sched, store, store_hits)
            sched.pricer.remote_link = cluster.store.link
        if store is not None and store.cfg.on_drop:  # what it drops goes to the store
            DropWriting.attach(sched.mem, store, sched)
            rep.writes_on_drop = True
        return rep

    shell = Cluster(
        sessions,
        replica,
        router,
        engine.replay,
        progress,
        decode_router,
        cluster.kv_events_delay_ms / 1e3,
    )
    shell.store = store
    replicas = shell.replicas
    with gc_paused():
        shell.run()
    wall = time.perf_counter() - wall0
    labels = run_labels(policy, memory, seed) | {
        "replicas": cluster.replicas,
        "router": cluster.router,
    }
    if cluster.groups:
        labels["groups"] = fleet_label(cluster.groups, cost.profile.name)
    results = tuple(
        SimResult(
            turns=ledger_frame(r.sched.ledger, sort=True, release=True),
            stats=engine_stats(r.sched, r, wall),
            labels=labels | replica_labels(setups[r.index], seed, r.index, cluster.groups),
        )
        for r in replicas
    )
    frames = [res.turns.assign(replica=np.int64(res.labels["replica"])) for res in results]
    turns = pd.concat(frames[:first_decode], ignore_index=True)
    discarded = decode_rejected = 0
    if disagg is not None:
        decoded = pd.concat(frames[first_decode:], ignore_index=True)
        turns, decode_rejected = merge_parts(turns, decoded, list(sessions), transfers)
        discarded = shell.handed_off  # a prefill part's first token, emitted again by decode
    turns = turns.sort_values(["session_id", "turn"], kind="stable", ignore_index=True)
    turns["elsewhere_tokens"] = shell.turn_column(turns, shell.elsewhere)
    if store is not None:
        turns["store_tokens"] = shell.turn_column(turns, store_hits)
    active = tuple((r.start_s or 0.0, r.end_s) for r in replicas)
    return ClusterResult(
        turns,
        results,
        labels,
        wall,
        active,
        None if store is None else store.stats,
        discarded,
        decode_rejected,
    )


def replica_labels(setup, seed: int, index: int, groups: Sequence[ReplicaGroup]) -> dict:
    """A replica's own labels: its index and, in a fleet of groups, its policy, memory and
    hardware (None: the run's)."""
    if not groups:
        return {"replica": index}
    return run_labels(setup.policy, setup.memory, seed) | {
        "replica": index,
        "hardware": setup.hardware,
    }


def store_predictor(cluster: ClusterConfig, sessions: Sequence[Session]):
    """The lifetime model of a store whose policy reads one: fitted on the trace's training
    split, as each replica's is (None for any other policy)."""
    assert cluster.store is not None
    if not getattr(policy_class(cluster.store.policy), "needs_predictor", False):
        return None
    return fit_lifetime(sessions)
