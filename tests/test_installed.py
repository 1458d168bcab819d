"""A non-editable install runs the quickstart from any directory: the wheel carries the bundled
experiments, and ``kvsim run quickstart`` finds them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel, installed into a folder of its own (dependencies are this environment's)."""
    tmp = tmp_path_factory.mktemp("wheel")
    # A clean copy of the sources: a build/ left by an earlier build would hide missing data.
    src = tmp / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache", "results"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        check=True,
    )
    wheel = next((tmp / "dist").glob("kvsim-*.whl"))
    target = tmp / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    return target


def _kvsim(target: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    # -S: no site processing, so no editable install of this checkout can answer the imports;
    # the wheel's folder first, then this environment's packages for numpy, pandas, simpy ...
    path = os.pathsep.join(
        [str(target), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    )
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-S", "-m", "experiments", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_the_wheel_runs_the_bundled_quickstart_from_any_directory(installed, tmp_path):
    out = tmp_path / "results"
    got = _kvsim(installed, tmp_path, "run", "quickstart", "--out", str(out), "--quiet")
    assert got.returncode == 0, got.stderr
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) > 0 and summary["name"].eq("quickstart").all()
    probe = _kvsim(installed, tmp_path, "list")
    assert probe.returncode == 0, probe.stderr


def test_the_wheel_imports_its_own_files(installed, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(installed), sysconfig.get_paths()["purelib"]]),
    }
    code = "import experiments, costmodels; print(experiments.__file__); print(costmodels.__file__)"
    got = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(line.startswith(str(installed)) for line in got.stdout.split())


def test_an_unknown_config_names_the_bundled_ones(tmp_path):
    from experiments.schema import ConfigError, load_experiment

    with pytest.raises(ConfigError, match="not a bundled experiment.*quickstart"):
        load_experiment(tmp_path / "nope.yaml")
