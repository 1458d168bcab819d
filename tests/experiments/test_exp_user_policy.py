"""A user's policy named ``module:Class`` is found beside the experiment file or in the current
directory, under the installed `kvsim` command as under ``python -m experiments``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.schema import ConfigError, load_experiment

POLICY = """
from sim.policies.lru import LRU


class OldestSession(LRU):
    pass
"""

CONFIG = """
name: mine
trace: {{kind: synthetic, sessions: 6, seed: 3}}
model: llama-3-8b
hardware: h100-sxm
memory: {{gpu_kv_gb: 1, cpu_kv_gb: 0}}
policies: [lru, "{module}:OldestSession"]
executor: {{kind: local, workers: {workers}}}
"""


@pytest.fixture
def clean_imports(monkeypatch):
    """Restore sys.path and forget the test's modules afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    names: list[str] = []
    yield names
    for name in names:
        sys.modules.pop(name, None)


def _write(folder: Path, module: str, workers: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(POLICY, encoding="utf-8")
    cfg = folder / "mine.yaml"
    cfg.write_text(CONFIG.format(module=module, workers=workers), encoding="utf-8")
    return cfg


def test_policy_module_beside_the_config_file(tmp_path, monkeypatch, clean_imports):
    clean_imports.append("kvsim_user_policy_beside")
    cfg = _write(tmp_path / "study", "kvsim_user_policy_beside")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert str(tmp_path / "study") not in sys.path
    exp = load_experiment(cfg)
    assert exp.policies == ["lru", "kvsim_user_policy_beside:OldestSession"]


def test_policy_module_in_the_current_directory(tmp_path, monkeypatch, clean_imports):
    clean_imports.append("kvsim_user_policy_cwd")
    here = tmp_path / "here"
    _write(here, "kvsim_user_policy_cwd")
    cfg = tmp_path / "configs" / "mine.yaml"
    cfg.parent.mkdir()
    cfg.write_text((here / "mine.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (here / "mine.yaml").unlink()
    monkeypatch.chdir(here)
    assert "" not in sys.path and str(here) not in sys.path
    exp = load_experiment(cfg)
    assert exp.policies[1] == "kvsim_user_policy_cwd:OldestSession"


def test_missing_policy_module_is_still_a_config_error(tmp_path, monkeypatch, clean_imports):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(CONFIG.format(module="kvsim_no_such_module", workers=1), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="kvsim_no_such_module"):
        load_experiment(cfg)


def test_installed_kvsim_command_runs_a_user_policy_in_workers(tmp_path):
    kvsim = Path(sys.executable).parent / "kvsim"
    if not kvsim.is_file():
        pytest.skip("the kvsim console script is not installed beside this Python")
    cfg = _write(tmp_path / "study", "kvsim_user_policy_run", workers=2)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(kvsim), "run", str(cfg.relative_to(tmp_path)), "--out", str(out), "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["policy"]) == ["kvsim_user_policy_run:OldestSession", "lru"]


def test_cachesim_finds_a_user_policy_in_the_current_directory(
    tmp_path, monkeypatch, clean_imports, capsys
):
    from experiments.cli import main

    clean_imports.append("kvsim_user_policy_cachesim")
    (tmp_path / "kvsim_user_policy_cachesim.py").write_text(POLICY, encoding="utf-8")
    (tmp_path / "t.csv").write_text("obj_id,size\n1,1\n2,1\n1,1\n3,1\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    policy = "kvsim_user_policy_cachesim:OldestSession"
    assert main(["cachesim", "--trace", "t.csv", "--policy", policy, "--capacity", "2"]) == 0
    assert policy in capsys.readouterr().out
