"""The cost model fitted to the public GPU tables (../shared/data): held-out MAPE per term and
source, against the calibration targets (GEMM/linear and prefill attention < 5 %, decode < 10 %).

Where a term meets its target, the test asserts the target. Where it misses, the test asserts the
figure documented in calibration/README.md as a regression bound (it may improve, never worsen),
so a miss is never loosened silently. The committed profiles must equal what the fit produces.
"""

from __future__ import annotations

import numpy as np
import pytest
from cal_helpers import DATA, needs_data

pytestmark = [pytest.mark.data, needs_data]

# (source, term, split) -> held-out MAPE documented in calibration/README.md (seed 0).
DOCUMENTED = {
    # GEMMs: the per-GEMM tile/wave form (costmodels.gemm), c_tile fixed at 0 on the A100;
    # elementwise: the per-op form (costmodels.elementwise), each kind fitted on its own ops.
    ("a100-vidur-mlp", "gemm", "random"): 0.0385,
    ("a100-vidur-mlp", "gemm", "extrapolation"): 0.0343,
    ("a100-vidur-mlp", "elementwise", "random"): 0.0355,
    ("a100-vidur-mlp", "elementwise", "extrapolation"): 0.0224,
    ("a100-vidur-mlp", "linear", "random"): 0.0346,
    ("a100-vidur-mlp", "linear", "extrapolation"): 0.0288,
    ("a100-vidur-mlp [test Llama-2-7B]", "gemm", "leave-out"): 0.0496,
    ("a100-vidur-mlp [test Llama-3-8B]", "gemm", "leave-out"): 0.0374,
    ("a100-vidur-mlp [test Llama-2-7B]", "elementwise", "leave-out"): 0.0402,
    ("a100-vidur-mlp [test Llama-3-8B]", "elementwise", "leave-out"): 0.0354,
    ("a100-vidur-mlp [test Llama-2-7B]", "linear", "leave-out"): 0.0431,
    ("a100-vidur-mlp [test Llama-3-8B]", "linear", "leave-out"): 0.0321,
    ("a100-vidur-flashinfer", "prefill_attn", "random"): 0.1191,
    ("a100-vidur-flashinfer", "prefill_attn", "extrapolation"): 0.1992,
    ("a100-vidur-flashinfer", "decode_attn", "random"): 0.0785,
    ("a100-vidur-flashinfer", "decode_attn", "extrapolation"): 0.0725,
    ("a100-vidur-fa-70b-tp2", "prefill_attn", "random"): 0.1162,
    ("a100-vidur-fa-70b-tp2", "prefill_attn", "extrapolation"): 0.1322,
    # Missed: the kernel's choice of key splits changes with the batch (16 sequences at 288
    # tokens take 25 us, 24 take 16 us), which no form rising with batch and context follows.
    ("a100-vidur-fa-70b-tp2", "decode_attn", "random"): 0.1134,
    ("a100-vidur-fa-70b-tp2", "decode_attn", "extrapolation"): 0.0818,
    ("h100-vidur-mlp", "gemm", "random"): 0.0368,
    ("h100-vidur-mlp", "gemm", "extrapolation"): 0.0299,
    ("h100-vidur-mlp", "elementwise", "random"): 0.0267,
    # Missed: the norms' L2-to-HBM step lies above N = 2048 on this table's shards, so a fit on
    # N <= 2048 cannot place it (calibration/README.md).
    ("h100-vidur-mlp", "elementwise", "extrapolation"): 0.0746,
    ("h100-vidur-mlp", "linear", "random"): 0.0310,
    ("h100-vidur-mlp", "linear", "extrapolation"): 0.0229,
    ("h100-lss-8b-layers", "prefill_attn", "random"): 0.0752,
    ("h100-lss-8b-layers", "prefill_attn", "extrapolation"): 0.0926,
    # Kernels without split-KV: the wave terms fit them (prefill and decode).
    ("h100-lss-70b-tp4", "prefill_attn", "random"): 0.0307,
    ("h100-lss-70b-tp4", "prefill_attn", "extrapolation"): 0.0201,
    ("h100-lss-70b-tp4", "decode_attn", "random"): 0.0310,
    ("h100-lss-70b-tp4", "decode_attn", "extrapolation"): 0.0337,
    ("a6000-lss-8b", "prefill_attn", "random"): 0.0240,
    ("a6000-lss-8b", "prefill_attn", "extrapolation"): 0.0285,
    ("a6000-lss-8b", "decode_attn", "random"): 0.0203,
    ("a6000-lss-8b", "decode_attn", "extrapolation"): 0.0248,
    ("h100-lss-8b-layers", "linear", "transfer"): 0.1347,
    ("h100-lss-8b-layers", "lm_head", "transfer"): 0.0614,
    ("h100-lss-8b-layers", "layer", "transfer"): 0.1087,
}
TARGET = {
    "gemm": 0.05,
    "elementwise": 0.05,
    "linear": 0.05,
    "prefill_attn": 0.05,
    "decode_attn": 0.10,
}
MET = [k for k, v in DOCUMENTED.items() if k[1] in TARGET and v < TARGET[k[1]]]


