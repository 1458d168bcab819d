"""The shared data folder: the real traces (ShareGPT, Mooncake, Azure, ...) that kvsim reads in place.

It is, in this order: the ``--data-dir`` of `kvsim run` / `kvsim trace`, else the environment
variable ``KVSIM_SHARED_DATA``, else ``../shared/data`` beside the checkout (the same default as
``calibration.public_tables.default_data_dir``, which reads the variable too). A path in an
experiment YAML that starts with ``${KVSIM_SHARED_DATA}`` (or ``$KVSIM_SHARED_DATA``) names a file
of that folder; the bundled real-trace experiments name their traces so, and run from any directory.
"""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DATA_VAR = "KVSIM_SHARED_DATA"
_PREFIXES = ("${" + SHARED_DATA_VAR + "}", "$" + SHARED_DATA_VAR)
HOW_TO_SET = f"set {SHARED_DATA_VAR} or pass --data-dir"


def shared_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """``data_dir`` if given, else ``$KVSIM_SHARED_DATA``, else ../shared/data beside the checkout."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    from calibration.public_tables import default_data_dir

    return default_data_dir().expanduser()


def where_from(data_dir: str | os.PathLike | None = None) -> str:
    """Where ``shared_data_dir(data_dir)`` came from, for messages."""
    if data_dir is not None:
        return "--data-dir"
    if os.environ.get(SHARED_DATA_VAR):
        return f"${SHARED_DATA_VAR}"
    return "the default, ../shared/data beside the checkout"


def check_data_dir(data_dir: str | os.PathLike | None) -> None:
    """A ``--data-dir`` that is not a folder is an input error (ValueError)."""
    if data_dir is not None and not Path(data_dir).expanduser().is_dir():
        raise ValueError(f"--data-dir {data_dir}: no such folder")


def names_shared_data(value: str) -> bool:
    """Whether a path starts with the shared data folder's variable."""
    return any(value == p or value.startswith(p + "/") for p in _PREFIXES)


def expand(value: str, data_dir: str | os.PathLike | None = None) -> str:
    """``value`` with a leading ``${KVSIM_SHARED_DATA}`` replaced by the shared data folder."""
    for prefix in _PREFIXES:
        if value == prefix or value.startswith(prefix + "/"):
            return str(shared_data_dir(data_dir)) + value[len(prefix) :]
    return value


def find_trace_file(value: str, data_dir: str | os.PathLike | None = None) -> Path:
    """A trace file named on the command line: as given (``${KVSIM_SHARED_DATA}/...`` expanded), or,
    when relative and not found here, in the shared data folder. ValueError when neither has it."""
    p = Path(expand(value, data_dir)).expanduser()
    if p.is_file():
        return p
    if names_shared_data(value):
        raise ValueError(
            f"{value}: no such file in the shared data folder {shared_data_dir(data_dir)} "
            f"(from {where_from(data_dir)}); {HOW_TO_SET}"
        )
    if not p.is_absolute():
        in_data = shared_data_dir(data_dir) / p
        if in_data.is_file():
            return in_data
        raise ValueError(
            f"{value}: no such file here, nor in the shared data folder {shared_data_dir(data_dir)} "
            f"(from {where_from(data_dir)})"
        )
    raise ValueError(f"{value}: no such file")
