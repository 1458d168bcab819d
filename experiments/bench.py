"""``kvsim bench``: simulator speed on a large synthetic trace (a benchmark, not a test).

Replays N synthetic sessions (Llama-3-8B on H100, block units, LRU by default) with the GPU KV set to
a fraction of the trace's peak demand, which an unbounded-memory run measures first. Each timed
repeat runs in a fresh process so its peak RSS is its own. Prints wall time, simulated turns per
second and peak memory as min/median/max, then the same at 2N sessions and the time ratio.

Progress goes to stderr: first the expected duration, from a short calibration run (the same
procedure on at most CALIBRATION_SESSIONS sessions, in this process, timed per turn), then a bar of
simulated turns done out of the total of every run (the unbounded run and the repeats, at each
size), with the elapsed and remaining time. The timed repeats report the turns the engine counts
(every 256 turns) over their worker's pipe, at most four times a second.
"""

from __future__ import annotations

import math
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from experiments.worker_pool import run_tasks
from sim.config import GIB, BudgetConfig, SparseConfig

CALIBRATION_SESSIONS = 300
# What the figures are held against (printed beside them; a benchmark judges nothing itself).
TURNS_PER_S_TARGET = 4_000  # block units, LRU, 10,000 sessions at 10 % of peak demand
VLLM_TURNS_PER_S_TARGET = 2_000  # the vllm-v1 engine: it prices every step, decodes included
DOUBLING_TARGET = 2.1  # wall time at 2N sessions over N
KIB_PER_SESSION_TARGET = 40  # peak RSS over sessions
SPAWN_S = 2.0  # rough cost of starting one timed process (spawn and imports), for the estimate


@dataclass(frozen=True, slots=True)
class BenchConfig:
    sessions: int = 10_000
    repeats: int = 3
    policy: str = "lru"
    gpu_fraction: float = 0.10  # GPU KV as a share of the unbounded run's peak demand
    cpu_kv_gb: float = 0.0
    model: str = "llama-3-8b"
    hardware: str = "h100-sxm"
    evict_unit: str = "block"
    seed: int = 1
    scaling: bool = True  # also run 2N sessions and report the time ratio
    budget: BudgetConfig = field(default_factory=BudgetConfig)  # token budgets (default: full KV)
    sparse: SparseConfig = field(default_factory=SparseConfig)  # decode from CPU (default: off)
    engine: str = "kvsim"  # kvsim | vllm-v1


@dataclass(frozen=True, slots=True)
class Sample:
    wall_s: float
    turns: int
    peak_rss_mib: float

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.wall_s


def _trace(n: int, seed: int):
    from traces import load_trace

    return load_trace({"kind": "synthetic", "sessions": n, "seed": seed}).sessions


def _import_engine(cfg: BenchConfig) -> None:
    """The modules ``_simulate`` uses (``sim`` imports its names on first use): the policy's own
    module (the registry imports it when first named) and pandas, for the ledger's frame that
    ``simulate`` returns (imported on first use since runs that write files build none)."""
    import pandas  # noqa: F401

    from sim.policies import policy_class

    policy_class(cfg.policy)
    if cfg.engine == "vllm-v1":
        import sim.vllm_v1.run  # noqa: F401
    else:
        import sim.run  # noqa: F401


def _simulate(cfg: BenchConfig, sessions, cost, mem, progress=None):
    """One bounded run of ``cfg``'s engine."""
    if cfg.engine == "vllm-v1":
        from sim.config import EngineConfig
        from sim.vllm_v1.run import simulate_vllm

        return simulate_vllm(
            sessions, cost, mem, EngineConfig(kind="vllm-v1"), cfg.policy, cfg.seed, progress
        )
    from sim import simulate

    return simulate(
        sessions,
        cost,
        mem,
        policy=cfg.policy,
        seed=cfg.seed,
        progress=progress,
        budget=cfg.budget,
        sparse=cfg.sparse,
    )


