"""The same sweep with each executor: local workers=1, local workers=2, and Ray on this machine.

A benchmark, not a test: it prints figures. Each run is a fresh Python process (so its peak RSS is
its own) that calls ``run_experiment`` on the config with the executor replaced; the results go to
a temporary folder that is removed afterwards. Per run it prints:

* wall_s: the whole process (imports, trace, Ray start and stop, writing the results folder);
* sweep_s: ``run_experiment`` alone; ray_init_s: ``ray.init`` (Ray only);
* self_mib: peak RSS of the driver (getrusage RUSAGE_SELF);
* child_mib: peak RSS of its largest finished descendant (RUSAGE_CHILDREN: a pool worker, a Ray
  worker or raylet -- a process the kernel reports only once it has been reaped);
* tree_mib: the highest sum of RSS over the driver and all its descendants, sampled every 0.2 s
  from /proc (Linux only; what the machine has to hold at once).

    python benchmarks/sweep_executors.py                       # the 200 points, all three runs
    python benchmarks/sweep_executors.py --seeds 1 --gpu 2     # a 10-point cut (5 x 2 x 1)
    python benchmarks/sweep_executors.py --only ray local2     # some of the runs

Ray needs `pip install -e '.[ray]'`. It is started with address="local" (a new instance, never a
running cluster), num_cpus = --ray-cpus (default: every core), no dashboard, worker logs not echoed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "benchmarks" / "sweep_200.yaml"
RUNS = {
    "local1": {"kind": "local", "workers": 1},
    "local2": {"kind": "local", "workers": 2},
    "ray": {"kind": "ray", "address": "local"},
}


def _cut(raw: dict, args: argparse.Namespace) -> dict:
    """The config with the first --policies / --gpu / --seeds entries of those axes."""
    raw = {**raw, "memory": dict(raw["memory"])}
    for key, n, where in (
        ("policies", args.policies, raw),
        ("seeds", args.seeds, raw),
        ("gpu_kv_gb", args.gpu, raw["memory"]),
    ):
        if n is not None:
            values = where[key] if isinstance(where[key], list) else [where[key]]
            where[key] = values[:n]
    return raw


# ---------------------------------------------------------------------------------------------
# The child: one run


def _child(args: argparse.Namespace) -> None:
    import yaml

    from experiments.runner import run_experiment
    from experiments.schema import parse_experiment

    raw = _cut(yaml.safe_load(Path(args.config).read_text(encoding="utf-8")), args)
    raw["executor"] = RUNS[args.child]
    exp = parse_experiment(raw)
    ray_init_s = 0.0
    if args.child == "ray":
        import ray

        t = time.perf_counter()
        ray.init(
            address="local", num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False
        )
        ray_init_s = time.perf_counter() - t
    t = time.perf_counter()
    outcome = run_experiment(exp, Path(args.out) / args.child, show_progress=not args.quiet)
    sweep_s = time.perf_counter() - t
    if args.child == "ray":
        ray.shutdown()
    # ru_maxrss is in KiB on Linux
    row = {
        "points": len(outcome.summary),
        "sweep_s": sweep_s,
        "ray_init_s": ray_init_s,
        "self_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "child_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }
    Path(args.report).write_text(json.dumps(row), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# The parent: run each in a fresh process, sample its process tree


def _tree_rss_mib(root: int) -> float | None:
    """Sum of RSS over ``root`` and its descendants, from /proc; None where there is no /proc."""
    try:
        parent, rss = {}, {}
        page = os.sysconf("SC_PAGE_SIZE")
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            pid = int(entry.name)
            parent[pid], rss[pid] = int(fields[1]), int(fields[21]) * page
    except OSError:
        return None
    total, todo, seen = 0, [root], set()
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / 2**20


def _run(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    report = tmp / f"{name}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--out",
        str(tmp),
        "--report",
        str(report),
        "--config",
        str(args.config),
        "--ray-cpus",
        str(args.ray_cpus),
    ]
    for flag in ("policies", "gpu", "seeds"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    if args.quiet:
        cmd.append("--quiet")
    env = dict(os.environ)  # kvsim importable in the child and in Ray's workers, installed or not
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    peak, stop = [0.0], threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            mib = _tree_rss_mib(proc.pid)
            if mib is not None:
                peak[0] = max(peak[0], mib)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    if rc != 0:
        raise SystemExit(f"{name}: the run failed (exit {rc})")
    row = json.loads(report.read_text(encoding="utf-8"))
    return {"run": name, "wall_s": wall, **row, "tree_mib": peak[0] or float("nan")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument(
        "--only",
        nargs="+",
        choices=list(RUNS),
        default=list(RUNS),
        help="which runs, in this order (default: all)",
    )
    ap.add_argument("--policies", type=int, help="keep the first N policies")
    ap.add_argument("--gpu", type=int, help="keep the first N GPU capacities")
    ap.add_argument("--seeds", type=int, help="keep the first N seeds")
    ap.add_argument("--ray-cpus", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--child", choices=list(RUNS), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvsim-sweep-") as tmp:
        for name in args.only:
            print(f"--- {name}: {RUNS[name]}", file=sys.stderr, flush=True)
            rows.append(_run(name, args, Path(tmp)))
            r = rows[-1]
            print(
                f"{name}: {r['points']} points, wall {r['wall_s']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    figures = ("wall_s", "sweep_s", "ray_init_s", "self_mib", "child_mib", "tree_mib")
    print(f"{'run':<8} {'points':>6} " + " ".join(f"{k:>10}" for k in figures))
    for r in rows:
        print(f"{r['run']:<8} {r['points']:>6} " + " ".join(f"{r[k]:>10.1f}" for k in figures))
    base = next((r for r in rows if r["run"] == "local1"), None)
    if base:
        for r in rows:
            if r is not base:
                print(f"{r['run']}: {base['sweep_s'] / r['sweep_s']:.2f}x local1's sweep time")


if __name__ == "__main__":  # spawned local workers re-import this module
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    main()
