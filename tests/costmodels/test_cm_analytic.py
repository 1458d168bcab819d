"""Level-0 profiles: the stated efficiencies applied to the datasheet numbers, each with a reason."""

from __future__ import annotations

import pytest

from costmodels import LEVEL0, analytic_profile, get_hardware


def test_every_assumption_states_its_reason() -> None:
    for key, a in LEVEL0.items():
        assert len(a.why) > 40, key
        if key.endswith("_eff"):
            assert 0 < a.value <= 1, key
        else:
            assert 0 <= a.value < 0.01, (
                key
            )  # fixed costs are seconds, microseconds to a millisecond


@pytest.mark.parametrize(
    "gpu, bw, flops, h2d, d2h",
    [
        # H100: H2D is the measured 55.63 GB/s copy-engine figure; D2H has none, so 0.8 x 64 GB/s.
        ("h100-sxm", 3.35e12, 989.4e12, 55.63e9, 0.8 * 64e9),
        # A100: H2D measured 25 GB/s; D2H 0.8 x 32 GB/s.
        ("a100-sxm", 2.039e12, 312e12, 25e9, 0.8 * 32e9),
        # H200: no measurement, both 0.8 x 64 GB/s.
        ("h200", 4.8e12, 989.4e12, 0.8 * 64e9, 0.8 * 64e9),
    ],
)
def test_analytic_constants(gpu, bw, flops, h2d, d2h) -> None:
    p = analytic_profile(get_hardware(gpu))
    assert p.linear.flops == pytest.approx(0.7 * flops)
    assert p.linear.weight_bw_Bps == pytest.approx(0.8 * bw)
    assert p.linear.elementwise_bw_Bps == pytest.approx(0.5 * bw)
    assert p.prefill_attn.flops == pytest.approx(0.4 * flops)
    assert p.decode_attn.kv_bw_Bps == pytest.approx(0.75 * bw)
    assert (p.h2d.bw_Bps, p.d2h.bw_Bps) == (pytest.approx(h2d), pytest.approx(d2h))
    assert p.h2d.latency_s == p.d2h.latency_s == 5e-6
    assert p.overlap.compute_slowdown == pytest.approx(h2d / bw)  # DMA's share of HBM bandwidth
    assert p.overlap.layerwise_h2d is True
    assert (p.linear.tau_s, p.prefill_attn.tau_s, p.decode_attn.tau_s) == (10e-6, 10e-6, 10e-6)
    assert p.step_overhead_s == 0.5e-3
    assert p.meta.gpu == gpu and p.meta.dtype == "bf16" and p.validation == {}
    assert "gemm_flops_eff" in p.meta.notes
