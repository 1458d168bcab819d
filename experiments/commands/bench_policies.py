"""`kvsim bench-policies`: eviction decision latency per policy and cachesim throughput (prints figures)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench-policies",
        help="time eviction decisions and cachesim replay speed",
        description="Eviction decision latency (evict + insert) with N resident units for "
        "every online registered policy (p50/p99 in microseconds), then cachesim "
        "throughput on a Zipf stream for lru and fifo next to libCacheSim's on the same "
        "stream (min/median/max over repeats, and the ratio). A benchmark: it prints "
        "figures, it asserts nothing.",
    )
    p.add_argument(
        "--resident", type=int, default=1_000_000, help="resident units (default 1000000)"
    )
    p.add_argument(
        "--cycles", type=int, default=20_000, help="timed cycles per policy (default 20000)"
    )
    p.add_argument(
        "--requests", type=int, default=1_000_000, help="cachesim stream length (default 1e6)"
    )
    p.add_argument("--objects", type=int, default=100_000, help="Zipf universe (default 100000)")
    p.add_argument("--alpha", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    p.add_argument("--capacity", type=int, default=10_000, help="cachesim capacity (default 10000)")
    p.add_argument("--repeats", type=int, default=3, help="throughput repeats (default 3)")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        help="latency benchmark for this policy only (repeatable; default: all online)",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=1,
        help="units per page: 1 (block, default) or a model's layers (layer_block units)",
    )
    p.add_argument("--no-throughput", action="store_true", help="skip the cachesim throughput part")
    p.add_argument("--seed", type=int, default=1)
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.policy_bench import PolicyBenchConfig, run_policy_bench

    for name in ("resident", "cycles", "requests", "objects", "capacity", "repeats", "layers"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1")
    cfg = PolicyBenchConfig(
        resident=args.resident,
        cycles=args.cycles,
        requests=args.requests,
        objects=args.objects,
        alpha=args.alpha,
        capacity=args.capacity,
        repeats=args.repeats,
        seed=args.seed,
        policies=tuple(args.policy),
        layers=args.layers,
        throughput=not args.no_throughput,
    )
    run_policy_bench(cfg)
    return 0
