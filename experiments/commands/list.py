"""`kvsim list`: every choice an experiment YAML offers, one line each (``experiments.choices``),
then the bundled experiments that `kvsim run NAME` runs (``experiments.bundled``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from experiments.choices import SECTION_ORDER, Choice, Section

EXPERIMENTS = "experiments"  # the section of the bundled experiments, listed last


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "list",
        help="list every choice an experiment YAML offers (models, policies, budgets, ...) "
        "and the bundled experiments",
        description="List the names an experiment YAML may use, one section per kind of choice "
        "(after it, the YAML key it fills) and one line per value: name, then what it is; "
        "last, the experiments that ship with kvsim, each with what it runs "
        "(kvsim run NAME runs one from any directory).",
    )
    p.add_argument(
        "what",
        nargs="?",
        metavar="SECTION",
        help=f"list only this section: {', '.join(SECTION_ORDER)}, ..., {EXPERIMENTS} "
        "(default: all)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, for tools")
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.bundled import bundled
    from experiments.choices import all_sections

    sections = all_sections()
    experiments = args.what in (None, EXPERIMENTS)
    if args.what is not None:
        sections = [s for s in sections if s.name == args.what]
        if not sections and not experiments:
            names = ", ".join([*(s.name for s in all_sections()), EXPERIMENTS])
            raise ValueError(f"no section {args.what!r} to list; sections: {names}")
    runs = bundled() if experiments else []
    if args.json:
        out: dict[str, Any] = {s.name: s.to_dict() for s in sections}
        if experiments:
            out[EXPERIMENTS] = {
                "key": None,  # not a YAML key: what `kvsim run` takes
                "run": "kvsim run NAME",
                "choices": [e.to_dict() for e in runs],
            }
        print(json.dumps(out, indent=2))
    else:
        texts = [render(s) for s in sections]
        if experiments:
            texts.append(render_experiments(runs))
        print("\n\n".join(texts))
    return 0


def render_experiments(runs: list) -> str:
    """The bundled experiments: a header saying how to run one, then ``name  description``."""
    width = max((len(e.name) for e in runs), default=0) + 2
    lines = ["bundled experiments (run one with kvsim run NAME, from any directory):"]
    lines += [f"  {e.name:<{width}}{e.description}".rstrip() for e in runs]
    return "\n".join(lines)


def render(section: Section) -> str:
    """A header naming the YAML key, then ``name  description`` lines in one column."""
    width = max((len(c.name) for c in section.choices), default=0) + 2
    lines = [f"{section.title} ({section.key}):"]
    lines += [f"  {c.name:<{width}}{_text(c)}".rstrip() for c in section.choices]
    return "\n".join(lines)


def _text(choice: Choice) -> str:
    """An option's accepted values and default before its description; a value's description."""
    if not (choice.values or choice.accepts):
        return choice.description
    accepts = " | ".join(_yaml(v) for v in choice.values) or choice.accepts
    default = "" if choice.default is None else f" (default {_yaml(choice.default)})"
    return f"{accepts}{default}: {choice.description}"


def _yaml(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)
