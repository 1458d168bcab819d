"""Grid expansion: counts, the documented order, grid points, infinite-memory baselines."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from experiments.schema import LABEL_COLUMNS, GridPoint, load_experiment
from sim.config import EngineConfig, MemoryConfig

REPO = Path(__file__).resolve().parents[2]

GRID = """
name: g
trace: [{kind: synthetic, sessions: 5, seed: 1}, {kind: synthetic, sessions: 5, seed: 2}]
model: [llama-3-8b, mistral-7b]
hardware: h100-sxm
memory: {gpu_kv_gb: [4, 1, 2], cpu_kv_gb: [0, 16], block_tokens: [16, 32],
         evict_unit: [block, session]}
engine: {max_batch_tokens: 4096, replay: open-loop}
policies: [lru, fifo]
seeds: [3, 1]
"""


def test_count_is_the_cartesian_product(write_yaml):
    grid = load_experiment(write_yaml(GRID)).grid()
    assert len(grid) == 2 * 2 * 1 * 3 * 2 * 2 * 2 * 2 * 2
    assert len(set(grid)) == len(grid)  # frozen, hashable, all distinct


def test_order_is_documented_and_keeps_list_order(write_yaml):
    grid = load_experiment(write_yaml(GRID)).grid()
    key = lambda p: (p.seed, p.memory.gpu_kv_gb, p.policy, p.memory.cpu_kv_gb)  # noqa: E731
    # seed varies fastest, then gpu_kv_gb (in the order written: 4, 1, 2), then policy, then cpu.
    assert [key(p) for p in grid[:14]] == [
        (3, 4, "lru", 0),
        (1, 4, "lru", 0),
        (3, 1, "lru", 0),
        (1, 1, "lru", 0),
        (3, 2, "lru", 0),
        (1, 2, "lru", 0),
        (3, 4, "fifo", 0),
        (1, 4, "fifo", 0),
        (3, 1, "fifo", 0),
        (1, 1, "fifo", 0),
        (3, 2, "fifo", 0),
        (1, 2, "fifo", 0),
        (3, 4, "lru", 16),
        (1, 4, "lru", 16),
    ]
    assert grid[24].memory.block_tokens == 32 and grid[23].memory.block_tokens == 16
    assert grid[48].memory.evict_unit == "session" and grid[47].memory.evict_unit == "block"
    assert grid[96].model == "mistral-7b" and grid[95].model == "llama-3-8b"
    assert grid[192].trace.to_dict()["seed"] == 2 and grid[191].trace.to_dict()["seed"] == 1
    assert load_experiment(write_yaml(GRID, "again.yaml")).grid() == grid  # deterministic


def test_grid_point_contents(write_yaml):
    p = load_experiment(write_yaml(GRID)).grid()[0]
    assert isinstance(p, GridPoint)
    assert p.memory == MemoryConfig(
        gpu_kv_gb=4.0, cpu_kv_gb=0.0, block_tokens=16, evict_unit="block"
    )
    assert p.engine == EngineConfig(max_batch_tokens=4096, replay="open-loop")
    assert p.trace.to_dict() == {"kind": "synthetic", "sessions": 5, "seed": 1}
    assert list(p.labels()) == list(LABEL_COLUMNS)
    assert p.labels()["trace"] == "synthetic[0]"  # two synthetic traces: labels disambiguated
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.policy = "fifo"


def test_scalars_are_one_value_axes(write_yaml):
    exp = load_experiment(
        write_yaml("""
        name: s
        trace: {kind: synthetic}
        model: llama-3-8b
        hardware: h100-sxm
        memory: {gpu_kv_gb: 2}
        policies: lru
        seeds: 5
    """)
    )
    (p,) = exp.grid()
    assert (p.policy, p.seed, p.memory.gpu_kv_gb, p.memory.cpu_kv_gb) == ("lru", 5, 2.0, 0.0)
    assert p.trace.label == "synthetic"


def test_baseline_points(write_yaml):
    text = GRID.replace("policies: [lru, fifo]", "policies: [lru, fifo]\nbaseline_infinite: true")
    exp = load_experiment(write_yaml(text))
    base = exp.baseline_points()
    assert len(base) == len(exp.grid()) // 3  # one per point, less the gpu_kv_gb axis
    assert all(math.isinf(b.memory.gpu_kv_gb) for b in base)
    assert len(set(base)) == len(base)
    assert load_experiment(write_yaml(GRID, "nob.yaml")).baseline_points() == []


def test_infinite_capacity_in_the_grid_is_not_run_twice(write_yaml):
    text = (
        GRID.replace("gpu_kv_gb: [4, 1, 2]", "gpu_kv_gb: [1, .inf]") + "baseline_infinite: true\n"
    )
    exp = load_experiment(write_yaml(text))
    assert exp.baseline_points() == []
    assert any(math.isinf(p.memory.gpu_kv_gb) for p in exp.grid())


def test_repository_quickstart_is_valid():
    exp = load_experiment(REPO / "experiments" / "quickstart.yaml")
    assert exp.name == "quickstart"
    raw = yaml.safe_load((REPO / "experiments" / "quickstart.yaml").read_text())
    axes = [raw["memory"]["gpu_kv_gb"], raw["memory"]["cpu_kv_gb"], raw["policies"], raw["seeds"]]
    assert len(exp.grid()) == math.prod(len(a) for a in axes) > 1
    assert exp.executor.workers == 2
