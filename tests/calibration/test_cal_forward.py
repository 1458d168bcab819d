"""validate_forward: shapes recorded from a simulation are rebuilt exactly and replayed as one-layer
forwards (on the CPU here; the same code runs on a GPU)."""

from __future__ import annotations

import math

import pytest

from calibration.validate_forward import RecordingCostModel, replay_batch, select_shapes
from costmodels import BatchShape, attention_pairs, get_model, load_profile


def _recorded(model, profile, sessions: int = 30, max_tokens: int = 1024) -> list[BatchShape]:
    from sim import EngineConfig, MemoryConfig, simulate
    from traces import SyntheticConfig, generate_synthetic

    rec = RecordingCostModel(model, profile)
    trace = generate_synthetic(SyntheticConfig(sessions=sessions, seed=3, max_context_tokens=2048))
    simulate(
        trace.sessions,
        rec,
        MemoryConfig(gpu_kv_gb=0.05),
        EngineConfig(max_batch_tokens=max_tokens),
        seed=3,
    )
    return rec.shapes


@pytest.mark.parametrize(
    "shape",
    [
        BatchShape.prefill(100, 0),
        BatchShape.prefill(7, 993),
        BatchShape.prefill(300, 40) + BatchShape.prefill(301, 40) + BatchShape.prefill(300, 40),
        BatchShape.decode(5, 5 * 812 + 3),
        BatchShape.prefill(64, 128) + BatchShape.decode(9, 9000),
    ],
)
def test_replay_batch_keeps_the_sums(shape) -> None:
    rb = replay_batch(shape)
    assert sum(n * c for n, _, c in rb.prefill) == shape.prefill_tokens
    assert sum(c for *_, c in rb.prefill) == shape.prefill_seqs
    assert sum(ctx * c for ctx, c in rb.decode) == shape.decode_ctx_tokens
    assert sum(c for _, c in rb.decode) == shape.decode_seqs
    pairs = sum(c * attention_pairs(n, ctx) for n, ctx, c in rb.prefill)
    assert pairs == pytest.approx(shape.prefill_pairs, rel=0.01, abs=shape.prefill_tokens)


def test_recording_cost_model_sees_simulated_iterations(tiny_model_path) -> None:
    shapes = _recorded(get_model(str(tiny_model_path)), load_profile("h100-sxm"))
    assert len(shapes) > 100
    kinds = {(s.prefill_seqs > 0, s.decode_seqs > 0) for s in shapes}
    assert {
        (True, False),
        (False, True),
        (True, True),
    } <= kinds  # prefill, decode and mixed batches
    chosen, skipped = select_shapes(shapes, 60, max_tokens=1024, max_kv_tokens=1 << 20)
    assert 50 <= len(chosen) <= 60 and skipped == len(shapes) - len(chosen)


@pytest.mark.slow
def test_forward_replay_on_cpu(cpu_calibration, tiny_model_path, tmp_path) -> None:
    pytest.importorskip("torch")
    import dataclasses

    from calibration.measure_attention import AttentionBackend
    from calibration.timing import TimingConfig, make_timer
    from calibration.validate_forward import format_report, replay, write_points_csv

    _, path, _, _ = cpu_calibration
    profile = load_profile(str(path))
    model = dataclasses.replace(get_model(str(tiny_model_path)), dtype_bytes=4)  # measured in fp32
    shapes = _recorded(model, profile, max_tokens=512)
    # Same cache-flush stand-in as the calibration (the CLI default) so both see cold caches.
    timer = make_timer(
        "cpu",
        TimingConfig(warmup_s=0.002, rep_s=0.01, min_reps=3, max_reps=10, cpu_flush_bytes=64 << 20),
    )
    rep = replay(
        shapes, model, profile, "cpu", "fp32", timer, AttentionBackend("sdpa"), n=55, max_tokens=512
    )
    assert rep.overall.n >= 50
    assert {k for k, _ in rep.by_kind} >= {"prefill", "decode"}
    assert all(p.measured_s > 0 and p.predicted_s > 0 for p in rep.points)
    # A sanity bound on a shared CPU (9 % was measured here; gross unit errors would be >> 100 %).
    assert math.isfinite(rep.overall.mape) and rep.overall.mape < 1.0
    text = format_report(rep)
    assert "one-layer forwards on cpu" in text and "MAPE" in text
    # The per-shape CSV: one row per replayed shape, the predicted terms add up to the prediction.
    import pandas as pd

    df = pd.read_csv(write_points_csv(rep, profile, model, tmp_path / "points.csv"))
    assert len(df) == rep.overall.n
    terms = df[
        ["pred_linear_s", "pred_elementwise_s", "pred_prefill_attn_s", "pred_decode_attn_s"]
    ].sum(axis=1)
    assert (terms / df["predicted_s"]).sub(1).abs().max() < 1e-4
    assert (df["pred_decode_attn_s"] > 0).eq(df["decode_seqs"] > 0).all()
    ape = (df["predicted_s"] - df["measured_s"]).abs() / df["measured_s"]
    assert abs(ape.mean() - rep.overall.mape) < 1e-3
