"""Subcommands of `kvsim`, one module each (found by ``experiments.cli`` at start).

To add ``kvsim foo``, write ``experiments/commands/foo.py`` with::

    def add_parser(subparsers) -> argparse.ArgumentParser:
        p = subparsers.add_parser("foo", help="one line", description="...")
        p.add_argument(...)
        return p

    def main(args: argparse.Namespace) -> int:
        ...          # return the exit status; raise ValueError (or a subclass) for bad input

Import heavy or optional dependencies inside ``main`` so `kvsim --help` stays fast and a missing
extra only breaks its own command. Modules whose name starts with ``_`` are helpers, not commands.
"""
