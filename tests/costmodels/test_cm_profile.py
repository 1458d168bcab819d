"""Profiles: name resolution, YAML round trip, strict validation naming the key and the file."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

import costmodels.profile as profile_mod
from costmodels import (
    Profile,
    TermValidation,
    analytic_profile,
    available_profiles,
    get_hardware,
    load_profile,
    save_profile,
)


@pytest.mark.parametrize("name", ["h100-sxm", "h100", "H100", "analytic-h100-sxm"])
def test_gpu_name_gives_analytic_profile(name: str) -> None:
    p = load_profile(name)
    assert p == analytic_profile(get_hardware("h100-sxm"))
    assert p.name == "analytic-h100-sxm"
    assert p.meta.source.startswith("analytic")
    assert p.validation == {}


def _calibrated() -> Profile:
    base = analytic_profile(get_hardware("a100"))
    return dataclasses.replace(
        base,
        name="fit-a100-test",
        decode_attn=dataclasses.replace(base.decode_attn, per_seq_s=1.5e-7),
        meta=dataclasses.replace(
            base.meta,
            source="fit: test",
            date="2025-06-01",
            torch="2.5.1",
            page_size=16,
            notes=None,
        ),
        validation={
            "decode_attn": TermValidation(
                mape=0.086, max_ape=0.25, n=60, split="random 80/20 by shape"
            )
        },
    )


def test_yaml_round_trip(tmp_path) -> None:
    p = _calibrated()
    path = save_profile(p, tmp_path / "p.yaml")
    q = load_profile(str(path))
    assert q == p
    assert q.validation == p.validation  # compare=False on validation: check it explicitly
    assert q.to_dict() == p.to_dict()
    assert Profile.from_dict(p.to_dict()) == p
    assert path.read_text().startswith("# kvsim cost-model profile")


def test_analytic_round_trip_is_exact(tmp_path) -> None:
    for gpu in ("a100", "h100", "h200"):
        p = analytic_profile(get_hardware(gpu))
        assert load_profile(str(save_profile(p, tmp_path / f"{gpu}.yaml"))).to_dict() == p.to_dict()


def test_hand_written_yaml_accepts_plain_floats_and_dates(tmp_path) -> None:
    d = _calibrated().to_dict()
    text = yaml.safe_dump(d, sort_keys=False)
    text = text.replace("tau_s: 1.0e-05", "tau_s: 5e-6", 1).replace(
        "date: '2025-06-01'", "date: 2025-06-01"
    )
    path = tmp_path / "hand.yaml"
    path.write_text(text)
    p = load_profile(str(path))
    assert p.linear.tau_s == 5e-6
    assert p.meta.date == "2025-06-01"


def _set(d: dict, dotted: str, value) -> None:
    *head, last = dotted.split(".")
    for k in head:
        d = d[k]
    if value is _DELETE:
        del d[last]
    else:
        d[last] = value


_DELETE = object()


def _load_error(tmp_path, d: dict) -> tuple:
    """(the file, its loading error) of profile data ``d`` written as YAML."""
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(ValueError) as exc:
        load_profile(str(path))
    return path, str(exc.value)


@pytest.mark.parametrize(
    "dotted, value, key",
    [
        ("linaer", {}, "linaer"),  # unknown top-level key
        ("linear.tau", 1e-6, "linear.tau"),  # unknown nested key
        ("decode_attn.kv_bw_Bps", _DELETE, "decode_attn.kv_bw_Bps"),  # missing constant
        ("linear.flops", "fast", "linear.flops"),  # wrong type
        ("h2d.bw_Bps", True, "h2d.bw_Bps"),  # bool is not a number
        ("prefill_attn.tau_s", -1e-6, "prefill_attn.tau_s"),  # negative constant
        ("d2h.bw_Bps", 0, "d2h.bw_Bps"),  # a rate must be > 0
        ("step_overhead_s", -0.001, "step_overhead_s"),
        ("overlap.layerwise_h2d", "yes", "overlap.layerwise_h2d"),
        ("overlap.compute_slowdown", [0.1], "overlap.compute_slowdown"),
        ("meta.gpu", _DELETE, "meta.gpu"),
        ("meta.page_size", 0, "meta.page_size"),
        ("meta.clock", "1980 MHz", "meta.clock"),
        (
            "validation.attention",
            {"mape": 0.1, "max_ape": 0.2, "n": 5, "split": "x"},
            "validation.attention",
        ),
        ("validation.decode_attn.mape", -0.1, "validation.decode_attn.mape"),
        ("validation.decode_attn.n", 2.5, "validation.decode_attn.n"),
        ("format_version", 2, "format_version"),
        ("linear", [1, 2], "linear"),
    ],
)
def test_strict_errors_name_key_and_file(tmp_path, dotted, value, key) -> None:
    d = _calibrated().to_dict()
    _set(d, dotted, value)
    path, msg = _load_error(tmp_path, d)
    assert str(path) in msg, msg
    assert f"'{key}'" in msg, msg


def _per_gemm(p: Profile) -> Profile:
    lin = dataclasses.replace(
        p.linear,
        gemm_knee_p=1.7,
        gemm_activation_bytes=True,
        gemm_tiles=((64, 64), (128, 256)),
        gemm_tile_overhead=2.5,
        gemm_wave_tail=0.3,
        gemm_sm_count=108,
    )
    return dataclasses.replace(p, linear=lin)


def test_per_gemm_fields_round_trip_and_old_files_keep_their_layout(tmp_path) -> None:
    p = _per_gemm(_calibrated())
    q = load_profile(str(save_profile(p, tmp_path / "g.yaml")))
    assert q == p and q.linear.gemm_tiles == ((64, 64), (128, 256))
    assert yaml.safe_load((tmp_path / "g.yaml").read_text())["linear"]["gemm_tiles"] == [
        [64, 64],
        [128, 256],
    ]
    # The layer form writes no per-GEMM key, and a file without them loads at the defaults.
    old = _calibrated().to_dict()["linear"]
    assert not [k for k in old if k.startswith("gemm_")]
    assert (
        load_profile(str(save_profile(_calibrated(), tmp_path / "o.yaml"))).linear.gemm_tiles == ()
    )


@pytest.mark.parametrize(
    "dotted, value, key, problem",
    [
        ("linear.gemm_sm_count", 0, "linear", "need gemm_sm_count"),
        ("linear.gemm_knee_p", 0.5, "linear", "0 (hard max) or >= 1"),
        ("linear.gemm_wave_tail", 1.5, "linear", "in [0, 1]"),
        ("linear.gemm_tiles", [[64, 0]], "linear.gemm_tiles.0", ">= 1"),
        ("linear.gemm_tiles", [64, 64], "linear.gemm_tiles.0", "rows, cols"),
        ("linear.gemm_tiles", "128x128", "linear.gemm_tiles", "list of"),
        ("linear.gemm_sm_count", 1.5, "linear.gemm_sm_count", "integer"),
    ],
)
def test_per_gemm_field_errors_name_key_and_file(tmp_path, dotted, value, key, problem) -> None:
    d = _per_gemm(_calibrated()).to_dict()
    _set(d, dotted, value)
    path, msg = _load_error(tmp_path, d)
    assert str(path) in msg and f"'{key}'" in msg and problem in msg, msg


def test_tile_fields_without_tiles_are_refused() -> None:
    lin = dataclasses.replace(_calibrated().linear, gemm_wave_tail=0.5)
    with pytest.raises(ValueError, match="need gemm_tiles"):
        dataclasses.replace(_calibrated(), linear=lin)


def test_invalid_yaml_names_file(tmp_path) -> None:
    path = tmp_path / "syntax.yaml"
    path.write_text("linear: {tau_s: 1\n")
    with pytest.raises(ValueError, match="syntax.yaml: not valid YAML"):
        load_profile(str(path))


def test_profile_built_in_code_is_checked() -> None:
    p = _calibrated()
    with pytest.raises(ValueError, match="'linear.flops'"):
        dataclasses.replace(p, linear=dataclasses.replace(p.linear, flops=-1.0))
    with pytest.raises(ValueError, match="'h2d'"):
        dataclasses.replace(p, h2d=p.linear)


def test_committed_profile_resolves_by_name(tmp_path, monkeypatch) -> None:
    p = _calibrated()
    save_profile(p, tmp_path / "fit-a100-test.yaml")
    monkeypatch.setattr(profile_mod, "PROFILES_DIR", tmp_path)
    assert load_profile("fit-a100-test") == p
    assert "fit-a100-test" in available_profiles()
    # A GPU name always means its analytic profile, whatever is committed.
    save_profile(dataclasses.replace(p, name="imposter"), tmp_path / "a100.yaml")
    assert load_profile("a100").name == "analytic-a100-sxm"


def test_committed_profiles_do_not_shadow_gpu_names() -> None:
    from costmodels.hardware import find_hardware

    shadowing = [
        n for n in profile_mod.committed_profiles() if find_hardware(n.removeprefix("analytic-"))
    ]
    assert shadowing == []


def test_unknown_profile() -> None:
    with pytest.raises(ValueError, match="unknown profile 'tpu-v5'"):
        load_profile("tpu-v5")
    with pytest.raises(ValueError, match="not found"):
        load_profile("missing/profile.yaml")


def test_readme_example_is_a_valid_profile(tmp_path) -> None:
    import re

    readme = profile_mod.PROFILES_DIR / "README.md"
    block = re.search(r"```yaml\n(.*?)```", readme.read_text(), re.S).group(1)
    path = tmp_path / "example.yaml"
    path.write_text(block)
    p = load_profile(str(path))
    assert p.meta.date == "2025-06-01" and p.validation["decode_attn"].n == 60


def test_readme_per_gemm_example_loads(tmp_path) -> None:
    import re

    readme = (profile_mod.PROFILES_DIR / "README.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", readme, re.S)]
    linear = next(b["linear"] for b in blocks if "gemm_tiles" in b.get("linear", {}))
    d = _calibrated().to_dict()
    d["linear"] = linear
    path = tmp_path / "per_gemm.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    lin = load_profile(str(path)).linear
    assert lin.gemm_tiles == ((64, 64), (128, 128), (128, 256)) and lin.gemm_sm_count == 108


def test_decode_wave_fields_round_trip_and_old_files_keep_their_layout(tmp_path) -> None:
    from costmodels import DecodeAttnTerm

    dec = DecodeAttnTerm(3e-6, 9e-8, 3.35e12, 6e-7, 1.35e-10, 5.8e-11, 132, 64)
    p = dataclasses.replace(_calibrated(), decode_attn=dec)
    q = load_profile(str(save_profile(p, tmp_path / "w.yaml")))
    assert q == p and q.decode_attn.key_tile == 64
    # Without waves a file holds the split-KV form's three keys, as before the wave fields.
    assert list(_calibrated().to_dict()["decode_attn"]) == ["tau_s", "per_seq_s", "kv_bw_Bps"]
