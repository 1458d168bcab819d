"""The serving-design experiments (token budgets, decode from CPU memory) run end to end at a tiny
size: every grid point simulates under the invariant checker, and each writes its figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.runner import run_experiment
from experiments.schema import ConfigError, load_experiment, parse_experiment

CONFIGS = Path(__file__).resolve().parents[2] / "experiments"


def _tiny(name: str):
    exp = load_experiment(CONFIGS / name)
    trace = exp.trace[0].model_copy(update={"sessions": 12})
    return exp.with_overrides(
        trace=[trace], debug=True, executor=exp.executor.model_copy(update={"workers": 1})
    )


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_budgets_config_compares_full_streamingllm_and_smartkv(tmp_path):
    out = tmp_path / "budgets"
    run_experiment(_tiny("budgets.yaml"), out, show_progress=False)
    s = pd.read_csv(out / "summary.csv")
    assert set(s["budget"]) == {
        "full",
        "streamingllm-4+252",
        "streamingllm-4+1020",
        "streamingllm-4+4092",
        "smartkv-4+256+764-random",
        "smartkv-4+64+188-lifespan",
        "smartkv-4+256+764-lifespan",
        "smartkv-4+1024+3068-lifespan",
    }
    full = s[s["budget"] == "full"]
    assert (full["pruned_share"] == 0).all() and (full["relevant_pruned_share"] == 0).all()
    pruned = s[s["budget"] != "full"]
    assert (pruned["pruned_share"] >= 0).all()
    # 12 short sessions: a 4,096-token budget may keep everything, 1,024 tokens or fewer may not.
    small = pruned[~pruned["budget"].str.contains("4092|3068")]
    assert (small["pruned_share"] > 0).all()
    # The oracle scorer keeps what stays relevant longest: it never loses more than random; a
    # smaller budget prunes more.
    by = pruned.groupby("budget")[["relevant_pruned_share", "pruned_share"]].mean()
    assert (
        by.loc["smartkv-4+256+764-lifespan", "relevant_pruned_share"]
        <= by.loc["smartkv-4+256+764-random", "relevant_pruned_share"]
    )
    assert (
        by.loc["streamingllm-4+252", "pruned_share"] > by.loc["streamingllm-4+1020", "pruned_share"]
    )
    assert (out / "plots" / "budget_tradeoff.png").stat().st_size > 10_000


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_offload_config_compares_swap_in_recompute_and_top_k(tmp_path):
    out = tmp_path / "offload"
    run_experiment(_tiny("offload.yaml"), out, show_progress=False)
    s = pd.read_csv(out / "summary.csv")
    caps = s["gpu_kv_gb"].nunique()
    # recompute (no CPU tier) and swap-in, plus four sparse modes that need the CPU tier
    assert len(s) == caps * (2 + 4)
    assert set(s[s["cpu_kv_gb"] == 0]["sparse"]) == {"off"}
    quest = s[s["sparse"].str.startswith("quest")]
    assert (quest["decode_h2d_gb"] > 0).all() and (quest["gpu_reserved_peak_gb"] > 0).all()
    # Reading more pages per step costs decode time: K=4 < K=16 < every page, at each capacity.
    tbt = s.pivot_table(index="gpu_kv_gb", columns="sparse", values="tbt_p50_s")
    assert (tbt["quest-k4-r16"] < tbt["quest-k16-r16"]).all()
    assert (tbt["quest-k16-r16"] < tbt["cpu-full-r16"]).all()
    assert (out / "plots" / "offload_vs_capacity.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "patch, key",
    [
        ({"budgets": [{"kind": "smartkv", "sink": 4, "window": 8000, "budget": 1000}]}, "budgets"),
        ({"sparse": [{"kind": "quest", "k": 32, "ring_slots": 16}]}, "sparse"),
        (
            {"sparse": [{"kind": "quest", "k": 8, "phases": ["prefill", "decode"]}]},
            "supports only decode",
        ),
        ({"sparse": [{"kind": "full"}], "memory": {"gpu_kv_gb": 4, "cpu_kv_gb": 0}}, "cpu_kv_gb"),
    ],
)
def test_bad_design_settings_name_the_key(patch, key):
    data = {
        "name": "x",
        "trace": {"kind": "synthetic", "sessions": 4},
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "memory": {"gpu_kv_gb": 4, "cpu_kv_gb": 8},
        "policies": "lru",
        **patch,
    }
    with pytest.raises(ConfigError, match=key):
        parse_experiment(data, source="x.yaml")
