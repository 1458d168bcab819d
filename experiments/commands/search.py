"""`kvsim search CONFIG`: the smallest GPU KV meeting an SLO attainment target, by bisection."""

from __future__ import annotations

import argparse


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"a share in (0, 1] (0.9: 90 %), got {text}")
    return v


def _gib(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GiB, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"a GPU KV size > 0 in GiB, got {text}")
    return v


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "search",
        help="the smallest memory.gpu_kv_gb meeting an SLO attainment target, by bisection",
        description="Bisect memory.gpu_kv_gb, in whole KV pages, for the smallest GPU KV whose "
        "slo_attainment (against the experiment's slo: section) reaches --target with one "
        "policy; every other axis of the experiment must have one value. Prints each probe as it "
        "runs, then the curve walked and the answer. Exit status 1 when even --hi misses.",
    )
    p.add_argument("config", help="experiment YAML file (or a bundled experiment's name)")
    p.add_argument("--policy", help="the policy (needed when the experiment lists several)")
    p.add_argument(
        "--target",
        type=_share,
        default=0.9,
        help="slo_attainment to reach, a share of turns (default 0.9)",
    )
    p.add_argument(
        "--lo",
        type=_gib,
        metavar="GIB",
        help="smallest GPU KV to consider (default: the smallest memory.gpu_kv_gb, or one page "
        "when the experiment gives one value)",
    )
    p.add_argument(
        "--hi",
        type=_gib,
        metavar="GIB",
        help="largest GPU KV to consider (default: the largest memory.gpu_kv_gb)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the shared data folder that ${KVSIM_SHARED_DATA} in the YAML's paths names",
    )
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.schema import load_experiment
    from experiments.search import describe, search
    from experiments.shared_data import check_data_dir

    check_data_dir(args.data_dir)
    exp = load_experiment(args.config, data_dir=args.data_dir)

    def show(p) -> None:
        print(
            f"probe: {p.gpu_kv_gb:.6g} GiB ({p.pages} page{'s' if p.pages != 1 else ''}): "
            f"slo_attainment "
            f"{p.slo_attainment:.4f} {'meets' if p.meets else 'misses'}",
            flush=True,
        )

    result = search(
        exp, target=args.target, policy=args.policy, lo_gb=args.lo, hi_gb=args.hi, on_probe=show
    )
    print(describe(result))
    return 0 if result.answer is not None else 1
