"""`import calibration` (and the fitting side) works without torch: torch is imported lazily."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.modules['torch'] = None          # any 'import torch' now raises ImportError
sys.modules['flashinfer'] = None
import calibration
from calibration import (fit, validate, samples, grids, public_tables, public_profiles, profile_writer,
                         samples_io, timing, measure, measure_gemm, measure_attention,
                         measure_copy, local, env, validate_forward)
import experiments.commands.calibrate, experiments.commands.cost
from experiments.cli import main
rc = main(['cost', '--profile', 'h100-public', '--model', 'llama-3-8b', '--decode-batch', '8', '--decode-ctx', '512'])
assert rc == 0, rc
rc = main(['calibrate', '--device', 'cpu', '--out', '/nonexistent/x.yaml'])
assert rc == 2, rc
print('OK')
"""


def test_calibration_imports_without_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("OK")
    assert "needs torch" in out.stderr  # the measure action says what to install
