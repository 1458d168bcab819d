"""Shared fixtures of the calibration tests: a tiny model spec and one quick CPU calibration (reused)."""

from __future__ import annotations

from pathlib import Path

import pytest

# Small enough that a CPU times every shape of the quick grid in a few seconds.
TINY_MODEL_YAML = """\
name: tiny-test
num_layers: 4
hidden_size: 256
num_heads: 4
num_kv_heads: 2
head_dim: 64
intermediate_size: 768
vocab_size: 2048
dtype_bytes: 2
gated_mlp: true
source: tests/calibration (a toy shape for CPU runs)
"""


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("model") / "tiny.yaml"
    p.write_text(TINY_MODEL_YAML)
    return p


@pytest.fixture(scope="session")
def cpu_calibration(tmp_path_factory, tiny_model_path):
    """`kvsim calibrate --device cpu --quick` once: (exit code, profile path, raw CSV path, stdout)."""
    pytest.importorskip("torch")
    import contextlib
    import io

    from experiments.cli import main

    out = tmp_path_factory.mktemp("cal") / "cpu-tiny.yaml"
    raw = out.with_suffix(".csv")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(
            [
                "calibrate",
                "--device",
                "cpu",
                "--model",
                str(tiny_model_path),
                "--out",
                str(out),
                "--quick",
                "--raw",
                str(raw),
            ]
        )
    return rc, out, raw, buf.getvalue()


@pytest.fixture(scope="session")
def public_fit():
    """``fit_public`` over every public table in ../shared/data, once per session (~40 s)."""
    from cal_helpers import DATA

    from calibration.public_profiles import fit_public

    return fit_public(DATA, seed=0)
