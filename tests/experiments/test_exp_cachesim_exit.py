"""``kvsim cachesim`` leaves without the interpreter's teardown once its output is flushed
(``experiments.cli._leave_now``): what a caller sees is what the ordinary exit gives, the same
output and status as the command in-process, and the ``atexit`` functions still run (a user's
policy module may register one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

POLICY = """
import atexit
import os
from pathlib import Path

from sim.policies.lru import LRU


class Remembered(LRU):
    pass


if os.environ.get("KVSIM_EXIT_MARK"):  # the subprocess's only, not the test's own process
    atexit.register(lambda: Path(os.environ["KVSIM_EXIT_MARK"]).write_text("yes"))
"""

REPO = Path(__file__).resolve().parents[2]


def _kvsim(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},  # stdout buffered
        "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "KVSIM_EXIT_MARK": str(cwd / "atexit_ran"),
    }
    return subprocess.run(
        [sys.executable, "-m", "experiments.cli", "cachesim", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("as_json", [True, False])
def test_the_process_prints_what_the_command_prints_and_runs_atexit(
    tmp_path, monkeypatch, capsys, as_json
):
    from experiments.cli import main

    (tmp_path / "kvsim_exit_policy.py").write_text(POLICY, encoding="utf-8")
    rows = "".join(f"{i % 7},{1 + i % 3}\n" for i in range(200))
    (tmp_path / "t.csv").write_text("obj_id,size\n" + rows, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    args = ["--trace", "t.csv", "--capacity", "6"] + (["--json"] if as_json else [])
    try:
        for policy in ("lru", "kvsim_exit_policy:Remembered"):
            proc = _kvsim(tmp_path, *args, "--policy", policy)
            assert proc.returncode == 0, proc.stderr
            assert main(["cachesim", *args, "--policy", policy]) == 0
            assert proc.stdout == capsys.readouterr().out
            assert proc.stdout.endswith("\n")
    finally:
        sys.modules.pop("kvsim_exit_policy", None)
    assert (tmp_path / "atexit_ran").read_text() == "yes"


def test_an_error_exits_as_before(tmp_path):
    (tmp_path / "t.csv").write_text("obj_id,size\n1,1\n", encoding="utf-8")
    proc = _kvsim(tmp_path, "--trace", "t.csv", "--policy", "no-such", "--capacity", "2")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("kvsim: error: unknown policy 'no-such'")
