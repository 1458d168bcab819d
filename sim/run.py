"""``simulate``: one trace, one memory configuration, one policy -> a SimResult.

The trace is a list of sessions, or a stream of them (``traces.jsonl.iter_jsonl``, any iterator
in order of first arrival): a stream is read as the simulation reaches each session's start and a
finished session's records are let go, so a long trace runs in memory that follows the live
sessions, plus the ledger and the per-step statistics (docs/semantics.md, section 1, "Streaming a
trace"). Both give the same result. ``simulate_to_file`` streams the ledger to disk as well
(docs/semantics.md, section 6, "A ledger on disk").
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from costmodels import CostModel
from sim.config import BudgetConfig, EngineConfig, MemoryConfig, SparseConfig
from sim.engine import Engine
from sim.results import EngineStats, SimResult, ledger_frame, run_labels
from sim.scheduler import Scheduler
from sim.turns import Step
from traces.records import Session

if TYPE_CHECKING:
    from sim.ledger_spool import SpooledResult


def simulate(
    sessions: Sequence[Session] | Iterable[Session],
    cost: CostModel,
    memory: MemoryConfig,
    engine: EngineConfig | None = None,
    policy: str = "lru",
    seed: int = 0,
    debug: bool = False,
    progress: Callable[[int], None] | None = None,
    decode_spans: bool = True,
    budget: BudgetConfig | None = None,
    sparse: SparseConfig | None = None,
    on_iteration: Callable[[Scheduler, Step, float], None] | None = None,
) -> SimResult:
    """Replay ``sessions`` through the engine (``engine.kind`` vllm-v1: through
    ``sim.vllm_v1.run.simulate_vllm``). ``progress(n)`` hears of every n turns completed.

    ``sessions``: a list (any Sequence) of the whole trace, or a stream (any other iterable, e.g.
    ``traces.jsonl.iter_jsonl(path)``) in order of first arrival, each session with turn 0's
    ``arrival_s``; the stream is pulled one session at a time, as the run reaches its start, and
    gives the ledger the list gives. Policies fitted on the whole trace up front (``predictive``,
    KV adapters that need a lifetime predictor) raise ValueError on a stream. The ledger is kept
    as columns (``sim.results.Ledger``), not one object per turn.

    ``decode_spans=False`` runs strictly one SimPy event per iteration; the default runs the
    decode-only iterations between two events in one (same ledger, far fewer events).
    ``on_iteration(scheduler, step, now)`` is called after every iteration is planned (e.g. a
    ``sim.paged_layout.LayoutExporter``); it implies ``decode_spans=False``, since a span runs its
    decode-only iterations without planning them one by one.
    """
    engine = engine or EngineConfig()
    if engine.kind == "vllm-v1":  # the other engine: its own loop (sim.vllm_v1)
        full_kv = budget is None or budget == BudgetConfig()
        if not full_kv or sparse is not None or on_iteration is not None or debug:
            raise ValueError(
                "engine.kind vllm-v1 runs full KV, without sparse decode, iteration hooks or "
                "invariant checks"
            )
        from sim.vllm_v1.run import simulate_vllm

        return simulate_vllm(list(sessions), cost, memory, engine, policy, seed, progress=progress)
    sched, shell, wall0 = _start(
        sessions,
        cost,
        memory,
        engine,
        policy,
        seed,
        debug,
        progress,
        decode_spans,
        budget,
        sparse,
        on_iteration,
    )
    with gc_paused():
        shell.run()
    stats = engine_stats(sched, shell, time.perf_counter() - wall0)
    turns = ledger_frame(sched.ledger, sort=True, release=True)  # by (session_id, turn)
    return SimResult(turns=turns, stats=stats, labels=run_labels(policy, memory, seed))


def simulate_to_file(
    path: str | os.PathLike,
    sessions: Sequence[Session] | Iterable[Session],
    cost: CostModel,
    memory: MemoryConfig,
    engine: EngineConfig | None = None,
    policy: str = "lru",
    seed: int = 0,
    debug: bool = False,
    progress: Callable[[int], None] | None = None,
    decode_spans: bool = True,
    budget: BudgetConfig | None = None,
    sparse: SparseConfig | None = None,
    on_iteration: Callable[[Scheduler, Step, float], None] | None = None,
    rows_per_group: int | None = None,
) -> SpooledResult:
    """``simulate``, with the ledger streamed to the parquet file ``path`` as the run goes
    (``sim.ledger_spool``: at most ``rows_per_group`` turns in memory, None: its
    ``ROWS_PER_GROUP``), so a long trace streamed from disk runs in memory that does not grow with
    its turns. The file appears at ``path`` only once the run is complete, its rows in completion
    order; ``sim.metrics`` summarizes the result a column at a time, to the row ``simulate``'s
    result gives. The kvsim engine only. pyarrow is imported here, by a spooled run alone."""
    from sim.ledger_spool import ROWS_PER_GROUP, LedgerSpool, SpooledResult

    engine = engine or EngineConfig()
    if engine.kind == "vllm-v1":
        raise ValueError(
            "simulate_to_file runs the kvsim engine (engine.kind vllm-v1 keeps its own)"
        )
    sched, shell, wall0 = _start(
        sessions,
        cost,
        memory,
        engine,
        policy,
        seed,
        debug,
        progress,
        decode_spans,
        budget,
        sparse,
        on_iteration,
    )
    spool = LedgerSpool(path, rows_per_group or ROWS_PER_GROUP)
    sched.ledger = spool  # the scheduler appends to whatever ledger it holds
    try:
        with gc_paused():
            shell.run()
    except BaseException:
        spool.abort()
        raise
    stats = engine_stats(sched, shell, time.perf_counter() - wall0)
    return SpooledResult(spool.close(), stats, run_labels(policy, memory, seed))


def _start(
    sessions: Sequence[Session] | Iterable[Session],
    cost: CostModel,
    memory: MemoryConfig,
    engine: EngineConfig,
    policy: str,
    seed: int,
    debug: bool,
    progress: Callable[[int], None] | None,
    decode_spans: bool,
    budget: BudgetConfig | None,
    sparse: SparseConfig | None,
    on_iteration: Callable[[Scheduler, Step, float], None] | None,
) -> tuple[Scheduler, Engine, float]:
    """A kvsim run ready to go: its scheduler, its engine loop, and the wall clock at its start."""
    budget = budget or BudgetConfig()
    wall0 = time.perf_counter()
    if budget.scores_tokens:  # the scorer runs on every new token at every layer
        per_key = budget.scorer_s_per_key
        cost = cost.with_token_scoring(
            None if per_key is None else per_key * cost.model.num_kv_heads, budget.scorer_launch_s
        )
    if isinstance(sessions, Sequence):
        sessions = list(sessions)
    sched = Scheduler(
        sessions,
        cost,
        memory,
        engine,
        policy,
        seed,
        clock=time.perf_counter_ns,
        budget=budget,
        sparse=sparse,
    )
    shell = Engine(
        sched, debug=debug, progress=progress, decode_spans=decode_spans, on_iteration=on_iteration
    )
    return sched, shell, wall0


def engine_stats(sched: Scheduler, shell, wall_s: float) -> EngineStats:
    """The engine-wide figures of a finished run: ``shell`` is its loop's accounting (an
    ``Engine``, or a cluster's replica), with ``start_s``, ``end_s`` and ``gpu_byte_seconds``."""
    start = shell.start_s or 0.0
    sim_time = max(0.0, shell.end_s - start)
    gpu_cap = sched.mem.capacity[0]
    util = (
        shell.gpu_byte_seconds / (gpu_cap * sim_time)
        if sim_time > 0 and not math.isinf(gpu_cap)
        else math.nan
    )
    return EngineStats(
        sim_time_s=sim_time,
        steps=sched.step,
        output_tokens=sched.output_tokens,
        gpu_capacity_bytes=gpu_cap,
        cpu_capacity_bytes=sched.mem.capacity[1],
        gpu_util=util,
        gpu_peak_bytes=sched.mem.peak_gpu_bytes,
        peak_demand_bytes=sched.peak_live_pages * sched.page_bytes,
        swap_in_bytes=sched.swap_in_bytes,
        swap_out_bytes=sched.mem.swap_out_bytes,
        dropped_bytes=sched.mem.dropped_bytes,
        preemptions=sched.preemptions,
        preempt_recompute_tokens=sched.preempt_recompute_tokens,
        evict_ns=sched.mem.evict_samples,
        tbt=sched.tbt,
        rejected_turns=sched.rejected_turns,
        decode_h2d_bytes=sched.offload.sparse.h2d_bytes if sched.offload is not None else 0.0,
        gpu_reserved_peak_bytes=sched.mem.peak_reserved,
        policy_metrics=tuple(p.metrics() for p in sched.mem.policy),
        wall_s=wall_s,
    )


@contextmanager
def gc_paused():
    """Python's cyclic GC off for the run: the engine's state is acyclic (units are integers,
    sessions and turns hold no back-references), so collections only rescan live objects, at a
    cost that grows with the trace (6 % of a 10,000-session run). What a user's policy leaves in
    cycles is collected when the run ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
