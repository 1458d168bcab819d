"""The fitter recovers known constants from synthetic samples (+noise), its forms are the cost
model's forms, and the validation splits keep whole shapes together. No torch, no data files."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from calibration.fit import (
    CUBLAS_TILES,
    RATE_CAP,
    ElementwiseFit,
    GemmFit,
    PerOpForm,
    RateLimits,
    TileWaveForm,
    fit_term,
    predict,
    predict_linear,
)
from calibration.profile_writer import ProfileFits, build_profile
from calibration.samples import Sample, Shape, Timing, shard
from calibration.validate import ErrorStats, extrapolation_split, random_split, validate_term
from costmodels import (
    BatchShape,
    CopyTerm,
    CostModel,
    DecodeAttnTerm,
    PrefillAttnTerm,
    ProfileMeta,
    analytic_profile,
    attention_pairs,
    get_hardware,
    get_model,
)
from costmodels.elementwise import ELEMENTWISE_KINDS, ElementwiseOp
from costmodels.tensor_parallel import ALLREDUCES_PER_LAYER

LLAMA = get_model("llama-3-8b")
NOISE = 0.02  # 2 % lognormal noise on every synthetic median


def _noisy(t: float, rng: np.random.Generator) -> Timing:
    return Timing.published(t * float(np.exp(rng.normal(0.0, NOISE))))


# --- synthetic recovery ---------------------------------------------------------------------------
def test_gemm_recovers_tau_bandwidth_and_flops() -> None:
    true = GemmFit(tau_s=20e-6, weight_bw_Bps=2.5e12, flops=6.0e14)
    rng = np.random.default_rng(1)
    samples = []
    for tp in (1, 2, 4, 8):  # distinct weight sizes separate tau from W/bw
        m = shard(LLAMA, tp)
        for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
            probe = Sample("gemm", Shape(tokens=n), Timing.published(1.0), m)
            t = float(predict("gemm", true, [probe])[0])
            samples.append(Sample("gemm", Shape(tokens=n), _noisy(t, rng), m, f"tp{tp}"))
    fit = fit_term("gemm", samples)
    got = fit.params
    assert got.weight_bw_Bps == pytest.approx(true.weight_bw_Bps, rel=0.05)
    assert got.flops == pytest.approx(true.flops, rel=0.03)
    assert got.tau_s == pytest.approx(true.tau_s, abs=4e-6)
    assert fit.notes == ()


def test_gemm_with_one_weight_size_fixes_tau_and_says_so() -> None:
    rng = np.random.default_rng(2)
    true = GemmFit(0.0, 2.0e12, 3.0e14)
    samples = [
        Sample(
            "gemm",
            Shape(tokens=n),
            _noisy(
                float(
                    predict(
                        "gemm",
                        true,
                        [Sample("gemm", Shape(tokens=n), Timing.published(1.0), LLAMA)],
                    )[0]
                ),
                rng,
            ),
            LLAMA,
        )
        for n in (1, 8, 64, 256, 1024, 4096)
    ]
    fit = fit_term("gemm", samples)
    assert fit.params.tau_s == 0.0
    assert any("tau_s not separable" in n for n in fit.notes)
    assert fit.params.weight_bw_Bps == pytest.approx(2.0e12, rel=0.05)


def test_elementwise_prefill_decode_and_copies_recover_constants() -> None:
    rng = np.random.default_rng(3)
    ew = ElementwiseFit(tau_s=8e-6, bw_Bps=1.5e12)
    pf = PrefillAttnTerm(tau_s=12e-6, flops=3.0e14, per_seq_s=4e-6)
    dec = DecodeAttnTerm(tau_s=9e-6, per_seq_s=0.3e-6, kv_bw_Bps=2.0e12)
    cp = CopyTerm(latency_s=6e-6, bw_Bps=25e9)
    cases = {
        "elementwise": (ew, [Shape(tokens=n) for n in (1, 16, 128, 512, 2048, 8192)]),
        "prefill_attn": (
            pf,
            [
                Shape(n_new=a, n_ctx=c, seqs=s)
                for a in (16, 128, 1024, 4096)
                for c in (0, 2048, 16384)
                for s in (1, 4)
            ],
        ),
        "decode_attn": (
            dec,
            [Shape(n_ctx=c, seqs=b) for b in (1, 8, 64, 256) for c in (128, 2048, 32768)],
        ),
        "h2d": (
            cp,
            [
                Shape(nbytes=b, copies=c)
                for b in (1 << 16, 1 << 20, 1 << 24, 1 << 28)
                for c in (1, 16, 256)
                if b // c >= 4096
            ],
        ),
    }
    for term, (params, shapes) in cases.items():
        probes = [Sample(term, s, Timing.published(1.0), LLAMA) for s in shapes]
        truth = predict(term, params, probes)
        samples = [Sample(term, s, _noisy(float(t), rng), LLAMA) for s, t in zip(shapes, truth)]
        got = fit_term(term, samples).params
        for name in ("bw_Bps", "flops", "kv_bw_Bps"):
            if hasattr(params, name):
                assert getattr(got, name) == pytest.approx(getattr(params, name), rel=0.05), (
                    term,
                    name,
                )
        for name in ("tau_s", "per_seq_s", "latency_s"):
            if hasattr(params, name):
                assert getattr(got, name) == pytest.approx(
                    getattr(params, name), rel=0.25, abs=1.5e-6
                ), (term, name)


def test_per_seq_fixed_at_zero_when_every_shape_has_one_sequence() -> None:
    shapes = [Shape(n_new=n, n_ctx=0, seqs=1) for n in (64, 256, 1024, 4096)]
    pf = PrefillAttnTerm(tau_s=10e-6, flops=2e14, per_seq_s=0.0)
    samples = [
        Sample(
            "prefill_attn",
            s,
            Timing.published(
                float(
                    predict(
                        "prefill_attn",
                        pf,
                        [Sample("prefill_attn", s, Timing.published(1.0), LLAMA)],
                    )[0]
                )
            ),
            LLAMA,
        )
        for s in shapes
    ]
    fit = fit_term("prefill_attn", samples)
    assert fit.params.per_seq_s == 0.0
    assert any("per_seq_s not separable" in n for n in fit.notes)
    assert fit.params.flops == pytest.approx(2e14, rel=1e-3)


# The per-GEMM tile/wave form, as the H100 public fit finds it (tau_s: 4 GEMMs' fixed costs).
TILE_WAVES = GemmFit(
    tau_s=18e-6,
    weight_bw_Bps=3.0e12,
    flops=7.8e14,
    gemm_knee_p=1.9,
    gemm_activation_bytes=True,
    gemm_tiles=CUBLAS_TILES,
    gemm_tile_overhead=28.0,
    gemm_wave_tail=0.5,
    gemm_sm_count=132,
)


def _tile_wave_samples(true: GemmFit, rng: np.random.Generator) -> list[Sample]:
    out = []
    for model, tp in ((LLAMA, 1), (LLAMA, 2), (get_model("llama-2-7b"), 4), (LLAMA, 8)):
        m = shard(model, tp)
        for n in (1, 8, 32, 64, 100, 128, 200, 256, 384, 512, 768, 1024, 2048, 4096):
            probe = Sample("gemm", Shape(tokens=n), Timing.published(1.0), m)
            t = float(predict("gemm", true, [probe])[0])
            out.append(Sample("gemm", Shape(tokens=n), _noisy(t, rng), m, f"tp{tp}"))
    return out


def test_tile_wave_gemm_recovers_rates_and_predicts_held_out_shapes() -> None:
    rng = np.random.default_rng(3)
    samples = _tile_wave_samples(TILE_WAVES, rng)
    form = TileWaveForm.of_gpu("h100-sxm")
    assert form.sm_count == 132 and form.tiles == CUBLAS_TILES
    fit = fit_term("gemm", samples, RateLimits.of_gpu("h100-sxm"), gemm_form=form)
    got = fit.params
    assert got.gemm_activation_bytes and got.gemm_sm_count == 132
    assert got.weight_bw_Bps == pytest.approx(TILE_WAVES.weight_bw_Bps, rel=0.1)
    assert got.flops == pytest.approx(TILE_WAVES.flops, rel=0.1)
    # Every shape, noise-free, within a few percent: the form recovers the tile/wave steps.
    clean = _tile_wave_samples(TILE_WAVES, np.random.default_rng(4))
    truth = predict("gemm", TILE_WAVES, clean)
    assert np.max(np.abs(predict("gemm", got, clean) / truth - 1)) < 0.05


def test_tile_overhead_can_be_fixed_at_zero() -> None:
    true = dataclasses.replace(TILE_WAVES, gemm_tile_overhead=0.0)
    samples = _tile_wave_samples(true, np.random.default_rng(5))
    form = TileWaveForm.of_gpu("h100-sxm", fit_tile_overhead=False)
    fit = fit_term("gemm", samples, RateLimits.of_gpu("h100-sxm"), gemm_form=form)
    assert fit.params.gemm_tile_overhead == 0.0
    assert any("gemm_tile_overhead fixed at 0" in n for n in fit.notes)


def test_tile_wave_form_needs_the_gpu_peaks_and_sms() -> None:
    s = _tile_wave_samples(TILE_WAVES, np.random.default_rng(6))
    with pytest.raises(ValueError, match="HBM bandwidth and FLOP peaks"):
        fit_term("gemm", s, gemm_form=TileWaveForm(132))


PER_OP = ElementwiseFit(
    tau_s=0.0,
    bw_Bps=1.4e12,
    elementwise_ops=tuple(
        ElementwiseOp(k, 2e-6, 2e-6, 2.5e12, 3e12, 2e13, p)
        for k, p in zip(ELEMENTWISE_KINDS, (2.0, 3.0, 2.5, 1.5), strict=True)
    ),
    elementwise_sm_count=132,
    elementwise_l2_bytes=50_000_000,
)
# What a Vidur row times: one residual add, no KV write.
TIMED = ("input_norm", "rope", "post_attention_norm", "act", "attention_residual_add")


def _per_op_samples(true: ElementwiseFit, rng: np.random.Generator) -> list[Sample]:
    out = []
    for model, tp in ((LLAMA, 1), (LLAMA, 2), (get_model("llama-2-7b"), 4), (LLAMA, 8)):
        m = shard(model, tp)
        for n in (1, 16, 64, 200, 264, 265, 512, 1024, 2048, 4096, 8192, 16384):
            parts = []
            for name in TIMED:
                probe = Sample(
                    "elementwise", Shape(tokens=n), Timing.published(1.0), m, "", "", ((name, 1.0),)
                )
                t = float(predict("elementwise", true, [probe])[0])
                parts.append((name, t * float(np.exp(rng.normal(0.0, NOISE)))))
            total = Timing.published(sum(t for _, t in parts))
            out.append(
                Sample("elementwise", Shape(tokens=n), total, m, f"tp{tp}", "", tuple(parts))
            )
    return out


def test_per_op_form_recovers_each_kind_and_prices_the_timed_ops() -> None:
    samples = _per_op_samples(PER_OP, np.random.default_rng(7))
    fit = fit_term(
        "elementwise", samples, RateLimits.of_gpu("h100-sxm"), ew_form=PerOpForm.of_gpu("h100")
    )
    got = fit.params
    assert got.tau_s == 0.0 and (got.elementwise_sm_count, got.elementwise_l2_bytes) == (
        132,
        50_000_000,
    )
    assert [op.kind for op in got.elementwise_ops] == list(ELEMENTWISE_KINDS)
    assert all(op.bw_Bps <= 3.35e12 for op in got.elementwise_ops)
    clean = _per_op_samples(PER_OP, np.random.default_rng(8))
    truth = predict("elementwise", PER_OP, clean)
    assert truth == pytest.approx([s.time.median_s for s in clean], rel=0.1)
    assert np.max(np.abs(predict("elementwise", got, clean) / truth - 1)) < 0.05
    # A row that names its ops is priced on those alone; one that names none, on all seven.
    whole = dataclasses.replace(clean[0], ew_parts=())
    assert predict("elementwise", got, [whole])[0] > predict("elementwise", got, clean[:1])[0]


def test_per_op_form_needs_each_ops_time_or_none() -> None:
    # Samples that time the ops together are fitted on their sums, and say so; a mix of rows
    # with and without each op's time is refused.
    clean = _per_op_samples(PER_OP, np.random.default_rng(8))
    whole = [dataclasses.replace(s, ew_parts=()) for s in clean]
    summed = [
        dataclasses.replace(s, time=Timing.published(float(t)))
        for s, t in zip(whole, predict("elementwise", PER_OP, whole), strict=True)
    ]
    lim, form = RateLimits.of_gpu("h100"), PerOpForm.of_gpu("h100")
    got = fit_term("elementwise", summed, lim, ew_form=form)
    assert any("summed time" in n for n in got.notes)
    y = np.array([s.time.median_s for s in summed])
    assert np.mean(np.abs(predict("elementwise", got.params, summed) / y - 1)) < 0.05
    with pytest.raises(ValueError, match="needs each op's time"):
        fit_term("elementwise", summed[:2] + clean[2:], lim, ew_form=form)


def test_rates_stay_under_physical_limits() -> None:
    # Data that "wants" 5 TB/s of weight bandwidth on a 3.35 TB/s GPU is held at the ceiling.
    true = GemmFit(0.0, 5.0e12, 6.0e14)
    samples = []
    for tp in (1, 4):
        m = shard(LLAMA, tp)
        for n in (1, 16, 256, 4096):
            s = Sample("gemm", Shape(tokens=n), Timing.published(1.0), m)
            samples.append(
                Sample(
                    "gemm",
                    Shape(tokens=n),
                    Timing.published(float(predict("gemm", true, [s])[0])),
                    m,
                )
            )
    fit = fit_term("gemm", samples, RateLimits.of_gpu("h100-sxm"))
    assert fit.params.weight_bw_Bps == pytest.approx(3.35e12, rel=1e-3)
    assert any("physical ceiling" in n for n in fit.notes)


def test_unbounded_rate_is_capped_and_noted() -> None:
    # Pure latency: the bandwidth never matters, its inverse goes to 0 -> RATE_CAP, with a note.
    shapes = [Shape(nbytes=1 << 16, copies=c) for c in (1, 2, 4, 8, 16)]
    samples = [Sample("h2d", s, Timing.published(5e-6 * s.copies), LLAMA) for s in shapes]
    fit = fit_term("h2d", samples)
    assert fit.params.bw_Bps == RATE_CAP and fit.params.latency_s == pytest.approx(5e-6)
    assert any("never made this rate the bottleneck" in n for n in fit.notes)


def test_fit_term_rejects_mixed_or_unknown_terms() -> None:
    s = Sample("gemm", Shape(tokens=1), Timing.published(1e-5), LLAMA)
    with pytest.raises(ValueError, match="got samples of"):
        fit_term("elementwise", [s])
    with pytest.raises(ValueError, match="cannot fit"):
        fit_term("lm_head", [s])


# --- the fitted forms are the cost model's -------------------------------------------------------
def test_predictions_equal_costmodel_of_the_built_profile() -> None:
    g, e = GemmFit(15e-6, 2.2e12, 5.5e14), ElementwiseFit(7e-6, 1.4e12)
    pf, dec = PrefillAttnTerm(11e-6, 2.5e14, 3e-6), DecodeAttnTerm(8e-6, 0.2e-6, 1.9e12)
    meta = ProfileMeta(gpu="h100-sxm", backend="test", dtype="bf16", source="fit: test")
    profile, from_base = build_profile(
        "t", ProfileFits(g, e, pf, dec), analytic_profile(get_hardware("h100")), meta
    )
    assert set(from_base) == {"h2d", "d2h", "overlap", "step_overhead_s"}
    cm = CostModel(LLAMA, profile)
    for n in (1, 37, 512, 8192):
        s = Sample("linear", Shape(tokens=n), Timing.published(1.0), LLAMA)
        assert cm.linear_s(n) + cm.elementwise_s(n) == pytest.approx(
            float(predict_linear(g, e, [s])[0]), rel=1e-5
        )
        head = Sample("lm_head", Shape(tokens=n), Timing.published(1.0), LLAMA)
        assert cm.lm_head_s(n) == pytest.approx(float(predict("lm_head", g, [head])[0]), rel=1e-5)
    for a, c, k in ((64, 0, 1), (512, 4096, 3)):
        s = Sample("prefill_attn", Shape(n_new=a, n_ctx=c, seqs=k), Timing.published(1.0), LLAMA)
        want = cm.prefill_attn_s(k * attention_pairs(a, c), k, k * a, ((a, c),) * k)
        assert float(predict("prefill_attn", pf, [s])[0]) == pytest.approx(want, rel=1e-5)
    s = Sample("decode_attn", Shape(n_ctx=3000, seqs=17), Timing.published(1.0), LLAMA)
    assert float(predict("decode_attn", dec, [s])[0]) == pytest.approx(
        cm.decode_attn_s(17, 17 * 3000), rel=1e-5
    )
    # The per-GEMM form: the fitter's prediction is the cost model's price, at every N.
    tiled, _ = build_profile(
        "t2", ProfileFits(TILE_WAVES, e, pf, dec), analytic_profile(get_hardware("h100")), meta
    )
    for model in (LLAMA, get_model("opt-13b")):
        cm2 = CostModel(model, tiled, tp=2)
        m2 = shard(model, 2)
        for n in (1, 37, 128, 129, 512, 8192):
            s = Sample("linear", Shape(tokens=n), Timing.published(1.0), m2)
            ar = ALLREDUCES_PER_LAYER * cm2.allreduce_s(n)
            want = cm2.linear_s(n) - ar + cm2.elementwise_s(n)
            assert want == pytest.approx(float(predict_linear(TILE_WAVES, e, [s])[0]), rel=1e-5)
    # The per-op elementwise form: a sample that names no ops is priced as the cost model prices.
    per_op, _ = build_profile(
        "t3", ProfileFits(TILE_WAVES, PER_OP, pf, dec), analytic_profile(get_hardware("h100")), meta
    )
    assert per_op.linear.tau_s == pytest.approx(TILE_WAVES.tau_s, rel=1e-5)
    for model in (LLAMA, get_model("opt-13b")):
        cm3 = CostModel(model, per_op, tp=2)
        m3 = shard(model, 2)
        for n in (1, 37, 264, 265, 512, 8192, 30000):
            s = Sample("elementwise", Shape(tokens=n), Timing.published(1.0), m3)
            got = float(predict("elementwise", PER_OP, [s])[0])
            assert cm3.elementwise_s(n) == pytest.approx(got, rel=1e-5)
            ar = ALLREDUCES_PER_LAYER * cm3.allreduce_s(n)
            want = cm3.linear_s(n) - ar + cm3.elementwise_s(n)
            assert want == pytest.approx(
                float(predict_linear(TILE_WAVES, PER_OP, [s])[0]), rel=1e-5
            )
    # Pensieve constants come out of the same profile (CostModel.pensieve_constants).
    pc = cm.pensieve_constants(1)
    assert pc.layer_s(2000) == pytest.approx(cm.layer_s(BatchShape.decode(1, 2000)))


def test_shard_splits_heads_and_mlp_width() -> None:
    s = shard(get_model("llama-3-70b"), 4)
    assert (s.num_heads, s.num_kv_heads, s.intermediate_size, s.hidden_size) == (16, 2, 7168, 8192)
    assert s.kv_bytes_per_token_layer * 4 == get_model("llama-3-70b").kv_bytes_per_token_layer
    with pytest.raises(ValueError, match="divisible"):
        shard(LLAMA, 3)
    # More GPUs than KV heads: each GPU holds one KV head (replicated), not a fraction of one.
    assert shard(LLAMA, 16).num_kv_heads == 1


# --- splits and errors ---------------------------------------------------------------------------
def _decode_rows(repeats: int = 2) -> list[Sample]:
    return [
        Sample(
            "decode_attn",
            Shape(n_ctx=c, seqs=b),
            Timing.published(1e-5 * (1 + r * 0.01) + c * b * 1e-12),
            LLAMA,
        )
        for b in (1, 8, 64, 128)
        for c in (256, 4096, 32768)
        for r in range(repeats)
    ]


def test_random_split_holds_out_whole_shapes() -> None:
    rows = _decode_rows()
    sp = random_split(rows, 0.2, seed=3)
    assert sp.train.isdisjoint(sp.test) and len(sp.test) == round(0.2 * 12)
    # Both repeats of a held-out shape are held out (keys, not rows, are split).
    assert all((s.key in sp.test) == (t.key in sp.test) for s, t in zip(rows[::2], rows[1::2]))
    assert random_split(rows, 0.2, seed=3) == sp


def test_extrapolation_split_uses_nominal_thresholds() -> None:
    sp = extrapolation_split("decode_attn", _decode_rows())
    assert "kv <= 16384 and batch <= 64" in sp.description
    assert all(k[1].n_ctx <= 16384 and k[1].seqs <= 64 for k in sp.train)
    assert all(k[1].n_ctx > 16384 or k[1].seqs > 64 for k in sp.test)
    rows = [
        Sample("gemm", Shape(tokens=n), Timing.published(1e-5), LLAMA)
        for n in (1, 64, 512, 1024, 2048, 4096, 8192)
    ]
    ex = extrapolation_split("gemm", rows)
    assert "tokens <= 2048" in ex.description and {k[1].tokens for k in ex.test} == {4096, 8192}


def test_validate_term_reports_both_splits_on_exact_data() -> None:
    dec = DecodeAttnTerm(8e-6, 0.1e-6, 1.5e12)
    shapes = [Shape(n_ctx=c, seqs=b) for b in (1, 8, 64, 128) for c in (256, 4096, 32768)]
    rows = [
        Sample(
            "decode_attn",
            s,
            Timing.published(
                float(
                    predict(
                        "decode_attn", dec, [Sample("decode_attn", s, Timing.published(1.0), LLAMA)]
                    )[0]
                )
            ),
            LLAMA,
        )
        for s in shapes
    ]
    reps = validate_term("t", "decode_attn", rows)
    assert [r.split.name for r in reps] == ["random", "extrapolation"]
    assert all(r.test.mape < 1e-6 and r.test.n > 0 for r in reps)


def test_error_stats() -> None:
    e = ErrorStats.of(np.array([1.1, 0.9, 2.0]), np.array([1.0, 1.0, 2.0]))
    assert e.n == 3 and e.mape == pytest.approx(0.2 / 3) and e.max_ape == pytest.approx(0.1)
    assert math.isnan(ErrorStats.of(np.array([]), np.array([])).mape)