def peak_demand_gb(
    cfg: BenchConfig, n: int, progress: Callable[[int], None] | None = None
) -> float:
    """Peak KV of the sessions still in progress, replayed with unbounded GPU memory. Nothing is
    evicted there, so the policy plays no part: LRU replays it, the fastest."""
    from costmodels import cost_model
    from sim import MemoryConfig, simulate

    res = simulate(
        _trace(n, cfg.seed),
        cost_model(cfg.model, cfg.hardware),
        MemoryConfig(gpu_kv_gb=math.inf, block_tokens=16, evict_unit=cfg.evict_unit),
        policy="lru",
        seed=cfg.seed,
        progress=progress,
    )
    return res.stats.peak_demand_bytes / GIB


def trace_turns(n: int, seed: int) -> int:
    return sum(len(s.turns) for s in _trace(n, seed))


def estimate_s(cfg: BenchConfig) -> tuple[float, dict[int, int], float]:
    """(expected seconds for the whole benchmark, turns per size, calibration turns/s): the same
    procedure, one unbounded and one bounded run, on at most CALIBRATION_SESSIONS sessions."""
    from costmodels import cost_model
    from sim import MemoryConfig

    sizes = [cfg.sessions, 2 * cfg.sessions] if cfg.scaling else [cfg.sessions]
    turns = {n: trace_turns(n, cfg.seed) for n in sizes}
    small = min(cfg.sessions, CALIBRATION_SESSIONS)
    t0 = time.perf_counter()
    demand = peak_demand_gb(cfg, small)
    t1 = time.perf_counter()
    mem = MemoryConfig(
        gpu_kv_gb=max(cfg.gpu_fraction * demand, 1e-3),
        cpu_kv_gb=cfg.cpu_kv_gb,
        block_tokens=16,
        evict_unit=cfg.evict_unit,
    )
    _simulate(cfg, _trace(small, cfg.seed), cost_model(cfg.model, cfg.hardware), mem)
    t2 = time.perf_counter()
    small_turns = trace_turns(small, cfg.seed)
    per_turn_unbounded, per_turn_bounded = (t1 - t0) / small_turns, (t2 - t1) / small_turns
    total = sum(
        t * (per_turn_unbounded + cfg.repeats * per_turn_bounded) + cfg.repeats * SPAWN_S
        for t in turns.values()
    )
    return total, turns, small_turns / max(t2 - t1, 1e-9)


def _one_run(cfg: BenchConfig, n: int, gpu_gb: float, progress) -> tuple:
    """One timed run (in its own process): wall seconds, turns, peak RSS (MiB), re-prefill rate."""
    from costmodels import cost_model
    from sim import MemoryConfig

    sessions = _trace(n, cfg.seed)
    cost = cost_model(cfg.model, cfg.hardware)
    mem = MemoryConfig(
        gpu_kv_gb=gpu_gb, cpu_kv_gb=cfg.cpu_kv_gb, block_tokens=16, evict_unit=cfg.evict_unit
    )
    _import_engine(cfg)  # imports are start-up, not simulation: outside the timed run
    t0 = time.perf_counter()
    res = _simulate(cfg, sessions, cost, mem, progress)
    wall = time.perf_counter() - t0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    reprefill = float(res.turns.recomputed_tokens.sum() / max(1, res.turns.history_tokens.sum()))
    return wall, len(res.turns), rss_mib, reprefill


def timed_runs(
    cfg: BenchConfig, n: int, gpu_gb: float, progress: Callable[[int], None] | None = None
) -> tuple[list[Sample], float]:
    """``cfg.repeats`` timed runs, each in a fresh process (a pool of one worker, so an interrupt
    or a crash of this process ends it too); ``progress(n)`` gets the turns each simulates."""
    samples, reprefill = [], math.nan
    for _ in range(cfg.repeats):
        got: list[tuple] = []
        seen = [0]

        def on_progress(index: int, k: int, seen=seen) -> None:
            seen[0] += k
            if progress is not None:
                progress(k)

        run_tasks(_one_run, [(cfg, n, gpu_gb)], 1, lambda i, r: got.append(r), on_progress)
        wall, turns, rss, reprefill = got[0]
        if progress is not None and turns > seen[0]:
            progress(turns - seen[0])
        samples.append(Sample(wall, turns, rss))
    return samples, reprefill


