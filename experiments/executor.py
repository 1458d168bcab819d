"""Run grid points: in this process, in local worker processes, or on Ray.

Every point is independent and seeded, so results do not depend on the executor or the number of
workers; they come back in grid order. Traces and cost models are loaded once per process (cached by
spec). Traces are first loaded here, in the calling process, to count the turns the progress bar
runs over -- which also reports a bad trace (as a ConfigError naming the experiment file and the
trace's key) before any worker starts. An error while simulating a point is re-raised as
``PointError`` naming the point.

Local workers are started with the "spawn" method (no fork of a process that holds threads), so a
script that calls ``run_experiment`` with workers > 1 needs the usual ``if __name__ == "__main__":``
guard; the `kvsim` command and notebooks need nothing. On Ctrl-C (or SIGTERM, which the `kvsim`
command turns into a KeyboardInterrupt), a failed point, a killed worker or a crash of the calling
process, every worker ends (``experiments.worker_pool`` says how that is made certain).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.schema import ConfigError, ExecutorSpec, GridPoint, TraceSpec

if TYPE_CHECKING:
    import pandas as pd


class PointError(RuntimeError):
    """Simulating one grid point failed; the message names the point and the original error."""


@dataclass(frozen=True)
class PointResult:
    """What one grid point yields: its labels, summary row, and ledgers with the labels added."""

    index: int  # position in the list of points run
    point: GridPoint
    labels: dict[str, Any]  # GridPoint.labels(): the grid columns
    summary: dict[str, Any]  # sim.metrics.summarize() row (no labels)
    turns: pd.DataFrame | None  # per-turn ledger, label columns first (None: in turns_file)
    # sim.metrics.session_table(), label columns first (None: in sessions_file)
    sessions: pd.DataFrame | None
    steps: tuple[str, ...] = ()  # the step log as JSON lines, when the point asks for it
    # a cluster point: each replica's summary row, as a run of its own (``replica`` first)
    replicas: tuple[dict[str, Any], ...] = ()
    # a point run with a ledger folder: its ledger on disk (rows by (session_id, turn), without
    # the labels; ``sim.ledger_spool.LedgerFile``), in place of ``turns``
    turns_file: str | None = None
    # and its session table on disk (rows by session_id, without the labels), in place of
    # ``sessions``
    sessions_file: str | None = None

    def ledger(self) -> pd.DataFrame:
        """The per-turn ledger with the labels, read from ``turns_file`` where it is on disk (for
        small runs and tests: the whole ledger in memory)."""
        if self.turns is not None:
            return self.turns
        assert self.turns_file is not None
        from experiments.point_rows import with_labels
        from sim.ledger_spool import LedgerFile

        return with_labels(LedgerFile(self.turns_file).frame(), self.labels)

    def session_table(self) -> pd.DataFrame:
        """The session table with the labels, read from ``sessions_file`` where it is on disk
        (for small runs and tests)."""
        if self.sessions is not None:
            return self.sessions
        from experiments.point_rows import PointRows

        return PointRows(self.labels, path=self.sessions_file).whole()


# ---------------------------------------------------------------------------------------------
# Per-process caches

# A trace is read once per process, without its timing options (time_scale, until_s); the
# timed trace of the spec asked for last is kept beside it, so a rate sweep holds one copy at a time.
_TRACES: dict[str, Any] = {}  # the spec's options but timing -> traces.TraceLoad
_TIMED: dict[str, Any] = {}  # TraceSpec.key -> traces.TraceLoad (at most one)
_COSTS: dict[tuple[str, str, int], Any] = {}


@dataclass(frozen=True)
class TraceInfo:
    """What a trace spec loaded to (recorded in config.resolved.yaml)."""

    where: str  # key path in the experiment YAML
    label: str
    source: str  # the loader's description of where the trace came from
    sessions: int
    turns: int
    skipped: int  # sessions the loader dropped as malformed
    time_scale: float = 1.0  # the factor on its arrival and think times (the time_scale axis)


def _load(spec: TraceSpec) -> Any:
    import traces

    options = spec.to_dict()
    timing = {k: options.pop(k) for k in traces.TIMING_KEYS if k in options}
    traces.check_timing(timing)  # before a long read
    read = json.dumps(options, sort_keys=True, default=str)
    if read not in _TRACES:
        _TRACES[read] = traces.load_trace(options)
    if not timing:
        return _TRACES[read]
    if spec.key not in _TIMED:
        _TIMED.clear()
        _TIMED[spec.key] = traces.timed(_TRACES[read], timing)
    return _TIMED[spec.key]


def load_sessions(spec: TraceSpec) -> tuple:
    """The sessions of a trace spec, loaded once per process."""
    return tuple(_load(spec).sessions)


def trace_info(spec: TraceSpec) -> TraceInfo:
    load = _load(spec)
    sessions = tuple(load.sessions)
    return TraceInfo(
        where=spec.where,
        label=spec.label,
        source=str(getattr(load, "source", "")),
        sessions=len(sessions),
        turns=sum(len(s.turns) for s in sessions),
        skipped=int(getattr(load, "skipped", 0)),
        time_scale=spec.time_scale,
    )


def _cost_model(model: str, hardware: str, tp: int = 1) -> Any:
    if (model, hardware, tp) not in _COSTS:
        import costmodels

        _COSTS[(model, hardware, tp)] = costmodels.cost_model(model, hardware, tp=tp)
    return _COSTS[(model, hardware, tp)]


def _count_turns(spec: TraceSpec, source: str) -> int:
    """Turns of the trace; a trace that fails to load or holds no turn is a ConfigError."""
    from traces import TraceError

    try:
        load = _load(spec)
    except TraceError as exc:
        msg = str(exc).removeprefix("trace: ")  # the loader may name the section itself
        raise ConfigError(f"{source}: {spec.where}: {msg}", file=source, key=spec.where) from exc
    turns = sum(len(s.turns) for s in load.sessions)
    if turns == 0:
        skipped = int(getattr(load, "skipped", 0))
        why = f"; {skipped} session(s) were skipped as malformed" if skipped else ""
        raise ConfigError(
            f"{source}: {spec.where}: the trace holds no turns "
            f"({len(load.sessions)} sessions from {spec.label}{why}); nothing to "
            f"simulate",
            file=source,
            key=spec.where,
        )
    return turns


# ---------------------------------------------------------------------------------------------
# One point


def run_point(
    index: int,
    point: GridPoint,
    debug: bool = False,
    progress: Callable[[int], None] | None = None,
    ledger_dir: str | os.PathLike | None = None,
) -> PointResult:
    """Simulate one grid point in this process. Any failure becomes a PointError naming it.
    With ``ledger_dir``, a kvsim-engine point without a cluster writes its ledger there as it runs
    (``sim.simulate_to_file``), then its session table, and the result names the files
    (``turns_file``, ``sessions_file``) instead of holding them; a cluster or vllm-v1 point keeps
    both in memory."""
    spooled = ledger_dir is not None and point.cluster is None and point.engine.kind != "vllm-v1"
    files: list[Path] = []
    try:
        import costmodels
        import sim
        from sim.metrics import session_columns, session_frame, summarize
        from sim.quality import budget_quality

        sessions = load_sessions(point.trace)
        cost = _cost_model(point.model, point.hardware, point.tp)
        steps: list[str] = []
        emit = (
            (lambda e: steps.append(json.dumps({"point": index, **e}))) if point.step_log else None
        )
        extra: dict[str, Any] = {}
        per_replica: tuple[dict[str, Any], ...] = ()
        if point.cluster is not None:
            result, extra, per_replica = _simulate_cluster(point, sessions, cost, debug, progress)
        elif point.engine.kind == "vllm-v1":
            from sim.vllm_v1.run import simulate_vllm

            result = simulate_vllm(
                sessions,
                cost,
                point.memory,
                point.engine,
                policy=point.policy,
                seed=point.seed,
                progress=progress,
                on_step=emit,
            )
        else:
            log = None
            if emit is not None:  # the step log's module only where a point asks for one
                from sim.step_log import KvsimStepLog

                log = KvsimStepLog(emit)
            hook = {"on_iteration": log} if log is not None else {}
            options: dict[str, Any] = dict(
                policy=point.policy,
                seed=point.seed,
                debug=debug,
                progress=progress,
                budget=point.budget,
                sparse=point.sparse,
                **hook,
            )
            if spooled:
                assert ledger_dir is not None
                files = _ledger_files(ledger_dir, index)
                from sim.run import simulate_to_file

                result = simulate_to_file(
                    files[0], sessions, cost, point.memory, point.engine, **options
                )
            else:
                result = sim.simulate(sessions, cost, point.memory, point.engine, **options)
            if log is not None:
                log.close()
        labels = point.labels()
        table = session_columns(result)  # numpy arrays: a spooled point needs no frame
        summary = summarize(result, table, point.slo)
        layers = costmodels.get_model(point.model).num_layers
        summary.update(
            budget_quality(_quality_view(result, point.budget), point.budget, layers, point.seed)
        )
        summary.update(extra)
        from experiments.point_rows import with_labels, write_columns

        turns_file = sessions_file = None
        if spooled:  # the ledger in simulate's row order, the spool's completion order gone
            turns_file = str(result.ledger.write_sorted(files[1]).path)
            files[0].unlink()
            if len(table["turns"]):  # an empty table stays in memory: its dtypes are its own
                # the file write_unlabelled makes of session_table's frame, without the frame
                write_columns(table, session_kinds(table), files[2])
                sessions_file = str(files[2])
        return PointResult(
            index=index,
            point=point,
            labels=labels,
            summary=summary,
            turns=None if spooled else with_labels(result.turns, labels),
            sessions=None if sessions_file else with_labels(session_frame(table), labels),
            steps=tuple(steps),
            replicas=tuple({**labels, **row} for row in per_replica),
            turns_file=turns_file,
            sessions_file=sessions_file,
        )
    except BaseException as exc:
        for path in files:  # nothing half-done is left in the ledger folder
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".part").unlink(missing_ok=True)
        if not isinstance(exc, Exception):
            raise
        raise PointError(
            f"grid point {index} ({point.describe()}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def session_kinds(columns: dict[str, np.ndarray]) -> dict[str, str]:
    """The kinds (``experiments.point_rows``) of ``sim.metrics.session_columns``' arrays in the
    frame ``session_frame`` makes of them: the ids a text column (pandas' str dtype), the rest as
    their numpy dtypes."""
    kinds = {}
    for name, values in columns.items():
        kinds[name] = "str" if name == "session_id" else values.dtype.name
        if kinds[name] not in ("str", "int64", "float64"):
            raise TypeError(f"session table column {name}: unexpected dtype {values.dtype}")
    return kinds


def _ledger_files(ledger_dir: str | os.PathLike, index: int) -> list[Path]:
    """A point's files in ``ledger_dir``, under a name of its own (a rerun after an interruption
    never meets a file of the run before): the spool, in completion order, the ledger sorted as
    ``simulate``'s, and the session table."""
    folder = Path(ledger_dir)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"point-{index}-{uuid.uuid4().hex[:12]}"
    return [folder / f"{stem}.{kind}.parquet" for kind in ("spool", "turns", "sessions")]


