"""Measurements of one device -> fitted terms, held-out validation, and a profile.

The same fitter and validator as the public tables (``fit``, ``validate``). Terms a sweep cannot
measure are filled in explicitly and named in the profile's notes:
  * GPU: ``step_overhead_s`` (an engine loop's CPU time, not a kernel) from the GPU's analytic
    profile when its name is recognised (else the H100's);
  * CPU: overlap is not measurable (no copy engine, no streams): compute_slowdown 0 and
    layerwise_h2d false (copies and compute share the cores); step overhead 0.

Samples a sweep of the copy engines adds, used where present (a file without them fits exactly
as before):
  * "duplex" (H2D and D2H at once): ``overlap.duplex_Bps`` is fitted on them with the pinned
    copy terms of the same run (``fit.fit_duplex``); without them it stays 0 (none);
  * copies from pageable host buffers: fitted per direction in the same form as the pinned ones,
    validated the same way and reported in the profile's notes, not priced: the simulated engines
    keep their host KV in pinned buffers (vLLM's CPU KV cache is pinned), so no profile field
    holds them. ``CalibrationResult.pageable`` keeps the fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodels import (
    CopyTerm,
    CostModel,
    DecodeAttnTerm,
    OverlapTerm,
    PrefillAttnTerm,
    Profile,
    ProfileMeta,
    TermValidation,
    analytic_profile,
    get_hardware,
)

from .fit import (
    DuplexFit,
    ElementwiseFit,
    GemmFit,
    PerOpForm,
    RateLimits,
    TermFit,
    TileWaveForm,
    fit_duplex,
    fit_term,
    fitted_params,
)
from .measure import Measurements
from .profile_writer import (
    ProfileFits,
    build_profile,
    model_note,
    pensieve_lines,
    report_lines,
    validation_entry,
)
from .samples import Sample
from .validate import TermReport, transfer_check, validate_term

# Decode before prefill: prefill attention's KV-read floor is read at the decode KV rate.
FIT_ORDER = ("gemm", "elementwise", "decode_attn", "prefill_attn", "h2d", "d2h")


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    profile: Profile
    fits: tuple[TermFit, ...]
    reports: tuple[TermReport, ...]
    from_base: tuple[str, ...]
    # Copies from pageable host buffers (reported in the notes, not priced) and their held-out
    # reports; empty where the samples hold none.
    pageable: tuple[TermFit, ...] = ()
    pageable_reports: tuple[TermReport, ...] = ()
    duplex: DuplexFit | None = None  # fitted where the samples hold "duplex" rows


def recognised_gpu(device_name: str) -> str | None:
    """The registered hardware a CUDA device name denotes, if any ("NVIDIA H100 80GB HBM3" -> h100-sxm)."""
    name = device_name.lower()
    for key, hw in (("h200", "h200"), ("h100", "h100-sxm"), ("a100", "a100-sxm")):
        if key in name:
            return hw
    return None


@dataclass(frozen=True, slots=True)
class GpuForms:
    """The forms a GPU sweep is fitted in, as the public tables' are where the GPU is registered:
    GEMMs one by one in tile waves, elementwise kernel by kernel, copies as a link, prefill
    attention under its KV-read floor at the fitted decode rate. None / False: the layer forms
    (a CPU, or a GPU with no SM count and L2 size on record)."""

    gemm: TileWaveForm | None = None
    elementwise: PerOpForm | None = None
    link: bool = False

    def of(self, term: str, fits: dict[str, TermFit]) -> dict:
        """``fit_term``'s keyword arguments for ``term`` (decode is fitted before prefill)."""
        if term == "gemm":
            return {"gemm_form": self.gemm}
        if term == "elementwise":
            return {"ew_form": self.elementwise}
        if term in ("h2d", "d2h"):
            return {"link": self.link}
        if term == "prefill_attn" and self.link and "decode_attn" in fits:
            return {"kv_floor_Bps": fits["decode_attn"].params_as(DecodeAttnTerm).kv_bw_Bps}
        return {}