def _mmm(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def _hms(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def run_bench(cfg: BenchConfig, echo=print, show_progress: bool = True) -> dict:
    """Run the benchmark; the figures go to ``echo``, progress (when shown) to stderr."""
    from tqdm.auto import tqdm

    figures: dict[int | str, Any] = {}  # per session count, then doubling_ratio
    sizes = [cfg.sessions, 2 * cfg.sessions] if cfg.scaling else [cfg.sessions]
    if show_progress:
        expected, turns, rate = estimate_s(cfg)
        runs = " + ".join(f"{turns[n]:,} turns x {1 + cfg.repeats} runs" for n in sizes)
        print(
            f"bench: {runs}; expected about {_hms(expected)} (calibration: "
            f"{rate:,.0f} turns/s on {min(cfg.sessions, CALIBRATION_SESSIONS)} sessions)",
            file=sys.stderr,
            flush=True,
        )
        total = sum(turns[n] * (1 + cfg.repeats) for n in sizes)
    else:
        total = 0
    bar = tqdm(
        total=total,
        unit="turn",
        desc="bench",
        disable=not show_progress,
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=0.5 if sys.stderr.isatty() else 10.0,
    )
    try:
        for n in sizes:
            figures[n] = _one_size(cfg, n, echo, bar)
    finally:
        bar.close()
    if cfg.scaling:
        ratio = figures[sizes[1]]["median_wall_s"] / figures[sizes[0]]["median_wall_s"]
        echo(
            f"doubling the sessions: {ratio:.2f}x the median wall time (target <= {DOUBLING_TARGET}x)"
        )
        figures["doubling_ratio"] = ratio
    return figures


def _one_size(cfg: BenchConfig, n: int, echo, bar) -> dict:
    start = bar.n
    demand = peak_demand_gb(cfg, n, progress=bar.update)
    gpu_gb = cfg.gpu_fraction * demand
    samples, reprefill = timed_runs(cfg, n, gpu_gb, progress=bar.update)
    if not bar.disable:  # turns rejected as too long for the GPU KV are never reported
        bar.update(max(0, start + trace_turns(n, cfg.seed) * (1 + cfg.repeats) - bar.n))
    walls = [s.wall_s for s in samples]
    with bar.external_write_mode():
        echo(
            f"{n} sessions, {samples[0].turns} turns, {cfg.model} on {cfg.hardware}, "
            f"{cfg.evict_unit} units, {cfg.policy}{_design(cfg)}: peak demand {demand:.2f} GiB, "
            f"GPU KV {gpu_gb:.2f} GiB ({cfg.gpu_fraction:.0%}), reprefill_rate {reprefill:.3f}"
        )
        echo(f"  wall s          min/median/max: {_mmm(walls, '.2f')}")
        echo(f"  turns/s         min/median/max: {_mmm([s.turns_per_s for s in samples], ',.0f')}")
        echo(f"  peak RSS MiB    min/median/max: {_mmm([s.peak_rss_mib for s in samples], ',.0f')}")
        echo(
            f"  KiB per session min/median/max: "
            f"{_mmm([s.peak_rss_mib * 1024 / n for s in samples], ',.1f')}  (peak RSS / sessions; "
            f"target <= {KIB_PER_SESSION_TARGET})"
        )
        median_rate = statistics.median(s.turns_per_s for s in samples)
        target = VLLM_TURNS_PER_S_TARGET if cfg.engine == "vllm-v1" else TURNS_PER_S_TARGET
        echo(f"  median {median_rate:,.0f} turns/s against a target of >= {target:,}")
    return {
        "median_wall_s": statistics.median(walls),
        "turns": samples[0].turns,
        "turns_per_s": samples[0].turns / statistics.median(walls),
        "peak_demand_gb": demand,
        "gpu_kv_gb": gpu_gb,
        "reprefill_rate": reprefill,
    }


def _design(cfg: BenchConfig) -> str:
    """The token budget and sparse mode, when they are not the default (full KV, no offload)."""
    out = "" if cfg.engine == "kvsim" else f", engine {cfg.engine}"
    out += "" if cfg.budget.kind == "full" else f", budget {cfg.budget.label}"
    return out + ("" if not cfg.sparse.enabled else f", sparse {cfg.sparse.label}")
