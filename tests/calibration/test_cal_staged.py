"""KV staged through host memory (``calibration.measure_staged``, ``calibration.validate_staged``):
the comparison on a hand-worked two-layer case, the measuring script's CPU paths, and the error
bounds of the committed H200 run against ``HostStagedLink``'s price. No GPU; torch where noted."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from calibration.measure_staged import COLUMNS, VARIANT_BY_NAME, VARIANTS, plan
from calibration.validate_staged import compare, format_markdown, main, read_staged_csv
from costmodels import CopyTerm, get_model, load_profile

MEASURED = Path(__file__).resolve().parents[2] / "calibration" / "measured"
H200_CSV = MEASURED / "staged-h200-llama3-8b.csv"
H100_CSV = MEASURED / "staged-h100-sxm-llama3-8b.csv"

# Two layers, 2 KV heads of 64 dims in bf16: 512 B a token of one layer, 8192 B a page of one layer.
TWO_LAYER_YAML = """\
name: two-layer-test
num_layers: 2
hidden_size: 128
num_heads: 2
num_kv_heads: 2
head_dim: 64
intermediate_size: 256
vocab_size: 1024
dtype_bytes: 2
gated_mlp: true
source: tests/calibration (a hand-worked staged transfer)
"""


@pytest.fixture
def two_layer(tmp_path):
    p = tmp_path / "two.yaml"
    p.write_text(TWO_LAYER_YAML)
    return get_model(p)


@pytest.fixture
def simple_profile():
    """D2H: 2 us a copy, 0.5 GB/s; H2D: 1 us a copy, 1 GB/s; no start or issue terms; the duplex
    rate 0.75 GB/s, so each direction keeps half its rate while both run."""
    base = load_profile("h200-llama3-8b")
    return dataclasses.replace(
        base,
        h2d=CopyTerm(latency_s=1e-6, bw_Bps=1e9),
        d2h=CopyTerm(latency_s=2e-6, bw_Bps=0.5e9),
        overlap=dataclasses.replace(base.overlap, duplex_Bps=0.75e9),
    )


def _write(path: Path, model_name: str, cases: dict[str, list[float]]) -> Path:
    """A measure_staged CSV of 32 tokens (2 pages of 8192 B a layer) per variant, with these
    per-layer ready times (the total is the last); the D2H ends are not compared."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for name, ready in cases.items():
            v = VARIANT_BY_NAME[name]
            calls = 2 if v.per_page else 1
            for i, r in enumerate(ready):
                row = dict.fromkeys(COLUMNS, "")
                row.update(
                    variant=name,
                    layerwise=int(v.layerwise),
                    per_layer_copies=int(v.per_layer_copies),
                    threads=v.threads,
                    tokens=32,
                    layers=2,
                    page_tokens=16,
                    layer_page_bytes=8192,
                    pages_per_layer=2,
                    layer_bytes=16384,
                    calls_per_layer=calls,
                    layer=i,
                    ready_min_s=r,
                    ready_median_s=r,
                    ready_max_s=r,
                    d2h_end_median_s=r / 2,
                    total_min_s=ready[-1],
                    total_median_s=ready[-1],
                    total_max_s=ready[-1],
                    host_issue_median_s=1e-6,
                    reps=3,
                    model=model_name,
                    device_name="hand",
                )
                w.writerow([row[c] for c in COLUMNS])
    return path


