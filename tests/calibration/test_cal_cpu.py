"""`kvsim calibrate --device cpu --quick` end to end: a valid profile, a validation block, the raw
samples, and a profile that changes the simulator's timings. Needs torch (CPU build)."""

from __future__ import annotations

import math

import pytest

from costmodels import CostModel, get_model, load_profile, save_profile

pytest.importorskip("torch")


@pytest.mark.slow
def test_quick_cpu_calibration_writes_a_valid_profile(cpu_calibration, tiny_model_path) -> None:
    rc, path, raw, out = cpu_calibration
    assert rc == 0, out
    p = load_profile(str(path))  # strict loader: every key and range checked
    assert p.name == "cpu-tiny"
    assert p.meta.gpu.startswith("cpu: ") and p.meta.dtype == "fp32" and p.meta.torch
    assert "torch SDPA" in p.meta.backend and "per-sequence" in p.meta.backend
    assert (
        "timing: perf_counter, 64 MB flush" in p.meta.backend and "CUDA-graph" not in p.meta.backend
    )
    assert p.meta.date and p.meta.page_size == 16
    # Every measured term is fitted (no constant left at the analytic default) and validated.
    assert {"linear", "elementwise", "prefill_attn", "decode_attn", "h2d", "d2h"} <= set(
        p.validation
    )
    for v in p.validation.values():
        assert (
            v.n >= 1 and math.isfinite(v.mape) and ("held out" in v.split or "transfer" in v.split)
        )
    # CPU: overlap not measurable, said so; copies are host memcpy, said so.
    assert p.overlap.compute_slowdown == 0.0 and p.overlap.layerwise_h2d is False
    assert "host memcpy" in p.meta.notes and "overlap" in p.meta.notes
    assert "pensieve tiny-test n_new=1: alpha=" in p.meta.notes
    # The printed table has both splits.
    assert "random" in out and "extrapolation" in out and "profile:" in out


@pytest.mark.slow
def test_raw_samples_round_trip(cpu_calibration) -> None:
    from calibration.samples_io import read_samples_csv

    _, _, raw, _ = cpu_calibration
    samples = read_samples_csv(raw)
    terms = {s.term for s in samples}
    assert {
        "gemm",
        "elementwise",
        "linear",
        "prefill_attn",
        "decode_attn",
        "h2d",
        "d2h",
        "lm_head",
    } <= terms
    assert all(
        s.time.median_s > 0 and s.time.p20_s <= s.time.median_s <= s.time.p80_s for s in samples
    )
    assert {s.model.dtype_bytes for s in samples} == {4}  # fp32 on the CPU
    # The layer and its /2 and /4 shards (at /4 its two KV heads are one, replicated, as
    # ModelSpec.shard splits them).
    assert {s.model.num_heads for s in samples if s.term == "gemm"} == {4, 2, 1}


@pytest.mark.slow
def test_refuses_to_overwrite_without_force(cpu_calibration, tiny_model_path, capsys) -> None:
    from experiments.cli import main

    _, path, _, _ = cpu_calibration
    rc = main(
        [
            "calibrate",
            "--device",
            "cpu",
            "--model",
            str(tiny_model_path),
            "--out",
            str(path),
            "--quick",
        ]
    )
    assert rc == 2 and "exists" in capsys.readouterr().err


def test_cuda_request_without_cuda_is_an_input_error(tmp_path, tiny_model_path, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    from experiments.cli import main

    rc = main(
        [
            "calibrate",
            "--device",
            "cuda",
            "--model",
            str(tiny_model_path),
            "--out",
            str(tmp_path / "x.yaml"),
        ]
    )
    assert rc == 2 and "torch.cuda.is_available() is False" in capsys.readouterr().err


def _ttfts(cost) -> list[float]:
    from sim import EngineConfig, MemoryConfig, simulate
    from traces import SyntheticConfig, generate_synthetic

    trace = generate_synthetic(SyntheticConfig(sessions=12, seed=5, max_context_tokens=4096))
    res = simulate(
        trace.sessions, cost, MemoryConfig(gpu_kv_gb=0.25), EngineConfig(max_batch_tokens=4096)
    )
    return list(res.turns["ttft_s"])


@pytest.mark.slow
def test_cpu_profile_changes_simulated_ttfts(cpu_calibration, tiny_model_path, tmp_path) -> None:
    _, path, _, _ = cpu_calibration
    model = get_model(str(tiny_model_path))
    calibrated = _ttfts(CostModel(model, load_profile(str(path))))
    analytic = _ttfts(CostModel(model, load_profile("h100-sxm")))
    assert len(calibrated) == len(analytic) > 20
    assert calibrated != analytic
    # A CPU is far slower than an H100: the same trace's first tokens come much later.
    assert sorted(calibrated)[len(calibrated) // 2] > 5 * sorted(analytic)[len(analytic) // 2]
    # And the profile survives a save/load round trip unchanged.
    again = tmp_path / "again.yaml"
    save_profile(load_profile(str(path)), again)
    assert load_profile(str(again)) == load_profile(str(path))


class _CountingTimer:
    """Runs each closure once and returns the k-th measurement as 10**k s, so sums show."""

    def __init__(self) -> None:
        self.calls = 0

    def measure(self, fn, graph=None):
        from calibration.samples import Timing

        fn()
        t = 10.0**self.calls
        self.calls += 1
        return Timing(t, t, t, 1)


def test_the_linear_sample_is_timed_as_one_closure_running_both_parts(
    tiny_model_path, monkeypatch
) -> None:
    # Timed apart, the GEMM and elementwise closures each start cold; inside a layer they run
    # back to back, so the linear sample is its own timing, not the sum of the other two.
    import torch

    from calibration.measure_gemm import LayerWeights, linear_closure, measure_token_level

    lw = LayerWeights(get_model(tiny_model_path), "cpu", "fp32")
    gemm, ew, linear = measure_token_level(lw, 8, _CountingTimer(), "shard/1")
    assert (gemm.term, ew.term, linear.term) == ("gemm", "elementwise", "linear")
    assert (gemm.time.median_s, ew.time.median_s, linear.time.median_s) == (1.0, 10.0, 100.0)
    assert linear.kernel.endswith("one graph")

    matmuls, norms = [], []
    real_matmul, real_norm = torch.matmul, torch.nn.functional.rms_norm
    monkeypatch.setattr(torch, "matmul", lambda *a: matmuls.append(1) or real_matmul(*a))
    monkeypatch.setattr(
        torch.nn.functional, "rms_norm", lambda *a, **k: norms.append(1) or real_norm(*a, **k)
    )
    linear_closure(lw, 8)()
    assert (len(matmuls), len(norms)) == (4, 2)
