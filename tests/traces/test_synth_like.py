"""`trace synth --like`: the generator fitted to a trace reproduces the trace's marginals.

The check (``mismatches``), per marginal, comparing the source with 20,000 synthetic sessions:
- p10, p50, p90: the synthetic quantile lies between the source's p(q - 2 %) and p(q + 2 %) (a rank
  band: robust where the CDF is flat, and tight in tokens where it is steep);
- mean: within 4 standard errors (source std / sqrt(m) for the empirical fits, which resample the
  source; source std * sqrt(1/n + 1/m) for the parametric think time and start gaps);
- the two-sample KS statistic stays below its 1 % critical value 1.628 * sqrt((n + m) / (n m));
- the inter-arrival shape is not fitted (Poisson starts): for a trace with real timestamps the start
  gaps are checked by their mean (the rate) alone;
- the multi-turn share: within 4 standard errors.
A trace with 15 % longer replies fails it, and so does another real trace.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml

from experiments.cli import main
from traces import (
    LogNormalMix,
    Session,
    SyntheticConfig,
    TraceError,
    Turn,
    generate_synthetic,
    load_trace,
    read_jsonl,
    write_jsonl,
)
from traces.fit_like import (
    MARGINALS,
    dump_params,
    empirical_mix,
    fit_like,
    ks_2samp,
    load_params,
    marginals,
    multi_turn_share,
)

N_SYNTH = 20_000
BAND = 0.02
MEAN_SE = 4.0
KS_C01 = 1.628
PARAMETRIC = ("think time s", "session start gap s")
SHAREGPT = "sharegpt/ShareGPT_V3_unfiltered_cleaned_split-sample.json"
AZURE_CONV = "azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = "azure_llm_inference_2023/AzureLLMInferenceTrace_code.csv"


def mismatches(src: dict, syn: dict, mean_only: tuple[str, ...] = ()) -> list[str]:
    """Every way ``syn`` fails to match ``src`` (the module docstring's check); [] when it matches.
    Marginals in ``mean_only`` are checked by their mean alone."""
    bad = []
    for name in MARGINALS:
        a, b = src[name].astype(float), syn[name].astype(float)
        if a.size == 0 or b.size == 0:
            if a.size != b.size:
                bad.append(f"{name}: {a.size} source values, {b.size} synthetic")
            continue
        # Empirical fits resample the source: only the synthetic sample is noisy. Parametric ones
        # (think time, start gaps) carry the source's sampling noise too.
        se = a.std() * math.sqrt(1 / b.size + (1 / a.size if name in PARAMETRIC else 0))
        if abs(b.mean() - a.mean()) > MEAN_SE * se + 1e-12:
            bad.append(f"{name}: mean {b.mean():.4g} vs {a.mean():.4g} (4 SE = {MEAN_SE * se:.3g})")
        if name in mean_only:
            continue
        for q in (0.1, 0.5, 0.9):
            v = np.quantile(b, q, method="inverted_cdf")
            lo, hi = np.quantile(a, (max(q - BAND, 0), min(q + BAND, 1)), method="inverted_cdf")
            if not lo <= v <= hi:
                bad.append(
                    f"{name}: synthetic p{q * 100:.0f} {v:g} outside the source's "
                    f"p{(q - BAND) * 100:.0f}..p{(q + BAND) * 100:.0f} = {lo:g}..{hi:g}"
                )
        d, crit = ks_2samp(a, b), KS_C01 * math.sqrt((a.size + b.size) / (a.size * b.size))
        if d > crit:
            bad.append(f"{name}: KS {d:.4f} > {crit:.4f}")
    p, p_syn = multi_turn_share(src), multi_turn_share(syn)
    if abs(p_syn - p) > MEAN_SE * math.sqrt(p * (1 - p) / syn["turns per session"].size) + 1e-12:
        bad.append(f"multi-turn share {p_syn:.4f} vs {p:.4f}")
    return bad


def synth(cfg: SyntheticConfig, seed: int = 1, n: int = N_SYNTH) -> dict:
    return marginals(generate_synthetic(dataclasses.replace(cfg, sessions=n, seed=seed)).sessions)


@pytest.fixture(scope="module")
def fixture_trace():
    """A small trace from a known generator (the ShareGPT defaults, timing included), uncapped."""
    return generate_synthetic(
        SyntheticConfig(sessions=3000, seed=3, max_context_tokens=None)
    ).sessions


@pytest.fixture(scope="module")
def fixture_fit(fixture_trace):
    """(fitted config, source marginals, marginals of 20k sessions drawn from the fit)"""
    cfg = fit_like(fixture_trace)
    return cfg, marginals(fixture_trace), synth(cfg)


# --- the fit itself ---


def test_empirical_mix_is_the_exact_pmf_when_values_are_few():
    mix = empirical_mix([0, 3, 3, 3, 3, 40, 40, 40, 700, 700])  # 0 is drawn as 1
    assert mix.weights == pytest.approx((0.1, 0.4, 0.3, 0.2))
    assert mix.quantiles((0.1, 0.5, 0.8, 0.9), 1, 700).tolist() == [1, 3, 40, 700]
    draws = mix.sample(np.random.default_rng(0), N_SYNTH, 1, 700)
    values, counts = np.unique(draws, return_counts=True)
    assert values.tolist() == [1, 3, 40, 700]
    assert np.abs(counts / N_SYNTH - (0.1, 0.4, 0.3, 0.2)).max() < 0.015


def test_empirical_mix_of_many_values_keeps_the_cdf_within_one_group():
    values = np.floor(np.exp(np.random.default_rng(1).normal(6, 1.5, 50_000))).astype(int) + 1
    mix = empirical_mix(values)
    assert len(mix.weights) == 256
    at = np.unique(np.quantile(values, np.linspace(0.001, 0.999, 999), method="inverted_cdf"))
    data = np.searchsorted(np.sort(values), at, side="right") / values.size
    assert np.abs(mix.cdf(at + 0.5) - data).max() < 1 / 256  # P(draw <= v) = cdf(v + 0.5)


def test_neighbouring_groups_of_one_value_are_one_part_with_the_same_draws():
    """Many values, heavy ties (replies of 1 token, say): equal-count groups that hold one value
    are merged into one part; the component thresholds at the merged edges are the same, so every
    draw is the one the unmerged mixture gives."""
    rng = np.random.default_rng(3)
    v = np.concatenate([np.ones(5000, dtype=np.int64), rng.integers(2, 4000, 5000)])
    mix = empirical_mix(v, max_components=64)
    assert len(mix.mu) < 40  # half the values are 1: about 32 groups of them are one part
    parts = list(zip(mix.mu, mix.sigma, strict=True))
    assert all(a != b for a, b in zip(parts, parts[1:], strict=False))
    groups = np.array_split(np.log(np.sort(v).astype(float)), 64)
    unmerged = LogNormalMix(
        tuple(float(len(g)) for g in groups),
        tuple(float(g.mean()) for g in groups),
        tuple(max(float(g.std()), 1e-6) for g in groups),
    )
    draws = [m.sample(np.random.default_rng(0), 20000, 1, 10**6) for m in (mix, unmerged)]
    np.testing.assert_array_equal(draws[0], draws[1])


def test_an_exact_pmf_is_written_as_token_counts_and_its_parts_read_back_exactly():
    cfg = SyntheticConfig(sessions=3, output_tokens=empirical_mix([5, 5, 9, 120, 120, 120]))
    text = dump_params(cfg)
    out = yaml.safe_load(text)["output_tokens"]
    assert out["values"] == [5, 9, 120] and "mu" not in out and "sigma" not in out
    back = load_params(text).output_tokens
    assert (back.mu, back.sigma) == (cfg.output_tokens.mu, cfg.output_tokens.sigma)
    assert back.weights == pytest.approx(cfg.output_tokens.weights, rel=1e-9)  # ten digits
    for bad, words in (
        ({"weights": [1], "values": [3], "mu": [1.0]}, "either values or mu"),
        ({"weights": [1, 1], "values": [3, 0.5]}, "token counts >= 1"),
        ({"weights": [1], "values": [0]}, "token counts >= 1"),
    ):
        with pytest.raises(TraceError, match=words):
            LogNormalMix.from_dict(bad)


def test_fit_recovers_the_generator_that_made_the_trace(fixture_trace, fixture_fit):
    cfg = fixture_fit[0]
    gen = SyntheticConfig()
    assert cfg.sessions == 3000 and cfg.max_context_tokens is None
    assert cfg.arrival_rate_per_s == pytest.approx(gen.arrival_rate_per_s, rel=3 / math.sqrt(3000))
    assert cfg.think.median_s == pytest.approx(gen.think.median_s, rel=0.05)
    assert cfg.think.sigma == pytest.approx(gen.think.sigma, abs=0.05)
    src = marginals(fixture_trace)
    assert cfg.turns_pmf == pytest.approx(np.bincount(src["turns per session"])[1:] / 3000)
    assert cfg.prompt_max_tokens == max(
        src["first prompt tokens"].max(), src["later prompt tokens"].max()
    )
    assert cfg.output_max_tokens == src["output tokens"].max()


def test_fitted_marginals_match_a_small_fixture(fixture_fit):
    _, src, syn = fixture_fit
    assert mismatches(src, syn) == []


def test_the_check_fails_for_a_trace_with_longer_replies(fixture_fit):
    """The check has power: 15 % longer replies, everything else equal, are caught; only there."""
    cfg, src, _ = fixture_fit
    o = cfg.output_tokens
    longer = dataclasses.replace(
        cfg,
        output_tokens=LogNormalMix(o.weights, tuple(m + math.log(1.15) for m in o.mu), o.sigma),
        output_max_tokens=2 * cfg.output_max_tokens,
    )
    bad = mismatches(src, synth(longer))
    assert bad and all(b.startswith("output tokens") for b in bad), bad


def test_one_turn_sessions_and_open_loop_gaps():
    one = [Session(f"s{i}", (Turn(10 * (i + 1), 5, arrival_s=2.0 * i),)) for i in range(5)]
    notes: list[str] = []
    cfg = fit_like(one, notes=notes)
    assert cfg.turns_pmf == (1.0,) and cfg.arrival_rate_per_s == pytest.approx(0.5)
    assert cfg.prompt_tokens == cfg.first_prompt_tokens and cfg.prompt_max_tokens == 50
    assert any(n.startswith("think:") for n in notes)
    # later turns with only arrival_s: the think time is the gap (an upper bound)
    open_loop = [
        Session(
            "a", (Turn(1, 1, arrival_s=0.0), Turn(1, 1, arrival_s=4.0), Turn(1, 1, arrival_s=5.0))
        ),
        Session("b", (Turn(1, 1, arrival_s=0.0), Turn(1, 1, think_s=2.0))),
    ]
    assert sorted(marginals(open_loop)["think time s"].tolist()) == [1.0, 2.0, 4.0]
    assert fit_like(open_loop).think.median_s == 2.0
    with pytest.raises(ValueError, match="^x.jsonl: no sessions to fit"):
        fit_like([], where="x.jsonl")


def test_params_yaml_round_trips_and_loads_as_a_synthetic_trace(fixture_fit):
    cfg = dataclasses.replace(fixture_fit[0], sessions=400, seed=2)
    text = dump_params(cfg, header=["a comment"])
    assert text.startswith("# a comment\nsessions: 400\n")
    back = load_params(text)
    for name in ("first_prompt_tokens", "prompt_tokens", "output_tokens"):
        a, b = getattr(cfg, name), getattr(back, name)
        for part in ("weights", "mu", "sigma"):  # the text keeps ten significant digits
            np.testing.assert_allclose(getattr(b, part), getattr(a, part), rtol=1e-9)
    assert (back.turns_pmf, back.arrival_rate_per_s) == (
        pytest.approx(cfg.turns_pmf, rel=1e-9),
        pytest.approx(cfg.arrival_rate_per_s, rel=5e-10),
    )
    for part in ("median_s", "sigma", "max_s"):
        assert getattr(back.think, part) == pytest.approx(getattr(cfg.think, part), rel=5e-10)
    spec = {"kind": "synthetic", **yaml.safe_load(text)}
    assert load_trace(spec).sessions == generate_synthetic(back).sessions


# --- real traces ---


@pytest.fixture(scope="module")
def sharegpt(data_file):
    return load_trace({"kind": "sharegpt", "path": str(data_file(SHAREGPT))}).sessions


@pytest.fixture(scope="module")
def azure_conv(data_file):
    """(sessions, fitted config, marginals of 20k sessions drawn from the fit)"""
    sessions = load_trace({"kind": "azure", "path": str(data_file(AZURE_CONV))}).sessions
    cfg = fit_like(sessions)
    return sessions, cfg, synth(cfg)


@pytest.mark.data
def test_sharegpt_sample_marginals_are_reproduced(sharegpt):
    """987 multi-turn sessions. The loader's timing is itself Poisson + lognormal think times
    (ShareGPT has no timestamps), so the timing fit is checked with KS too."""
    cfg = fit_like(sharegpt)
    src, syn = marginals(sharegpt), synth(cfg)
    assert src["turns per session"].max() > 100 and multi_turn_share(src) > 0.6
    assert mismatches(src, syn) == []
    assert cfg.think.median_s == pytest.approx(30.0, rel=0.1)  # the loader's assumption
    assert cfg.arrival_rate_per_s == pytest.approx(1.0, rel=3 / math.sqrt(len(sharegpt)))


@pytest.mark.data
def test_azure_conversation_marginals_and_rate_are_reproduced(azure_conv):
    """One-turn sessions with real arrivals: lengths by KS; arrivals only by their mean (rate),
    since Poisson starts do not keep the trace's inter-arrival shape."""
    sessions, cfg, syn = azure_conv
    src = marginals(sessions)
    assert cfg.arrival_rate_per_s == pytest.approx(5.53, abs=0.01)
    assert mismatches(src, syn, mean_only=("session start gap s",)) == []


@pytest.mark.data
def test_a_different_real_trace_does_not_match(azure_conv, data_file):
    """The Azure code trace (longer prompts, short replies) fails the conversation fit. (Its mean
    start gap, 0.39 s vs 0.18 s, is within 4 SE: a trace with inter-arrival CV 13 is that noisy.)"""
    code = load_trace({"kind": "azure", "path": str(data_file(AZURE_CODE))}).sessions
    bad = mismatches(marginals(code), azure_conv[2], mean_only=("session start gap s",))
    for name in ("first prompt tokens", "output tokens"):
        assert sum(b.startswith(name) for b in bad) == 5, (name, bad)  # 3 quantiles, mean, KS


# --- the command ---


def test_synth_command_end_to_end(tmp_path, capsys):
    src = tmp_path / "small.jsonl"
    write_jsonl(generate_synthetic(SyntheticConfig(sessions=300, seed=9)).sessions, src)
    out, params = tmp_path / "out" / "big.jsonl", tmp_path / "out" / "big.yaml"
    argv = [
        "trace",
        "synth",
        "--like",
        str(src),
        "--sessions",
        "1000",
        "--seed",
        "4",
        "--out",
        str(out),
        "--params-out",
        str(params),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{out}: 1,000 sessions") and "(jsonl, 300 sessions)" in printed
    assert "later prompt tokens" in printed and "multi-turn share" in printed
    written = read_jsonl(out).sessions
    assert len(written) == 1000
    assert (
        written == load_trace({"kind": "synthetic", **yaml.safe_load(params.read_text())}).sessions
    )
    assert sorted(p.name for p in out.parent.iterdir()) == ["big.jsonl", "big.yaml"]

    assert main(argv) == 2  # exists: refused
    assert (
        capsys.readouterr().err.strip() == f"kvsim: error: {out} exists; pass --force to replace it"
    )
    assert main(argv[:-2] + ["--force"]) == 0 and read_jsonl(out).sessions == written
    default_n = tmp_path / "n.jsonl"
    assert main(["trace", "synth", "--like", str(src), "--out", str(default_n)]) == 0
    assert len(read_jsonl(default_n).sessions) == 300  # default: as many
    capsys.readouterr()


@pytest.mark.parametrize(
    "content, args, message",
    [
        (None, [], "{src}: no such file"),
        ("", [], "{src}: no sessions to fit"),
        ('{"session_id": "a", "turn": 0}\n', [], "{name}:1: missing key(s) 'arrival_s'"),
        (
            '{"session_id": "a", "turn": 0, "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n',
            ["--max-context-tokens", "1"],
            "--max-context-tokens must be >= 2, got 1",
        ),
    ],
)
def test_synth_command_errors_name_the_file_and_write_nothing(
    tmp_path, capsys, content, args, message
):
    src = tmp_path / "src.jsonl"
    if content is not None:
        src.write_text(content)
    out = tmp_path / "out.jsonl"
    assert (
        main(
            [
                "trace",
                "synth",
                "--like",
                str(src),
                "--kind",
                "jsonl",
                "--out",
                str(out),
                "--params-out",
                str(tmp_path / "p.yaml"),
                *args,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("kvsim: error: ")
    assert message.format(src=src, name=src.name).split(" 'arrival_s'")[0] in err, err
    assert not out.exists() and not (tmp_path / "p.yaml").exists()