def _quality_view(result: Any, budget: Any) -> Any:
    """What ``sim.quality.budget_quality`` reads of a run: a budgeted point's ``turns`` with its
    session ids, turn indices and history lengths (a spooled run's read from its file: those
    columns alone); full KV reads nothing."""
    from sim.ledger_spool import SpooledResult
    from sim.results import SimResult

    if budget.capacity is None or not isinstance(result, SpooledResult):
        return result
    columns = ("session_id", "turn", "history_tokens")
    import pandas as pd

    turns = pd.DataFrame({c: result.ledger.column(c) for c in columns}, columns=list(columns))
    return SimResult(turns=turns, stats=result.stats, labels=result.labels)


def _simulate_cluster(
    point: GridPoint,
    sessions: Sequence[Any],
    cost: Any,
    debug: bool,
    progress: Callable[[int], None] | None,
) -> tuple[Any, dict[str, Any], tuple[dict[str, Any], ...]]:
    """A cluster point: the cluster as one run (``ClusterResult.merged``, which the summary reads
    as any run's; its ledger keeps ``replica`` and ``elsewhere_tokens``), the cluster's own
    summary columns (``cluster_columns``; with a ``cluster.store`` section ``store_columns`` too,
    with a ``cluster.disaggregation`` section ``disagg_columns``), and each replica's summary row
    (``replica``, with a disaggregation section its ``role``, and ``summarize``'s columns of its
    own ledger and statistics, with its ``elsewhere_rate`` and, with a store section, its
    ``store_hit_rate``)."""
    from sim.cluster import simulate_cluster
    from sim.metrics import summarize

    if point.step_log:
        raise ValueError("step_log: a cluster run writes no step log")
    result = simulate_cluster(
        list(sessions),  # the router reads sessions by index: the whole trace
        cost,
        point.memory,
        point.engine,
        policy=point.policy,
        seed=point.seed,
        cluster=point.cluster,
        debug=debug,
        progress=progress,
    )
    on = result.turns["replica"].to_numpy()
    with_store = point.store_gb is not None or result.store is not None
    if with_store and "store_tokens" not in result.turns:  # capacity 0: nothing from a store
        result.turns["store_tokens"] = 0
    disagg = point.cluster.disaggregation if point.cluster is not None else None
    with_disagg = point.prefill_replicas is not None or disagg is not None
    if with_disagg and "decode_replica" not in result.turns:  # colocated: no part went anywhere
        for column, value in NO_TRANSFER.items():
            result.turns[column] = value
    prefill = disagg.prefill_replicas if disagg is not None else 0
    fleet = point.cluster is not None and bool(point.cluster.groups)
    hardware = point.labels()["hardware"]
    replicas = tuple(
        {
            "replica": i,
            **({"role": replica_role(i, prefill)} if with_disagg else {}),
            **(replica_setup(r.labels, hardware) if fleet else {}),
            **summarize(r, slo=point.slo),
            "elsewhere_rate": elsewhere_rate(result.turns[on == i]),
            **({"store_hit_rate": store_hit_rate(result.turns[on == i])} if with_store else {}),
        }
        for i, r in enumerate(result.replicas)
    )
    columns = (
        cluster_columns(result)
        | (store_columns(result) if with_store else {})
        | (disagg_columns(result.turns) if with_disagg else {})
    )
    return result.merged(), columns, replicas