def gpu_forms(hw: str | None, per_kernel_linear: bool = False) -> GpuForms:
    """The forms for a GPU sweep: copies as a link and prefill under its floor on any GPU; the
    per-GEMM and per-op linear forms only when asked (``per_kernel_linear``) and the GPU's SMs
    and L2 are on record. Why the layer form by default: on the committed H100 sweep the
    per-kernel forms fit the separately timed GEMMs and elementwise ops closer (linear 2.7 / 2.7 %
    held out against 5.3 / 4.2 %), but those closures run about 4 % slower than the same kernels
    inside a whole-layer graph, and the forward replay of 60 simulated batches went from 3.7 % to
    4.6 % MAPE with them (docs/cost-model.md, "The measured H100 profile, refitted")."""
    if hw is None:
        return GpuForms()
    spec = get_hardware(hw)
    if not (per_kernel_linear and spec.sm_count and spec.l2_bytes):
        return GpuForms(link=True)
    return GpuForms(TileWaveForm.of_gpu(hw), PerOpForm.of_gpu(hw), True)


def gpu_base(device_name: str) -> Profile:
    """The analytic profile of the GPU a device name denotes (the H100's when unrecognised)."""
    return analytic_profile(get_hardware(recognised_gpu(device_name) or "h100-sxm"))


def _overlap_validation(m: Measurements) -> dict[str, TermValidation]:
    if m.overlap is None or not m.overlap.pipeline:
        return {}
    pts = m.overlap.pipeline
    ape = np.array([abs(p.predicted_s - p.measured_s) / p.measured_s for p in pts])
    return {
        "pipeline": TermValidation(
            mape=round(float(ape.mean()), 4),
            max_ape=round(float(ape.max()), 4),
            n=len(pts),
            split="layer-wise pipeline at t_x/t_c ratios "
            + ", ".join(f"{p.t_copy_layer_s / p.t_compute_layer_s:.2g}" for p in pts),
        )
    }


