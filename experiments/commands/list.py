"""`kvsim list`: every choice an experiment YAML offers, one line each (``experiments.choices``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from experiments.choices import SECTION_ORDER, Choice, Section


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "list",
        help="list every choice an experiment YAML offers (models, policies, budgets, ...)",
        description="List the names an experiment YAML may use, one section per kind of choice "
        "(after it, the YAML key it fills) and one line per value: name, then what it is.",
    )
    p.add_argument(
        "what",
        nargs="?",
        metavar="SECTION",
        help=f"list only this section: {', '.join(SECTION_ORDER)} (default: all)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, for tools")
    return p


def main(args: argparse.Namespace) -> int:
    from experiments.choices import all_sections

    sections = all_sections()
    if args.what is not None:
        sections = [s for s in sections if s.name == args.what]
        if not sections:
            names = ", ".join(s.name for s in all_sections())
            raise ValueError(f"no section {args.what!r} to list; sections: {names}")
    if args.json:
        print(json.dumps({s.name: s.to_dict() for s in sections}, indent=2))
    else:
        print("\n\n".join(render(s) for s in sections))
    return 0


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
