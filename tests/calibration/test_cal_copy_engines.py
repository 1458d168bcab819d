"""The copy-engine samples a GPU sweep adds: copies from pageable host buffers (``Shape.pinned``)
and H2D with D2H at once ("duplex"). They round-trip through the raw CSV (a file written before
them reads as pinned), resume, and are fitted: the duplex rate by hand-computed cases, the
pageable copies beside the pinned ones without changing them. No GPU; torch only where noted."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest

from calibration.env import EnvInfo
from calibration.fit import fit_duplex, fit_term, predict, predict_duplex
from calibration.grids import full_grid, quick_grid
from calibration.local import calibrate
from calibration.measure import Measurements
from calibration.measure_attention import AttentionBackend
from calibration.samples import Sample, Shape, Timing
from calibration.samples_io import parse_samples, read_samples_csv, write_samples_csv
from costmodels import CopyTerm, get_model

MEASURED = Path(__file__).resolve().parents[2] / "calibration" / "measured"
COMMITTED = MEASURED / "h100-sxm-llama3-8b-samples.csv"
TRIAL = MEASURED / "h200-copies-appends-trial-samples.csv"
MODEL = get_model("llama-3-8b")


def _at(term: str, shape: Shape, seconds: float) -> Sample:
    return Sample(term, shape, Timing.published(seconds), MODEL, f"x{shape.copies}")


# --- samples on disk ------------------------------------------------------------------------------
def test_pageable_and_duplex_samples_round_trip(tmp_path) -> None:
    samples = [
        _at("h2d", Shape(nbytes=1 << 20, copies=1), 2.5e-5),
        _at("h2d", Shape(nbytes=1 << 20, copies=1, pinned=False), 9.1e-5),
        _at("d2h", Shape(nbytes=4 << 20, copies=16, pinned=False), 3.3e-4),
        _at("duplex", Shape(nbytes=4 << 20, copies=1), 1.1e-4),
    ]
    back = read_samples_csv(write_samples_csv(samples, tmp_path / "s.csv"))
    assert [(s.term, s.shape, s.time) for s in back] == [(s.term, s.shape, s.time) for s in samples]
    assert [s.shape.pinned for s in back] == [True, False, False, True]


def test_a_file_without_the_pinned_column_reads_as_pinned() -> None:
    text = COMMITTED.read_text()
    assert "shape_pinned" not in text.splitlines()[0]
    samples = parse_samples(io.StringIO(text), "committed")
    assert len(samples) == 1281 and all(s.shape.pinned for s in samples)
    assert {s.term for s in samples} >= {"h2d", "d2h"} and "duplex" not in {s.term for s in samples}


def test_a_pinned_column_that_is_not_a_bool_is_refused(tmp_path) -> None:
    path = write_samples_csv([_at("h2d", Shape(nbytes=4096, copies=1), 1e-5)], tmp_path / "s.csv")
    rows = list(csv.reader(path.open()))
    rows[1][rows[0].index("shape_pinned")] = "yes"
    with pytest.raises(ValueError, match="shape_pinned"):
        parse_samples(io.StringIO("\n".join(",".join(r) for r in rows)), "bad")


def test_pageable_and_duplex_jobs_resume_from_a_raw_file(tmp_path) -> None:
    from calibration.raw_sweep import RawSweep
    from calibration.sweep_plan import plan_sweep

    plan = plan_sweep(
        quick_grid(), MODEL, terms=("h2d", "d2h", "pageable", "duplex"), device="cuda"
    )
    extra = [j for j in plan.jobs if j.kind == "duplex" or not j.shape.pinned]
    assert len(extra) == 8  # 3 pageable sizes per direction, 2 duplex sizes
    path = tmp_path / "raw.csv"
    with RawSweep.open(path, {"run": 1}, plan.jobs) as raw:
        for j in extra:
            raw.append([Sample(j.kind, j.shape, Timing.published(1e-4), j.model)])
    again = RawSweep.open(path, {"run": 1}, plan.jobs)
    again.close()
    assert set(again.done) == {j.key for j in extra}


# --- the duplex rate, by hand ---------------------------------------------------------------------
H2D = CopyTerm(latency_s=0.0, bw_Bps=50e9)
D2H = CopyTerm(latency_s=0.0, bw_Bps=40e9)


def test_the_duplex_pair_by_hand() -> None:
    """5 MB each way: H2D alone 100 us, D2H alone 125 us. With 80 GB/s for both, each keeps
    80 / 90 of its rate: H2D ends at 100 * 90 / 80 = 112.5 us, D2H then runs its last 25 us
    alone: 137.5 us. At 90 GB/s or more nothing is shared: 125 us."""
    s = [_at("duplex", Shape(nbytes=5_000_000, copies=1), 1.0)]
    assert predict_duplex(80e9, H2D, D2H, s)[0] == pytest.approx(137.5e-6, rel=1e-12)
    assert predict_duplex(90e9, H2D, D2H, s)[0] == pytest.approx(125e-6, rel=1e-12)
    assert predict_duplex(0.0, H2D, D2H, s)[0] == pytest.approx(125e-6, rel=1e-12)


def test_fit_duplex_recovers_the_rate_the_pairs_were_timed_at() -> None:
    """Pairs of 2 .. 50 MB timed at a duplex rate of 80 GB/s: (10 MB: H2D 200 us, D2H 250 us,
    pair 200 * 90 / 80 + 50 = 275 us) give back 80 GB/s, share 8/9, no error."""
    shapes = [Shape(nbytes=n, copies=1) for n in (2_000_000, 10_000_000, 50_000_000)]
    times = [55e-6, 275e-6, 1375e-6]  # 1.1 x the D2H time alone, by hand
    samples = [_at("duplex", sh, t) for sh, t in zip(shapes, times, strict=True)]
    np.testing.assert_allclose(predict_duplex(80e9, H2D, D2H, samples), times, rtol=1e-12)
    d = fit_duplex(samples, H2D, D2H)
    assert d.duplex_Bps == pytest.approx(80e9, rel=1e-9)
    assert d.share == pytest.approx(8 / 9, rel=1e-9) and d.n == 3
    assert d.mape < 1e-9 and d.max_ape < 1e-9 and not d.notes


def test_fit_duplex_with_the_copies_own_costs() -> None:
    """The per-copy costs of each direction come in as the cost model prices them
    (``copy_time``): 16 copies of 256 KiB each way, start 5 us, 2 us a copy."""
    h2d = CopyTerm(latency_s=2e-6, bw_Bps=55e9, start_s=5e-6, issue_s=7e-6)
    d2h = CopyTerm(latency_s=2e-6, bw_Bps=55e9, start_s=5e-6, issue_s=7e-6)
    shapes = [Shape(nbytes=16 * 262144, copies=16), Shape(nbytes=64 << 20, copies=1)]
    # Both directions alone: 5 + 32 + 4194304 / 55e3 us = 113.26 us; each keeps 83.4 / 110.
    alone = [5e-6 + 32e-6 + 4194304 / 55e9, 5e-6 + 2e-6 + (64 << 20) / 55e9]
    samples = [_at("duplex", sh, t * 110 / 83.4) for sh, t in zip(shapes, alone, strict=True)]
    assert fit_duplex(samples, h2d, d2h).duplex_Bps == pytest.approx(83.4e9, rel=1e-9)


def test_pairs_no_slower_than_alone_share_nothing_and_say_so() -> None:
    samples = [_at("duplex", Shape(nbytes=10_000_000, copies=1), 240e-6)]  # < 250 us alone
    d = fit_duplex(samples, H2D, D2H)
    assert d.duplex_Bps == pytest.approx(90e9) and d.share == 1.0
    assert "nothing shared" in d.notes[0]
    with pytest.raises(ValueError, match="duplex samples only"):
        fit_duplex([_at("h2d", Shape(nbytes=4096, copies=1), 1e-5)], H2D, D2H)


# --- pageable copies ------------------------------------------------------------------------------
PINNED = CopyTerm(latency_s=2e-6, bw_Bps=55e9, start_s=5e-6)
PAGEABLE = CopyTerm(latency_s=6e-6, bw_Bps=22e9, start_s=12e-6)


def _copies(term: str, copy: CopyTerm, pinned: bool) -> list[Sample]:
    g = full_grid()
    shapes = g.copy_shapes() if pinned else g.pageable_shapes()
    out = []
    for b, c in shapes:
        sh = Shape(nbytes=(b // c) * c, copies=c, pinned=pinned)
        out.append(_at(term, sh, float(predict(term, copy, [_at(term, sh, 1.0)])[0])))
    return out


def test_pinned_and_pageable_copies_are_never_fitted_together() -> None:
    mixed = _copies("h2d", PINNED, True) + _copies("h2d", PAGEABLE, False)
    with pytest.raises(ValueError, match="pinned and pageable"):
        fit_term("h2d", mixed)


def test_the_pageable_rate_is_recovered_in_the_link_form() -> None:
    f = fit_term("h2d", _copies("h2d", PAGEABLE, False), link=True)
    c = f.params_as(CopyTerm)
    assert c.bw_Bps == pytest.approx(22e9, rel=0.01)
    assert c.start_s + c.latency_s == pytest.approx(18e-6, rel=0.05)


def _run(extra: list[Sample]) -> Measurements:
    """Pinned copies of both directions (and ``extra``) measured on an H100, nothing else."""
    samples = _copies("h2d", PINNED, True) + _copies("d2h", PINNED, True) + extra
    env = EnvInfo("cuda", "NVIDIA H100 80GB HBM3", "2.x", "12.4", "550.54", None, "2025-06-01")
    return Measurements(
        tuple(samples), MODEL, "bf16", env, AttentionBackend("sdpa"), "full", None, (), 1.0
    )


def test_the_profile_takes_the_duplex_rate_and_reports_pageable_copies() -> None:
    # Duplex pairs of every planned shape at 83.4 GB/s, from the pinned constants.
    pairs = [
        Sample("duplex", Shape(nbytes=(b // c) * c, copies=c), Timing.published(1.0), MODEL)
        for b, c in full_grid().duplex_shapes()
    ]
    t = predict_duplex(83.4e9, PINNED, PINNED, pairs)
    duplex = [dataclasses.replace(s, time=Timing.published(float(x))) for s, x in zip(pairs, t)]
    pageable = _copies("h2d", PAGEABLE, False) + _copies("d2h", PAGEABLE, False)
    before = calibrate(_run([]), "h100-copies")
    after = calibrate(_run(duplex + pageable), "h100-copies")
    # Without the new samples: no duplex rate, nothing said about them.
    assert before.profile.overlap.duplex_Bps == 0.0 and before.duplex is None
    assert not before.pageable and "pageable" not in (before.profile.meta.notes or "")
    # With them: the pinned fits are unchanged, the duplex rate is the one they were timed at
    # (against the fitted, not the true, pinned terms: within 1 %), pageable copies reported.
    assert after.profile.h2d == before.profile.h2d and after.profile.d2h == before.profile.d2h
    assert after.profile.validation == before.profile.validation
    assert after.profile.overlap.duplex_Bps == pytest.approx(83.4e9, rel=0.01)
    assert after.duplex is not None and after.duplex.n == len(duplex)
    assert [f.term for f in after.pageable] == ["h2d", "d2h"]
    for f in after.pageable:
        assert f.params_as(CopyTerm).bw_Bps == pytest.approx(22e9, rel=0.01)
    assert {r.term for r in after.pageable_reports} == {"h2d", "d2h"}
    notes = after.profile.meta.notes or ""
    assert "duplex: H2D and D2H at once share 83." in notes
    assert "pageable h2d (reported, not priced): 22.0 GB/s, pinned 55.0 GB/s" in notes
    assert "one copy of 1024 MiB ran at 22.0 GB/s" in notes  # 18 us of fixed costs: 21.99
    assert "held-out (pageable): h2d" in notes
    # No overlap run: the base profile's compute slowdown, and the notes say so.
    assert "compute_slowdown and layerwise_h2d from analytic-h100-sxm" in notes


def test_duplex_samples_without_both_directions_are_left_out_and_said_so() -> None:
    pair = Sample("duplex", Shape(nbytes=4 << 20, copies=1), Timing.published(1e-4), MODEL)
    m = dataclasses.replace(_run([pair]), samples=(pair,))
    res = calibrate(m, "no-copies")
    assert res.duplex is None and "duplex: 1 samples not used" in (res.profile.meta.notes or "")


def test_the_h200_trial_refits_to_the_figures_its_readme_quotes() -> None:
    """The new shapes timed once on an H200 (calibration/measured/README.md)."""
    samples = read_samples_csv(TRIAL)
    assert len(samples) == 122
    assert sum(s.term == "duplex" for s in samples) == 10
    assert sum(not s.shape.pinned for s in samples) == 36
    env = EnvInfo("cuda", "NVIDIA H200", "2.11.0+cu130", "13.0", None, None, None)
    m = Measurements(
        tuple(samples),
        samples[0].model,
        "bf16",
        env,
        AttentionBackend("sdpa"),
        "trial",
        None,
        (),
        0,
    )
    res = calibrate(m, "h200-trial")
    d = res.duplex
    assert d is not None and d.n == 10
    assert res.profile.overlap.duplex_Bps == pytest.approx(98.4e9, rel=1e-3)
    assert (round(d.share, 3), round(d.mape, 3), round(d.max_ape, 3)) == (0.894, 0.036, 0.141)
    notes = res.profile.meta.notes or ""
    assert "pageable d2h (reported, not priced): 12.0 GB/s, pinned 54.8 GB/s" in notes
    assert "one copy of 1024 MiB ran at 12.4 GB/s" in notes
    assert "one copy of 1024 MiB ran at 8.8 GB/s" in notes  # pageable H2D
    by = {(r.term, r.split.name): r.test.mape for r in res.pageable_reports}
    assert round(by["d2h", "random"], 3) == 0.081 and round(by["d2h", "extrapolation"], 3) == 0.059
    assert by["h2d", "random"] > 0.5  # the link form misses pageable H2D (two regimes)


# --- the measuring code, on a CPU -----------------------------------------------------------------
def test_cpu_stand_ins_measure_pageable_copies_and_duplex_pairs() -> None:
    pytest.importorskip("torch")
    from calibration.measure_copy import measure_copy, measure_duplex
    from calibration.timing import CpuTimer, TimingConfig

    timer = CpuTimer(TimingConfig(warmup_s=0.0, rep_s=0.0, min_reps=3, max_reps=3))
    s = measure_copy("d2h", 1 << 16, 4, timer, "cpu", MODEL, pinned=False)
    assert s.term == "d2h" and s.shape == Shape(nbytes=1 << 16, copies=4, pinned=False)
    assert s.group == "x4 pageable" and s.time.median_s > 0
    d = measure_duplex(3 << 16, 2, timer, "cpu", MODEL)
    assert d.term == "duplex" and d.shape == Shape(nbytes=3 << 16, copies=2)
    assert d.time.median_s > 0 and "stand-in" in d.kernel


def test_the_job_runner_dispatches_the_new_kinds() -> None:
    pytest.importorskip("torch")
    from calibration.measure import MeasureConfig, _JobRunner
    from calibration.sweep_plan import Job

    class Fixed:
        kind = "cpu"
        eager_fallbacks: tuple[str, ...] = ()

        def measure(self, fn, graph=None) -> Timing:
            fn()
            return Timing.published(1e-5)

    cfg = MeasureConfig("cpu", MODEL, "fp32", quick_grid())
    run = _JobRunner(cfg, AttentionBackend("sdpa"), Fixed())
    (s,) = run.run(Job("h2d", MODEL, Shape(nbytes=8192, copies=2, pinned=False)))
    assert (s.term, s.shape.pinned) == ("h2d", False)
    (d,) = run.run(Job("duplex", MODEL, Shape(nbytes=8192, copies=1)))
    assert d.term == "duplex" and d.shape.nbytes == 8192
