"""The `kvsim` command line. Each subcommand is a module in ``experiments.commands``, found at start.

A command module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` (add its subparser and
return it) and ``main(args) -> int``; nothing here needs editing to add one. Input errors
(ConfigError, TraceError, ValueError, an existing --out) print one line and exit with status 2;
pass --debug to a command that has it to see the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from experiments.version import kvsim_version

EXIT_INPUT_ERROR = 2


def _command_modules() -> list[tuple[str, object]]:
    import experiments.commands as pkg
    found = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            found.append((info.name, importlib.import_module(f"{pkg.__name__}.{info.name}")))
        except Exception as exc:  # a broken command must not take the others down
            found.append((info.name, exc))
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvsim", description="Trace-driven simulator of KV-cache management for multi-turn "
                                  "LLM serving.")
    parser.add_argument("--version", action="version", version=f"kvsim {kvsim_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, mod in _command_modules():
        if isinstance(mod, Exception):
            p = sub.add_parser(name.replace("_", "-"), help=f"(unavailable: {mod})")
            p.set_defaults(_command_main=_unavailable(name, mod))
            continue
        p = mod.add_parser(sub)
        p.set_defaults(_command_main=mod.main)
    return parser


def _unavailable(name: str, exc: Exception):
    def main(args: argparse.Namespace) -> int:
        print(f"kvsim: error: command {name!r} could not be loaded: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    return main


def _input_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ValueError, FileExistsError]  # ConfigError is a ValueError
    try:
        from traces.records import TraceError  # a ValueError too; listed for clarity
        errors.append(TraceError)
    except ImportError:
        pass
    return tuple(errors)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._command_main(args) or 0)
    except _input_errors() as exc:
        if getattr(args, "debug", False):
            raise
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