def test_hand_worked_two_layer_case(tmp_path, two_layer, simple_profile) -> None:
    # Per page: D2H of a layer = 2 calls x 2 us + 16384 B / 0.5 GB/s = 36.768 us, H2D = 2 x 1 us +
    # 16384 B / 1 GB/s = 18.384 us. Layer 0 in at 36.768 + 18.384 = 55.152 us; layer 1 sent at
    # 73.536 us, in at max(73.536, 55.152) + 18.384 = 91.92 us.
    # One call per layer (as issued, and as the link prices it under per_layer_copies): 34.768
    # and 17.384 us: 52.152 and 86.92 us.
    # At the duplex share 0.5 each layer's bytes count twice: 67.536 and 33.768 us, so 101.304 and
    # max(135.072, 101.304) + 33.768 = 168.84 us.
    # Whole, one call per layer: D2H 2 x 2 + 32768 / 0.5e9 = 69.536 us, H2D 2 x 1 + 32.768 =
    # 34.768 us: every layer at 104.304 us (no overlap, so no duplex share).
    path = _write(
        tmp_path / "hand.csv",
        "two-layer-test",
        {
            "layerwise-page": [50e-6, 100e-6],
            "layerwise-layer": [50e-6, 80e-6],
            "whole-layer": [70e-6, 104.304e-6],
        },
    )
    cases = read_staged_csv(path)
    assert [(c.variant, c.layer_bytes, c.calls_per_layer) for c in cases] == [
        ("layerwise-page", 16384, 2),
        ("layerwise-layer", 16384, 1),
        ("whole-layer", 16384, 1),
    ]
    page, layer, whole = compare(cases, simple_profile, two_layer)
    us = 1e-6
    np.testing.assert_allclose(page.link_s, [55.152 * us, 91.92 * us], rtol=1e-12)
    np.testing.assert_allclose(page.as_issued_s, page.link_s, rtol=1e-12)
    np.testing.assert_allclose(layer.link_s, [52.152 * us, 86.92 * us], rtol=1e-12)
    np.testing.assert_allclose(layer.as_issued_s, layer.link_s, rtol=1e-12)
    np.testing.assert_allclose(layer.duplex_s, [101.304 * us, 168.84 * us], rtol=1e-12)
    np.testing.assert_allclose(whole.link_s, [104.304 * us] * 2, rtol=1e-12)
    np.testing.assert_allclose(whole.duplex_s, whole.link_s, rtol=1e-12)
    assert page.total_error == pytest.approx(-0.0808, abs=1e-12)  # 91.92 against 100
    assert page.first_error == pytest.approx(55.152 / 50 - 1, abs=1e-12)
    assert layer.as_issued_error == pytest.approx(86.92 / 80 - 1, abs=1e-12)
    assert whole.total_error == pytest.approx(0.0, abs=1e-12)
    text = format_markdown([page, layer, whole], "simple")
    assert "| 32 | layerwise-page | 100.0 (100.0) | 91.9 | -8.1% |" in text
    assert "- whole-layer: +0.0% .. +0.0% (1 sizes)" in text


def test_command_line_writes_the_markdown(tmp_path, two_layer, simple_profile, capsys) -> None:
    path = _write(tmp_path / "hand.csv", "two-layer-test", {"whole-page": [100e-6, 150e-6]})
    yaml_model = tmp_path / "two.yaml"
    prof = tmp_path / "simple.yaml"
    from costmodels import save_profile

    save_profile(simple_profile, prof)
    out = tmp_path / "table.md"
    assert main([str(path), str(prof), "--model", str(yaml_model), "--out", str(out)]) == 0
    # Whole, per page: D2H 4 calls x 2 us + 65.536 us = 73.536 us, H2D 4 + 32.768 = 36.768 us.
    assert "| 32 | whole-page | 150.0 (150.0) | 110.3 | -26.5% |" in out.read_text()
    assert capsys.readouterr().out == out.read_text()


def test_a_csv_missing_a_layer_is_refused(tmp_path) -> None:
    path = _write(tmp_path / "hand.csv", "two-layer-test", {"whole-page": [1e-4, 2e-4]})
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="lacks layers"):
        read_staged_csv(path)


# --- the measuring script without a GPU ------------------------------------------------------------
def test_plan_sizes_pages_and_calls() -> None:
    m = get_model("llama-3-8b")
    cases = plan(m, (1024, 256))
    assert [c.tokens for c in cases] == [256] * len(VARIANTS) + [1024] * len(VARIANTS)
    c = next(c for c in cases if c.tokens == 1024 and c.variant.name == "layerwise-page")
    assert (c.layers, c.layer_page_bytes, c.pages, c.layer_bytes) == (32, 65536, 64, 64 << 16)
    assert c.calls_per_layer == 64
    assert next(c for c in cases if c.variant.name == "whole-layer").calls_per_layer == 1
    with pytest.raises(ValueError, match="multiple of the page"):
        plan(m, (100,))


def test_cpu_stand_in_runs_every_variant_and_writes_the_csv(tmp_path, two_layer) -> None:
    pytest.importorskip("torch")
    from calibration.measure_staged import CpuStandIn, measure, write_csv

    cases = plan(two_layer, (32, 64))
    results = measure(cases, CpuStandIn(), reps=3, warmup=1)  # each checks dst == src once
    assert len(results) == len(cases)
    for r in results:
        assert r.ready_s.shape == (3, 2) and r.d2h_end_s.shape == (3, 2)
        assert (r.ready_s > 0).all() and (r.issue_s > 0).all()
        assert (r.ready_s[:, 0] >= r.d2h_end_s[:, 0]).all()  # a layer's H2D after its D2H
    path = write_csv(results, tmp_path / "s.csv", two_layer, {"device_name": "cpu"})
    back = read_staged_csv(path)
    assert [(c.variant, c.tokens) for c in back] == [(c.variant.name, c.tokens) for c in cases]
    assert all(c.reps == 3 and c.model == "two-layer-test" for c in back)


def test_main_without_cuda_exits_non_zero(tmp_path, capsys) -> None:
    from calibration.measure_staged import main as measure_main

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert measure_main(["--device", "cuda", "--out", str(tmp_path / "x.csv")]) == 2
    assert "needs CUDA" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


# --- the committed H200 run ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def h200_points():
    points = compare(read_staged_csv(H200_CSV), "h200-llama3-8b")
    return {(p.case.variant, p.case.tokens): p for p in points}


