"""Llama-3-8B on an H100 80GB HBM3, the full grid (calibration/measured/README.md, "Llama-3-8B on
an H100, the full grid"): the committed samples are every shape of the full grid's plan, their run
record and fitted profile agree, they repeat the committed H100 sweep on its shapes, and the
README's long-append figures (under-priced by the committed H100 profile) are these samples'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cal_helpers import (
    COPIES,
    assert_link_fit_is_an_optimum,
    committed_lead_s,
    issue_branch_copies,
)

from costmodels import CostModel, get_model, load_profile
from costmodels.cost import attention_pairs

MEASURED = Path(__file__).resolve().parents[2] / "calibration" / "measured"
FULL = "h100-sxm-llama3-8b-full"  # the full-grid run (not a committed profile)
H100 = "h100-sxm-llama3-8b"  # the committed profile and its samples (the older grid)
H200 = "h200-llama3-8b"


def _samples(name: str):
    from calibration.samples_io import read_samples_csv

    return read_samples_csv(MEASURED / f"{name}-samples.csv")


def _run_record() -> dict:
    return json.loads((MEASURED / f"{FULL}-samples.run.json").read_text())


def _full_profile():
    return load_profile(str(MEASURED / f"{FULL}.yaml"))


def _pinned(samples, term: str) -> list:
    return [s for s in samples if s.term == term and s.shape.pinned]


def _key(s) -> tuple:
    from calibration.sweep_plan import job_key

    return (s.term, s.group, job_key(s))


def test_h100_full_sweep_is_the_full_grid() -> None:
    """No time budget: the samples are every shape of the full grid's plan (722), nothing thinned,
    as on the H200."""
    from calibration.grids import full_grid
    from calibration.sweep_plan import estimated_call_s, job_key, plan_sweep
    from calibration.timing import TimingConfig

    call_s = estimated_call_s("cuda", TimingConfig())
    plan = plan_sweep(full_grid(), get_model("llama-3-8b"), device="cuda", call_s=call_s)
    samples = _samples(FULL)
    assert {j.key for j in plan.jobs} == {job_key(s) for s in samples}
    assert len(plan.jobs) == _run_record()["shapes"] == 722
    assert sum(len(j.terms) for j in plan.jobs) == len(samples) == 1354
    assert plan.grid.name == _run_record()["grid"] == "full"
    # The same shapes as the H200's full-grid run.
    assert {job_key(s) for s in samples} == {job_key(s) for s in _samples(H200)}


def test_h100_full_run_record_matches_its_profile() -> None:
    run, p = _run_record(), _full_profile()
    m = p.meta
    assert run["device"] == m.gpu == "NVIDIA H100 80GB HBM3"
    assert run["torch"] == m.torch == "2.11.0+cu130" and run["dtype"] == m.dtype == "bf16"
    assert run["flashinfer"] is m.flashinfer is None and m.driver == "580.159.04"
    assert m.cuda == "13.0" and m.date == "2026-11-26"
    assert run["timing"] == "CUDA events, cold L2, CUDA-graph replays"
    assert run["timing"] in m.backend
    assert run["attention"] in m.backend and "torch SDPA" in m.backend
    assert run["model"] == "Llama-3-8B" and run["tp"] == 1 and run["seed"] == 0
    assert run["timing_config"]["cuda_graph"] and run["timing_config"]["flush_l2"]
    assert "(full grid, 1354 samples, 334 s)" in m.source and "--budget-s" not in m.source
    assert "time budget" not in (m.notes or "")
    assert p.name == FULL


def test_h100_full_profile_is_the_fit_of_its_samples() -> None:
    """Refitting the committed samples gives the committed YAML's constants and the held-out
    figures the README gives (the run's validation table)."""
    import pandas as pd

    from calibration.env import EnvInfo
    from calibration.local import calibrate
    from calibration.measure import Measurements
    from calibration.measure_attention import AttentionBackend

    p, samples = _full_profile(), _samples(FULL)
    model = next(s.model for s in samples if s.group == "shard/1")
    env = EnvInfo("cuda", p.meta.gpu, p.meta.torch, p.meta.cuda, p.meta.driver, None, p.meta.date)
    m = Measurements(
        tuple(samples), model, "bf16", env, AttentionBackend("sdpa"), "full", None, (), 0.0
    )
    result = calibrate(m, FULL)
    refit = result.profile
    links = {f.term: f for f in result.fits if f.term in COPIES}
    assert set(links) == set(COPIES)
    for term in ("linear", "prefill_attn", "decode_attn", *COPIES):
        got, want = getattr(refit, term), getattr(p, term)
        for field in type(want).__dataclass_fields__:
            want_v = getattr(want, field)
            assert getattr(got, field) == pytest.approx(want_v, rel=1e-4), (term, field)
    # The pinned copies' issue branch: H2D reaches it on the three 256-copy trains alone, so the
    # samples fix 256 * issue - lead (1106.3 us), not issue_s: any issue_s from 4.41 to 8.23 us
    # (lead 23 us to the fit's 1 ms bound) costs the same; least_squares stops where the CPU's
    # BLAS kernels take it, and the fit then takes the point with an 80 us lead (4.63 us). D2H
    # reaches it on 16- and 256-copy trains, which fix issue_s too.
    branch = {
        t: issue_branch_copies(t, getattr(p, t), _pinned(samples, t), committed_lead_s(p, t))
        for t in COPIES
    }
    assert branch == {"h2d": {256}, "d2h": {16, 256}}
    assert (p.h2d.issue_s, committed_lead_s(p, "h2d")) == pytest.approx((4.63414e-6, 80e-6))
    for fit in links.values():
        assert fit.lead_s == pytest.approx(committed_lead_s(p, fit.term), abs=0.05e-6)
        assert_link_fit_is_an_optimum(fit, p, samples)
    assert refit.overlap.duplex_Bps == pytest.approx(p.overlap.duplex_Bps, rel=1e-4)
    table = pd.read_csv(MEASURED / f"{FULL}-validation.csv")
    gpu = {(r.term, r.split): r.mape for r in table.itertuples()}
    mine = {(r.term, r.split.name): r.test.mape for r in result.reports}
    # Every held-out figure is the GPU's but one: the random split of the pinned D2H copies (5
    # held out). Its 19 training copies reach the issue branch on 256-copy trains and (with a lead
    # near 57 us) on 16-copy ones too (cost 0.0036, test MAPE 1.9 %), and from three starts the
    # GPU's fit, and these samples under Haswell kernels, stopped on a worse local optimum that
    # leaves the 16-copy trains to the engine (cost 0.0184, 3.0 %, the run's table); the fourth
    # start, with no lead, reaches the better one under any kernels.
    for key, mape in mine.items():
        if key != ("d2h", "random"):
            assert mape == pytest.approx(gpu[key], abs=5e-4), key
    assert round(mine["d2h", "random"], 3) == 0.019
    assert round(gpu["prefill_attn", "extrapolation"], 3) == 0.236
    assert round(gpu["d2h", "random"], 3) == 0.030


def test_h100_full_repeats_the_committed_h100_sweep_on_its_shapes() -> None:
    """Every sample of the committed H100 sweep is in the full-grid run (1281 of 1354), and on them
    the two agree: median ratio 0.99-1.01 for every kind of kernel; the linear rows, timed here
    as one graph, run 4 % faster than the committed rows' two closures."""
    full = {_key(s): s for s in _samples(FULL)}
    old = {_key(s): s for s in _samples(H100)}
    assert set(old) <= set(full) and len(old) == 1281
    new_only = [s for k, s in full.items() if k not in old]
    counts: dict[tuple, int] = {}
    for s in new_only:
        counts[s.term, s.shape.pinned] = counts.get((s.term, s.shape.pinned), 0) + 1
    assert counts == {
        ("prefill_attn", True): 20,
        ("h2d", False): 18,
        ("d2h", False): 18,
        ("duplex", True): 10,
        ("lm_head", True): 7,
    }
    kinds = {"h2d": "copies", "d2h": "copies"}
    ratios: dict[str, list[float]] = {}
    for k, s in old.items():
        kind = kinds.get(s.term, s.term)
        ratios.setdefault(kind, []).append(full[k].time.median_s / s.time.median_s)
    med = {k: round(float(np.median(v)), 3) for k, v in ratios.items()}
    assert med == {
        "gemm": 1.002,
        "elementwise": 1.001,
        "linear": 0.961,
        "lm_head": 1.007,
        "prefill_attn": 0.994,
        "decode_attn": 0.999,
        "copies": 1.005,
    }
    assert {s.kernel for s in full.values() if s.term == "linear"} == {
        "torch.matmul + eager ops, one graph"
    }
    assert {s.kernel for s in old.values() if s.term == "linear"} == {"torch.matmul + eager ops"}


def _long_appends(name: str) -> dict[tuple[int, int], object]:
    """The 20 appends of the newer grid (2..48 new tokens over 8k..64k cached, one sequence)."""
    from calibration.sweep_plan import job_key

    old = {job_key(s) for s in _samples(H100) if s.term == "prefill_attn"}
    rows = [
        s
        for s in _samples(name)
        if s.term == "prefill_attn" and s.shape.pinned and job_key(s) not in old
    ]
    return {(s.shape.n_new, s.shape.n_ctx): s for s in rows}


def _signed(appends, profile: str) -> dict[tuple[int, int], tuple[float, float, float]]:
    """(priced / measured - 1, measured s, priced s) per append, priced by a committed profile."""
    cm = CostModel(get_model("llama-3-8b"), load_profile(profile))
    out = {}
    for (n_new, n_ctx), s in appends.items():
        priced = cm.prefill_attn_s(attention_pairs(n_new, n_ctx), 1, n_new, ((n_new, n_ctx),))
        out[n_new, n_ctx] = (priced / s.time.median_s - 1, s.time.median_s, priced)
    return out


def test_h100_long_appends_are_under_priced_by_the_committed_profile() -> None:
    """README: the committed H100 profile under-prices every long append by 30.7 to 57.4 %
    (median 48.8 %): 2 new tokens over 64k take 232 us and are priced 105 us. The H200's own
    profile under-prices the H200's by 28.2 to 67.8 % (median 52.1 %)."""
    h100 = _long_appends(FULL)
    assert len(h100) == 20
    assert {n for n, _ in h100} == {2, 4, 8, 32, 48}
    assert {c for _, c in h100} == {8192, 16384, 32768, 65536}
    assert all(s.shape.seqs == 1 for s in h100.values())
    signed = _signed(h100, H100)
    errs = np.array([e for e, _, _ in signed.values()])
    assert (errs < 0).all(), signed
    assert (round(-errs.max() * 100, 1), round(-errs.min() * 100, 1)) == (30.7, 57.4)
    assert round(-float(np.median(errs)) * 100, 1) == 48.8
    _, measured, priced = signed[2, 65536]
    assert (round(measured * 1e6), round(priced * 1e6)) == (232, 105)
    # The 48-token appends are priced on their FLOPs, above the KV floor, and miss the least.
    assert all(-0.32 < signed[48, c][0] < -0.30 for c in (8192, 16384, 32768, 65536))

    h200 = _long_appends(H200)
    signed200 = _signed(h200, H200)
    errs200 = np.array([e for e, _, _ in signed200.values()])
    assert (round(-errs200.max() * 100, 1), round(-errs200.min() * 100, 1)) == (28.2, 67.8)
    assert round(-float(np.median(errs200)) * 100, 1) == 52.1
    # The same appends take the same time on both GPUs (not bound by HBM bandwidth): median
    # H100 / H200 ratio 1.02 (0.97-1.05), so the H100's lower KV rate under-prices them less.
    ratio = [h100[k].time.median_s / h200[k].time.median_s for k in h100]
    assert round(float(np.median(ratio)), 2) == 1.02
    assert 0.97 < min(ratio) and max(ratio) < 1.05


def test_h100_long_appends_miss_the_fits_extrapolation() -> None:
    """README (c): the fit's prefill extrapolation miss is 23.6 % with the appends and 18.9 %
    without them (the committed profile's: 19.8 %, on samples without them)."""
    from calibration.fit import RateLimits, fit_term
    from calibration.validate import validate_term
    from costmodels import DecodeAttnTerm

    samples = _samples(FULL)

    def extrapolation(rows):
        limits = RateLimits.of_gpu("h100-sxm")
        decode = [s for s in rows if s.term == "decode_attn"]
        kv = fit_term("decode_attn", decode, limits).params_as(DecodeAttnTerm).kv_bw_Bps
        pf = [s for s in rows if s.term == "prefill_attn" and s.shape.pinned]
        reports = validate_term("x", "prefill_attn", pf, seed=0, limits=limits, kv_floor_Bps=kv)
        (ex,) = [r for r in reports if r.split.name == "extrapolation"]
        return ex.train_n, round(ex.test.mape, 3)

    assert extrapolation(samples) == (28, 0.236)
    shapes = {s.shape for s in _long_appends(FULL).values()}
    assert len(shapes) == 20
    rest = [s for s in samples if not (s.term == "prefill_attn" and s.shape in shapes)]
    assert len(rest) == len(samples) - 20
    assert extrapolation(rest) == (28, 0.189)
