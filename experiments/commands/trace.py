"""`kvsim trace stats FILE`: look at a trace before simulating it; `trace convert` rewrites one as
canonical JSONL; `trace synth --like FILE` scales one to any size with the fitted synthetic generator."""

from __future__ import annotations

import argparse

KINDS = ("sharegpt", "mooncake", "azure", "burstgpt", "jsonl")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "trace",
        help="inspect, convert or scale a trace (kvsim trace stats FILE)",
        description="Tools for trace files.",
    )
    sub = p.add_subparsers(dest="trace_command", required=True, metavar="{stats,convert,synth}")
    s = sub.add_parser(
        "stats",
        help="sessions, lengths, arrivals, history share, prefix reuse",
        description="Print what to check in a trace before simulating it: sessions "
        "and turns per session, length percentiles, inter-arrival "
        "times, the share of multi-turn sessions, the history share of "
        "prefill by turn index, and the prefix-reuse upper bound.",
    )
    s.add_argument("file", help="a trace file")
    s.add_argument(
        "--kind",
        choices=KINDS,
        help="its format (default: from the file: .csv BurstGPT by its header, else "
        "Azure; .json sharegpt; .jsonl mooncake when its first line has hash_ids, "
        "else kvsim's own JSONL)",
    )
    c = sub.add_parser(
        "convert",
        help="write a trace as kvsim's canonical JSONL",
        description="Read a trace in any supported format and write it as "
        "kvsim's own JSONL (one turn per line), atomically.",
    )
    c.add_argument("file", help="a trace file")
    c.add_argument("--kind", choices=KINDS, help="its format (default: guessed as for stats)")
    c.add_argument("--out", required=True, help="the JSONL file to write")
    c.add_argument("--force", action="store_true", help="replace an existing --out")
    g = sub.add_parser(
        "synth",
        help="generate a synthetic trace fitted to a real one",
        description="Fit the synthetic generator's marginals (turns per session, "
        "first and later prompt tokens, output tokens, session arrival "
        "rate, think time) to a trace and write N sessions drawn from "
        "the fit as canonical JSONL, atomically. Correlations between "
        "turns and lengths, arrival burstiness and prefix hashes are "
        "not kept (docs/semantics.md, section 1).",
    )
    g.add_argument("--like", dest="file", required=True, metavar="FILE", help="the trace to fit")
    g.add_argument("--kind", choices=KINDS, help="its format (default: guessed as for stats)")
    g.add_argument(
        "--sessions", type=int, metavar="N", help="sessions to generate (default: as many as FILE)"
    )
    g.add_argument("--seed", type=int, default=0, metavar="S", help="generator seed (default 0)")
    g.add_argument(
        "--max-context-tokens",
        type=int,
        default=None,
        metavar="TOKENS",
        help="end a session before a turn whose context would exceed this (default: no "
        "cap, which keeps the fitted marginals)",
    )
    g.add_argument("--out", required=True, metavar="OUT.jsonl", help="the JSONL file to write")
    g.add_argument(
        "--params-out",
        metavar="PARAMS.yaml",
        help="also write the fitted parameters as YAML: the options of "
        "a `kind: synthetic` trace that draw the same trace",
    )
    g.add_argument("--force", action="store_true", help="replace existing output files")
    for reader in (s, c, g):
        reader.add_argument(
            "--data-dir",
            metavar="DIR",
            help="the shared data folder: a relative FILE not found here is read from it "
            "(default: $KVSIM_SHARED_DATA, else ../shared/data beside the checkout)",
        )
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

    from experiments.shared_data import check_data_dir, find_trace_file
    from traces import load_trace
    from traces.stats import arrival_notes, format_stats, trace_stats

    check_data_dir(args.data_dir)
    path = str(find_trace_file(args.file, args.data_dir))
    kind = args.kind or guess_kind(path)
    load = load_trace({"kind": kind, "path": path})
    if args.trace_command == "convert":
        return _convert(load, Path(args.out), args.force)
    if args.trace_command == "synth":
        return _synth(load, args, kind)
    if not load.sessions:
        raise ValueError(
            f"{args.file}: no sessions in this {kind} trace (an empty file?): nothing to report"
        )
    notes = arrival_notes(kind, load.info)
    print(format_stats(trace_stats(load.sessions), f"{args.file} ({kind})", notes))
    if load.skipped:
        print(f"  skipped                {load.skipped:,} malformed sessions")
    return 0


