"""`kvsim search CONFIG`: the smallest GPU KV or CPU tier, or the highest request rate, meeting an
SLO attainment target, by bisection."""

from __future__ import annotations

import argparse
import math


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"a share in (0, 1] (0.9: 90 %), got {text}")
    return v


def _bound(axis: str, text: str, *, lo: bool) -> float:
    """``--lo`` / ``--hi`` in the axis's unit; ArgumentTypeError saying what it must be."""
    if axis == "rate":
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a request-rate multiplier (x the trace's rate), got {text!r}"
            ) from None
        if not (v > 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError(
                f"a request-rate multiplier > 0 (x the trace's rate; 2: twice it), got {text}"
            )
        return v
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GiB, got {text!r}") from None
    if axis == "cpu_kv_gb" and lo:  # a CPU tier of 0: none
        if not (v >= 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"a CPU KV size >= 0 in GiB, got {text}")
    elif not v > 0 or v == float("inf"):
        what = "a CPU KV size" if axis == "cpu_kv_gb" else "a GPU KV size"
        raise argparse.ArgumentTypeError(f"{what} > 0 in GiB, got {text}")
    return v


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "search",
        help="the smallest GPU KV or CPU tier, or the highest request rate, meeting an SLO "
        "attainment target, by bisection",
        description="Bisect one axis of the experiment for the boundary where slo_attainment "
        "(against the experiment's slo: section) reaches --target with one policy; every other "
        "axis of the experiment must have one value. --axis gpu_kv_gb (default): the smallest "
        "memory.gpu_kv_gb, in whole KV pages. --axis cpu_kv_gb: the smallest memory.cpu_kv_gb "
        "(the CPU tier), in whole pages, the GPU KV fixed at the experiment's value. --axis rate: "
        "the highest request rate, as a multiplier of the trace's own rate (2: twice it; the "
        "YAML's trace.time_scale is 1 / the multiplier, and the answer gives both), on the "
        "multipliers of three significant digits (1.00, 1.01, ...). Each probe is one simulation, deterministic for "
        "the seed: a rerun makes the same probes and gives the same answer, exact to one page or "
        "one multiplier. Bisection assumes attainment does not fall as memory grows nor rise as "
        "the rate grows; neither is guaranteed (FIFO's Belady anomaly, for one), and where it "
        "fails the answer is a point where the target starts to be met, the curve walked showing "
        "the probes. Prints each probe as it runs, then the curve walked and the answer. Exit "
        "status 1 when even the easiest end (--hi for memory, --lo for the rate) misses.",
    )
    p.add_argument("config", help="experiment YAML file (or a bundled experiment's name)")
    p.add_argument("--policy", help="the policy (needed when the experiment lists several)")
    p.add_argument(
        "--axis",
        choices=("gpu_kv_gb", "cpu_kv_gb", "rate"),
        default="gpu_kv_gb",
        help="what to search: gpu_kv_gb (the smallest GPU KV, the default), cpu_kv_gb (the "
        "smallest CPU tier) or rate (the highest request rate)",
    )
    p.add_argument(
        "--target",
        type=_share,
        default=0.9,
        help="slo_attainment to reach, a share of turns (default 0.9)",
    )
    p.add_argument(
        "--lo",
        metavar="X",
        help="low end of the search: GiB for the memory axes (0 allowed for the CPU tier: "
        "none), x the trace's rate for rate (default: the lowest of the experiment's values of "
        "the axis, for rate 1 / its largest trace.time_scale; when it gives one: one page of GPU "
        "KV, no CPU tier, or a tenth of its rate)",
    )
    p.add_argument(
        "--hi",
        metavar="X",
        help="high end of the search, in the same unit (default: the highest of the "
        "experiment's values of the axis, for rate 1 / its smallest trace.time_scale; when it "
        "gives one: that value, or ten times its rate)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the shared data folder that ${KVSIM_SHARED_DATA} in the YAML's paths names",
    )
    p.set_defaults(_search_parser=p)
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.schema import load_experiment
    from experiments.search import describe, describe_probe, search
    from experiments.shared_data import check_data_dir

    bounds: dict[str, float | None] = {}
    for flag in ("lo", "hi"):
        text = getattr(args, flag)
        if text is None:
            bounds[flag] = None
            continue
        try:
            bounds[flag] = _bound(args.axis, text, lo=flag == "lo")
        except argparse.ArgumentTypeError as exc:
            args._search_parser.error(f"argument --{flag}: {exc}")  # exits with status 2
    check_data_dir(args.data_dir)
    exp = load_experiment(args.config, data_dir=args.data_dir)

    def show(p) -> None:
        print(describe_probe(p), flush=True)

    result = search(
        exp,
        target=args.target,
        policy=args.policy,
        axis=args.axis,
        lo=bounds["lo"],
        hi=bounds["hi"],
        on_probe=show,
    )
    print(describe(result))
    return 0 if result.answer is not None else 1
