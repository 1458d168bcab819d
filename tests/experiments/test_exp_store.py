"""The experiment YAML's ``cluster.store`` section: its errors name keys, its capacity axis and
``store_gb`` label in the grid (0: no store), its summary and per-replica columns against the
ledger and the store's own counts, a capacity-0 point equal to the same point without the section,
and the store figure through `kvsim run`, `kvsim plot` and `kvsim report`."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

import costmodels
from experiments.checkpoint import Checkpoints
from experiments.cli import main
from experiments.compare import AXES
from experiments.executor import load_sessions, run_point
from experiments.schema import (
    ALL_LABEL_COLUMNS,
    STORE_DEFAULTS,
    ConfigError,
    load_experiment,
    parse_experiment,
)
from sim.cluster import simulate_cluster
from sim.cluster.store import StoreConfig
from sim.metrics import WALL_CLOCK_COLUMNS

BASE = """
name: s
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.5, cpu_kv_gb: 0}
policies: [lru]
seeds: [1, 2]
cluster:
  replicas: [1, 2]
  router: [round-robin, kv-aware]
  store: {capacity_gb: [0, 8], policy: lru, chunk_tokens: 32}
"""
STORE_COLUMNS = (
    "store_hit_rate",
    "store_loaded_gb",
    "store_written_gb",
    "store_drop_written_gb",
)
# The labels of a point with a cluster and a store section, and with neither (no disaggregation
# section: prefill_replicas is test_exp_disagg.py's).
STORE_LABELS = [
    c for c in ALL_LABEL_COLUMNS if c not in ("groups", "prefill_replicas", "kv_delay_ms")
]
NO_STORE_LABELS = [c for c in STORE_LABELS if c not in ("store_gb", "store_policy", "store_write")]


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return info.value


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("capacity_gb: [0, 8]", "capacity_gb: [0, -8]", "cluster.store.capacity_gb[1]", ">= 0"),
        ("capacity_gb: [0, 8]", "capacity_gb: -1", "cluster.store.capacity_gb", ">= 0, got -1"),
        ("capacity_gb: [0, 8]", "capacity_gb: [8, 8]", "cluster.store.capacity_gb", "duplicate"),
        ("capacity_gb: [0, 8]", "capacity_gb: [0, .inf]", "cluster.store.capacity_gb", "finite"),
        ("capacity_gb: [0, 8]", "capacity_gb: [0, 0.001]", "cluster.store.capacity_gb[1]", "chunk"),
        ("capacity_gb: [0, 8], ", "", "cluster.store.capacity_gb", "required key is missing"),
        ("policy: lru", "policy: belady", "cluster.store.policy", "'belady' reads what"),
        ("policy: lru", "policy: lruu", "cluster.store.policy", "did you mean 'lru'?"),
        ("policy: lru", "policy: 3", "cluster.store.policy", "expected a string"),
        (
            "chunk_tokens: 32",
            "chunk_tokens: 40",
            "cluster.store.chunk_tokens",
            "40 is not a whole number of pages of 16 tokens",
        ),
        ("chunk_tokens: 32", "chunk_tokens: 0", "cluster.store.chunk_tokens", ">= 1, got 0"),
        ("chunk_tokens: 32", "chunk_tokens: 32.5", "cluster.store.chunk_tokens", "an integer"),
        ("policy: lru", "bandwidth_gb_s: 0", "cluster.store.bandwidth_gb_s", "> 0, got 0"),
        ("policy: lru", "latency_us: -1", "cluster.store.latency_us", ">= 0, got -1"),
        ("policy: lru", "latency: 1", "cluster.store.latency", "did you mean 'latency_us'?"),
        ("store: {", "store: 3 #{", "cluster.store", "expected a mapping"),
    ],
)
def test_store_errors_name_file_and_key(write_yaml, old, new, key, words):
    assert old in BASE
    path = write_yaml(BASE.replace(old, new), "bad.yaml")
    err = error_of(path)
    first = str(err).splitlines()[0]
    assert first.startswith(f"{path}: {key}: "), str(err)
    assert words in first, str(err)
    assert err.key == key


def test_a_capacity_of_0_alone_is_no_store_and_refuses_nothing(write_yaml):
    # the combinations a store cannot run with are refused only where a point has one
    text = (
        BASE.replace("[0, 8]", "0")
        .replace("cpu_kv_gb: 0}", "cpu_kv_gb: 0, evict_unit: session}")
        .replace("chunk_tokens: 32}", "chunk_tokens: 32, write: eviction}")
    )
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 8
    assert all(p.cluster.store is None and p.store_gb == 0.0 for p in grid)
    assert {p.labels()["store_gb"] for p in grid} == {0.0}


def test_the_store_axis_comes_after_replicas_and_before_seed(write_yaml):
    grid = load_experiment(write_yaml(BASE)).grid()
    assert len(grid) == 2 * 2 * 2 * 2  # router, replicas, store capacity, seed
    order = [(p.cluster.router, p.cluster.replicas, p.store_gb, p.seed) for p in grid]
    assert order[:6] == [
        ("round-robin", 1, 0.0, 1),
        ("round-robin", 1, 0.0, 2),
        ("round-robin", 1, 8.0, 1),
        ("round-robin", 1, 8.0, 2),
        ("round-robin", 2, 0.0, 1),
        ("round-robin", 2, 0.0, 2),
    ]
    assert order[8][0] == "kv-aware"
    # capacity 0: no store; a capacity: a store with the section's keys, defaults StoreConfig's
    for p in grid:
        if p.store_gb == 0:
            assert p.cluster.store is None
        else:
            assert p.cluster.store == StoreConfig(capacity_gb=8.0, chunk_tokens=32)
    labels = grid[2].labels()
    assert list(labels) == STORE_LABELS
    assert (labels["replicas"], labels["store_gb"], labels["seed"]) == (1, 8.0, 1)
    assert "store_gb" in AXES  # kvsim compare matches on it
    # points that differ only in the store never share a checkpoint
    ckpt = Checkpoints("unused")
    assert len({ckpt.key(p) for p in grid}) == len(grid)
    other = load_experiment(write_yaml(BASE.replace("policy: lru", "policy: fifo"), "b.yaml"))
    assert {ckpt.key(p) for p in grid if p.store_gb} & {ckpt.key(p) for p in other.grid()} == set()


def test_the_store_defaults_are_store_configs():
    fields = {f.name: f.default for f in dataclasses.fields(StoreConfig) if f.name != "capacity_gb"}
    assert STORE_DEFAULTS == fields
    exp = parse_experiment(
        {
            "name": "d",
            "trace": {"kind": "synthetic", "sessions": 4, "seed": 3},
            "model": "llama-3-8b",
            "hardware": "h100-sxm",
            "memory": {"gpu_kv_gb": 1},
            "policies": ["lru"],
            "cluster": {"replicas": 2, "store": {"capacity_gb": 3}},
        }
    )
    (point,) = exp.grid()
    assert point.cluster.store == StoreConfig(capacity_gb=3.0)


def test_without_a_store_section_there_is_no_store_label(write_yaml):
    text = BASE[: BASE.index("  store:")]
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 8
    assert all(p.store_gb is None and p.cluster.store is None for p in grid)
    assert list(grid[0].labels()) == NO_STORE_LABELS


TINY = """
name: tiny-store
trace: {kind: synthetic, sessions: 16, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.25, cpu_kv_gb: 0}
policies: [lru]
cluster:
  replicas: [1, 2]
  router: round-robin
  store: {capacity_gb: [0, 2], chunk_tokens: 32}
