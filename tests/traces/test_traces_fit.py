"""The ShareGPT fit: EM recovers known mixtures, and the packaged YAML is what the shared data gives."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from traces import LogNormalMix
from traces.fit_sharegpt import fit_length, fit_lognormal_mix, main
from traces.synthetic import load_fit


def test_em_recovers_a_known_two_component_mixture():
    true = LogNormalMix((0.3, 0.7), (2.0, 5.0), (0.4, 0.6))
    x = np.exp(true.mu[0] + true.sigma[0] * np.random.default_rng(0).standard_normal(30_000))
    y = np.exp(true.mu[1] + true.sigma[1] * np.random.default_rng(1).standard_normal(70_000))
    fit, _ = fit_lognormal_mix(np.concatenate([x, y]), 2)
    assert fit.weights == pytest.approx(true.weights, abs=0.01)
    assert fit.mu == pytest.approx(true.mu, abs=0.03)
    assert fit.sigma == pytest.approx(true.sigma, abs=0.03)


@pytest.mark.parametrize(
    "true", [LogNormalMix.lognormal(300, 0.5), LogNormalMix((0.4, 0.6), (2.5, 5.5), (0.5, 0.5))]
)
def test_fit_length_picks_the_true_number_of_components_by_bic(true):
    draws = true.sample(np.random.default_rng(4), 5_000, 1, 20_000)
    f = fit_length(draws, 20_000)
    assert len(f.dist.weights) == len(true.weights) == min(f.bic, key=f.bic.get)
    assert f.dist.mu == pytest.approx(true.mu, abs=0.05)
    assert f.dist.weights == pytest.approx(true.weights, abs=0.03)
    rel = np.array(f.model_quantiles) / np.array(f.data_quantiles) - 1
    assert np.abs(rel).max() < 0.05 and f.ks < 0.02


def test_model_quantiles_agree_with_sampling():
    mix = LogNormalMix((0.4, 0.6), (2.5, 5.5), (0.5, 0.5))
    draws = mix.sample(np.random.default_rng(7), 400_000, 1, 2000)
    exact = mix.quantiles([0.1, 0.5, 0.9, 0.99], 1, 2000)
    assert exact == pytest.approx(np.quantile(draws, [0.1, 0.5, 0.9, 0.99]), rel=0.02)


@pytest.mark.data
def test_cli_reproduces_the_packaged_yaml(data_file, tmp_path, capsys):
    """`python -m traces.fit_sharegpt` on the shared data gives the packaged YAML (not stale), and
    the fit is good: model vs data quantiles and KS within the documented bounds."""
    src = data_file("sharegpt/sharegpt_v3_messages_derived.csv")
    out = tmp_path / "fit.yaml"
    assert main(["--data", str(src), "--out", str(out)]) == 0
    assert "output_tokens" in capsys.readouterr().out
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    packaged = load_fit()
    assert doc["source"]["sha256"] == packaged["source"]["sha256"]
    assert doc["source"]["date"] and doc["source"]["file"].endswith(
        "sharegpt_v3_messages_derived.csv"
    )
    for name in ("first_prompt_tokens", "prompt_tokens", "output_tokens"):
        for key in ("weights", "mu", "sigma", "clip"):
            assert doc[name][key] == pytest.approx(packaged[name][key], abs=1e-3), (name, key)
        g = doc[name]["gof"]
        rel = np.abs(np.array(g["model"]) / np.array(g["data"]) - 1)
        q = g["quantiles"]
        assert rel[q.index(0.5)] <= 0.05 and rel[q.index(0.9)] <= 0.06, (name, g)
        assert rel[q.index(0.99)] <= 0.20 and g["ks"] < 0.03, (name, g)
    assert doc["turns"]["counts"] == packaged["turns"]["counts"]
    assert doc["tokenizer"]["chars_per_token"] == packaged["tokenizer"]["chars_per_token"]
    # The YAML's own counts agree with each other
    assert (
        sum(doc["turns"]["counts"])
        == doc["counts"]["sessions"]
        == doc["first_prompt_tokens"]["gof"]["n"]
    )
    assert doc["output_tokens"]["gof"]["n"] == doc["counts"]["turns"]
    assert doc["prompt_tokens"]["gof"]["n"] == doc["counts"]["turns"] - doc["counts"]["sessions"]


def test_cli_missing_data_is_a_clear_error(tmp_path, capsys):
    assert main(["--data", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