@pytest.fixture(scope="module")
def public(public_fit):
    return public_fit


def _report(res, key):
    source, term, split = key
    for r in res.reports():
        if (r.source, r.term, r.split.name) == key:
            return r
    raise KeyError(key)


@pytest.mark.slow
@pytest.mark.parametrize("key", list(DOCUMENTED), ids=lambda k: "/".join(k))
def test_held_out_mape_is_the_documented_figure(public, key) -> None:
    r = _report(public, key)
    assert r.test.n > 0
    # A regression bound: the documented figure (4 decimals) may improve, never worsen.
    assert r.test.mape <= DOCUMENTED[key] + 5e-5, (
        f"{key}: {r.test.mape:.4f} > documented {DOCUMENTED[key]}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("key", MET, ids=lambda k: "/".join(k))
def test_targets_that_are_met(public, key) -> None:
    assert _report(public, key).test.mape < TARGET[key[1]]


@pytest.mark.slow
def test_the_wave_term_is_fitted_where_the_kernel_does_not_split_keys(public) -> None:
    # Without split-KV, one CTA per (query tile or sequence, head) streams the keys, and the fit
    # keeps a wave term; kernels that split keys get none.
    for src in public.sources:
        pf = [f.params for f in src.fits if f.term == "prefill_attn"]
        if not pf:
            continue
        waves = src.source.wave_sms
        assert (pf[0].wave_key_elem_s > 0) == bool(waves), src.source.name
        assert pf[0].wave_sm_count == waves, src.source.name


@pytest.mark.slow
def test_the_decode_wave_term_and_its_key_tile(public) -> None:
    # The decode kernels without split-KV step over their keys in tiles: the fit picks the tile
    # by training error, 64 keys on the H100 table and 32 on the A6000's (their time is flat
    # within a tile: at 64 sequences on the H100, 16 and 60 keys each both take 23 us).
    from calibration.fit import DECODE_KEY_TILES

    tiles = {}
    for src in public.sources:
        dec = [f.params for f in src.fits if f.term == "decode_attn"]
        if not dec:
            continue
        d, waves = dec[0], src.source.wave_sms
        assert d.wave_sm_count == waves, src.source.name
        assert (d.wave_key_elem_s > 0) == bool(waves), src.source.name
        if waves:
            assert d.key_tile in DECODE_KEY_TILES
            tiles[src.source.name] = d.key_tile
    assert tiles == {"h100-lss-70b-tp4": 64, "a6000-lss-8b": 32}


@pytest.mark.slow
def test_gemms_use_the_tile_wave_form_over_the_gpus_sms(public) -> None:
    # c_tile is fitted or fixed at 0 as the source says (PublicSource.gemm_tile_overhead_fitted).
    from costmodels import get_hardware

    for src in public.sources:
        gemm = [f.params for f in src.fits if f.term == "gemm"]
        if not gemm:
            continue
        g, rule = gemm[0], src.source
        assert rule.gemm_tile_waves and g.gemm_activation_bytes and g.gemm_tiles
        assert g.gemm_sm_count == get_hardware(rule.gpu).sm_count
        assert (g.gemm_tile_overhead > 0) == rule.gemm_tile_overhead_fitted, rule.name
        assert 1 <= g.gemm_knee_p and 0 <= g.gemm_wave_tail <= 1


@pytest.mark.slow
def test_fitted_constants_are_physical(public) -> None:
    from costmodels import get_hardware

    for spec_name, gpu in (("a100-vidur", "a100-sxm"), ("h100-public", "h100-sxm")):
        p = next(p for p in public.profiles if p.name == spec_name)
        hw = get_hardware(gpu)
        for bw in (p.linear.weight_bw_Bps, p.linear.elementwise_bw_Bps, p.decode_attn.kv_bw_Bps):
            assert 0.3 * hw.hbm_bw_Bps < bw <= hw.hbm_bw_Bps * (1 + 1e-9)
        for f in (p.linear.flops, p.prefill_attn.flops):
            assert 0.05 * hw.dense_bf16_flops < f <= hw.dense_bf16_flops
        assert 0 < p.linear.tau_s < 100e-6 and 0 < p.decode_attn.tau_s < 30e-6


@pytest.mark.slow
def test_committed_profiles_equal_the_fit(public) -> None:
    from costmodels import load_profile

    for fitted in public.profiles:
        committed = load_profile(fitted.name)  # by name: costmodels/profiles/<name>.yaml
        for term in ("linear", "prefill_attn", "decode_attn", "h2d", "d2h", "overlap"):
            a, b = getattr(committed, term), getattr(fitted, term)
            for f in a.__dataclass_fields__:
                want = getattr(b, f)
                if f == "elementwise_ops":  # _assert_ops_are_the_fit
                    continue
                if not isinstance(want, tuple):  # the GEMM tiles compare exactly
                    want = pytest.approx(want, rel=1e-5)
                assert getattr(a, f) == want, (fitted.name, term, f)
        _assert_ops_are_the_fit(committed, fitted)
        assert set(committed.validation) == set(fitted.validation), fitted.name
        for term, want in fitted.validation.items():
            got = committed.validation[term]
            if term != "layer":
                assert got == want, (fitted.name, term)
                continue
            # The whole layer is priced with the KV write as an add at 8192 B rows, a row size
            # the tables never time: its floor per wave is where the add fit stopped on its line
            # (above), 0.768 or 0.777 us on two machines, so the layer's APEs move by 1e-5 (max
            # 0.301876 / 0.301846): to one unit of the 4 written decimals.
            assert (got.n, got.split) == (want.n, want.split), fitted.name
            assert got.mape == pytest.approx(want.mape, abs=1e-4), fitted.name
            assert got.max_ape == pytest.approx(want.max_ape, abs=1e-4), fitted.name
        assert committed.meta.source == fitted.meta.source


# The per-op elementwise constants the public tables fix one by one (rel 1e-5). The rates are
# compared as seconds per byte, to 1e-21 s/B (1 ps a GB) at least, so a rate the fit left at its
# bound (inverse ~0: h100-public's add spill_bw_Bps 6.118e24 / 6.118e24 B/s, rel 6e-5 apart on two
# machines, 1e-17 s on its largest op) is not read as a constant.
_OP_CONSTANTS = ("tau_s", "bw_Bps", "spill_bw_Bps", "knee_p")


def _assert_ops_are_the_fit(committed, fitted) -> None:
    """The committed per-op elementwise form is the fit's: the same kinds in the same order, each
    kind's constants the tables determine, its floor per wave at each row size its ops have, and
    its priced time on every op of that kind the fit was given.

    A kind's floor per wave is floor_s + row_bytes / row_bw_Bps. The norms (16384 B rows) and
    the residual add (24576 B) have one row size in these tables, so only that sum is fixed, not
    its two parts: a line of equal loss. Fits of the same rows on two machines stopped at
    different points on it (a100-vidur norm floor_s 1.28835 / 1.28853 us, row_bw_Bps 21.6116 /
    21.6169 GB/s; add floor 0.4 % apart; h100-public norm and add floors 2.8 % and 2.6 %,
    row_bw_Bps 7.5 % and 1.7 %) with the same loss to 1e-9 relative, the same floor per wave
    (a100-vidur norm 2.04646 us) and the same priced times to 1.6e-6 relative on every op (the written 6 digits
    allow 1e-5). Moving floor_s or row_bw_Bps alone by 0.1 % moves them by 1.5e-4 to 6e-4."""
    from calibration.fit import _kind_rows
    from calibration.public_profiles import PROFILE_SPECS, SOURCES
    from costmodels.elementwise import op_s

    a, b = committed.linear.elementwise_ops, fitted.linear.elementwise_ops
    assert [op.kind for op in a] == [op.kind for op in b], committed.name
    if not b:
        return
    (spec,) = (s for s in PROFILE_SPECS if s.name == fitted.name)
    rows = [s for s in SOURCES[spec.linear].load(DATA) if s.term == "elementwise"]
    lin = fitted.linear
    for got, want in zip(a, b, strict=True):
        where = (committed.name, got.kind)
        for k in _OP_CONSTANTS:
            x, y = getattr(got, k), getattr(want, k)
            if k.endswith("_Bps"):
                x, y = 1.0 / x, 1.0 / y
            assert x == pytest.approx(y, rel=1e-5, abs=1e-12 if k == "tau_s" else 1e-21), (
                *where,
                k,
            )
        tokens, shapes, _ = _kind_rows(rows, got.kind)
        row_bytes = np.array([op.row_bytes for op in shapes], dtype=float)
        threads = np.array([op.block_threads for op in shapes], dtype=float)
        for r in np.unique(row_bytes):
            floor = got.floor_s + r / got.row_bw_Bps
            assert floor == pytest.approx(want.floor_s + r / want.row_bw_Bps, rel=1e-5), (*where, r)
        shape = (tokens, row_bytes, threads, lin.elementwise_sm_count, lin.elementwise_l2_bytes)
        priced = op_s(got, *shape)
        assert priced == pytest.approx(op_s(want, *shape), rel=1e-5), where


@pytest.mark.slow
def test_elementwise_uses_the_per_op_form_where_the_source_says(public) -> None:
    # Each kind fitted on its own ops' times, its streaming bandwidth under the HBM peak (the
    # elementwise bytes at HBM peak stay a bound on the priced time).
    from costmodels import get_hardware

    for src in public.sources:
        ew = [f.params for f in src.fits if f.term == "elementwise"]
        if not ew:
            continue
        rule, hw = src.source, get_hardware(src.source.gpu)
        assert bool(ew[0].elementwise_ops) == rule.elementwise_per_op, rule.name
        for op in ew[0].elementwise_ops:
            assert 0.1 * hw.hbm_bw_Bps < op.bw_Bps <= hw.hbm_bw_Bps * (1 + 1e-9), (rule.name, op)
            assert op.knee_p >= 1 and op.tau_s < 20e-6 and op.floor_s < 20e-6, (rule.name, op)
        if ew[0].elementwise_ops:
            assert ew[0].elementwise_l2_bytes == hw.l2_bytes and ew[0].tau_s == 0.0


@pytest.mark.slow
def test_h100_decode_is_transferred_not_fitted(public) -> None:
    a100 = next(p for p in public.profiles if p.name == "a100-vidur")
    h100 = next(p for p in public.profiles if p.name == "h100-public")
    assert h100.decode_attn.kv_bw_Bps == pytest.approx(
        a100.decode_attn.kv_bw_Bps * 3.35 / 2.039, rel=1e-4
    )
    assert "decode_attn" not in h100.validation
    assert "NOT fitted on this GPU" in h100.meta.notes


def test_vidur_rows_keep_each_elementwise_ops_time() -> None:
    # The per-op form fits each kind on its ops' own times and prices the ops a row timed: both
    # norms, RoPE, the activation and one residual add (no second add, no KV write).
    from calibration.public_tables import load_vidur_mlp

    rows = load_vidur_mlp("vidur-h100-llama2-7b-mlp", "llama-2-7b", data_dir=DATA)
    ew = [s for s in rows if s.term in ("elementwise", "linear")]
    names = ["input_norm", "rope", "post_attention_norm", "act", "attention_residual_add"]
    assert ew and all([n for n, _ in s.ew_parts] == names for s in ew)
    for s in (s for s in ew if s.term == "elementwise"):
        assert s.time.median_s == pytest.approx(sum(t for _, t in s.ew_parts), rel=1e-12)
    assert not any(s.ew_parts for s in rows if s.term == "gemm")


def test_lss_decode_rows_with_no_context_are_dropped() -> None:
    from calibration.public_tables import load_lss_attention
    from costmodels import get_model

    dropped: list[int] = []
    s = load_lss_attention("lss-a6000-llama31-8b-attn", get_model("llama-3-8b"), DATA, dropped)
    assert dropped == [283] and all(x.shape.n_ctx >= 1 for x in s if x.term == "decode_attn")
    # kv_cache_size is the batch total: per-sequence context = total // batch.
    assert any(
        x.shape.seqs == 8 and x.shape.n_ctx == 10240 // 8 for x in s if x.term == "decode_attn"
    )


def test_cli_fit_prints_the_table(capsys) -> None:
    from experiments.cli import main

    assert main(["calibrate", "fit", "--data", str(DATA), "--source", "a100-vidur-flashinfer"]) == 0
    out = capsys.readouterr().out
    assert "a100-vidur-flashinfer" in out and "decode_attn" in out and "<10% met" in out
