"""`kvsim export-layout CONFIG --iterations 5,100 --out DIR`: chosen iterations of one grid point
as FlashInfer paged KV layouts, one ``iter-<n>.npz`` each (``sim.paged_layout``), for replay through
real kernels (``python -m calibration.replay_layout DIR``).

Iteration n is the scheduler's step n, counted from 0. The simulation runs one iteration at a time
(no decode spans) so that every iteration is planned, and stops after the last one asked for.
"""

from __future__ import annotations

import argparse
from pathlib import Path


class _AllFound(Exception):
    """Raised by the hook once the last requested iteration is exported: nothing more to run."""


def _iterations(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one iteration number")
    negative = [v for v in values if v < 0]
    if negative:
        raise argparse.ArgumentTypeError(f"iteration numbers start at 0, got {negative[0]}")
    return sorted(set(values))


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export-layout",
        help="write chosen iterations' KV page tables in FlashInfer's layout",
        description="Simulate one grid point of an experiment and write the paged KV layout "
        "(kv_indptr, kv_page_indices, kv_last_page_len, qo_indptr) of each requested "
        "iteration to DIR/iter-<n>.npz. Iteration n is the scheduler's step n, from 0.",
    )
    p.add_argument("config", help="experiment YAML file (e.g. experiments/quickstart.yaml)")
    p.add_argument(
        "--iterations",
        required=True,
        type=_iterations,
        metavar="N[,N...]",
        help="iteration numbers, comma-separated (e.g. 5,100,1000)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the .npz files")
    p.add_argument(
        "--point",
        type=int,
        default=0,
        metavar="N",
        help="grid point to simulate, in `kvsim run`'s order (default 0)",
    )
    p.add_argument(
        "--layout",
        choices=("NHD", "HND"),
        default="NHD",
        help="FlashInfer paged-cache layout of the pool (default NHD)",
    )
    p.add_argument(
        "--debug", action="store_true", help="show tracebacks instead of one-line errors"
    )
    return p


def main(args: argparse.Namespace) -> int:
    import costmodels
    import sim
    from experiments.executor import load_sessions
    from experiments.schema import load_experiment
    from sim.paged_layout import LayoutExporter

    exp = load_experiment(args.config)
    points = exp.grid() + exp.baseline_points()
    if not 0 <= args.point < len(points):
        raise ValueError(
            f"--point {args.point}: {args.config} has {len(points)} grid points "
            f"(0..{len(points) - 1})"
        )
    point = points[args.point]
    wanted, last = set(args.iterations), max(args.iterations)
    exporter = LayoutExporter(args.layout)
    found = {}

    def on_iteration(sched, step, now: float) -> None:
        if sched.step in wanted:
            found[sched.step] = exporter.layout(sched, step)
            if sched.step == last:
                raise _AllFound
        else:
            exporter(sched, step, now)

    # The point's simulation as experiments.executor.run_point runs it, plus the hook.
    try:
        cost = costmodels.cost_model(point.model, point.hardware, tp=point.tp)
        result = sim.simulate(
            load_sessions(point.trace),
            cost,
            point.memory,
            point.engine,
            policy=point.policy,
            seed=point.seed,
            on_iteration=on_iteration,
            budget=point.budget,
            sparse=point.sparse,
        )
    except _AllFound:
        result = None
    if result is not None:
        steps = result.stats.steps
        missing = sorted(wanted - found.keys())
        raise ValueError(
            f"iteration(s) {', '.join(map(str, missing))} past the end of the run: "
            f"grid point {args.point} ({point.describe()}) ran {steps} iterations "
            f"(0..{steps - 1})"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for n in sorted(found):
        found[n].save(out / f"iter-{n}.npz")
    print(
        f"layouts: {out}/ ({len(found)} iterations of grid point {args.point}: {point.describe()})"
    )
    for n in sorted(found):
        lay = found[n]
        print(
            f"  iter-{n}.npz: {lay.num_requests} requests, {int(lay.seq_lens.sum())} KV tokens in "
            f"{len(lay.kv_page_indices)} of {lay.max_num_pages} pages, "
            f"{int(lay.qo_lens.sum())} query tokens"
        )
    return 0
