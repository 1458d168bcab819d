"""One bounded run of ``kvsim bench``'s simulation, for profiling and paired timings (a benchmark,
not a test).

The bench's synthetic trace and GPU KV (10 % of the peak demand of an unbounded run), one policy,
one run in this process: prints turns/s, wall and CPU seconds and the re-prefill rate. Unlike
``kvsim bench`` it runs no repeats in fresh processes, so ``py-spy record -- python
benchmarks/bounded_run.py ...`` sees the whole simulation, and an old tree can be timed against a
new one run by run (``python OLD_TREE/benchmarks/bounded_run.py ...`` times the old tree). The peak demand
run costs time: ``--gpu-kv-gb`` skips it with the value a first run printed.

    python benchmarks/bounded_run.py pensieve --sessions 2000
    python benchmarks/bounded_run.py fifo --sessions 500 --evict-unit layer_block --gpu-kv-gb 1.9
"""

from __future__ import annotations

import argparse
import dataclasses
import time


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policy")
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--evict-unit", default="block", choices=["session", "block", "layer_block"])
    ap.add_argument("--gpu-kv-gb", type=float, help="default: 10 %% of the unbounded run's peak")
    args = ap.parse_args(argv)
    from experiments.bench import BenchConfig, _one_run, peak_demand_gb
    from sim.policies import available_policies

    if args.policy not in available_policies():
        ap.error(
            f"unknown policy {args.policy!r}; one of {', '.join(sorted(available_policies()))}"
        )
    cfg = BenchConfig(sessions=args.sessions, policy=args.policy, evict_unit=args.evict_unit)
    gpu_gb = args.gpu_kv_gb
    if gpu_gb is None:
        gpu_gb = cfg.gpu_fraction * peak_demand_gb(
            dataclasses.replace(cfg, policy="lru"), cfg.sessions
        )
    t0 = time.process_time()
    wall, turns, _rss, reprefill = _one_run(cfg, cfg.sessions, gpu_gb, None)
    cpu = time.process_time() - t0
    print(
        f"{args.policy} {args.evict_unit} {args.sessions} sessions, GPU KV {gpu_gb:.4f} GiB: "
        f"{turns / wall:,.0f} turns/s, wall {wall:.2f} s, CPU {cpu:.2f} s, "
        f"reprefill_rate {reprefill:.4f}"
    )


if __name__ == "__main__":
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    main()
