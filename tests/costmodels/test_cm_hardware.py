"""Hardware specs: datasheet and measured figures, aliases, a source for every number."""

from __future__ import annotations

import pytest

from costmodels import available_hardware, get_hardware
from costmodels.hardware import HardwareSpec, hardware_aliases


@pytest.mark.parametrize(
    "alias, name",
    [
        ("a100", "a100-sxm"),
        ("A100-SXM", "a100-sxm"),
        ("h100", "h100-sxm"),
        ("H100-SXM", "h100-sxm"),
        ("h200", "h200"),
        ("h200-sxm", "h200"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert get_hardware(alias).name == name


def test_available() -> None:
    assert available_hardware() == ["a100-sxm", "h100-sxm", "h200"]
    assert "h100" in hardware_aliases("h100-sxm")


# Public figures (sources in costmodels/data/hardware.yaml), transcribed:
# (HBM bytes, HBM B/s, dense BF16, link/direction, H2D measured, D2H measured)
NOTES_S3 = {
    "a100-sxm": (80e9, 2.039e12, 312e12, 32e9, 25e9, None),
    "h100-sxm": (80e9, 3.35e12, 989.4e12, 64e9, 55.63e9, None),
    "h200": (141e9, 4.8e12, 989.4e12, 64e9, None, None),
}


@pytest.mark.parametrize("name", sorted(NOTES_S3))
def test_values_match_notes(name: str) -> None:
    hw = get_hardware(name)
    assert (
        hw.hbm_bytes,
        hw.hbm_bw_Bps,
        hw.dense_bf16_flops,
        hw.host_link_Bps,
        hw.h2d_measured_Bps,
        hw.d2h_measured_Bps,
    ) == NOTES_S3[name]
    assert hw.copy_latency_s == 5e-6


@pytest.mark.parametrize("name", sorted(NOTES_S3))
def test_every_number_has_a_source(name: str) -> None:
    hw = get_hardware(name)
    numeric = [
        "hbm_bytes",
        "hbm_bw_Bps",
        "dense_bf16_flops",
        "host_link_Bps",
        "h2d_measured_Bps",
        "d2h_measured_Bps",
        "copy_latency_s",
        "nvlink_per_direction_Bps",
        "allreduce_latency_s",
        "sm_count",
        "l2_bytes",
    ]
    assert sorted(hw.sources) == sorted(numeric)
    assert all(len(s) > 10 for s in hw.sources.values())


def test_sm_counts() -> None:
    # The width of a wave of CTAs (architecture whitepapers): A100 108, H100/H200 SXM5 132.
    assert [get_hardware(n).sm_count for n in ("a100", "h100", "h200")] == [108, 132, 132]


def test_ridge_points_match_notes() -> None:
    # dense BF16 / HBM bandwidth: A100 ~153, H100 ~295, H200 ~206 FLOP/byte
    assert get_hardware("a100").ridge_flop_per_byte == pytest.approx(153, abs=1)
    assert get_hardware("h100").ridge_flop_per_byte == pytest.approx(295, abs=1)
    assert get_hardware("h200").ridge_flop_per_byte == pytest.approx(206, abs=1)


def test_unknown_hardware() -> None:
    with pytest.raises(ValueError, match="unknown hardware 'b200'.*h100-sxm"):
        get_hardware("b200")


HW = """\
name: l40s
hbm_bytes: 48e9
hbm_bw_Bps: 864e9
dense_bf16_flops: 362e12
host_link_Bps: 32e9
h2d_measured_Bps: null
d2h_measured_Bps: null
copy_latency_s: 5e-6
sources:
  hbm_bytes: datasheet
  hbm_bw_Bps: datasheet
  dense_bf16_flops: datasheet
  host_link_Bps: PCIe4 x16
  h2d_measured_Bps: none
  d2h_measured_Bps: none
  copy_latency_s: judgment
"""


def test_hardware_file(tmp_path) -> None:
    path = tmp_path / "l40s.yaml"
    path.write_text(HW)
    hw = get_hardware(str(path))
    assert isinstance(hw, HardwareSpec) and hw.hbm_bw_Bps == 864e9


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda s: s.replace("  copy_latency_s: judgment\n", ""), "sources.copy_latency_s"),
        (lambda s: s.replace("hbm_bw_Bps: 864e9", "hbm_bw_Bps: 0"), "hbm_bw_Bps"),
        (lambda s: s + "nvlink_Bps: 1\n", "nvlink_Bps"),
        (
            lambda s: s.replace("copy_latency_s: 5e-6\n", "copy_latency_s: 5e-6\nsm_count: 2\n"),
            "sources.sm_count",
        ),
        (
            lambda s: s.replace("copy_latency_s: 5e-6\n", "copy_latency_s: 5e-6\nsm_count: 1.5\n"),
            "sm_count",
        ),
    ],
)
def test_hardware_file_errors(tmp_path, edit, key) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(edit(HW))
    with pytest.raises(ValueError) as exc:
        get_hardware(str(path))
    assert str(path) in str(exc.value) and f"'{key}'" in str(exc.value)
