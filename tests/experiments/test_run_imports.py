"""A single-turn run of one policy (benchmarks/single_turn_10k.yaml's kind, small) imports that
policy's module and no other policy's, without a token budget not the relevance model
(``sim.token_budget``), and without sparse decode not its selectors (``sim.sparse``): checked in a
fresh interpreter, where nothing else has imported them. The twins ask for each and import it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.policies import registry

REPO_ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
name: single-turn-imports
trace: {kind: synthetic, sessions: 20, seed: 1, turns_pmf: [1.0]}
model: llama-3-8b
hardware: a100-sxm
memory: {gpu_kv_gb: .inf, cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
engine: {max_batch_tokens: 4096, max_running: 128}
policies: [%s]
seeds: [1]
executor: {kind: local, workers: 1}
%s
"""


def _modules_after_run(tmp_path: Path, policy: str, extra: str = "") -> tuple[int, set[str]]:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(CONFIG % (policy, extra), encoding="utf-8")
    out = tmp_path / "out"
    code = (
        "import sys; from experiments.cli import main; "
        f"rc = main(['run', {str(cfg)!r}, '--out', {str(out)!r}, '--quiet']); "
        "print(rc, *sorted(m for m in sys.modules if m.startswith('sim.')))"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    rc, *mods = got.stdout.strip().splitlines()[-1].split()
    assert (out / "summary.csv").is_file(), got.stderr
    return int(rc), set(mods)


@pytest.mark.parametrize("policy", ["lru"])
def test_a_run_imports_its_policy_alone(tmp_path, policy):
    rc, mods = _modules_after_run(tmp_path, policy)
    assert rc == 0
    mapped = set(registry._MODULES.values())
    assert registry._MODULES[policy] in mods
    assert mods & mapped == {registry._MODULES[policy]}
    assert "sim.token_budget" not in mods  # no token budget: no relevance model
    assert "sim.sparse" not in mods  # sparse decode off: no selector


def test_a_budgeted_run_reads_the_relevance_model(tmp_path):
    """The twin: with a token budget the summary's quality columns need it, and it is imported."""
    rc, mods = _modules_after_run(
        tmp_path, "lru", "budgets: [{kind: streamingllm, sink: 4, window: 60}]"
    )
    assert rc == 0
    assert "sim.token_budget" in mods


def test_sparse_decode_alone_imports_its_selectors():
    """The twin of sparse decode off: a config that asks for it imports ``sim.sparse`` (to check
    its selector), one without it does not."""
    code = (
        "import sys; from sim.config import SparseConfig; "
        "off = SparseConfig(); a = 'sim.sparse' in sys.modules; off.selector(); "
        "b = 'sim.sparse' in sys.modules; SparseConfig(kind='quest', k=4); "
        "print(a, b, 'sim.sparse' in sys.modules)"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert got.stdout.split() == ["False", "False", "True"]
