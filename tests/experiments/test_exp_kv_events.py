"""The experiment YAML's ``cluster.kv_events`` section: its delay reaches each point's cluster,
and a bad value is an error naming the key."""

from __future__ import annotations

import pytest

from experiments.schema import ConfigError, load_experiment

BASE = """
name: k
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.5, cpu_kv_gb: 0}
policies: [lru]
cluster:
  replicas: [1, 2]
  router: [round-robin, kv-aware]
  kv_events: {delay_ms: 50}
"""


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return info.value


def test_the_delay_reaches_every_point(write_yaml):
    grid = load_experiment(write_yaml(BASE)).grid()
    assert len(grid) == 4
    assert {p.cluster.kv_events_delay_ms for p in grid} == {50.0}
    plain = load_experiment(write_yaml(BASE.replace("  kv_events: {delay_ms: 50}\n", ""))).grid()
    assert {p.cluster.kv_events_delay_ms for p in plain} == {0.0}
    # an int is taken as a number of ms; the section's default is no delay
    empty = load_experiment(write_yaml(BASE.replace("{delay_ms: 50}", "{}"))).grid()
    assert {p.cluster.kv_events_delay_ms for p in empty} == {0.0}


@pytest.mark.parametrize(
    ("new", "key", "words"),
    [
        ("{delay_ms: -1}", "cluster.kv_events.delay_ms", "must be >= 0, got -1"),
        ("{delay_ms: abc}", "cluster.kv_events.delay_ms", "number"),
        ("{delay_ms: .inf}", "cluster.kv_events.delay_ms", "finite"),
        ("{delay_ms: true}", "cluster.kv_events.delay_ms", "number"),
        ("{delay: 5}", "cluster.kv_events.delay", "unknown key"),
    ],
)
def test_a_bad_delay_names_the_key(write_yaml, new, key, words):
    path = write_yaml(BASE.replace("{delay_ms: 50}", new), "bad.yaml")
    err = error_of(path)
    first = str(err).splitlines()[0]
    assert first.startswith(f"{path}: {key}: "), str(err)
    assert words in first, str(err)
    assert err.key == key


def test_a_delay_with_disaggregation_reaches_each_pool(write_yaml):
    text = BASE.replace("replicas: [1, 2]", "replicas: [2]") + (
        "  disaggregation: {prefill_replicas: [0, 1]}\n"
    )
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 4
    assert {p.cluster.kv_events_delay_ms for p in grid} == {50.0}
    assert {p.prefill_replicas for p in grid} == {0, 1}
