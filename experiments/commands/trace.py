"""`kvsim trace stats FILE`: look at a trace before simulating it."""
from __future__ import annotations

import argparse

KINDS = ("sharegpt", "mooncake", "azure", "burstgpt", "jsonl")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("trace", help="inspect a trace (kvsim trace stats FILE)",
                              description="Tools for trace files.")
    sub = p.add_subparsers(dest="trace_command", required=True, metavar="{stats,convert}")
    s = sub.add_parser("stats", help="sessions, lengths, arrivals, history share, prefix reuse",
                       description="Print what to check in a trace before simulating it: sessions "
                                   "and turns per session, length percentiles, inter-arrival "
                                   "times, the share of multi-turn sessions, the history share of "
                                   "prefill by turn index, and the prefix-reuse upper bound.")
    s.add_argument("file", help="a trace file")
    s.add_argument("--kind", choices=KINDS,
                   help="its format (default: from the file: .csv BurstGPT by its header, else "
                        "Azure; .json sharegpt; .jsonl mooncake when its first line has hash_ids, "
                        "else kvsim's own JSONL)")
    c = sub.add_parser("convert", help="write a trace as kvsim's canonical JSONL",
                       description="Read a trace in any supported format and write it as "
                                   "kvsim's own JSONL (one turn per line), atomically.")
    c.add_argument("file", help="a trace file")
    c.add_argument("--kind", choices=KINDS, help="its format (default: guessed as for stats)")
    c.add_argument("--out", required=True, help="the JSONL file to write")
    c.add_argument("--force", action="store_true", help="replace an existing --out")
    return p


def guess_kind(path: str) -> str:
    """The trace kind a file's name and first line suggest."""
    import json

    if path.endswith(".csv"):
        with open(path, encoding="utf-8") as f:
            header = f.readline()
        return "burstgpt" if header.startswith("Timestamp,Model") else "azure"
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
    if args.trace_command == "convert":
        return _convert(load, Path(args.out), args.force)
    print(format_stats(trace_stats(load.sessions), f"{args.file} ({kind})"))
    if load.skipped:
        print(f"  skipped                {load.skipped:,} malformed sessions")
    return 0


def _convert(load, out, force: bool) -> int:
    """Write ``load``'s sessions to ``out`` through a temporary file: a failed write leaves
    nothing behind, and an existing file is kept unless ``force``."""
    import os
    import tempfile

    from traces import write_jsonl

    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        lines = write_jsonl(load.sessions, tmp)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"{out}: {len(load.sessions):,} sessions, {lines:,} turns")
    return 0
