"""The generic top-level names (traces, experiments ... exist on PyPI) resolve to this checkout,
and pyproject's explicit package list names every package folder we ship."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
TOP = ("sim", "costmodels", "traces", "calibration", "experiments")


@pytest.mark.parametrize("name", TOP)
def test_package_is_imported_from_this_repository(name):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(ROOT / name)


def test_pyproject_lists_every_package_folder():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in TOP
        for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk == listed


def test_console_script_points_at_the_cli():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["kvsim"].partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
