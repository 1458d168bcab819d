"""`kvsim list`: the model specs, hardware and policies kvsim knows by name."""

from __future__ import annotations

import argparse

SECTIONS = ("models", "hardware", "profiles", "policies")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "list",
        help="list known models, hardware, profiles and policies",
        description="List the names an experiment YAML may use for model, "
        "hardware (a GPU name or a profile name) and policies.",
    )
    p.add_argument("what", nargs="?", choices=SECTIONS, help="list only this (default: all)")
    return p


def main(args: argparse.Namespace) -> int:
    import costmodels
    from sim.policies import available_policies

    sections = {
        "models": costmodels.available_models,
        "hardware": costmodels.available_hardware,
        "profiles": costmodels.available_profiles,
        "policies": available_policies,
    }
    for name, fn in sections.items():
        if args.what in (None, name):
            names = sorted(fn())
            if args.what:
                print("\n".join(names))
            else:
                print(f"{name}: {', '.join(names)}")
    return 0