# A colocated point's transfer columns (an experiment with a cluster.disaggregation section):
# no decode part, nothing sent.
NO_TRANSFER: dict[str, Any] = {
    "decode_replica": -1,
    "transfer_tokens": 0,
    "transfer_bytes": 0,
    "transfer_stall_s": 0.0,
}


def replica_setup(labels: dict, hardware: str) -> dict[str, Any]:
    """replicas.csv's own setup of a replica in a fleet of groups (``cluster.groups``): its
    hardware (``hardware``, the point's, where its group names none), policy and KV capacities."""
    return {
        "replica_hardware": labels["hardware"] or hardware,
        "replica_policy": labels["policy"],
        "replica_gpu_kv_gb": labels["gpu_kv_gb"],
        "replica_cpu_kv_gb": labels["cpu_kv_gb"],
    }


def replica_role(replica: int, prefill_replicas: int) -> str:
    """replicas.csv's ``role``: the first ``prefill_replicas`` replicas prefill, the rest decode;
    without a prefill pool (0) every replica is colocated."""
    if not prefill_replicas:
        return "colocated"
    return "prefill" if replica < prefill_replicas else "decode"


def disagg_columns(turns: pd.DataFrame) -> dict[str, float]:
    """A cluster run's disaggregation columns (an experiment with a ``cluster.disaggregation``
    section), from its ledger: the KV sent from prefill to decode replicas in GB (1e9 bytes), the
    p90 of the transfer stall over turns with a decode part (0.0 when none), and the share of
    turns with a decode part. A colocated point has 0.0 in each."""
    from sim.samples import finite_percentile

    decoded = turns["decode_replica"].to_numpy() >= 0
    stalls = turns["transfer_stall_s"].to_numpy(dtype=float)[decoded]
    p90 = finite_percentile(stalls, 90) if decoded.any() else 0.0
    return {
        "transfer_gb": float(turns["transfer_bytes"].to_numpy().sum()) / 1e9,
        "transfer_stall_p90_s": p90 if math.isfinite(p90) else 0.0,
        "decoded_share": float(decoded.sum()) / len(turns) if len(turns) else 0.0,
    }


