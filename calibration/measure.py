"""Run a calibration sweep: every term of one layer of ``model`` over a ``Grid``, on one device.

Returns typed ``Measurements`` (samples, overlap, environment, what was skipped and why). The
device-specific parts live in measure_gemm / measure_attention / measure_copy; this module only
orders the shapes (shuffled), picks the backend and records reasons for anything left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from costmodels import ModelSpec

from .env import EnvInfo, collect, flashinfer_version
from .grids import Grid, shuffled
from .measure_attention import AttentionBackend, measure_decode, measure_prefill
from .measure_copy import OverlapResult, measure_copy, measure_overlap
from .measure_gemm import (
    LayerWeights,
    dtype_bytes,
    gemm_closure,
    lm_head_closure,
    measure_token_level,
)
from .samples import Sample, Shape, shard, with_dtype_bytes
from .timing import TimingConfig, make_timer

TERMS = ("linear", "prefill_attn", "decode_attn", "h2d", "d2h", "lm_head", "overlap")
CPU_LM_HEAD_LIMIT = 1 << 30  # bytes: a bigger LM head is left out on a CPU (minutes per shape)


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


@dataclass(frozen=True, slots=True)
class Measurements:
    samples: tuple[Sample, ...]
    model: ModelSpec  # the measured model, bytes per element as measured
    dtype: str
    env: EnvInfo
    backend: AttentionBackend
    grid: str
    overlap: OverlapResult | None
    skipped: tuple[str, ...]  # what was not measured, and why
    wall_s: float
    timing: str = ""  # how kernels were timed (CudaTimer/CpuTimer.describe())


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


def run_measurements(cfg: MeasureConfig, log: Callable[[str], None] = print) -> Measurements:
    import torch

    t0 = time.perf_counter()
    skipped: list[str] = []
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
    model = with_dtype_bytes(cfg.model, dtype_bytes(cfg.dtype))
    timer = make_timer(device, cfg.timing)
    be = _backend(cfg, skipped)
    env = collect(device)
    g = cfg.grid
    samples: list[Sample] = []
    torch.manual_seed(cfg.seed)

    with torch.inference_mode():
        if "linear" in cfg.terms:
            shards = [k for k in g.gemm_shards if _divisible(model, k)]
            skipped += [
                f"gemm shard /{k}: heads or MLP width not divisible"
                for k in g.gemm_shards
                if k not in shards
            ]
            jobs = shuffled([(k, n) for k in shards for n in g.gemm_tokens], cfg.seed)
            layers = {k: LayerWeights(shard(model, k), device, cfg.dtype, cfg.seed) for k in shards}
            log(f"token-level ops: {len(jobs)} shapes over shards {shards}")
            for k, n in jobs:
                samples += measure_token_level(layers[k], n, timer, f"shard/{k}", g.page_size)
        if "lm_head" in cfg.terms and g.lm_head_rows:
            head_bytes = model.lm_head_params * model.dtype_bytes
            if device == "cpu" and head_bytes > CPU_LM_HEAD_LIMIT:
                skipped.append(
                    f"lm_head: {head_bytes / 2**30:.1f} GiB of weights is too slow on a CPU"
                )
            else:
                for rows in g.lm_head_rows:
                    t = timer.measure(lm_head_closure(model, rows, device, cfg.dtype, cfg.seed))
                    samples.append(
                        Sample("lm_head", Shape(tokens=rows), t, model, "", "torch.matmul")
                    )
        if "prefill_attn" in cfg.terms:
            log(f"prefill attention: {len(g.prefill)} shapes ({be.describe()})")
            for n_new, n_ctx, seqs in shuffled(g.prefill, cfg.seed):
                samples.append(
                    measure_prefill(model, n_new, n_ctx, seqs, be, timer, device, cfg.dtype)
                )
        if "decode_attn" in cfg.terms:
            log(f"decode attention: {len(g.decode)} shapes")
            for seqs, ctx in shuffled(g.decode, cfg.seed):
                samples.append(measure_decode(model, seqs, ctx, be, timer, device, cfg.dtype))
        for direction in ("h2d", "d2h"):
            if direction in cfg.terms:
                shapes = g.copy_shapes()
                log(f"{direction} copies: {len(shapes)} (bytes, copies) shapes")
                for nbytes, copies in shuffled(shapes, cfg.seed):
                    samples.append(measure_copy(direction, nbytes, copies, timer, device, model))
        overlap = None
        if "overlap" in cfg.terms:
            if device == "cpu":
                skipped.append(
                    "overlap: no copy engine or streams on a CPU (host memcpy and compute share "
                    "the cores); compute_slowdown and layerwise_h2d are not measured"
                )
            else:  # GPU-only
                bw = _h2d_bw(samples) or 25e9
                lw = LayerWeights(model, device, cfg.dtype, cfg.seed)
                overlap = measure_overlap(gemm_closure(lw, 512), bw, timer, device)
    if timer.eager_fallbacks:  # GPU-only
        skipped.append(
            f"CUDA graph capture failed for {len(timer.eager_fallbacks)} closures, timed with "
            f"eager launches instead (first: {timer.eager_fallbacks[0]})"
        )
    return Measurements(
        tuple(samples),
        model,
        cfg.dtype,
        env,
        be,
        g.name,
        overlap,
        tuple(skipped),
        time.perf_counter() - t0,
        timer.describe(),
    )


def _probe_flashinfer(cfg: MeasureConfig, be: AttentionBackend) -> str | None:  # GPU-only
    """Run one tiny prefill and decode through FlashInfer; the error text if its API differs."""
    from .measure_attention import flashinfer_decode_closure, flashinfer_prefill_closure

    try:
        flashinfer_prefill_closure(cfg.model, 16, 16, 1, be, cfg.device, cfg.dtype)()
        flashinfer_decode_closure(cfg.model, 2, 32, be, cfg.device, cfg.dtype)()
    except Exception as exc:  # version skew in plan/run signatures, missing JIT toolchain, ...
        return f"{type(exc).__name__}: {exc}"
    return None


def _divisible(model: ModelSpec, k: int) -> bool:
    return k == 1 or (
        model.num_heads % k == 0
        and model.num_kv_heads % k == 0
        and model.intermediate_size % k == 0
    )


def _h2d_bw(samples: list[Sample]) -> float | None:
    big = [s for s in samples if s.term == "h2d" and s.shape.copies == 1]
    if not big:
        return None
    s = max(big, key=lambda x: x.shape.nbytes)
    return s.shape.nbytes / s.time.median_s
