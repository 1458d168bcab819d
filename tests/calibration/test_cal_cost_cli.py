"""`kvsim cost` prints the expected numbers for hand-checked shapes (arithmetic written out below,
not taken from CostModel)."""

from __future__ import annotations

import json

import pytest
from cost_hand import PROFILE  # the hand-written profile the cost command tests share

from experiments.cli import main

# Llama-3-8B, per layer (the formulas of costmodels.cost, numbers from its config):
P = 4096 * 4096 + 2 * 4096 * 8 * 128 + 4096 * 4096 + 3 * 4096 * 14336  # 218,103,808 linear params
EW = (
    10 * 4096 + 2 * (32 + 8) * 128 + 3 * 14336 + 4 * 8 * 128
) * 2  # 196,608 elementwise bytes/token
KVL = 2 * 8 * 128 * 2  # 4096 KV bytes/token/layer
HEAD = 4096 * 128256  # LM head params


def _run(tmp_path, capsys, *args: str) -> tuple[dict, str]:
    path = tmp_path / "hand.yaml"
    path.write_text(PROFILE)
    base = ["cost", "--profile", str(path), "--model", "llama-3-8b", *args]
    assert main(base + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(base) == 0
    return data, capsys.readouterr().out


def test_decode_batch(tmp_path, capsys) -> None:
    data, text = _run(tmp_path, capsys, "--decode-batch", "4", "--decode-ctx", "1000")
    linear = 10e-6 + max(P * 2 / 2.0e12, 2 * 4 * P / 5.0e14)  # weight-read floor: 218.1 us
    ew = 4 * EW / 1.0e12
    dec = 5e-6 + 4 * 1e-6 + 4 * 1000 * KVL / 1.0e12
    layer = linear + ew + dec
    head = max(HEAD * 2 / 2.0e12, 2 * 4 * HEAD / 5.0e14)
    total = 32 * layer + head + 0.5e-3
    assert data["per_layer"]["linear_s"] == pytest.approx(linear, rel=1e-12)
    assert data["per_layer"]["decode_attn_s"] == pytest.approx(dec, rel=1e-12)
    assert data["per_layer"]["layer_s"] == pytest.approx(layer, rel=1e-12)
    assert data["total_s"] == pytest.approx(total, rel=1e-12)
    assert total == pytest.approx(
        9.1621e-3, rel=1e-4
    )  # 32 x (228.1 + 0.8 + 25.4) us + 525.3 us + 0.5 ms
    assert "TOTAL (iteration)" in text and f"{total * 1e3:.3f} ms" in text


def test_prefill_with_context_and_swap(tmp_path, capsys) -> None:
    data, text = _run(
        tmp_path,
        capsys,
        "--prefill",
        "1024",
        "--ctx",
        "4096",
        "--swap-bytes",
        str(64 << 20),
        "--swap-copies",
        "32",
    )
    n = 1024
    linear = 10e-6 + max(P * 2 / 2.0e12, 2 * n * P / 5.0e14)  # compute-bound: 893.4 us
    pairs = n * (4096 + n / 2)
    attn = 20e-6 + 4 * 32 * 128 * pairs / 2.0e14
    layer = linear + n * EW / 1.0e12 + attn
    head = max(HEAD * 2 / 2.0e12, 2 * 1 * HEAD / 5.0e14)
    compute = 32 * layer + head + 0.5e-3
    h2d = 32 * 10e-6 + (64 << 20) / 25.0e9
    # Compute-bound pipeline, epsilon 0: t_x(one layer) + L*t_c (costmodels.pipeline).
    total = h2d / 32 + 32 * layer + head + 0.5e-3
    assert data["shape"]["prefill_pairs"] == pairs
    assert data["compute_s"] == pytest.approx(compute, rel=1e-12)
    assert data["h2d_s"] == pytest.approx(h2d, rel=1e-12)
    assert data["total_s"] == pytest.approx(total, rel=1e-12)
    assert data["stall_s"] == pytest.approx(h2d / 32, rel=1e-9)
    assert f"{total * 1e3:.3f} ms" in text


def test_swap_only_and_pensieve(tmp_path, capsys) -> None:
    data, _ = _run(
        tmp_path, capsys, "--swap-bytes", "1000000", "--direction", "d2h", "--pensieve", "1"
    )
    assert data["total_s"] == pytest.approx(10e-6 + 1e6 / 25e9, rel=1e-12)
    pc = data["pensieve"]
    assert pc["alpha_s_per_ctx_token"] == pytest.approx(KVL / 1.0e12, rel=1e-12)
    assert pc["beta_s"] == pytest.approx(5e-6 + 1e-6, rel=1e-12)


def test_cost_input_errors(capsys) -> None:
    assert main(["cost", "--profile", "h100", "--model", "llama-3-8b"]) == 2
    assert "give --prefill" in capsys.readouterr().err
    assert main(["cost", "--profile", "h100", "--model", "llama-3-8b", "--ctx", "10"]) == 2
    assert main(["cost", "--profile", "nope-gpu", "--model", "llama-3-8b", "--prefill", "1"]) == 2


def test_committed_profile_by_name(capsys) -> None:
    assert (
        main(
            [
                "cost",
                "--profile",
                "h100-public",
                "--model",
                "llama-3-8b",
                "--prefill",
                "512",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["profile"] == "h100-public" and data["total_s"] > 0
