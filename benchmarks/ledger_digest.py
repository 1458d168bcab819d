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
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import numpy as np

CONFIGS = {  # name -> (gpu GiB, cpu GiB, unit)
    "gpu-block": (0.6, 0.0, "block"),
    "gpu+cpu-block": (0.5, 0.8, "block"),
    "gpu-layer": (0.6, 0.0, "layer_block"),
    "gpu+cpu-layer": (0.5, 0.8, "layer_block"),
}
WALL_CLOCK = ("evict_ns",)


def digest(policy: str, config: str, sessions: int, seed: int) -> str:
    from costmodels import cost_model
    from sim import MemoryConfig, simulate
    from traces import load_trace

    gpu, cpu, unit = CONFIGS[config]
    trace = load_trace({"kind": "synthetic", "sessions": sessions, "seed": seed}).sessions
    res = simulate(
        trace,
        cost_model("llama-3-8b", "h100-sxm"),
        MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit=unit),
        policy=policy,
        seed=seed,
    )
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
    args = p.parse_args(argv)
    policies = args.policies or available_policies()
    got: dict[str, str] = {}
    for policy in policies:
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
    sys.exit(main())
