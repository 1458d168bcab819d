"""`kvsim cachesim`: replay an object request stream through a policy, libCacheSim-style.

Semantics: docs/semantics.md section 4 ("Object streams").
"""

from __future__ import annotations

import argparse
import json
import sys

JSON_KEYS = ("policy", "capacity", "requests", "hits", "misses", "byte_requests", "byte_hits")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cachesim",
        help="replay an object request stream through one eviction policy",
        description="Replay a CSV request stream (header obj_id,size[,time]) through an eviction "
        "policy with libCacheSim's semantics: the first request to an object is a miss, "
        "a miss admits the object evicting until it fits, an object larger than the "
        "capacity is not admitted. Capacity is in the units of size.",
    )
    p.add_argument(
        "--trace", required=True, help="CSV file with header obj_id,size (optional time)"
    )
    p.add_argument(
        "--policy",
        required=True,
        help="a registered policy name (see `kvsim list policies`), module:Class, or "
        "'all' for a table of every registered policy that supports cachesim",
    )
    p.add_argument("--capacity", required=True, type=int, help="cache capacity, in units of size")
    p.add_argument(
        "--json",
        action="store_true",
        help="print {policy, capacity, requests, hits, misses, byte_requests, byte_hits} "
        "(with --policy all: a JSON list of those objects)",
    )
    p.add_argument(
        "--debug", action="store_true", help="show tracebacks instead of one-line errors"
    )
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.start_up import freed_memory_kept, start_up_frozen

    with freed_memory_kept(), start_up_frozen() as started:
        return _main(args, started)


def _main(args: argparse.Namespace, started) -> int:
    from sim.cachesim import read_trace, simulate_cache

    if args.capacity < 1:
        raise ValueError(f"--capacity must be a positive integer, got {args.capacity}")
    stream = read_trace(args.trace)
    started()  # numpy is imported and the stream read
    if args.policy != "all":
        if ":" in args.policy:  # a module:Class, importable from here
            from experiments.schema import check_policy_name

            check_policy_name(args.policy)
        # A registered name needs no schema: importing it (pydantic, pandas) took longer than
        # reading and replaying a million requests. An unknown name fails in simulate_cache,
        # with the closest registered one.
        res = simulate_cache(stream, args.policy, args.capacity)
        if args.json:
            print(json.dumps(res.summary()))
        else:
            _print_table([res])
        return 0

    from sim.policies import available_policies  # every policy: only "all" needs them

    results, skipped = [], []
    for name in available_policies():
        try:
            results.append(simulate_cache(stream, name, args.capacity))
        except Exception as exc:  # a policy that needs the engine's context (cost model, sessions)
            if args.debug:
                raise
            skipped.append((name, f"{type(exc).__name__}: {exc}"))
    if args.json:
        print(json.dumps([r.summary() for r in results]))
    else:
        _print_table(results)
    for name, why in skipped:
        print(f"kvsim cachesim: skipped {name} (does not support cachesim: {why})", file=sys.stderr)
    return 0


def _print_table(results) -> None:
    header = ("policy", "capacity", "requests", "hits", "misses", "hit_ratio", "byte_hit_ratio")
    rows = [
        (
            r.policy,
            str(r.capacity),
            str(r.requests),
            str(r.hits),
            str(r.misses),
            f"{r.hit_ratio:.4f}",
            f"{r.byte_hit_ratio:.4f}",
        )
        for r in results
    ]
    widths = [
        max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
        for i, h in enumerate(header)
    ]
    print(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))
        )
    )
    for row in rows:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )
        )
