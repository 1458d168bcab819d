"""The synthetic generator: determinism, config validation, the context cap, and fit targets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from traces import (
    LogNormalMix,
    SyntheticConfig,
    ThinkTime,
    TraceError,
    generate_synthetic,
    load_trace,
    validate_session,
)
from traces.synthetic import load_fit


def test_same_seed_identical_different_seed_different():
    a = generate_synthetic(SyntheticConfig(sessions=300, seed=11))
    b = generate_synthetic(SyntheticConfig(sessions=300, seed=11))
    c = generate_synthetic(SyntheticConfig(sessions=300, seed=12))
    assert a == b
    assert a.sessions != c.sessions
    assert [s.start_s for s in a.sessions] != [s.start_s for s in c.sessions]


def test_longer_trace_extends_a_shorter_one():
    short = generate_synthetic(SyntheticConfig(sessions=50, seed=5))
    long = generate_synthetic(SyntheticConfig(sessions=400, seed=5))
    assert long.sessions[:50] == short.sessions


def test_sessions_are_valid_sorted_and_closed_loop():
    load = generate_synthetic(SyntheticConfig(sessions=200, seed=1))
    assert len(load.sessions) == 200 and load.skipped == 0
    starts = [s.start_s for s in load.sessions]
    assert starts == sorted(starts) and starts[0] == 0.0
    for s in load.sessions:
        validate_session(s)
        assert all(t.think_s is not None and t.arrival_s is None for t in s.turns[1:])
        cfg = SyntheticConfig()
        assert all(1 <= t.prompt_tokens <= cfg.prompt_max_tokens for t in s.turns)
        assert all(1 <= t.output_tokens <= cfg.output_max_tokens for t in s.turns)


def test_context_cap_is_enforced():
    cap = 1500
    load = generate_synthetic(SyntheticConfig(sessions=2000, seed=2, max_context_tokens=cap))
    for s in load.sessions:
        assert s.history_tokens(len(s.turns)) <= cap
    assert load.info["truncated_sessions"] > 0 and load.info["shortened_first_prompts"] > 0
    uncapped = generate_synthetic(SyntheticConfig(sessions=2000, seed=2, max_context_tokens=None))
    assert uncapped.n_turns - load.n_turns == load.info["dropped_turns"]


def test_fixed_shapes_give_known_answers():
    cfg = SyntheticConfig(
        sessions=1000,
        seed=0,
        turns_pmf=(0, 0, 1),
        first_prompt_tokens=LogNormalMix.lognormal(100, 1e-9),
        prompt_tokens=LogNormalMix.lognormal(40, 1e-9),
        output_tokens=LogNormalMix.lognormal(7, 1e-9),
        think=ThinkTime(median_s=2.5, sigma=0.0),
        arrival_rate_per_s=4.0,
    )
    load = generate_synthetic(cfg)
    for s in load.sessions:
        assert [(t.prompt_tokens, t.output_tokens) for t in s.turns] == [(100, 7), (40, 7), (40, 7)]
        assert [t.think_s for t in s.turns[1:]] == [2.5, 2.5]
    gaps = np.diff([s.start_s for s in load.sessions])
    assert np.mean(gaps) == pytest.approx(1 / 4.0, rel=0.1)  # Poisson rate 4/s
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.1)  # exponential: CV 1


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("sessions", -1, "sessions must be >= 0"),
        ("sessions", 2.5, "sessions must be an integer"),
        ("arrival_rate_per_s", 0, "arrival_rate_per_s must be a finite number > 0"),
        ("turns_pmf", (), "turns_pmf must be a non-empty list"),
        ("turns_pmf", (0.5, -0.1), "turns_pmf must be a non-empty list"),
        ("max_context_tokens", 1, "max_context_tokens must be an integer >= 2"),
        ("prompt_tokens", {"weights": [1]}, "prompt_tokens must be a LogNormalMix"),
    ],
)
def test_config_errors_name_the_field(field, value, words):
    with pytest.raises(TraceError, match=words):
        SyntheticConfig(**{field: value})


def test_from_dict_nested_and_unknown_keys():
    cfg = SyntheticConfig.from_dict(
        {
            "sessions": 3,
            "seed": 9,
            "turns_pmf": [1, 1],
            "think": {"median_s": 5, "sigma": 0.5},
            "output_tokens": {"weights": [1], "mu": [3.0], "sigma": [0.5]},
        }
    )
    assert cfg.turns_pmf == (0.5, 0.5) and cfg.think == ThinkTime(5, 0.5)
    assert cfg.output_tokens == LogNormalMix((1.0,), (3.0,), (0.5,))
    with pytest.raises(TraceError, match="unknown synthetic option.*'sesions'"):
        SyntheticConfig.from_dict({"sesions": 3})
    with pytest.raises(TraceError, match=r"trace\.think: unknown key.*'median'"):
        SyntheticConfig.from_dict({"think": {"median": 3}})
    with pytest.raises(TraceError, match=r"trace\.think\.sigma must be a number"):
        SyntheticConfig.from_dict({"think": {"sigma": "wide"}})
    with pytest.raises(TraceError, match=r"trace\.prompt_tokens: missing key 'sigma'"):
        SyntheticConfig.from_dict({"prompt_tokens": {"weights": [1], "mu": [1]}})
    assert load_trace({"kind": "synthetic", "sessions": 3, "seed": 9}) == generate_synthetic(
        SyntheticConfig(sessions=3, seed=9)
    )


def test_config_is_frozen_and_documented():
    cfg = SyntheticConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.sessions = 5  # type: ignore[misc]
    assert all(len(text) > 10 for text in SyntheticConfig.help().values())


def test_defaults_come_from_the_packaged_fit():
    fit = load_fit()
    cfg = SyntheticConfig()
    assert cfg.output_tokens.weights == pytest.approx(fit["output_tokens"]["weights"], abs=1e-4)
    assert cfg.prompt_max_tokens == fit["prompt_tokens"]["clip"][1]
    assert len(cfg.turns_pmf) == fit["turns"]["max_turns"]


def test_generator_matches_the_fitted_data_targets_on_20k_sessions():
    """Statistics of 20k generated sessions vs the ShareGPT data quantiles stored in the fit YAML."""
    fit = load_fit()
    load = generate_synthetic(SyntheticConfig(sessions=20_000, seed=123, max_context_tokens=None))
    first = np.array([s.turns[0].prompt_tokens for s in load.sessions])
    later = np.array([t.prompt_tokens for s in load.sessions for t in s.turns[1:]])
    out = np.array([t.output_tokens for s in load.sessions for t in s.turns])
    n_turns = np.array([len(s.turns) for s in load.sessions])
    q = fit["prompt_tokens"]["gof"]["quantiles"]
    i50, i90 = q.index(0.5), q.index(0.9)
    for name, x in (
        ("first_prompt_tokens", first),
        ("prompt_tokens", later),
        ("output_tokens", out),
    ):
        data = fit[name]["gof"]["data"]
        assert np.median(x) == pytest.approx(data[i50], rel=0.10), name
        assert np.quantile(x, 0.9) == pytest.approx(data[i90], rel=0.15), name
        assert x.mean() == pytest.approx(fit[name]["gof"]["mean_data"], rel=0.15), name
    t = fit["turns"]["gof"]
    assert np.median(n_turns) == t["data"][i50]
    assert n_turns.mean() == pytest.approx(t["mean_data"], rel=0.10)
    counts = np.array(fit["turns"]["counts"])
    assert np.mean(n_turns == 1) == pytest.approx(counts[0] / counts.sum(), abs=0.02)
    think = np.array([t.think_s for s in load.sessions for t in s.turns[1:]])
    assert np.median(think) == pytest.approx(SyntheticConfig().think.median_s, rel=0.05)


def test_the_fit_loader_reads_the_fit_as_the_pure_loader_does():
    from importlib import resources

    import yaml

    from traces.synthetic import FIT_LOADER, load_fit

    text = resources.files("traces").joinpath("data/sharegpt_fit.yaml").read_text(encoding="utf-8")
    assert load_fit() == yaml.safe_load(text)
    assert FIT_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