def calibrate(
    m: Measurements, name: str, seed: int = 0, source: str = "", per_kernel_linear: bool = False
) -> CalibrationResult:
    """Fit, validate and build the profile of ``m``; ``per_kernel_linear``: fit the GEMMs and the
    elementwise ops kernel by kernel (``gpu_forms``)."""
    samples = [s for s in m.samples if s.term != "duplex" and s.shape.pinned]
    duplex_rows = [s for s in m.samples if s.term == "duplex"]
    pageable_rows = [s for s in m.samples if not s.shape.pinned]
    by_term: dict[str, list[Sample]] = {}
    for s in samples:
        by_term.setdefault(s.term, []).append(s)
    fits: dict[str, TermFit] = {}
    reports: list[TermReport] = []
    src = f"{m.env.device}:{m.model.name}"
    on_cpu = m.env.device == "cpu"
    # Datasheet ceilings for a recognised GPU (see RateLimits); none on a CPU.
    hw = None if on_cpu else recognised_gpu(m.env.device_name)
    limits = RateLimits.of_gpu(hw) if hw else RateLimits()
    forms = gpu_forms(hw, per_kernel_linear)
    for term in FIT_ORDER:
        rows = by_term.get(term, [])
        if len({s.key for s in rows}) < 3:
            continue
        kw = forms.of(term, fits)
        fits[term] = fit_term(term, rows, limits, **kw)
        reports += validate_term(src, term, samples, seed=seed, limits=limits, **kw)
    if "gemm" in fits and "elementwise" in fits and by_term.get("linear"):
        kw = {"gemm_form": forms.gemm, "ew_form": forms.elementwise}
        reports += validate_term(src, "linear", samples, seed=seed, limits=limits, **kw)
    if "gemm" in fits and by_term.get("lm_head"):
        reports.append(
            transfer_check(
                src,
                "lm_head",
                samples,
                fits["gemm"].params_as(GemmFit),
                note="transfer: the layer-GEMM constants on the LM head",
            )
        )

    base = gpu_base(m.env.device_name) if not on_cpu else analytic_profile(get_hardware("h100-sxm"))
    overlap = None
    step = None
    notes: list[str] = []
    if on_cpu:
        overlap = OverlapTerm(compute_slowdown=0.0, layerwise_h2d=False)
        step = 0.0
        notes.append(
            "CPU profile: copies are host memcpy (a stand-in for PCIe); overlap not measurable "
            "(no copy engine or streams): compute_slowdown 0, layerwise_h2d false; "
            "step_overhead_s 0 (not measured: it needs an engine loop)"
        )
    elif hw is None:
        notes.append(
            f"GPU {m.env.device_name!r} not in costmodels/data/hardware.yaml: no datasheet ceilings "
            f"on the fitted rates; unmeasured terms from {base.name}"
        )
    if not on_cpu and m.overlap is not None:
        overlap = OverlapTerm(compute_slowdown=m.overlap.epsilon, layerwise_h2d=True)
        notes.append(
            f"overlap: eta={m.overlap.eta:.3f}, epsilon={m.overlap.epsilon:.4f} "
            f"(t_c={m.overlap.t_compute_s:.3g}s, t_x={m.overlap.t_copy_s:.3g}s, "
            f"t_both={m.overlap.t_both_s:.3g}s)"
        )
    duplex = None
    if duplex_rows:
        duplex, overlap = _fit_duplex(duplex_rows, fits, overlap, base, notes)
    pageable, pageable_reports = _fit_pageable(pageable_rows, src, seed, limits, forms, fits, notes)
    pf = ProfileFits(
        gemm=fitted_params(fits, "gemm", GemmFit),
        elementwise=fitted_params(fits, "elementwise", ElementwiseFit),
        prefill_attn=fitted_params(fits, "prefill_attn", PrefillAttnTerm),
        decode_attn=fitted_params(fits, "decode_attn", DecodeAttnTerm),
        h2d=fitted_params(fits, "h2d", CopyTerm),
        d2h=fitted_params(fits, "d2h", CopyTerm),
        overlap=overlap,
        step_overhead_s=step,
    )
    validation: dict[str, TermValidation] = {}
    for r in reports:
        if (
            r.term
            in ("linear", "elementwise", "prefill_attn", "decode_attn", "h2d", "d2h", "lm_head")
            and r.split.name in ("random", "transfer")
            and r.test.n > 0
        ):
            validation[r.term] = validation_entry(r)
    validation.update(_overlap_validation(m))
    env = m.env
    meta = ProfileMeta(
        gpu=("cpu: " + env.device_name) if on_cpu else env.device_name,
        backend=f"torch {env.torch} matmul GEMMs, eager elementwise ops; attention: {m.backend.describe()}"
        + (f"; timing: {m.timing}" if m.timing else ""),
        dtype=m.dtype,
        source=source
        or f"fit: kvsim calibrate --device {env.device} ({m.grid} grid, "
        f"{len(samples)} samples, {m.wall_s:.0f} s)",
        driver=env.driver,
        cuda=env.cuda,
        torch=env.torch,
        flashinfer=env.flashinfer,
        page_size=m.backend.page_size,
        date=env.date,
    )
    profile, from_base = build_profile(name, pf, base, meta, validation)
    notes.append("measured model: " + model_note(m.model))
    if from_base:
        notes.append(f"not measured, taken from {base.name}: " + ", ".join(from_base))
    notes += [f"skipped: {s}" for s in m.skipped]
    notes += [f"note [{f.term}]: {n}" for f in fits.values() for n in f.notes]
    notes += ["held-out: " + line for line in report_lines(reports)]
    if env.clocks:
        notes.append(
            f"nvidia-smi clocks.sm,clocks.max.sm,power.draw,temperature.gpu at start: {env.clocks}"
        )
    if env.threads:
        notes.append(f"torch threads: {env.threads}")
    notes += pensieve_lines(CostModel(m.model, profile), (1, 128))
    profile = replace(profile, meta=replace(profile.meta, notes="\n".join(notes)))
    return CalibrationResult(
        profile,
        tuple(fits.values()),
        tuple(reports),
        from_base,
        pageable,
        pageable_reports,
        duplex,
    )


