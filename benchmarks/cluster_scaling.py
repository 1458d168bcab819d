"""A cluster from 1 to 16 replicas on one synthetic trace: turns/s and peak memory (a benchmark,
not a test).

Each cluster size runs in a fresh process (so its peak RSS is its own): the synthetic multi-turn
trace of ``--sessions`` sessions, Llama-3-8B on an H100, ``--gpu-kv-gb`` of GPU KV per replica and
no CPU tier, policy lru, router ``--router``. Reported per size: wall and CPU seconds of the
``simulate_cluster`` call, turns per CPU second, iterations (all replicas), the cluster's
re-prefill rate, and peak RSS (getrusage ru_maxrss) after the run. ``--repeats`` runs each size
that many times and reports min / median / max of the CPU seconds. Size 0 is the single engine
(``simulate``) on the same trace and one replica's memory, for comparison. ``--store-gb`` puts a
shared KV store of that size (LRU, default link) behind the replicas; ``--prefill N`` makes the
first N replicas of each size a prefill pool and the rest a decode pool (sizes without a decode
replica are skipped).

    python benchmarks/cluster_scaling.py                                 # 10,000 sessions, 0 1 2 4 8 16
    python benchmarks/cluster_scaling.py --sessions 100000 --replicas 16 # the large run
    python benchmarks/cluster_scaling.py --replicas 2 4 8 16 --store-gb 512 --prefill 1
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def one_run(
    sessions: int,
    replicas: int,
    gpu_kv_gb: float,
    router: str,
    seed: int,
    store_gb: float = 0.0,
    prefill: int = 0,
) -> dict:
    """Run one cluster size in this process and return its figures."""
    from costmodels import cost_model
    from sim import EngineConfig, MemoryConfig, simulate
    from sim.cluster import ClusterConfig, simulate_cluster
    from sim.cluster.disagg import DisaggConfig
    from sim.cluster.store import StoreConfig
    from traces import load_trace

    trace = load_trace({"kind": "synthetic", "sessions": sessions, "seed": seed}).sessions
    cost = cost_model("llama-3-8b", "h100-sxm")
    memory = MemoryConfig(gpu_kv_gb=gpu_kv_gb)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if replicas == 0:
        res = simulate(trace, cost, memory, EngineConfig(), "lru", 0)
        turns, steps = res.turns, res.stats.steps
    else:
        cfg = ClusterConfig(
            replicas,
            router,
            store=StoreConfig(store_gb) if store_gb else None,
            disaggregation=DisaggConfig(prefill) if prefill else None,
        )
        cres = simulate_cluster(trace, cost, memory, EngineConfig(), "lru", 0, cfg)
        turns, steps = cres.turns, sum(r.stats.steps for r in cres.replicas)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    history = turns.history_tokens.sum()
    return {
        "replicas": replicas,
        "turns": len(turns),
        "wall_s": wall,
        "cpu_s": cpu,
        "steps": int(steps),
        "reprefill_rate": float(turns.recomputed_tokens.sum() / history) if history else 0.0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--replicas", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16])
    ap.add_argument("--gpu-kv-gb", type=float, default=16.0, help="per replica")
    ap.add_argument("--router", default="kv-aware")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--store-gb", type=float, default=0.0, help="a shared store (0: none)")
    ap.add_argument("--prefill", type=int, default=0, help="prefill replicas (0: colocated)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child process
    args = ap.parse_args(argv)
    if args.one:
        r = args.replicas[0]
        fig = one_run(
            args.sessions, r, args.gpu_kv_gb, args.router, args.seed, args.store_gb, args.prefill
        )
        print(json.dumps(fig))
        return 0
    print(
        f"{args.sessions:,} synthetic sessions, {args.gpu_kv_gb} GiB GPU KV per replica, "
        f"router {args.router}, lru; CPU seconds min / median / max of {args.repeats}"
        + (f"; a {args.store_gb} GB store" if args.store_gb else "")
        + (f"; {args.prefill} prefill replica(s), the rest decode" if args.prefill else "")
    )
    print(
        f"{'replicas':>8} {'turns':>8} {'cpu s (min/med/max)':>22} {'turns/cpu-s':>11} "
        f"{'steps':>10} {'re-prefill':>10} {'peak MiB':>9}"
    )
    for r in args.replicas:
        if args.prefill and not 0 < args.prefill < r:
            continue  # no decode replica (or the single engine): not a disaggregated cluster
        runs = []
        for _ in range(args.repeats):
            cmd = [sys.executable, __file__, "--one", "--replicas", str(r)]
            cmd += ["--sessions", str(args.sessions), "--gpu-kv-gb", str(args.gpu_kv_gb)]
            cmd += ["--router", args.router, "--seed", str(args.seed)]
            cmd += ["--store-gb", str(args.store_gb), "--prefill", str(args.prefill)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        cpu = sorted(x["cpu_s"] for x in runs)
        x = runs[0]
        label = "single" if r == 0 else str(r)
        print(
            f"{label:>8} {x['turns']:>8,} "
            f"{cpu[0]:>6.1f} /{statistics.median(cpu):>6.1f} /{cpu[-1]:>6.1f} "
            f"{x['turns'] / statistics.median(cpu):>11,.0f} {x['steps']:>10,} "
            f"{x['reprefill_rate']:>10.3f} {max(y['peak_rss_mib'] for y in runs):>9,.0f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    raise SystemExit(main())
