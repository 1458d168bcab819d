"""The real-trace experiments (ShareGPT, Mooncake, Azure) load and validate, their grids have the
intended size, and every GPU capacity holds the trace's longest session (no turn rejected). The
sweeps themselves are not run here. Their traces are in the shared data folder ($KVSIM_SHARED_DATA,
else ../shared/data beside the checkout); they skip when it does not hold them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import costmodels
import traces
from experiments.schema import load_experiment
from experiments.shared_data import shared_data_dir

REPO = Path(__file__).resolve().parents[2]
DATA = shared_data_dir()

# name: (trace file, number of traces x cpu tiers x policies x gpu capacities x seeds)
CONFIGS = {
    "sharegpt": ("sharegpt/ShareGPT_V3_unfiltered_cleaned_split-sample.json", 2 * 2 * 6 * 4 * 1),
    "mooncake": ("mooncake/conversation_trace.jsonl", 1 * 2 * 4 * 3 * 1),
    "azure": ("azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv", 1 * 2 * 6 * 4 * 1),
}


@pytest.fixture
def load(monkeypatch):
    def _load(name: str):
        rel, _ = CONFIGS[name]
        if not (DATA / rel).is_file():
            pytest.skip(
                f"real data file {rel} not found in {DATA.resolve()} (set KVSIM_SHARED_DATA)"
            )
        monkeypatch.chdir(REPO)
        return load_experiment(REPO / "experiments" / f"{name}.yaml")

    return _load


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_trace_config_validates_with_the_intended_grid(load, name):
    exp = load(name)
    rel, size = CONFIGS[name]
    assert exp.name == name
    assert all(Path(t.path) == (DATA / rel).resolve() for t in exp.trace)
    assert len(exp.grid()) == size
    m = exp.memory
    assert 3 <= len(m.gpu_kv_gb) <= 4 and all(math.isfinite(g) for g in m.gpu_kv_gb)
    assert len(m.cpu_kv_gb) == 2 and m.cpu_kv_gb[0] == 0 and m.cpu_kv_gb[1] > 0
    assert 4 <= len(exp.policies) <= 7 and "lru" in exp.policies
    assert exp.executor.kind == "local" and exp.executor.workers == 2


def test_sharegpt_draws_differ_only_in_their_seed(load):
    exp = load("sharegpt")
    specs = [t.model_dump() for t in exp.trace]
    assert [s.pop("seed") for s in specs] == [1, 2]
    assert specs[0] == specs[1] and specs[0]["max_sessions"] == 200


def test_mooncake_and_azure_set_their_replay_rate(load):
    mooncake, azure = load("mooncake"), load("azure")
    assert mooncake.memory.prefix_sharing and mooncake.memory.block_tokens == [512]
    assert mooncake.trace[0].model_dump()["time_scale"] == 20
    assert "belady" not in mooncake.policies  # no bound with shared pages
    assert azure.trace[0].model_dump()["time_scale"] == 1


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_capacity_holds_the_longest_session(load, name):
    """A turn longer than the GPU KV is rejected with the rest of its session; the figures compare
    capacities, so the smallest must serve every turn."""
    exp = load(name)
    bpt = costmodels.get_model(exp.model[0]).kv_bytes_per_token
    bt = exp.memory.block_tokens[0]
    for spec in exp.trace_specs():
        sessions = traces.load_trace(spec.to_dict()).sessions
        longest = max(sum(t.prompt_tokens + t.output_tokens for t in s.turns) for s in sessions)
        assert math.ceil(longest / bt) * bt * bpt <= min(exp.memory.gpu_kv_gb) * 2**30
