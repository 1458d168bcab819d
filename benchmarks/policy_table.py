"""Every policy's speed against LRU's: ``kvsim bench`` once per policy, one markdown table (a
benchmark, not a test).

Each policy runs ``kvsim bench --sessions N --repeats R --policy P --no-scaling --quiet`` in its
own process (the bench itself times each repeat in a fresh process), and the table gives turns/s
as min / median / max of the repeats and the ratio of LRU's median to the policy's: the slowdown
that the speed targets bound (online policies within 2x of LRU, the offline bounds within 4x).
``--jobs 2`` runs two policies at a time, each on its own core: faster on a 2-core machine, but
each run then shares the machine's memory bandwidth with another, so rows measured alone and rows
measured in pairs are not comparable.

    python benchmarks/policy_table.py                       # 10,000 sessions, 3 repeats, every policy
    python benchmarks/policy_table.py --sessions 2000 --repeats 1 --policies lru pensieve
    python benchmarks/policy_table.py --sessions 1000 --layer-block   # each policy: layer_block / block

``--layer-block`` runs every policy at block and at layer_block units (a page's 32 layers each a
unit) and gives the slowdown of layer_block against the same policy's block run, the bound of the
layer-wise target (within 2x).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

OFFLINE = {"belady", "cost-belady"}
_RATE = re.compile(r"turns/s\s+min/median/max:\s+([\d,]+) / ([\d,]+) / ([\d,]+)")


def all_policies() -> list[str]:
    from sim.policies import available_policies

    names = sorted(available_policies())
    return ["lru"] + [n for n in names if n != "lru"]


def bench(
    policy: str, sessions: int, repeats: int, evict_unit: str = "block"
) -> tuple[int, int, int]:
    """(min, median, max) turns/s of ``kvsim bench`` for one policy."""
    cmd = [sys.executable, "-m", "experiments.cli", "bench", "--sessions", str(sessions)]
    cmd += ["--repeats", str(repeats), "--policy", policy, "--no-scaling", "--quiet"]
    cmd += ["--evict-unit", evict_unit]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = _RATE.search(done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(
            f"kvsim bench --policy {policy} failed ({done.returncode}):\n{done.stderr[-2000:]}"
        )
    lo, mid, hi = (int(x.replace(",", "")) for x in found.groups())
    return lo, mid, hi


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policies", nargs="*", help="default: every registered policy")
    ap.add_argument("--jobs", type=int, default=1, help="policies run at once (default 1)")
    ap.add_argument(
        "--layer-block",
        action="store_true",
        help="each policy at block and at layer_block units: the slowdown of layer_block",
    )
    args = ap.parse_args(argv)
    names = args.policies or all_policies()
    if args.layer_block:
        layer_block_table(names, args)
        return
    if "lru" not in names:
        names = ["lru", *names]
    print(
        f"kvsim bench --sessions {args.sessions} --repeats {args.repeats} --no-scaling, "
        f"{args.jobs} at a time",
        file=sys.stderr,
    )
    rows: dict[str, tuple[int, int, int]] = {}

    def one(name: str) -> None:
        rows[name] = bench(name, args.sessions, args.repeats)
        lo, mid, hi = rows[name]
        print(f"  {name}: {lo:,} / {mid:,} / {hi:,} turns/s", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, names))
    lru = rows["lru"][1]
    print("| policy | turns/s min / median / max | x LRU (median) | target |")
    print("|---|---|---|---|")
    for name in names:
        lo, mid, hi = rows[name]
        ratio = lru / mid
        bound = 4.0 if name in OFFLINE else 2.0
        verdict = (
            "" if name == "lru" else ("within" if ratio <= bound else "outside") + f" {bound:g}x"
        )
        label = f"{name} (offline)" if name in OFFLINE else name
        print(f"| {label} | {lo:,} / {mid:,} / {hi:,} | {ratio:.2f} | {verdict} |")


def layer_block_table(names: list[str], args) -> None:
    """Each policy at block and at layer_block units, and the slowdown between the two."""
    runs = [(name, unit) for name in names for unit in ("block", "layer_block")]
    print(
        f"kvsim bench --sessions {args.sessions} --repeats {args.repeats} --no-scaling "
        f"--evict-unit block|layer_block, {args.jobs} at a time",
        file=sys.stderr,
    )
    rows: dict[tuple[str, str], tuple[int, int, int]] = {}

    def one(run: tuple[str, str]) -> None:
        rows[run] = bench(run[0], args.sessions, args.repeats, run[1])
        lo, mid, hi = rows[run]
        print(
            f"  {run[0]} {run[1]}: {lo:,} / {mid:,} / {hi:,} turns/s", file=sys.stderr, flush=True
        )

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, runs))
    print("| policy | block turns/s | layer_block turns/s | layer_block slowdown | target |")
    print("|---|---|---|---|---|")
    for name in names:
        block, layer = rows[(name, "block")], rows[(name, "layer_block")]
        ratio = block[1] / layer[1]
        verdict = ("within" if ratio <= 2.0 else "outside") + " 2x"
        print(
            f"| {name} | {block[0]:,} / {block[1]:,} / {block[2]:,} | "
            f"{layer[0]:,} / {layer[1]:,} / {layer[2]:,} | {ratio:.2f} | {verdict} |"
        )


if __name__ == "__main__":
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    main()
