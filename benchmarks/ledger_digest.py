"""Digests of every policy's ledger on a grid of memory configurations: the check that a change
meant to be a pure speed-up changes no result, to the bit.

Each (policy, configuration) is simulated on one small synthetic trace and reduced to a SHA-256 of
its ledger (every column but the wall-clock ones), its step count and its step durations. Save the
digests before a change and check them after it:

    python benchmarks/ledger_digest.py --save /tmp/before.json     # on the old commit
    python benchmarks/ledger_digest.py --check /tmp/before.json    # on the new one: exit 1 on a change

The grid: 17 policies x {GPU only, GPU + CPU} x {block, layer_block units}, 80 sessions, GPU KV
tight enough that every run evicts (and, with a CPU tier, demotes and drops). Offline bounds run
too. About ten minutes on one core of a 2-core machine, most of it the layer_block runs;
``--policies`` narrows the grid.

``--features`` digests the engine's serving features instead, each on its own configuration with
LRU and with ARC: chunked prefill, both token budgets, CPU-offload
decode, both prefetch modes, per-layer swap copies, synchronous saves, session units, a streamed
trace, prefix sharing on the first 400 requests of Mooncake's conversation trace (when the shared
data is there: beside the repository, or at $KVSIM_SHARED_DATA). A change to the engine's structure must leave every one identical.

``--engine vllm-v1`` digests the vLLM v1 engine instead (``sim.vllm_v1``): tight and loose GPU
blocks, a long-prefill threshold (chunked prefills), synchronous scheduling, no prefix caching,
and vLLM's CPU offloading connector with each of its two policies, each with LRU and ARC as the
prefix cache's policy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIGS = {  # name -> (gpu GiB, cpu GiB, unit)
    "gpu-block": (0.6, 0.0, "block"),
    "gpu+cpu-block": (0.5, 0.8, "block"),
    "gpu-layer": (0.6, 0.0, "layer_block"),
    "gpu+cpu-layer": (0.5, 0.8, "layer_block"),
}
WALL_CLOCK = ("evict_ns",)
MOONCAKE = "mooncake/conversation_trace.jsonl"  # in the shared data (default_data_dir)
# name -> (gpu GiB, cpu GiB, unit, engine options, budget, sparse); every one evicts
Feature = tuple[float, float, str, dict, tuple | None, tuple | None]
FEATURES: dict[str, Feature] = {
    "chunked": (0.6, 0.0, "block", {"chunked_prefill": True, "max_batch_tokens": 512}, None, None),
    "chunked+cpu": (
        0.5,
        0.8,
        "block",
        {"chunked_prefill": True, "max_batch_tokens": 384, "max_running": 24},
        None,
        None,
    ),
    "streamingllm": (0.3, 0.0, "block", {}, ("streamingllm", 4, 60, 0, "random"), None),
    "smartkv": (0.3, 0.4, "block", {}, ("smartkv", 4, 28, 32, "recency"), None),
    "quest": (0.5, 0.8, "block", {}, None, ("quest", 4, 8)),
    "quest-layer": (0.5, 0.8, "layer_block", {}, None, ("quest", 4, 8)),
    "prefetch-queue": (0.5, 0.8, "block", {"prefetch": "queue"}, None, None),
    "prefetch-think": (0.5, 0.8, "layer_block", {"prefetch": "think"}, None, None),
    "per-layer-copies": (0.5, 0.8, "layer_block", {"swap_copies": "per_layer"}, None, None),
    "sync": (0.5, 0.8, "block", {"async_save": False, "pipelining": False}, None, None),
    "unfused": (0.5, 0.8, "block", {"fused_recompute": False}, None, None),
    "session-unit": (0.6, 0.8, "session", {}, None, None),
    "open-loop": (0.5, 0.8, "block", {"replay": "open-loop"}, None, None),
    "stream": (0.5, 0.8, "block", {}, None, None),
    "sharing": (0.4, 0.6, "block", {}, None, None),
}


# name -> (gpu GiB, cpu GiB, engine options); every one evicts
VLLM: dict[str, tuple[float, float, dict]] = {
    "tight": (0.3, 0.0, {}),
    "loose": (0.8, 0.0, {}),
    "threshold": (0.5, 0.0, {"long_prefill_token_threshold": 256, "max_batch_tokens": 1024}),
    "sync": (0.5, 0.0, {"async_scheduling": False}),
    "no-prefix-cache": (0.5, 0.0, {"enable_prefix_caching": False}),
    "offload-lru": (0.4, 0.8, {"offload_eviction_policy": "lru"}),
    "offload-arc": (0.4, 0.8, {"offload_eviction_policy": "arc", "offload_blocks_per_chunk": 4}),
}


def vllm_digest(config: str, policy: str, sessions: int, seed: int) -> str:
    from sim.config import EngineConfig

    gpu, cpu, engine = VLLM[config]
    return _synthetic_digest(
        policy, sessions, seed, gpu, cpu, "block", EngineConfig("vllm-v1", **engine)
    )


def digest(policy: str, config: str, sessions: int, seed: int) -> str:
    gpu, cpu, unit = CONFIGS[config]
    return _synthetic_digest(policy, sessions, seed, gpu, cpu, unit)


def _synthetic_digest(
    policy: str, sessions: int, seed: int, gpu: float, cpu: float, unit: str, engine=None
) -> str:
    """The digest of one run on the synthetic trace (Llama-3-8B on an H100, pages of 16)."""
    from costmodels import cost_model
    from sim import MemoryConfig, simulate
    from traces import load_trace

    trace = load_trace({"kind": "synthetic", "sessions": sessions, "seed": seed}).sessions
    res = simulate(
        trace,
        cost_model("llama-3-8b", "h100-sxm"),
        MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit),
        engine=engine,
        policy=policy,
        seed=seed,
    )
    return _hash(res)


def feature_digest(feature: str, policy: str, sessions: int, seed: int) -> str | None:
    """The digest of one serving feature's run (None: its data is absent)."""
    from calibration.public_tables import default_data_dir
    from costmodels import cost_model
    from sim import MemoryConfig, simulate
    from sim.config import BudgetConfig, EngineConfig, SparseConfig
    from traces import load_mooncake, load_trace

    gpu, cpu, unit, engine, budget, sparse = FEATURES[feature]
    if feature == "sharing":
        path = default_data_dir() / MOONCAKE
        if not path.exists():
            return None
        with tempfile.TemporaryDirectory() as tmp:
            head = Path(tmp) / "head.jsonl"
            head.write_text("\n".join(path.read_text().splitlines()[:400]) + "\n")
            trace = load_mooncake(head, jitter=False).sessions
    else:
        trace = load_trace({"kind": "synthetic", "sessions": sessions, "seed": seed}).sessions
    res = simulate(
        iter(trace) if feature == "stream" else trace,
        cost_model("llama-3-8b", "h100-sxm"),
        MemoryConfig(
            gpu_kv_gb=gpu,
            cpu_kv_gb=cpu,
            block_tokens=16,
            evict_unit=unit,
            prefix_sharing=feature == "sharing",
        ),
        engine=EngineConfig(**engine),
        policy=policy,
        seed=seed,
        budget=BudgetConfig(
            budget[0], sink=budget[1], window=budget[2], budget=budget[3], scorer=budget[4]
        )
        if budget
        else None,
        sparse=SparseConfig(sparse[0], k=sparse[1], ring_slots=sparse[2]) if sparse else None,
    )
    return _hash(res)


