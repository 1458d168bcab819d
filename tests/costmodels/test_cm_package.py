"""Package contract: imported from this checkout, depends on nothing else of the project."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import costmodels

ROOT = Path(__file__).resolve().parents[2]


def test_imported_from_this_repository() -> None:
    # PyPI has an unrelated `costmodels`-like namespace risk: make sure it is ours.
    assert Path(costmodels.__file__).resolve().parent == ROOT / "costmodels"


def test_imports_only_stdlib_numpy_yaml() -> None:
    code = (
        "import sys; before = set(sys.modules); import costmodels; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(' '.join(sorted(new)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    new = set(out.stdout.split())
    assert "costmodels" in new
    project = {"sim", "traces", "calibration", "experiments", "notebooks"}
    assert not new & project, new & project
    # PyYAML's C extension (_yaml) brings Cython's runtime modules along.
    cython = {m for m in new if m.startswith(("_cython", "cython_runtime"))}
    third_party = (
        new - set(sys.stdlib_module_names) - {"costmodels", "yaml", "_yaml", "numpy"} - cython
    )
    assert third_party == set(), third_party


def test_public_api() -> None:
    for name in (
        "ModelSpec",
        "HardwareSpec",
        "Profile",
        "BatchShape",
        "IterationCost",
        "CostModel",
        "PensieveConstants",
        "attention_pairs",
        "pipelined_time",
        "get_model",
        "get_hardware",
        "load_profile",
        "save_profile",
        "analytic_profile",
        "available_models",
        "available_hardware",
        "cost_model",
    ):
        assert name in costmodels.__all__ and hasattr(costmodels, name), name


def test_data_files_are_declared_package_data() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'costmodels = ["data/*.yaml", "profiles/*.yaml"]' in text
    assert sorted(p.name for p in (ROOT / "costmodels" / "data").glob("*.yaml")) == [
        "hardware.yaml",
        "models.yaml",
    ]