def elsewhere_rate(turns: pd.DataFrame) -> float:
    """The share of history tokens computed only on another replica, token weighted over turns
    with history as re-prefill is (0.0 with no history)."""
    return _history_share(turns, "elsewhere_tokens")


def store_hit_rate(turns: pd.DataFrame) -> float:
    """The share of history tokens loaded from the shared store, token weighted over turns with
    history as ``elsewhere_rate`` is (0.0 with no history, or no store: no ``store_tokens``)."""
    return _history_share(turns, "store_tokens") if "store_tokens" in turns else 0.0


def _history_share(turns: pd.DataFrame, column: str) -> float:
    with_history = turns["history_tokens"].to_numpy() > 0
    history = float(turns["history_tokens"].to_numpy()[with_history].sum())
    part = float(turns[column].to_numpy()[with_history].sum())
    return part / history if history > 0 else 0.0


def cluster_columns(result: Any) -> dict[str, float]:
    """A cluster run's summary columns: the share of history tokens computed only on another
    replica (``elsewhere_rate``, token weighted over turns with history as re-prefill is; 0.0
    with no history), Jain's index of the turns each replica served, and the worst replica's
    TTFT p90: of the turns whose first token it emitted (with disaggregation, a turn's first
    token comes from its decode replica, and its TTFT runs from the prefill part's arrival)."""
    from sim.metrics import jain_index
    from sim.samples import finite_percentile

    turns = result.turns
    emitter = turns["replica"].to_numpy()
    if "decode_replica" in turns:
        decoded = turns["decode_replica"].to_numpy()
        emitter = np.where(decoded >= 0, decoded, emitter)
    ttft = turns["ttft_s"].to_numpy()
    p90s = [finite_percentile(ttft[emitter == r], 90) for r in range(len(result.replicas))]
    finite = [v for v in p90s if math.isfinite(v)]  # a replica that served no turn has none
    return {
        "elsewhere_rate": elsewhere_rate(result.turns),
        "replica_jain_turns": jain_index([len(r.turns) for r in result.replicas]),
        "replica_ttft_p90_max_s": max(finite) if finite else math.nan,
    }