def _hash(res) -> str:
    h = hashlib.sha256()
    turns = res.turns[[c for c in res.turns.columns if c not in WALL_CLOCK]]
    h.update(turns.to_csv(index=False).encode())
    h.update(str(res.stats.steps).encode())
    h.update(np.asarray(res.stats.step_s, dtype=np.float64).tobytes())
    return h.hexdigest()


def main(argv=None) -> int:
    from sim.policies import available_policies

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", metavar="FILE", help="write the digests to FILE (JSON)")
    mode.add_argument("--check", metavar="FILE", help="compare with FILE; exit 1 on any change")
    p.add_argument("--sessions", type=int, default=80)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--policies", nargs="*", default=None, help="default: every registered one")
    p.add_argument(
        "--features", action="store_true", help="the serving features' grid (lru and arc)"
    )
    p.add_argument(
        "--engine",
        choices=("kvsim", "vllm-v1"),
        default="kvsim",
        help="vllm-v1: the vLLM engine's grid (lru and arc) instead",
    )
    args = p.parse_args(argv)
    got: dict[str, str] = {}
    if args.engine == "vllm-v1":
        for config in VLLM:
            for policy in args.policies or ("lru", "arc"):
                t0 = time.perf_counter()
                got[f"vllm-v1/{policy}/{config}"] = vllm_digest(
                    config, policy, args.sessions, args.seed
                )
                took = time.perf_counter() - t0
                print(f"vllm-v1 {policy:10s} {config:16s} {took:6.2f} s", file=sys.stderr)
    if args.features and args.engine == "kvsim":
        for feature in FEATURES:
            for policy in args.policies or ("lru", "arc"):
                t0 = time.perf_counter()
                d = feature_digest(feature, policy, args.sessions, args.seed)
                if d is None:
                    print(f"{feature}: no {MOONCAKE} in the shared data", file=sys.stderr)
                    continue
                got[f"{policy}/{feature}"] = d
                took = time.perf_counter() - t0
                print(f"{policy:18s} {feature:16s} {took:6.2f} s", file=sys.stderr)
    plain = not args.features and args.engine == "kvsim"
    for policy in args.policies or available_policies() if plain else []:
        for config in CONFIGS:
            t0 = time.perf_counter()
            got[f"{policy}/{config}"] = digest(policy, config, args.sessions, args.seed)
            print(f"{policy:18s} {config:14s} {time.perf_counter() - t0:6.2f} s", file=sys.stderr)
    if args.save:
        with open(args.save, "w") as f:
            json.dump({"sessions": args.sessions, "seed": args.seed, "digests": got}, f, indent=1)
        print(f"saved {len(got)} digests to {args.save}")
        return 0
    with open(args.check) as f:
        saved = json.load(f)
    if (saved["sessions"], saved["seed"]) != (args.sessions, args.seed):
        raise SystemExit(f"{args.check} was saved with other --sessions/--seed")
    changed = [k for k, v in got.items() if saved["digests"].get(k) != v]
    missing = [k for k in got if k not in saved["digests"]]
    for k in changed:
        print(f"CHANGED {k}" + (" (not in the saved file)" if k in missing else ""))
    print(f"{len(got) - len(changed)} of {len(got)} ledgers identical")
    return 1 if changed else 0


if __name__ == "__main__":
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    sys.exit(main())
