"""``kvsim bench``: simulator speed on a large synthetic trace (a benchmark, not a test).

Replays N synthetic sessions (Llama-3-8B on H100, block units, LRU by default) with the GPU KV set to
a fraction of the trace's peak demand, which an unbounded-memory run measures first. Each timed
repeat runs in a fresh process so its peak RSS is its own. Prints wall time, simulated turns per
second and peak memory as min/median/max, then the same at 2N sessions and the time ratio.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import resource
import statistics
import time
from dataclasses import dataclass

from sim.config import GIB


@dataclass(frozen=True, slots=True)
class BenchConfig:
    sessions: int = 10_000
    repeats: int = 3
    policy: str = "lru"
    gpu_fraction: float = 0.10      # GPU KV as a share of the unbounded run's peak demand
    cpu_kv_gb: float = 0.0
    model: str = "llama-3-8b"
    hardware: str = "h100-sxm"
    evict_unit: str = "block"
    seed: int = 1
    scaling: bool = True            # also run 2N sessions and report the time ratio


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


def peak_demand_gb(cfg: BenchConfig, n: int) -> float:
    """Peak KV of the sessions still in progress, replayed with unbounded GPU memory."""
    from costmodels import cost_model
    from sim import MemoryConfig, simulate
    res = simulate(_trace(n, cfg.seed), cost_model(cfg.model, cfg.hardware),
                   MemoryConfig(gpu_kv_gb=math.inf, block_tokens=16, evict_unit=cfg.evict_unit),
                   policy=cfg.policy, seed=cfg.seed)
    return res.stats.peak_demand_bytes / GIB


def _one_run(cfg: BenchConfig, n: int, gpu_gb: float, out: mp.Queue) -> None:
    from costmodels import cost_model
    from sim import MemoryConfig, simulate
    sessions = _trace(n, cfg.seed)
    cost = cost_model(cfg.model, cfg.hardware)
    mem = MemoryConfig(gpu_kv_gb=gpu_gb, cpu_kv_gb=cfg.cpu_kv_gb, block_tokens=16,
                       evict_unit=cfg.evict_unit)
    t0 = time.perf_counter()
    res = simulate(sessions, cost, mem, policy=cfg.policy, seed=cfg.seed)
    wall = time.perf_counter() - t0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    reprefill = float(res.turns.recomputed_tokens.sum() / max(1, res.turns.history_tokens.sum()))
    out.put((wall, len(res.turns), rss_mib, reprefill))


def timed_runs(cfg: BenchConfig, n: int, gpu_gb: float) -> tuple[list[Sample], float]:
    ctx = mp.get_context("spawn")
    samples, reprefill = [], math.nan
    for _ in range(cfg.repeats):
        q = ctx.Queue()
        p = ctx.Process(target=_one_run, args=(cfg, n, gpu_gb, q))
        p.start()
        try:
            wall, turns, rss, reprefill = q.get()
        except BaseException:
            p.terminate()  # interrupted (Ctrl-C, SIGTERM): stop the timed run too
            p.join()
            raise
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"benchmark process exited with {p.exitcode}")
        samples.append(Sample(wall, turns, rss))
    return samples, reprefill


def _mmm(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def run_bench(cfg: BenchConfig, echo=print) -> dict:
    figures = {}
    sizes = [cfg.sessions, 2 * cfg.sessions] if cfg.scaling else [cfg.sessions]
    for n in sizes:
        demand = peak_demand_gb(cfg, n)
        gpu_gb = cfg.gpu_fraction * demand
        samples, reprefill = timed_runs(cfg, n, gpu_gb)
        walls = [s.wall_s for s in samples]
        echo(f"{n} sessions, {samples[0].turns} turns, {cfg.model} on {cfg.hardware}, "
             f"{cfg.evict_unit} units, {cfg.policy}: peak demand {demand:.2f} GiB, "
             f"GPU KV {gpu_gb:.2f} GiB ({cfg.gpu_fraction:.0%}), reprefill_rate {reprefill:.3f}")
        echo(f"  wall s          min/median/max: {_mmm(walls, '.2f')}")
        echo(f"  turns/s         min/median/max: {_mmm([s.turns_per_s for s in samples], ',.0f')}")
        echo(f"  peak RSS MiB    min/median/max: {_mmm([s.peak_rss_mib for s in samples], ',.0f')}")
        figures[n] = {"median_wall_s": statistics.median(walls), "turns": samples[0].turns,
                      "turns_per_s": samples[0].turns / statistics.median(walls),
                      "peak_demand_gb": demand, "gpu_kv_gb": gpu_gb, "reprefill_rate": reprefill}
    if cfg.scaling:
        ratio = figures[sizes[1]]["median_wall_s"] / figures[sizes[0]]["median_wall_s"]
        echo(f"doubling the sessions: {ratio:.2f}x the median wall time (target <= 2.2x)")
        figures["doubling_ratio"] = ratio
    return figures