def store_columns(result: Any) -> dict[str, float]:
    """A cluster run's store columns (an experiment with a ``cluster.store`` section): the share
    of history tokens loaded from the store (``store_hit_rate``), and the store's traffic in GB
    (1e9 bytes): loaded by replicas, written by them, and of that written, what they wrote as
    they dropped it (``cluster.store.write``: eviction or both; the rest was written at turns'
    completions). A point without a store (capacity 0) has 0.0 in each, so that a figure compares
    it with the others."""
    stats = result.store
    return {
        "store_hit_rate": store_hit_rate(result.turns),
        "store_loaded_gb": stats.loaded_bytes / 1e9 if stats is not None else 0.0,
        "store_written_gb": stats.written_bytes / 1e9 if stats is not None else 0.0,
        "store_drop_written_gb": stats.drop_written_bytes / 1e9 if stats is not None else 0.0,
    }


# ---------------------------------------------------------------------------------------------
# Executors


def run_points(
    points: Sequence[GridPoint],
    executor: ExecutorSpec,
    *,
    debug: bool = False,
    show_progress: bool = True,
    source: str = "<experiment>",
    on_result: Callable[[PointResult], None] | None = None,
    ledger_dir: str | os.PathLike | None = None,
) -> list[PointResult]:
    """Run every point and return results in the order of ``points``. A trace that fails to load
    raises ConfigError naming ``source`` and the trace's key before anything runs. ``on_result``
    hears of each point as soon as it is done (a checkpoint), whatever the executor.

    ``ledger_dir``: a folder for the points' ledgers (``run_point``): each point's result then
    names its file instead of holding its ledger, in this process and in local workers alike. A
    Ray worker may run on another machine, whose disk this process cannot read: Ray points hand
    their ledgers back in memory, as without ``ledger_dir``."""
    done = on_result or (lambda result: None)
    counts = {
        spec.key: _count_turns(spec, source) for spec in dict.fromkeys(p.trace for p in points)
    }  # each trace once, in grid order
    expected = [counts[p.trace.key] for p in points]
    bar = _progress_bar(sum(expected)) if show_progress else _NoBar()
    try:
        if executor.kind == "ray":
            return _run_ray(points, executor, debug, bar, expected, source, done)
        if executor.workers == 1 or len(points) == 1:
            return _run_inline(points, debug, bar, expected, done, ledger_dir)
        return _run_pool(points, executor.workers, debug, bar, expected, done, ledger_dir)
    finally:
        bar.close()


