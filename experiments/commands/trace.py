"""`kvsim trace stats FILE`: look at a trace before simulating it."""
from __future__ import annotations

import argparse

KINDS = ("sharegpt", "mooncake", "azure", "jsonl")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("trace", help="inspect a trace (kvsim trace stats FILE)",
                              description="Tools for trace files.")
    sub = p.add_subparsers(dest="trace_command", required=True, metavar="{stats}")
    s = sub.add_parser("stats", help="sessions, lengths, arrivals, history share, prefix reuse",
                       description="Print what to check in a trace before simulating it: sessions "
                                   "and turns per session, length percentiles, inter-arrival "
                                   "times, the share of multi-turn sessions, the history share of "
                                   "prefill by turn index, and the prefix-reuse upper bound.")
    s.add_argument("file", help="a trace file")
    s.add_argument("--kind", choices=KINDS,
                   help="its format (default: from the file: .csv azure, .json sharegpt, .jsonl "
                        "mooncake when its first line has hash_ids, else kvsim's own JSONL)")
    return p


def guess_kind(path: str) -> str:
    """The trace kind a file's name and first line suggest."""
    import json

    if path.endswith(".csv"):
        return "azure"
    if path.endswith(".json"):
        return "sharegpt"
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    try:
        head = json.loads(first) if first.strip() else {}
    except json.JSONDecodeError:
        head = {}
    return "mooncake" if isinstance(head, dict) and "hash_ids" in head else "jsonl"


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from traces import load_trace
    from traces.stats import format_stats, trace_stats

    if not Path(args.file).is_file():
        raise ValueError(f"{args.file}: no such file")
    kind = args.kind or guess_kind(args.file)
    load = load_trace({"kind": kind, "path": args.file})
    print(format_stats(trace_stats(load.sessions), f"{args.file} ({kind})"))
    if load.skipped:
        print(f"  skipped                {load.skipped:,} malformed sessions")
    return 0