"""


@pytest.fixture(scope="module")
def store_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    cfg = folder / "tiny.yaml"
    cfg.write_text(TINY, encoding="utf-8")
    out = folder / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    return cfg, out


def _share(turns: pd.DataFrame, column: str) -> float:
    """``column`` over history tokens, over the turns with history (by hand)."""
    total = part = 0
    for row in turns.itertuples():
        if row.history_tokens > 0:
            total += row.history_tokens
            part += getattr(row, column)
    return part / total


def test_a_store_experiment_runs_end_to_end(store_run):
    _, out = store_run
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns[: len(STORE_LABELS)]) == STORE_LABELS
    assert set(STORE_COLUMNS) <= set(summary.columns)
    assert list(zip(summary.replicas, summary.store_gb)) == [(1, 0.0), (1, 2.0), (2, 0.0), (2, 2.0)]
    turns = pd.read_parquet(out / "turns.parquet")
    assert turns.store_tokens.notna().all()  # 0 at the points without a store
    for row in summary.itertuples():
        mine = turns[(turns.replicas == row.replicas) & (turns.store_gb == row.store_gb)]
        assert row.store_hit_rate == pytest.approx(_share(mine, "store_tokens"), rel=1e-12)
        assert row.reprefill_rate == pytest.approx(_share(mine, "recomputed_tokens"), rel=1e-12)
        if row.store_gb == 0:
            assert (mine.store_tokens == 0).all()
            assert (row.store_hit_rate, row.store_loaded_gb, row.store_written_gb) == (0, 0, 0)
        else:
            assert 0 < row.store_hit_rate < 1 and row.store_loaded_gb > 0
            assert row.store_written_gb > 0
    # the store serves history that was recomputed without it
    by = summary.set_index(["replicas", "store_gb"])
    for n in (1, 2):
        assert by.loc[(n, 2.0), "reprefill_rate"] < by.loc[(n, 0.0), "reprefill_rate"]
    for name in ("store_vs_replicas.png", "routers_vs_replicas.png"):
        assert (out / "plots" / name).is_file()


def test_replicas_csv_has_each_replicas_store_hit_rate(store_run):
    _, out = store_run
    replicas = pd.read_csv(out / "replicas.csv")
    assert "store_gb" in replicas.columns and "store_hit_rate" in replicas.columns
    turns = pd.read_parquet(out / "turns.parquet")
    two = replicas[(replicas.replicas == 2) & (replicas.store_gb == 2.0)]
    assert len(two) == 2
    for row in two.itertuples():
        mine = turns[
            (turns.replicas == 2) & (turns.store_gb == 2.0) & (turns.replica == row.replica)
        ]
        assert row.store_hit_rate == pytest.approx(_share(mine, "store_tokens"), rel=1e-12)
        assert row.store_hit_rate > 0


def test_store_traffic_columns_are_the_stores_counts(store_run):
    cfg, out = store_run
    summary = pd.read_csv(out / "summary.csv")
    point = next(p for p in load_experiment(cfg).grid() if p.store_gb and p.cluster.replicas == 2)
    result = simulate_cluster(
        list(load_sessions(point.trace)),
        costmodels.cost_model(point.model, point.hardware),
        point.memory,
        point.engine,
        point.policy,
        point.seed,
        point.cluster,
    )
    row = summary[(summary.replicas == 2) & (summary.store_gb == 2.0)].iloc[0]
    assert result.store is not None and result.store.loaded_bytes > 0
    assert row.store_loaded_gb == pytest.approx(result.store.loaded_bytes / 1e9, rel=1e-12)
    assert row.store_written_gb == pytest.approx(result.store.written_bytes / 1e9, rel=1e-12)
    assert row.store_hit_rate == pytest.approx(_share(result.turns, "store_tokens"), rel=1e-12)


def test_plot_and_report_draw_the_store_figure(store_run, tmp_path):
    _, out = store_run
    (out / "plots" / "store_vs_replicas.png").unlink()
    assert main(["plot", str(out)]) == 0
    assert (out / "plots" / "store_vs_replicas.png").stat().st_size > 10_000
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert 'data-file="store_vs_replicas.png"' in text
    assert 'data-file="routers_vs_replicas.png"' in text


def test_one_store_capacity_draws_no_store_figure(write_yaml, tmp_path):
    cfg = write_yaml(TINY.replace("capacity_gb: [0, 2]", "capacity_gb: 2").replace("[1, 2]", "1"))
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    plots = {p.name for p in (out / "plots").iterdir()}
    assert "routers_vs_replicas.png" in plots and "store_vs_replicas.png" not in plots


def test_capacity_0_equals_the_same_point_without_a_store_section():
    base = {
        "name": "eq",
        "trace": {"kind": "synthetic", "sessions": 16, "seed": 3},
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "memory": {"gpu_kv_gb": 0.25, "cpu_kv_gb": 0},
        "policies": ["lru"],
    }
    cluster = {"replicas": 2, "router": "round-robin"}
    (plain,) = parse_experiment({**base, "cluster": cluster}).grid()
    store = {**cluster, "store": {"capacity_gb": 0}}
    (zero,) = parse_experiment({**base, "cluster": store}).grid()
    a, b = run_point(0, plain), run_point(0, zero)
    assert a.summary["reprefill_rate"] > 0  # the GPU is short: a store would have had work
    shared = [k for k in a.summary if k in b.summary and k not in WALL_CLOCK_COLUMNS]
    assert set(a.summary) - set(shared) == set(WALL_CLOCK_COLUMNS)
    assert set(b.summary) - set(shared) == set(WALL_CLOCK_COLUMNS) | set(STORE_COLUMNS)
    for k in shared:
        x, y = a.summary[k], b.summary[k]
        assert x == y or (math.isnan(x) and math.isnan(y)), k
    # the ledgers too, but b's store_gb, store_policy and store_write labels and store_tokens
    # column (0 at every turn)
    labels = ["store_gb", "store_policy", "store_write", "store_tokens"]
    pd.testing.assert_frame_equal(a.turns, b.turns.drop(columns=labels))
    assert (b.turns.store_policy == "none").all()
    assert (b.turns.store_tokens == 0).all()


@pytest.mark.parametrize(
    ("memory", "engine", "write"),
    [
        ({"evict_unit": "session"}, {}, "eviction"),
        ({"evict_unit": "session"}, {}, "both"),
        ({}, {"prefetch": "queue"}, "completion"),
        ({"evict_unit": "session"}, {"prefetch": "think"}, "both"),
    ],
)
def test_what_the_yaml_refused_with_a_store_loads_and_runs(memory, engine, write):
    """Writes at drops at session units and a prefetch with a store (refused at load time and by
    simulate_cluster until each was modelled): the YAML loads, its point runs, the store loads
    and the history is conserved."""
    data = _tiny(2)
    data["memory"] |= memory | {"gpu_kv_gb": 0.05}
    data["engine"] = engine
    data["cluster"]["store"] |= {"write": write, "chunk_tokens": 32}
    (point,) = parse_experiment(data, source="x.yaml").grid()
    res = run_point(0, point)
    t = res.turns
    assert t.store_tokens.sum() > 0
    split = t.gpu_hit_tokens + t.cpu_hit_tokens + t.store_tokens + t.recomputed_tokens
    assert (split + t.pruned_tokens == t.history_tokens).all()


@pytest.mark.parametrize("unit", ["session", "layer_block"])
@pytest.mark.parametrize("write", ["completion", "eviction", "both"])
def test_what_the_yaml_accepts_with_a_store_the_simulator_runs(unit, write):
    """Every eviction unit takes a store, with every write: the YAML loads, and simulate_cluster
    runs its point, the store loading at that unit."""
    data = _tiny(2)
    data["memory"] |= {"evict_unit": unit, "gpu_kv_gb": 0.05}
    data["cluster"]["store"] |= {"write": write, "chunk_tokens": 32}
    (point,) = parse_experiment(data).grid()
    res = run_point(0, point)
    assert res.turns.store_tokens.sum() > 0
    t = res.turns
    split = t.gpu_hit_tokens + t.cpu_hit_tokens + t.store_tokens + t.recomputed_tokens
    assert (split + t.pruned_tokens == t.history_tokens).all()


def _tiny(capacity: float) -> dict:
    return {
        "name": "t",
        "trace": {"kind": "synthetic", "sessions": 4, "seed": 3},
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "memory": {"gpu_kv_gb": 0.25, "cpu_kv_gb": 0},
        "policies": ["lru"],
        "cluster": {"replicas": 2, "store": {"capacity_gb": capacity}},
    }


def test_router_lines_split_by_store_capacity_never_average_over_it():
    from experiments.cluster_plots import router_lines

    summary = pd.DataFrame(
        {
            "policy": "lru",
            "gpu_kv_gb": 4.0,
            "router": ["kv-aware"] * 4,
            "replicas": [1, 2, 1, 2],
            "store_gb": [0.0, 0.0, 64.0, 64.0],
            "reprefill_rate": [0.7, 0.5, 0.1, 0.05],
        }
    )
    lines = router_lines(summary, "reprefill_rate")
    # a line's store: (capacity, store policy), the policy None where it does not vary
    assert list(lines) == [
        ("kv-aware", (0.0, None), "kv-aware, no store"),
        ("kv-aware", (64.0, None), "kv-aware, store 64 GB"),
    ]
    assert lines["kv-aware", (64.0, None), "kv-aware, store 64 GB"].tolist() == [0.1, 0.05]
    # one capacity: no split, no store in the name
    one = router_lines(summary[summary.store_gb == 64.0], "reprefill_rate")
    assert list(one) == [("kv-aware", None, "kv-aware")]
