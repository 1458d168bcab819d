"""The kvsim version recorded in results (this checkout's pyproject, else installed metadata)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@cache
def kvsim_version() -> str:
    try:
        import tomllib  # Python >= 3.11

        with _PYPROJECT.open("rb") as f:  # a checkout: its own pyproject is the truth
            return str(tomllib.load(f)["project"]["version"])
    except (ImportError, OSError, KeyError, ValueError):
        pass
    from importlib import metadata  # here: a checkout never needs it (it imports email, socket)

    try:
        return metadata.version("kvsim")
    except metadata.PackageNotFoundError:
        return "unknown"
