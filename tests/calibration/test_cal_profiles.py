"""The committed public profiles load by name and by path, say where their constants come from,
and drive the simulator (no torch, no data files needed)."""

from __future__ import annotations

import pytest

from costmodels import CostModel, get_model, load_profile
from costmodels.profile import PROFILES_DIR, committed_profiles

NAMES = ("a100-vidur", "h100-public")


@pytest.mark.parametrize("name", NAMES)
def test_committed_profile_loads_by_name_and_path(name) -> None:
    assert name in committed_profiles()
    by_name = load_profile(name)
    assert by_name == load_profile(str(PROFILES_DIR / f"{name}.yaml"))
    m = by_name.meta
    assert m.gpu in ("a100-sxm", "h100-sxm")
    # Source named: file paths and commits from PROVENANCE.
    assert "../shared/data" in m.source and "mlp.csv" in m.source and "@" in m.source
    assert {"linear", "elementwise", "prefill_attn"} <= set(by_name.validation)
    assert all(v.split.split(":")[0] for v in by_name.validation.values())
    assert "pensieve Llama-3-8B n_new=1: alpha=" in m.notes
    assert "not in any public table" in m.notes and "h2d" in m.notes


def _ttfts(profile) -> list[float]:
    from sim import MemoryConfig, simulate
    from traces import SyntheticConfig, generate_synthetic

    trace = generate_synthetic(SyntheticConfig(sessions=15, seed=11, max_context_tokens=8192))
    res = simulate(
        trace.sessions, CostModel(get_model("llama-3-8b"), profile), MemoryConfig(gpu_kv_gb=1.0)
    )
    return list(res.turns["ttft_s"])


def test_public_profiles_change_simulated_ttfts() -> None:
    analytic = _ttfts(load_profile("h100-sxm"))
    h100 = _ttfts(load_profile("h100-public"))
    a100 = _ttfts(load_profile("a100-vidur"))
    assert len(analytic) == len(h100) == len(a100) > 30
    assert h100 != analytic and a100 != analytic
    # The A100 is slower than the H100 on the same trace (median TTFT).
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    assert med(a100) > 1.5 * med(h100)


def test_experiment_yaml_accepts_a_profile_name_or_path(tmp_path) -> None:
    from experiments.schema import load_experiment

    for hw in ("h100-public", str(PROFILES_DIR / "a100-vidur.yaml")):
        cfg = tmp_path / "e.yaml"
        cfg.write_text(
            f"name: t\ntrace: {{kind: synthetic, sessions: 3, seed: 1}}\nmodel: llama-3-8b\n"
            f"hardware: {hw}\nmemory: {{gpu_kv_gb: 1}}\npolicies: [lru]\n"
        )
        assert load_experiment(str(cfg)).hardware