def test_h200_run_holds_every_case(h200_points) -> None:
    assert set(h200_points) == {
        (v.name, t) for v in VARIANTS for t in (256, 1024, 4096, 16384, 32768)
    }
    assert all(
        p.case.reps == 10 and p.case.device_name == "NVIDIA H200" for p in h200_points.values()
    )


def test_h200_whole_copies_one_call_per_layer(h200_points) -> None:
    """No overlap, 32 calls a direction: the profile's copy terms, within 10 % (2.5 % from 1024
    tokens up), on the total, which is the last layer's ready time."""
    for t in (256, 1024, 4096, 16384, 32768):
        p = h200_points[("whole-layer", t)]
        assert p.last_error == p.total_error
        assert abs(p.total_error) <= (0.10 if t == 256 else 0.03), (t, p.total_error)


def test_h200_layer_by_layer_one_call_per_layer(h200_points) -> None:
    """The pipelined two-direction timeline, copy-engine bound. Priced with the calls issued (one
    a layer) it is 6-17 % optimistic, and within 4 % from 1024 tokens up once each copy runs at
    the profile's duplex share (one GPU: both directions on one PCIe link). The link's own price
    under per_layer_copies is the one as issued: a call per layer and direction (it once counted
    min(pages, 32) calls there, 2.8x the measured time at 256 tokens)."""
    for t in (256, 1024, 4096, 16384, 32768):
        p = h200_points[("layerwise-layer", t)]
        assert -0.17 <= p.as_issued_error <= -0.06, (t, p.as_issued_error)
        assert abs(p.duplex_error) <= (0.11 if t == 256 else 0.04), (t, p.duplex_error)
        np.testing.assert_allclose(p.link_s, p.as_issued_s, rtol=1e-12)


def test_h200_per_page_copies_are_host_bound(h200_points) -> None:
    """One call per page: the host's issue rate decides. Whole, the price is 24 % low to 3 % high;
    layer by layer from one host thread (which issues both directions, where the price assumes a
    sender's and a receiver's host) it is 43-58 % optimistic, and 50-59 % with a thread per
    direction in one process; the first layer's price is 1-24 % low on one thread (the profile's
    issue costs, 3.5 us a D2H and 4.1 us an H2D call, against 3.7-5.0 us a call here)."""
    for t in (256, 1024, 4096, 16384, 32768):
        whole = h200_points[("whole-page", t)]
        one = h200_points[("layerwise-page", t)]
        two = h200_points[("layerwise-page-2threads", t)]
        assert -0.25 <= whole.total_error <= 0.03, (t, whole.total_error)
        assert -0.59 <= one.total_error <= -0.42, (t, one.total_error)
        assert -0.25 <= one.first_error <= -0.005, (t, one.first_error)
        assert -0.60 <= two.total_error <= -0.50, (t, two.total_error)
        # The measured time of the single-thread run is its host's issue time (within 2 %).
        assert abs(one.case.total_median_s / one.case.host_issue_median_s - 1) <= 0.02


# --- the committed H100 run ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def h100_points():
    points = compare(read_staged_csv(H100_CSV), "h100-sxm-llama3-8b")
    return {(p.case.variant, p.case.tokens): p for p in points}


def test_h100_copy_engine_bound_cases_agree_with_the_h200s(h100_points) -> None:
    """One call per layer: the whole copies within 3.5 % from 1024 tokens up (-10.8 % at 256),
    the layer-by-layer timeline 6-11 % optimistic from 1024 up (at 256 the host's issue time of
    the 64 calls, 2 ms, decides: -55 %)."""
    assert {p.case.device_name for p in h100_points.values()} == {"NVIDIA H100 80GB HBM3"}
    for t in (256, 1024, 4096, 16384, 32768):
        whole = h100_points[("whole-layer", t)]
        layer = h100_points[("layerwise-layer", t)]
        assert abs(whole.total_error) <= (0.11 if t == 256 else 0.035), (t, whole.total_error)
        if t >= 1024:
            assert -0.11 <= layer.total_error <= -0.06, (t, layer.total_error)
    assert h100_points[("layerwise-layer", 256)].total_error < -0.5


def test_h100_profile_prices_per_page_issue_about_twice_the_measured(h100_points) -> None:
    """Whole per-page copies: the host issued a call in 3.6-3.9 us from 4096 tokens up, the profile
    prices about 7 us, so the price is 80-94 % high from 4096 tokens up (what a refit of the H100
    profile's copy issue terms on these samples would fix)."""
    for t in (4096, 16384, 32768):
        p = h100_points[("whole-page", t)]
        assert 0.8 <= p.total_error <= 0.95, (t, p.total_error)
        calls = 2 * p.case.layers * p.case.calls_per_layer
        assert 3.5e-6 <= p.case.host_issue_median_s / calls <= 4.0e-6