def _fit_duplex(
    rows: list[Sample],
    fits: dict[str, TermFit],
    overlap: OverlapTerm | None,
    base: Profile,
    notes: list[str],
) -> tuple[DuplexFit | None, OverlapTerm | None]:
    """The duplex fit and the overlap term carrying its rate (the base profile's overlap where the
    run measured none); unchanged, with a note, when a direction alone was not fitted."""
    if "h2d" not in fits or "d2h" not in fits:
        notes.append(
            f"duplex: {len(rows)} samples not used: the pinned H2D and D2H copies alone were not "
            "both fitted"
        )
        return None, overlap
    h2d, d2h = fits["h2d"].params_as(CopyTerm), fits["d2h"].params_as(CopyTerm)
    d = fit_duplex(rows, h2d, d2h)
    notes.append(
        f"duplex: H2D and D2H at once share {d.duplex_Bps / 1e9:.1f} GB/s, each direction at "
        f"{d.share:.3f} of its own rate while both run (fitted on {d.n} pairs, in-sample MAPE "
        f"{d.mape:.1%}, max {d.max_ape:.1%})"
    )
    notes += [f"note [duplex]: {n}" for n in d.notes]
    if overlap is None:
        notes.append(f"duplex: compute_slowdown and layerwise_h2d from {base.name} (not measured)")
    return d, replace(overlap or base.overlap, duplex_Bps=d.duplex_Bps)


def _fit_pageable(
    rows: list[Sample],
    src: str,
    seed: int,
    limits: RateLimits,
    forms: GpuForms,
    fits: dict[str, TermFit],
    notes: list[str],
) -> tuple[tuple[TermFit, ...], tuple[TermReport, ...]]:
    """Each direction's pageable copies fitted as the pinned ones are, validated (random and
    extrapolation splits) and written into ``notes`` beside the pinned rate."""
    out: list[TermFit] = []
    reports: list[TermReport] = []
    for term in ("h2d", "d2h"):
        got = [s for s in rows if s.term == term]
        if len({s.key for s in got}) < 3:
            if got:
                notes.append(f"pageable {term}: {len(got)} shapes, too few to fit")
            continue
        kw = forms.of(term, fits)
        f = fit_term(term, got, limits, **kw)
        out.append(f)
        reports += validate_term(f"{src} pageable", term, got, seed=seed, limits=limits, **kw)
        c = f.params_as(CopyTerm)
        pinned = (
            f", pinned {fits[term].params_as(CopyTerm).bw_Bps / 1e9:.1f} GB/s"
            if term in fits
            else ""
        )
        # The form can miss where the driver changes how it stages a copy (on an H200, pageable
        # H2D copies up to 1 MiB ran at the pinned rate, larger ones at 7-16 GB/s), so the
        # largest single copy's own rate is reported beside it.
        singles = [s for s in got if s.shape.copies == 1]
        big = max(singles, key=lambda s: s.shape.nbytes) if singles else None
        largest = (
            f"; one copy of {big.shape.nbytes / 2**20:g} MiB ran at "
            f"{big.shape.nbytes / big.time.median_s / 1e9:.1f} GB/s"
            if big
            else ""
        )
        notes.append(
            f"pageable {term} (reported, not priced): {c.bw_Bps / 1e9:.1f} GB/s{pinned}; "
            f"start {c.start_s * 1e6:.2f} us, {c.latency_s * 1e6:.2f} us a copy, issue "
            f"{c.issue_s * 1e6:.2f} us ({f.n} shapes){largest}"
        )
        notes += [f"note [pageable {term}]: {n}" for n in f.notes]
    notes += ["held-out (pageable): " + line for line in report_lines(reports)]
    return tuple(out), tuple(reports)
