"""`kvsim vllm-check`: kvsim's vLLM v1 engine against the real vLLM scheduler, step by step.

The harness is ``experiments.vllm_check``; the rules are in docs/semantics.md ("vLLM v1 engine").
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traces.records import Session


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "vllm-check",
        help="compare kvsim's vllm-v1 engine with the real vLLM scheduler, step by step",
        description="Replay a trace through kvsim's vLLM v1 scheduler and through the real vLLM "
        "0.33.0 scheduler (run by --python, an environment that has vLLM), with the same token "
        "ids, arrivals and step prices; print the first step where their logs differ (exit 1), "
        "or that they match (exit 0), and each side's steps/s. With CONFIG: every grid point of "
        "the experiment with engine.kind vllm-v1 and policy lru (vLLM's own eviction); without: "
        "a synthetic trace shaped by the options below.",
    )
    p.add_argument(
        "config",
        nargs="?",
        help="an experiment YAML or a bundled experiment's name (e.g. vllm)",
    )
    p.add_argument(
        "--python",
        default=os.environ.get("KVSIM_VLLM_PYTHON"),
        help="a Python with vLLM 0.33.0 (default: $KVSIM_VLLM_PYTHON)",
    )
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--rate", type=float, default=4.0, help="session starts per second")
    p.add_argument("--model", default="llama-3-8b")
    p.add_argument("--hardware", default="h100-sxm", help="a GPU name or profile")
    p.add_argument("--num-blocks", type=int, default=200)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument(
        "--no-reserve-full-isl",
        action="store_true",
        help="scheduler_reserve_full_isl off: admit on the first chunk's blocks",
    )
    p.add_argument(
        "--sync",
        action="store_true",
        help="async_scheduling off: vLLM's synchronous loop (default: async, as on a GPU; with "
        "CONFIG, every point is run sync)",
    )
    p.add_argument(
        "--cpu-chunks",
        type=int,
        default=0,
        help="vLLM's CPU offloading with this many chunks (default 0: no CPU tier)",
    )
    p.add_argument("--blocks-per-chunk", type=int, default=1, help="GPU blocks per CPU chunk")
    p.add_argument("--offload-policy", default="lru", choices=["lru", "arc"])
    p.add_argument(
        "--copy-scale",
        type=float,
        default=1.0,
        help="multiply each offloading copy's price (slower copies keep more jobs in flight)",
    )
    p.add_argument("--out", help="write both step logs here (kvsim.jsonl, vllm.jsonl)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(args: argparse.Namespace) -> int:
    if not args.python:
        raise ValueError("--python (or KVSIM_VLLM_PYTHON) must name a Python that has vLLM 0.33.0")
    if not Path(args.python).exists():
        raise ValueError(f"--python: {args.python} does not exist")
    cases = _config_cases(args.config, args.sync) if args.config else [_synthetic_case(args)]
    failed = 0
    for i, (label, trace, cfg, cost, mode, offload) in enumerate(cases):
        print(f"[{i + 1}/{len(cases)}] {label}", flush=True)
        out = Path(args.out) / str(i) if args.out and len(cases) > 1 else args.out
        failed += _check(trace, cfg, cost, mode, args.python, out, offload, args.copy_scale)
    return 1 if failed else 0


def _config_cases(config: str, sync: bool = False) -> list[tuple]:
    """(label, sessions, VllmConfig, cost model, replay mode, OffloadConfig or None) of each
    vllm-v1 lru grid point; ``sync``: each with async scheduling off."""
    import dataclasses

    from experiments.executor import _cost_model, load_sessions
    from experiments.schema import load_experiment, resolve_config
    from sim.vllm_v1.run import offload_config, vllm_config, without_prefixes

    exp = load_experiment(resolve_config(config))
    points = [p for p in exp.grid() if p.engine.kind == "vllm-v1" and p.policy == "lru"]
    if not points:
        raise ValueError(
            f"{exp.source}: no grid point with engine.kind vllm-v1 and policy lru to check"
        )
    cases = []
    for p in points:
        cost = _cost_model(p.model, p.hardware, p.tp)
        sessions: Sequence[Session] = load_sessions(p.trace)
        if not p.memory.prefix_sharing:
            sessions = without_prefixes(sessions)
        cfg = vllm_config(cost, p.memory, p.engine)
        if sync:
            cfg = dataclasses.replace(cfg, async_scheduling=False)
        mode = "async" if cfg.async_scheduling else "sync"
        offload = offload_config(cost, p.memory, p.engine)
        cases.append((f"{p.describe()}, {mode}", sessions, cfg, cost, p.engine.replay, offload))
    return cases


def _synthetic_case(args: argparse.Namespace) -> tuple:
    from costmodels import cost_model
    from sim.vllm_v1.offload import OffloadConfig
    from sim.vllm_v1.scheduler import VllmConfig
    from traces.synthetic import SyntheticConfig, generate_synthetic

    cfg = VllmConfig(
        num_blocks=args.num_blocks,
        block_size=args.block_size,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        scheduler_reserve_full_isl=not args.no_reserve_full_isl,
        async_scheduling=not args.sync,
    )
    trace = generate_synthetic(
        SyntheticConfig(sessions=args.sessions, seed=args.seed, arrival_rate_per_s=args.rate)
    ).sessions
    mode = "sync" if args.sync else "async"
    label = (
        f"synthetic: {args.sessions} sessions, seed {args.seed}, {args.num_blocks} blocks, {mode}"
    )
    offload = None
    if args.cpu_chunks:
        offload = OffloadConfig(args.cpu_chunks, args.blocks_per_chunk, args.offload_policy)
        label += (
            f", CPU {args.cpu_chunks} chunks of {args.blocks_per_chunk} ({args.offload_policy})"
        )
    return label, trace, cfg, cost_model(args.model, args.hardware), "closed-loop", offload


def _check(trace, cfg, cost, mode: str, python: str, out, offload=None, copy_scale=1.0) -> int:
    """Run both sides; print their speeds and the first mismatch. 1 on a mismatch, else 0."""
    from experiments.vllm_check import describe_mismatch, first_mismatch, run_both
    from sim.vllm_v1.loop import StepPrices
    from sim.vllm_v1.run import transfer_prices

    copy_s = transfer_prices(cost, cfg.block_size)
    runs = run_both(
        trace,
        cfg,
        python,
        StepPrices(cost),
        mode,
        offload,
        lambda kind, blocks: copy_scale * copy_s(kind, blocks),
    )
    logs = {name: run.steps for name, (run, _) in runs.items()}
    rates = {name: run.num_steps / wall for name, (run, wall) in runs.items()}
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        for name, log in logs.items():
            tmp = out / f".{name}.jsonl.tmp"
            tmp.write_text("".join(json.dumps(s) + "\n" for s in log))
            tmp.replace(out / f"{name}.jsonl")
    preempted = sum(len(s["preempted"]) for s in logs["kvsim"])
    jobs = [j for s in logs["kvsim"] for j in s.get("jobs", ())]
    if offload is not None:
        loads = sum(1 for j in jobs if j[1] == "load")
        flushed = sum(len(s.get("flush", ())) for s in logs["kvsim"])
        print(f"offloading (kvsim): {len(jobs) - loads} stores, {loads} loads, {flushed} flushes")
    print(
        f"steps: kvsim {len(logs['kvsim'])}, vllm {len(logs['vllm'])}; preemptions (kvsim) "
        f"{preempted}; steps/s: kvsim {rates['kvsim']:,.0f}, vllm {rates['vllm']:,.0f} "
        f"({rates['kvsim'] / rates['vllm']:.1f}x; vLLM's includes the pipe to its process)"
    )
    at = first_mismatch(logs["kvsim"], logs["vllm"])
    if at is None:
        print("match: every field of every step")
        return 0
    print(describe_mismatch(logs["kvsim"], logs["vllm"], at))
    return 1
