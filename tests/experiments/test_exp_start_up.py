"""Start-up: a run that draws no figure never imports matplotlib, a quiet one no progress bar
(tqdm), a kvsim-engine one not vLLM's engine (checked in a fresh interpreter, where nothing else
has imported them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
name: no-figures
trace: {kind: synthetic, sessions: 5, seed: 1}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: %s, cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
policies: [lru]
seeds: [1]
"""


def _run(tmp_path: Path, gpu_kv_gb: str) -> tuple[str, Path]:
    cfg = tmp_path / f"exp_{gpu_kv_gb}.yaml"
    cfg.write_text(CONFIG % gpu_kv_gb, encoding="utf-8")
    out = tmp_path / f"out_{gpu_kv_gb}"
    code = (
        "import sys; from experiments.cli import main; "
        f"rc = main(['run', {str(cfg)!r}, '--out', {str(out)!r}, '--quiet']); "
        "print(rc, 'matplotlib' in sys.modules, 'tqdm' in sys.modules, 'sim.vllm_v1' in sys.modules)"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return got.stdout.strip().splitlines()[-1], out


def test_a_run_without_figures_does_not_import_matplotlib(tmp_path):
    line, out = _run(tmp_path, ".inf")
    assert line == "0 False False False"
    assert (out / "summary.csv").is_file() and not any((out / "plots").iterdir())


def test_a_run_with_figures_draws_them(tmp_path):
    line, out = _run(tmp_path, "0.5")
    assert line == "0 True False False"
    assert (out / "plots" / "reprefill_vs_capacity.png").is_file()
