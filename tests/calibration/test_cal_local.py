"""Measurements -> profile for a GPU run, without a GPU: synthetic samples generated from known
constants go through the same assembly as `kvsim calibrate --device cuda` (fits, datasheet
ceilings, overlap and pipeline validation, meta). No torch needed."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.env import EnvInfo
from calibration.fit import ElementwiseFit, GemmFit, predict
from calibration.grids import quick_grid
from calibration.local import calibrate, recognised_gpu
from calibration.measure import Measurements
from calibration.measure_attention import AttentionBackend
from calibration.measure_copy import OverlapResult, PipelinePoint
from calibration.samples import Sample, Shape, Timing, shard
from costmodels import CopyTerm, CostModel, DecodeAttnTerm, PrefillAttnTerm, get_model

TRUE = {
    "gemm": GemmFit(20e-6, 2.6e12, 6.5e14),
    "elementwise": ElementwiseFit(8e-6, 1.8e12),
    "prefill_attn": PrefillAttnTerm(12e-6, 3.0e14, 2e-6),
    "decode_attn": DecodeAttnTerm(9e-6, 0.1e-6, 2.4e12),
    "h2d": CopyTerm(6e-6, 50e9),
    "d2h": CopyTerm(6e-6, 48e9),
}


def _measurements(device_name: str) -> Measurements:
    rng = np.random.default_rng(7)
    model = get_model("llama-3-8b")
    g = quick_grid()
    shapes: list[tuple[str, Shape, object]] = []
    for k in (1, 2, 4):
        for n in g.gemm_tokens:
            for term in ("gemm", "elementwise"):
                shapes.append((term, Shape(tokens=n), shard(model, k)))
    shapes += [("prefill_attn", Shape(n_new=a, n_ctx=c, seqs=s), model) for a, c, s in g.prefill]
    shapes += [("decode_attn", Shape(n_ctx=c, seqs=b), model) for b, c in g.decode]
    shapes += [
        (d, Shape(nbytes=b, copies=c), model) for d in ("h2d", "d2h") for b, c in g.copy_shapes()
    ]
    samples = []
    for term, shape, m in shapes:
        t = float(predict(term, TRUE[term], [Sample(term, shape, Timing.published(1.0), m)])[0])
        samples.append(
            Sample(term, shape, Timing.published(t * float(np.exp(rng.normal(0, 0.01)))), m)
        )
    for n in g.gemm_tokens:  # linear = gemm + elementwise of the same row
        m = model
        parts = [
            s
            for s in samples
            if s.model is m and s.shape == Shape(tokens=n) and s.term in ("gemm", "elementwise")
        ]
        samples.append(
            Sample(
                "linear", Shape(tokens=n), Timing.published(sum(p.time.median_s for p in parts)), m
            )
        )
    pipe = tuple(
        PipelinePoint(8, r * 1e-3, 1e-3, 8e-3 * max(1, r) * 1.02, 8e-3 * max(1, r))
        for r in (0.25, 1, 4)
    )
    ov = OverlapResult(1e-3, 1e-3, 1.1e-3, 1.02e-3, 0.9, 0.02, pipe)
    env = EnvInfo(
        "cuda",
        device_name,
        "2.x",
        "12.4",
        "550.54",
        None,
        "2025-06-01",
        clocks="1980 MHz, 1980 MHz, 300 W, 40 C",
    )
    return Measurements(
        tuple(samples), model, "bf16", env, AttentionBackend("sdpa"), "quick", ov, (), 60.0
    )


def test_gpu_measurements_become_a_profile() -> None:
    res = calibrate(_measurements("NVIDIA H100 80GB HBM3"), "my-h100", source="fit: test")
    p = res.profile
    assert p.linear.flops == pytest.approx(6.5e14, rel=0.03)
    assert p.linear.weight_bw_Bps == pytest.approx(2.6e12, rel=0.05)
    assert p.linear.tau_s == pytest.approx(28e-6, rel=0.2)  # GEMM tau + elementwise tau
    assert p.decode_attn.kv_bw_Bps == pytest.approx(2.4e12, rel=0.03)
    assert p.prefill_attn.flops == pytest.approx(3.0e14, rel=0.03)
    assert p.h2d.bw_Bps == pytest.approx(50e9, rel=0.03) and p.h2d.latency_s == pytest.approx(
        6e-6, rel=0.2
    )
    assert p.overlap.compute_slowdown == pytest.approx(0.02) and p.overlap.layerwise_h2d is True
    assert p.validation["pipeline"].n == 3 and p.validation["pipeline"].mape == pytest.approx(
        0.02, abs=1e-3
    )
    assert {"linear", "elementwise", "prefill_attn", "decode_attn", "h2d", "d2h"} <= set(
        p.validation
    )
    assert res.from_base == ("step_overhead_s",)
    assert (
        p.meta.gpu == "NVIDIA H100 80GB HBM3"
        and p.meta.cuda == "12.4"
        and p.meta.driver == "550.54"
    )
    assert "nvidia-smi" in p.meta.notes and "eta=0.900" in p.meta.notes
    assert CostModel(get_model("llama-3-8b"), p).decode_step_s(8, 8000) > 0


def test_unknown_gpu_gets_no_ceilings_and_says_so() -> None:
    assert (
        recognised_gpu("NVIDIA A100-SXM4-80GB") == "a100-sxm"
        and recognised_gpu("NVIDIA L40S") is None
    )
    p = calibrate(_measurements("NVIDIA L40S"), "l40s").profile
    assert "not in costmodels/data/hardware.yaml" in p.meta.notes
