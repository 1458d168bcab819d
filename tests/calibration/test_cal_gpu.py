"""GPU path (CUDA events, cold L2, pinned copies on streams, overlap, FlashInfer when installed).
Marked gpu: excluded from the default run, and skipped with the reason when CUDA is absent."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)"
    ),
]


def test_cuda_timer_and_l2_flush() -> None:
    from calibration.timing import L2_FLUSH_BYTES, CudaTimer, TimingConfig

    t = CudaTimer(TimingConfig.quick())
    assert t._flush.numel() * 4 == L2_FLUSH_BYTES
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    r = t.measure(lambda: x @ x)
    assert 0 < r.p20_s <= r.median_s <= r.p80_s and r.reps >= 5


def test_cuda_graph_replays_remove_launch_gaps() -> None:
    """Many tiny kernels: eager timing is bound by the host's launch rate, graph replays are not,
    and the replays really run the kernels."""
    import dataclasses

    from calibration.timing import CudaTimer, TimingConfig

    x = torch.zeros(1, device="cuda")

    def many():
        for _ in range(200):
            x.add_(1.0)

    cfg = TimingConfig.quick()
    eager = CudaTimer(dataclasses.replace(cfg, cuda_graph=False)).measure(many)
    before = float(x)
    t = CudaTimer(cfg)
    graph = t.measure(many)
    assert t.eager_fallbacks == []
    done = float(x) - before
    assert done > 0 and done % 200 == 0
    assert graph.median_s < 0.7 * eager.median_s, (graph, eager)


def test_uncapturable_closure_is_timed_eagerly() -> None:
    from calibration.timing import CudaTimer, TimingConfig

    x = torch.randn(1024, device="cuda")
    t = CudaTimer(TimingConfig.quick())
    r = t.measure(lambda: (x * 2).sum().item())  # a host sync cannot be captured
    assert len(t.eager_fallbacks) == 1 and r.median_s > 0
    r2 = t.measure(lambda: x * 2)  # the next closure is captured again
    assert len(t.eager_fallbacks) == 1 and r2.median_s > 0


def test_pinned_copies_and_overlap() -> None:
    from calibration.measure_copy import measure_copy, measure_overlap
    from calibration.measure_gemm import LayerWeights, gemm_closure
    from calibration.timing import CudaTimer, TimingConfig
    from costmodels import get_model

    timer = CudaTimer(TimingConfig.quick())
    m = get_model("llama-3-8b")
    s = measure_copy("h2d", 64 << 20, 1, timer, "cuda", m)
    bw = s.shape.nbytes / s.time.median_s
    assert 2e9 < bw < 1e12
    ov = measure_overlap(gemm_closure(LayerWeights(m, "cuda", "bf16"), 512), bw, timer, "cuda")
    assert ov.epsilon >= 0 and -0.5 < ov.eta <= 1.5 and len(ov.pipeline) == 3
    for p in ov.pipeline:
        assert p.measured_s > 0 and abs(p.predicted_s - p.measured_s) / p.measured_s < 0.5


def test_quick_cuda_calibration(tmp_path) -> None:
    from costmodels import load_profile
    from experiments.cli import main

    out = tmp_path / "gpu.yaml"
    assert (
        main(
            ["calibrate", "--device", "cuda", "--model", "llama-3-8b", "--quick", "--out", str(out)]
        )
        == 0
    )
    p = load_profile(str(out))
    assert p.meta.cuda and p.meta.torch and p.meta.date
    assert {"linear", "prefill_attn", "decode_attn", "h2d", "d2h", "pipeline"} <= set(p.validation)
    assert "CUDA-graph replays" in p.meta.backend and "capture failed" not in p.meta.notes


def test_forward_replay_on_gpu(tmp_path) -> None:
    from experiments.cli import main

    assert (
        main(
            [
                "calibrate",
                "forward",
                "--device",
                "cuda",
                "--profile",
                "h100-public",
                "--model",
                "llama-3-8b",
                "--shapes",
                "50",
                "--quick",
            ]
        )
        == 0
    )
