"""The `kvsim` command line. Each subcommand is a module in ``experiments.commands``, found at start.

A command module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` (add its subparser and
return it) and ``main(args) -> int``; nothing here needs editing to add one. Input errors
(ConfigError, TraceError, ValueError, an existing --out) print one line and exit with status 2;
pass --debug to a command that has it to see the traceback instead.

SIGTERM is handled as Ctrl-C is: it raises ``Terminated`` (a KeyboardInterrupt) in the main thread,
so worker processes are stopped and half-written files are removed on the way out; the command
then prints one line and exits with status 143 (128 + SIGTERM), or 130 after Ctrl-C. A command may
add notes to the exception (``add_note``) to say what it kept: `kvsim run` keeps the grid points it
finished in ``<out>.partial/`` and says how many, since running it again resumes from them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType

from experiments.version import kvsim_version

EXIT_INPUT_ERROR = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM. A KeyboardInterrupt, so every
    clean-up path that handles Ctrl-C handles it too."""


def _command_modules(only: str | None = None) -> list[tuple[str, ModuleType | ImportError]]:
    """The command modules, or with ``only`` (a command as typed) just that one when it names one:
    a command then imports no other command's module."""
    import experiments.commands as pkg

    name = None if only is None or "_" in only else only.replace("-", "_")
    if name is not None and name.isidentifier() and _has_source(pkg.__path__, name):
        # what the listing below would find for it, without the listing: pkgutil's imports
        # inspect (with ast, dis and tokenize), milliseconds that no command's start-up needs
        names = [name]
    else:
        import pkgutil

        names = [
            info.name
            for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)
            if not info.name.startswith("_")
        ]
        if name in names:
            names = [name]
    found: list[tuple[str, ModuleType | ImportError]] = []
    for name in names:
        try:
            found.append((name, importlib.import_module(f"{pkg.__name__}.{name}")))
        except ImportError as exc:  # a missing extra must not take the other commands down
            found.append((name, exc))
    return found


def _has_source(paths: Sequence[str], name: str) -> bool:
    """Whether one of ``paths`` holds ``name.py`` (a module ``pkgutil.iter_modules`` lists)."""
    return any(os.path.isfile(os.path.join(path, f"{name}.py")) for path in paths)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``command`` (the command line's first word) one that holds only
    that command when it names one (what ``main`` parses with: start-up imports only the command
    that runs). Anything else (an option, a typo) gets every command, for the help and the error."""
    parser = argparse.ArgumentParser(
        prog="kvsim",
        description="Trace-driven simulator of KV-cache management for multi-turn LLM serving.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, mod in _command_modules(command):
        if isinstance(mod, ImportError):
            p = sub.add_parser(name.replace("_", "-"), help=f"(unavailable: {mod})")
            p.set_defaults(_command_main=_unavailable(name, mod))
            continue
        p = mod.add_parser(sub)
        p.set_defaults(_command_main=mod.main)
    return parser


class _Version(argparse.Action):
    """argparse's ``version`` action, with the version read only when asked for: reading it
    (the checkout's pyproject, with tomllib) is start-up time that no other command needs."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser._print_message(f"kvsim {kvsim_version()}\n", sys.stdout)
        parser.exit()


def _unavailable(name: str, exc: ImportError):
    def main(args: argparse.Namespace) -> int:
        print(
            f"kvsim: error: command {name!r} could not be loaded: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
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


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While active (main thread only), the first SIGTERM raises Terminated; later ones are ignored
    so that the clean-up it starts is not cut short. The previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        with sigterm_raises():
            return int(args._command_main(args) or 0)
    except _input_errors() as exc:
        if getattr(args, "debug", False):
            raise
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except Terminated as exc:
        print(_stopped("terminated (SIGTERM); worker processes stopped", exc), file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt as exc:
        print(_stopped("interrupted", exc), file=sys.stderr)
        return EXIT_INTERRUPTED


def run() -> None:
    """The `kvsim` command: ``main()``, then exit with its status. A process that loaded Ray leaves
    with ``os._exit`` once its output is flushed, skipping the interpreter's teardown: there Ray
    2.60's driver can crash after its cluster has ended (SIGSEGV after a Ctrl-C in the stop stress
    test, 4 of 9 stops at one moment of a sweep on a loaded machine), which turned a clean 130 into
    -11. Ray's own exit hook, ``ray.shutdown``, has run by then (the sweep leaves Ray itself)."""
    code = main()
    if "ray._raylet" in sys.modules:
        import logging  # here: only a Ray run needs its handlers flushed

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed or gone: nothing to flush
                stream.flush()
        os._exit(code)
    if code == 0 and sys.argv[1:2] == ["cachesim"] and threading.active_count() == 1:
        _leave_now()  # returns only where the output could not be flushed
    # The process ends: the collection at the interpreter's exit need not scan every object left
    # (pandas' and pydantic's, the results'), which it would only find alive.
    gc.freeze()
    sys.exit(code)


def _leave_now() -> None:
    """Ends the process with status 0 after what the interpreter's exit does that anyone sees:
    the ``atexit`` functions (a user's policy module may have some), then stdout and stderr
    flushed; what it skips is tearing down the modules and freeing every object one by one
    (about 10-20 ms after a million-request ``kvsim cachesim``, whose replay is a few times
    that). Returns, for the ordinary exit, where a stream cannot be flushed (a closed pipe: the
    interpreter then reports it as it always does). Only for a process with no other thread."""
    import atexit

    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except (OSError, ValueError):
        return
    os._exit(0)


def _stopped(words: str, exc: BaseException) -> str:
    """The one line printed after a stop: what happened, then what the command says it kept (the
    notes it added to the exception, e.g. `kvsim run`'s finished grid points)."""
    return "; ".join([f"kvsim: {words}", *getattr(exc, "__notes__", ())])


if __name__ == "__main__":
    run()