def _convert(load, out, force: bool) -> int:
    """Write ``load``'s sessions to ``out`` through a temporary file: a failed write leaves
    nothing behind, and an existing file is kept unless ``force``."""
    from traces import write_jsonl

    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    lines = _write_atomic(out, lambda tmp: write_jsonl(load.sessions, tmp))
    print(f"{out}: {len(load.sessions):,} sessions, {lines:,} turns")
    return 0


def _write_atomic(out, write):
    """``write(tmp_path)`` into a temporary file beside ``out``, then rename it to ``out``; on any
    failure the temporary file is removed and ``out`` is left as it was. Returns what write does."""
    return _write_all_atomic([(out, write)])[0]


def _write_all_atomic(jobs):
    """``_write_atomic`` for several (out, write) pairs: every file is written to its temporary
    first and the renames come last, so a failed write leaves none of the outputs behind."""
    import os
    import tempfile

    mask = os.umask(0)
    os.umask(mask)
    tmps, results = [], []
    try:
        for out, write in jobs:
            out.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
            os.close(fd)
            tmps.append(tmp)
            os.chmod(tmp, 0o666 & ~mask)  # mkstemp's 0600 -> what open() would have created
            results.append(write(tmp))
        for (out, _), tmp in zip(jobs, tmps):
            os.replace(tmp, out)
    except BaseException:
        for tmp in tmps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    return results


def _synth(load, args: argparse.Namespace, kind: str) -> int:
    """Fit the generator to ``load``, draw ``--sessions`` sessions from the parameters exactly as
    ``--params-out`` writes them (so that YAML reproduces this trace), write both atomically."""
    from dataclasses import replace
    from pathlib import Path

    from traces import generate_synthetic, write_jsonl
    from traces.fit_like import dump_params, fit_like, format_comparison, load_params, marginals

    out = Path(args.out)
    params_out = Path(args.params_out) if args.params_out else None
    if params_out is not None and params_out.resolve() == out.resolve():
        raise ValueError(f"--params-out {params_out} is the same file as --out")
    for path in (out, params_out):
        if path is not None and path.exists() and not args.force:
            raise FileExistsError(f"{path} exists; pass --force to replace it")
    for name, value, least in (
        ("--sessions", args.sessions, 0),
        ("--seed", args.seed, 0),
        ("--max-context-tokens", args.max_context_tokens, 2),
    ):
        if value is not None and value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
    notes: list[str] = []
    cfg = fit_like(
        load.sessions, max_context_tokens=args.max_context_tokens, where=args.file, notes=notes
    )
    cfg = replace(
        cfg, sessions=len(load.sessions) if args.sessions is None else args.sessions, seed=args.seed
    )
    text = dump_params(
        cfg,
        header=[
            f"kvsim trace synth --like {args.file} (kind {kind}): {len(load.sessions):,} sessions fitted",
            "SyntheticConfig options: use as a trace spec {kind: synthetic, <these keys>}",
            "fitted: turns_pmf, first_prompt_tokens, prompt_tokens, output_tokens (empirical), "
            "prompt/output_max_tokens, arrival_rate_per_s, think",
            *(f"not fitted: {n}" for n in notes),
        ],
    )
    syn = generate_synthetic(load_params(text, where=f"{args.file} fit"))
    jobs = [(out, lambda tmp: write_jsonl(syn.sessions, tmp))]
    if params_out is not None:
        jobs.append((params_out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8")))
    lines = _write_all_atomic(jobs)[0]
    print(
        f"{out}: {len(syn.sessions):,} sessions, {lines:,} turns, seed {args.seed}, fitted to "
        f"{args.file} ({kind}, {len(load.sessions):,} sessions)"
        + (f"; parameters in {params_out}" if params_out is not None else "")
    )
    for n in notes:
        print(f"  not fitted: {n}")
    if syn.info.get("truncated_sessions") or syn.info.get("shortened_first_prompts"):
        print(
            f"  --max-context-tokens ended {syn.info['truncated_sessions']:,} sessions early "
            f"({syn.info['dropped_turns']:,} turns dropped) and shortened "
            f"{syn.info['shortened_first_prompts']:,} first prompts"
        )
    print(format_comparison(marginals(load.sessions), marginals(syn.sessions)))
    return 0