def _progress_bar(turns: int) -> Any:
    from tqdm.auto import tqdm  # here: a quiet run does not import it (nor the asyncio it pulls in)

    return tqdm(
        total=turns,
        unit="turn",
        desc="simulating",
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 5.0,
    )


class _NoBar:
    """The progress bar of a quiet run: hears of progress and shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _run_inline(points, debug, bar, expected, done, ledger_dir=None) -> list[PointResult]:
    out = []
    for i, p in enumerate(points):
        reported = [0]

        def progress(n: int, reported=reported) -> None:
            reported[0] += n
            bar.update(n)

        out.append(run_point(i, p, debug, progress, ledger_dir))
        done(out[-1])
        bar.update(max(0, expected[i] - reported[0]))  # rejected turns are never reported
    return out


def _run_pool(
    points, workers, debug, bar, expected, done_hook, ledger_dir=None
) -> list[PointResult]:
    results: list[PointResult | None] = [None] * len(points)
    reported = [0] * len(points)

    def on_progress(i: int, n: int) -> None:
        reported[i] += n
        bar.update(n)

    def on_result(i: int, result: PointResult) -> None:
        results[i] = result
        done_hook(result)
        bar.update(max(0, expected[i] - reported[i]))  # rejected turns are never reported
        reported[i] = expected[i]

    from experiments.worker_pool import WorkerDied, run_tasks  # here: one worker needs no pool

    tasks = [(i, p, debug, ledger_dir) for i, p in enumerate(points)]
    try:
        run_tasks(_pool_task, tasks, workers, on_result, on_progress)
    except WorkerDied as exc:
        i = exc.index
        raise PointError(f"grid point {i} ({points[i].describe()}) failed: {exc}") from exc
    return results  # type: ignore[return-value]


def _pool_task(
    index: int,
    point: GridPoint,
    debug: bool,
    ledger_dir: str | os.PathLike | None,
    progress: Callable[[int], None],
) -> PointResult:
    """A local worker's point (``worker_pool.run_tasks`` passes ``progress`` last): its ledger
    written to ``ledger_dir``, on the disk the calling process reads."""
    return run_point(index, point, debug, progress, ledger_dir)


def _ray_task(index: int, point: GridPoint, debug: bool) -> PointResult:
    return run_point(index, point, debug)


def _run_ray(
    points, executor: ExecutorSpec, debug, bar, expected, source, done_hook
) -> list[PointResult]:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"{source}: executor.kind: ray requires `pip install ray`",
            file=source,
            key="executor.kind",
        ) from None
    with _ray_connection(ray, executor, source) as own_head:
        # A Ray of the sweep's own ends with it, workers and all: its tasks need no cancelling
        # (a forced cancel that races a finishing task aborts Ray 2.60's driver: "Tried to complete
        # task that was not pending", seen in the stop stress test).
        cancel = not own_head
        return _run_on_ray(ray, points, debug, bar, expected, done_hook, cancel)


def _run_on_ray(ray, points, debug, bar, expected, done_hook, cancel=True) -> list[PointResult]:
    task = ray.remote(_ray_task)
    refs = [task.remote(i, p, debug) for i, p in enumerate(points)]
    where = {ref: i for i, ref in enumerate(refs)}
    results: list[PointResult | None] = [None] * len(points)
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = where[done[0]]
            try:
                results[i] = ray.get(done[0])
            except Exception as exc:  # RayTaskError wraps the PointError
                cause = getattr(exc, "cause", None)
                raise (
                    cause
                    if isinstance(cause, PointError)
                    else PointError(f"grid point {i} ({points[i].describe()}) failed: {exc}")
                ) from exc
            done_hook(results[i])  # checkpoint each point as it completes, in completion order
            bar.update(expected[i])
    except BaseException:
        if cancel:
            _cancel_ray(ray, pending)  # as with local workers: stop what is left, now
        raise
    return results  # type: ignore[return-value]


@contextlib.contextmanager
def _ray_connection(ray: Any, executor: ExecutorSpec, source: str) -> Iterator[bool]:
    """Join Ray for one sweep: the cluster at ``executor.address``, or, for ``local`` (and unset
    without RAY_ADDRESS), a Ray of the sweep's own on this machine that ends with it however the
    sweep ends (``ray_head``). A Ray this process joined before (``ray.init`` by hand) is used and
    left as it is. Yields whether the Ray is the sweep's own."""
    if ray.is_initialized():
        yield False
        return
    address = executor.address
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or "local"
    own = address == "local"
    with contextlib.ExitStack() as stack:
        if own:
            from experiments.ray_head import RayStartError, local_ray_head

            try:
                address = stack.enter_context(local_ray_head())
            except RayStartError as exc:
                raise ConfigError(
                    f"{source}: executor.address: local: {exc} (an address host:port joins a "
                    f"running cluster instead)",
                    file=source,
                    key="executor.address",
                ) from exc
        # Registered before the join: a Ctrl-C held through ``ray.init`` is raised as the call
        # returns, and the driver must still leave Ray before its head ends. ``ray.shutdown`` of a
        # Ray never joined does nothing.
        stack.callback(_shutdown, ray)  # before the head ends (the exit stack's order)
        with _signals_held():
            try:
                ray.init(address=address)
            except ConnectionError as exc:  # address: auto with no cluster running, unreachable
                raise ConfigError(
                    f"{source}: executor.address: {executor.address}: {exc} (address: "
                    f"local starts a new Ray on this machine)",
                    file=source,
                    key="executor.address",
                ) from exc
        yield own


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held pending through a Ray call, and this process's handlers put back
    before they are delivered. ``ray.init`` installs its own SIGTERM handler (``sys.exit``), and
    ``ray.shutdown`` leaves both signals at the system default underneath Python (a SIGTERM then
    ended `kvsim run` with no clean-up); a signal that lands inside either call's C++ code can
    abort the process (SIGABRT seen in the stop stress test). Held, a Ctrl-C or SIGTERM takes effect
    as soon as the call returns: the `kvsim` command stops the sweep and exits 130 or 143."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = {signal.SIGINT, signal.SIGTERM}
    ours = {sig: signal.getsignal(sig) for sig in sigs}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)  # threads Ray starts inherit it
    try:
        yield
    finally:
        for sig, handler in ours.items():
            if handler is not None:  # None: not set from Python; nothing to put back
                signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a held signal is delivered here


def _shutdown(ray: Any) -> None:
    with _signals_held():
        ray.shutdown()


def _cancel_ray(ray: Any, refs: Sequence[Any]) -> None:
    """Cancel the grid points still queued or running on the cluster (best effort)."""
    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # already finished, or the cluster is gone
            pass
