"""`kvsim bench`: how fast the simulator replays a large synthetic trace (prints figures)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench",
        help="time the simulator on a large synthetic trace",
        description="Replay N synthetic sessions under memory pressure (GPU KV a fraction of the "
        "trace's peak live demand) and print wall time, simulated turns per second and "
        "peak RSS as min/median/max over repeats, then the time ratio at 2N sessions. "
        "Before it starts, stderr shows the expected duration (from a short "
        "calibration run), then a progress bar of simulated turns.",
    )
    p.add_argument("--sessions", type=int, default=10_000, help="sessions (default 10000)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    p.add_argument("--policy", default="lru", help="eviction policy (default lru)")
    p.add_argument(
        "--engine",
        default="kvsim",
        choices=("kvsim", "vllm-v1"),
        help="the engine (default kvsim; vllm-v1: no CPU tier, budgets or sparse offload)",
    )
    p.add_argument(
        "--gpu-fraction",
        type=float,
        default=0.10,
        help="GPU KV as a share of peak demand (default 0.10)",
    )
    p.add_argument("--cpu-kv-gb", type=float, default=0.0, help="CPU tier in GiB (default 0)")
    p.add_argument("--evict-unit", default="block", choices=("session", "block", "layer_block"))
    p.add_argument("--model", default="llama-3-8b")
    p.add_argument("--hardware", default="h100-sxm")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-scaling", action="store_true", help="skip the 2N-session run")
    p.add_argument(
        "--budget",
        default="full",
        choices=("full", "streamingllm", "smartkv"),
        help="token budget (default full); sizes from --sink/--window/--budget-tokens",
    )
    p.add_argument("--sink", type=int, default=4, help="budget: sink tokens (default 4)")
    p.add_argument("--window", type=int, default=256, help="budget: window tokens (default 256)")
    p.add_argument(
        "--budget-tokens",
        type=int,
        default=764,
        help="smartkv: best-scored tokens kept (default 764)",
    )
    p.add_argument(
        "--sparse",
        default="off",
        choices=("off", "quest", "full"),
        help="decode from CPU memory (default off; needs --cpu-kv-gb)",
    )
    p.add_argument("--k", type=int, default=8, help="quest: pages per layer and step (default 8)")
    p.add_argument("--ring-slots", type=int, default=16, help="sparse: GPU ring slots (default 16)")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no expected duration and no progress bar on stderr (figures still print)",
    )
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.bench import BenchConfig, run_bench

    if args.sessions < 1 or args.repeats < 1 or not 0 < args.gpu_fraction:
        raise ValueError("--sessions and --repeats must be >= 1 and --gpu-fraction > 0")
    if args.engine == "vllm-v1" and (
        args.cpu_kv_gb > 0 or args.budget != "full" or args.sparse != "off"
    ):
        raise ValueError("--engine vllm-v1 takes no --cpu-kv-gb, --budget or --sparse")
    cfg = BenchConfig(
        sessions=args.sessions,
        repeats=args.repeats,
        policy=args.policy,
        gpu_fraction=args.gpu_fraction,
        cpu_kv_gb=args.cpu_kv_gb,
        model=args.model,
        hardware=args.hardware,
        evict_unit=args.evict_unit,
        seed=args.seed,
        scaling=not args.no_scaling,
        budget=_budget(args),
        sparse=_sparse(args),
        engine=args.engine,
    )
    run_bench(cfg, show_progress=not args.quiet)
    return 0


def _budget(args: argparse.Namespace):
    from sim.config import BudgetConfig

    if args.budget == "full":
        return BudgetConfig()
    budget = args.budget_tokens if args.budget == "smartkv" else 0
    return BudgetConfig(args.budget, sink=args.sink, window=args.window, budget=budget)


def _sparse(args: argparse.Namespace):
    from sim.config import SparseConfig

    k = args.k if args.sparse == "quest" else None
    return SparseConfig(args.sparse, k=k, ring_slots=args.ring_slots)
