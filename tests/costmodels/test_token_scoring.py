"""Token-scorer cost: FLOPs and parameters counted by hand, and the time formula's shape."""

from __future__ import annotations

import dataclasses

import pytest

from costmodels import CostModel, cost_model, get_model, load_profile
from costmodels.token_scoring import (
    scorer_flops_per_key,
    scorer_params,
    scoring_s,
    scoring_s_per_token_layer,
)


def test_default_scorer_flops_by_hand() -> None:
    # 128 -> 256 -> 256 -> 256 -> 1
    macs = 128 * 256 + 256 * 256 + 256 * 256 + 256 * 1  # 32768 + 65536 + 65536 + 256
    assert macs == 164_096
    matmul = 2 * macs  # 328_192
    biases = 256 + 256 + 256 + 1  # one add per output: 769
    relus = 256 + 256 + 256  # hidden outputs only: 768
    assert scorer_flops_per_key() == matmul + biases + relus == 329_729


def test_small_shapes_by_hand() -> None:
    assert scorer_flops_per_key(4, 3, 2) == 2 * (4 * 3 + 3 * 1) + (3 + 1) + 3 == 37
    assert scorer_flops_per_key(128, 256, 1) == 2 * 128 + 1  # a linear score, no ReLU
    assert scorer_params(4, 3, 2) == (4 * 3 + 3) + (3 * 1 + 1) == 19
    assert scorer_params() == (128 * 256 + 256) + 2 * (256 * 256 + 256) + (256 + 1) == 164_865


@pytest.mark.parametrize("kw", [{"key_dim": 0}, {"hidden": -1}, {"depth": 0}, {"depth": 2.0}])
def test_bad_shapes(kw) -> None:
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        scorer_flops_per_key(**kw)


@pytest.fixture(scope="module")
def cm() -> CostModel:
    return cost_model("llama-3-8b", "h100-sxm")


def test_analytic_time_from_the_profile(cm) -> None:
    lin = cm.profile.linear
    kv_heads = 8  # Llama-3-8B
    tokens = 4096
    expected = lin.tau_s + tokens * kv_heads * 329_729 / lin.flops
    assert scoring_s(cm, tokens) == pytest.approx(expected, rel=1e-12)
    # One token: the 330 KB of bf16 weights take longer to read than 8 keys take to score.
    floor = 164_865 * 2 / lin.weight_bw_Bps
    assert floor > kv_heads * 329_729 / lin.flops
    assert scoring_s(cm, 1) == pytest.approx(lin.tau_s + floor, rel=1e-12)
    assert scoring_s(cm, 0) == 0.0


def test_time_is_linear_in_tokens(cm) -> None:
    t1, t2, t4 = (scoring_s(cm, n, tau_s=0.0) for n in (10_000, 20_000, 40_000))
    assert t2 == pytest.approx(2 * t1, rel=1e-12) and t4 == pytest.approx(4 * t1, rel=1e-12)
    tau = cm.profile.linear.tau_s
    a, b = scoring_s(cm, 10_000), scoring_s(cm, 20_000)
    assert b - a == pytest.approx(a - tau, rel=1e-9)


def test_measured_seconds_per_key(cm) -> None:
    assert scoring_s(cm, 100, s_per_key=1e-9, tau_s=2e-6) == pytest.approx(2e-6 + 100 * 8 * 1e-9)
    with pytest.raises(ValueError, match="s_per_key must be > 0"):
        scoring_s(cm, 100, s_per_key=0.0)
    with pytest.raises(ValueError, match="tau_s must be >= 0"):
        scoring_s(cm, 100, tau_s=-1.0)


def test_key_dim_defaults_to_the_head_dim(cm) -> None:
    narrow = CostModel(
        dataclasses.replace(get_model("llama-3-8b"), head_dim=64), load_profile("h100-sxm")
    )
    n = 50_000
    assert scoring_s(narrow, n) == pytest.approx(scoring_s(narrow, n, key_dim=64), rel=1e-12)
    assert scoring_s(narrow, n) < scoring_s(narrow, n, key_dim=128)
    flops = scoring_s(narrow, n, tau_s=0.0) * narrow.profile.linear.flops / (n * 8)
    assert flops == pytest.approx(scorer_flops_per_key(64), rel=1e-9)


def test_per_token_layer_slope(cm) -> None:
    per = scoring_s_per_token_layer(cm)
    assert per == pytest.approx(8 * 329_729 / cm.profile.linear.flops, rel=1e-12)
    assert scoring_s(cm, 30_000, tau_s=0.0) == pytest.approx(30_000 * per, rel=1e-12)
    assert scoring_s_per_token_layer(cm, s_per_key=3e-9) == pytest.approx(8 * 3e-9)
    with pytest.raises(ValueError, match="s_per_key must be > 0"):
        scoring_s_per_token_layer(cm, s_per_key=-1.0)
