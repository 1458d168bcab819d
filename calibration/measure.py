"""Run a calibration sweep: every term of one layer of ``model`` over a ``Grid``, on one device.

Returns typed ``Measurements`` (samples, overlap, environment, what was skipped and why). The
device-specific parts live in measure_gemm / measure_attention / measure_copy; the shapes and their
order in ``sweep_plan``; this module runs the plan's jobs, picks the backend and records reasons for
anything left out. With a raw file (``MeasureConfig.raw``) every finished shape is appended to it
at once and a rerun resumes from it (``raw_sweep``); progress goes to stderr (``progress``). The
overlap runs are not shapes of the raw file: a resumed GPU sweep measures them again (seconds).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from costmodels import ModelSpec

from .env import EnvInfo, collect, flashinfer_version
from .grids import Grid
from .measure_attention import AttentionBackend, measure_decode, measure_prefill
from .measure_copy import OverlapResult, measure_copy, measure_duplex, measure_overlap
from .measure_gemm import (
    LayerWeights,
    dtype_bytes,
    gemm_closure,
    lm_head_closure,
    measure_token_level,
)
from .progress import SweepProgress
from .raw_sweep import RawSweep
from .samples import Sample, with_dtype_bytes
from .sweep_plan import Job, SweepPlan, estimated_call_s, plan_sweep, plan_within_budget, tp_shard
from .timing import TimingConfig, make_timer

# "pageable": the copy directions also from/to pageable host buffers; "duplex": H2D and D2H at
# once (both GPU-only, ``sweep_plan``).
TERMS = (
    "linear",
    "prefill_attn",
    "decode_attn",
    "h2d",
    "d2h",
    "lm_head",
    "overlap",
    "pageable",
    "duplex",
)


@dataclass(frozen=True, slots=True)
class MeasureConfig:
    device: str  # "cpu" | "cuda" | "cuda:N"
    model: ModelSpec
    dtype: str  # "bf16" | "fp16" | "fp32"
    grid: Grid
    timing: TimingConfig = field(default_factory=TimingConfig)
    seed: int = 0
    attention: str = "auto"  # "auto" (FlashInfer when installed on CUDA) | "sdpa" | "flashinfer"
    decode_impl: str = "sdpa"  # torch decode: "sdpa" | "gather"
    kv_layout: str = "NHD"
    terms: tuple[str, ...] = TERMS
    cpu_threads: int = 1  # CPU: torch intra-op threads (see run_measurements)
    tp: int = 1  # measure one layer of the model's per-GPU shard at this tensor parallelism
    raw: Path | None = None  # append each finished shape here; resume from it when it exists
    fresh: bool = False  # start ``raw`` over instead of resuming
    budget_s: float | None = None  # thin the grid until its estimated duration fits (sweep_plan)


@dataclass(frozen=True, slots=True)
class Measurements:
    samples: tuple[Sample, ...]
    model: ModelSpec  # the measured model (the per-GPU shard), bytes per element as measured
    dtype: str
    env: EnvInfo
    backend: AttentionBackend
    grid: str
    overlap: OverlapResult | None
    skipped: tuple[str, ...]  # what was not measured, and why
    wall_s: float
    timing: str = ""  # how kernels were timed (CudaTimer/CpuTimer.describe())
    resumed: int = 0  # shapes taken from an earlier run's raw file, not measured by this one


def _backend(cfg: MeasureConfig, skipped: list[str]) -> AttentionBackend:
    want = cfg.attention
    on_gpu = cfg.device.startswith("cuda")
    fi = flashinfer_version() if on_gpu else None
    if want == "flashinfer" and (not on_gpu or fi is None):
        raise ValueError("--attention flashinfer needs CUDA and an installed flashinfer")
    if want in ("auto", "flashinfer") and fi is not None:  # GPU-only
        be = AttentionBackend("flashinfer", page_size=cfg.grid.page_size, kv_layout=cfg.kv_layout)
        problem = _probe_flashinfer(cfg, be)
        if problem is None:
            return be
        if want == "flashinfer":
            raise ValueError(f"flashinfer {fi} failed a probe call: {problem}")
        skipped.append(
            f"FlashInfer {fi} failed a probe call ({problem}): attention measured with torch SDPA"
        )
    if want == "auto" and on_gpu:
        skipped.append("FlashInfer not installed: attention measured with torch SDPA")
    return AttentionBackend("sdpa", decode_impl=cfg.decode_impl, page_size=cfg.grid.page_size)


def plan_for(cfg: MeasureConfig) -> tuple[SweepPlan, str]:
    """The sweep ``cfg`` asks for, and what its time budget trimmed (empty: nothing)."""
    model = with_dtype_bytes(cfg.model, dtype_bytes(cfg.dtype))
    call_s = estimated_call_s(cfg.device, cfg.timing)
    if cfg.budget_s is None:
        return plan_sweep(cfg.grid, model, cfg.tp, cfg.terms, cfg.device, cfg.seed, call_s), ""
    return plan_within_budget(
        cfg.grid,
        cfg.budget_s,
        call_s,
        model=model,
        tp=cfg.tp,
        terms=cfg.terms,
        device=cfg.device,
        seed=cfg.seed,
    )


def run_measurements(
    cfg: MeasureConfig,
    log: Callable[[str], None] = print,
    timer=None,
    on_shape: Callable[[int, int], None] | None = None,
    progress_stream: TextIO | None = None,
) -> Measurements:
    """Measure every job of the plan not already in ``cfg.raw``. ``timer``: another timer than
    the device's (tests use a deterministic one); ``on_shape(done, total)`` is called after every
    shape is on disk."""
    import torch

    t0 = time.perf_counter()
    device = cfg.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"--device {device}: torch.cuda.is_available() is False "
            f"(torch {torch.__version__}); use --device cpu"
        )
    if device == "cpu" and cfg.cpu_threads > 0:
        # Why one thread by default: on a shared or oversubscribed host, OpenMP barriers between
        # threads turn microsecond kernels into scheduler quanta (milliseconds); one thread
        # measures the kernels, not the scheduler.
        torch.set_num_threads(cfg.cpu_threads)
    plan, trimmed = plan_for(cfg)
    skipped = list(plan.skipped) + ([trimmed] if trimmed else [])
    model = with_dtype_bytes(cfg.model, dtype_bytes(cfg.dtype))
    layer = tp_shard(model, cfg.tp)
    timer = timer or make_timer(device, cfg.timing)
    be = _backend(cfg, skipped)
    env = collect(device)
    if trimmed:
        log(trimmed)
    for kind in ("token", "lm_head", "prefill_attn", "decode_attn", "h2d", "d2h", "duplex"):
        if plan.count(kind):
            pageable = sum(j.kind == kind and not j.shape.pinned for j in plan.jobs)
            extra = f" ({pageable} of them pageable)" if pageable else ""
            log(f"{_KIND_LABEL[kind]}: {plan.count(kind)} shapes{extra}")
    log(f"{len(plan.jobs)} shapes, estimated {plan.estimate_s:.0f} s ({be.describe()})")
    raw = None
    if cfg.raw is not None:
        record = run_record(cfg, env, be, timer, plan, layer)
        raw = RawSweep.open(cfg.raw, record, plan.jobs, fresh=cfg.fresh)
        if raw.done:
            log(f"resuming {cfg.raw}: {len(raw.done)} of {len(plan.jobs)} shapes already measured")
    done = raw.done if raw else {}
    new: dict[tuple, tuple[Sample, ...]] = {}
    progress = SweepProgress(len(plan.jobs), len(done), layer.name, progress_stream)
    runner = _JobRunner(cfg, be, timer)
    torch.manual_seed(cfg.seed)
    try:
        with torch.inference_mode():
            for job in plan.jobs:
                if job.key in done:
                    continue
                new[job.key] = got = tuple(runner.run(job))
                if raw is not None:
                    raw.append(got)
                progress.step(_KIND_LABEL[job.kind])
                if on_shape is not None:
                    on_shape(progress.done, progress.total)
    except KeyboardInterrupt:
        if raw is not None:
            print(
                f"calibrate: {progress.done} of {progress.total} shapes are in {raw.path}; "
                "the same command resumes from there",
                file=progress_stream or sys.stderr,
            )
        raise
    finally:
        if raw is not None:
            raw.close()
    # Plan order whether measured now or earlier: a resumed sweep fits exactly what an
    # uninterrupted one would have.
    samples = [s for job in plan.jobs for s in (done.get(job.key) or new[job.key])]
    overlap = None
    if "overlap" in cfg.terms:
        if device == "cpu":
            skipped.append(
                "overlap: no copy engine or streams on a CPU (host memcpy and compute share "
                "the cores); compute_slowdown and layerwise_h2d are not measured"
            )
        else:  # GPU-only
            with torch.inference_mode():
                bw = _h2d_bw(samples) or 25e9
                lw = LayerWeights(layer, device, cfg.dtype, cfg.seed)
                overlap = measure_overlap(gemm_closure(lw, 512), bw, timer, device)
    if timer.eager_fallbacks:  # GPU-only
        skipped.append(
            f"CUDA graph capture failed for {len(timer.eager_fallbacks)} closures, timed with "
            f"eager launches instead (first: {timer.eager_fallbacks[0]})"
        )
    return Measurements(
        tuple(samples),
        layer,
        cfg.dtype,
        env,
        be,
        plan.grid.name,
        overlap,
        tuple(skipped),
        time.perf_counter() - t0,
        timer.describe(),
        resumed=len(done),
    )


_KIND_LABEL = {
    "token": "token-level ops (GEMMs + elementwise)",
    "lm_head": "LM head",
    "prefill_attn": "prefill attention",
    "decode_attn": "decode attention",
    "h2d": "h2d copies",
    "d2h": "d2h copies",
    "duplex": "h2d + d2h at once",
}


def run_record(cfg: MeasureConfig, env: EnvInfo, be, timer, plan: SweepPlan, layer) -> dict:
    """What the samples of a raw file are measured with: a rerun must match it to resume."""
    return {
        "device": env.device_name,
        "torch": env.torch,
        "flashinfer": env.flashinfer,
        "dtype": cfg.dtype,
        "model": layer.name,
        "tp": cfg.tp,
        "attention": be.describe(),
        "timing": timer.describe(),
        "timing_config": dataclasses.asdict(cfg.timing),
        "threads": env.threads,
        "grid": plan.grid.name,
        "shapes": len(plan.jobs),
        "seed": cfg.seed,
    }


class _JobRunner:
    """Measures one job; the layer weights of each shard are made once, on first use."""

    def __init__(self, cfg: MeasureConfig, be: AttentionBackend, timer) -> None:
        self.cfg, self.be, self.timer = cfg, be, timer
        self._layers: dict[str, LayerWeights] = {}

    def run(self, job: Job) -> list[Sample]:
        cfg, be, timer, sh = self.cfg, self.be, self.timer, job.shape
        dev, dt = cfg.device, cfg.dtype
        if job.kind == "token":
            lw = self._layers.get(job.model.name)
            if lw is None:
                lw = self._layers[job.model.name] = LayerWeights(job.model, dev, dt, cfg.seed)
            return measure_token_level(lw, sh.tokens, timer, f"shard/{job.shard}", be.page_size)
        if job.kind == "lm_head":
            t = timer.measure(lm_head_closure(job.model, sh.tokens, dev, dt, cfg.seed))
            return [Sample("lm_head", sh, t, job.model, "", "torch.matmul")]
        if job.kind == "prefill_attn":
            return [measure_prefill(job.model, sh.n_new, sh.n_ctx, sh.seqs, be, timer, dev, dt)]
        if job.kind == "decode_attn":
            return [measure_decode(job.model, sh.seqs, sh.n_ctx, be, timer, dev, dt)]
        if job.kind == "duplex":
            return [measure_duplex(sh.nbytes, sh.copies, timer, dev, job.model)]
        return [measure_copy(job.kind, sh.nbytes, sh.copies, timer, dev, job.model, sh.pinned)]


def _probe_flashinfer(cfg: MeasureConfig, be: AttentionBackend) -> str | None:  # GPU-only
    """Run one tiny prefill and decode through FlashInfer; the error text if its API differs."""
    from .measure_attention import flashinfer_decode_closure, flashinfer_prefill_closure

    try:
        flashinfer_prefill_closure(cfg.model, 16, 16, 1, be, cfg.device, cfg.dtype)()
        flashinfer_decode_closure(cfg.model, 2, 32, be, cfg.device, cfg.dtype)()
    except Exception as exc:  # version skew in plan/run signatures, missing JIT toolchain, ...
        return f"{type(exc).__name__}: {exc}"
    return None


def _h2d_bw(samples: list[Sample]) -> float | None:
    big = [s for s in samples if s.term == "h2d" and s.shape.copies == 1 and s.shape.pinned]
    if not big:
        return None
    s = max(big, key=lambda x: x.shape.nbytes)
    return s.shape.nbytes / s.time.median_s
