"""The experiment YAML's ``cluster`` section: its errors name keys, its axes and labels in the grid,
a cluster run through `kvsim run` (summary columns, the routers figure, the report), and a
one-replica cluster's summary equal to the single engine's."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.checkpoint import Checkpoints
from experiments.cli import main
from experiments.compare import AXES, compare, read_folder
from experiments.executor import run_point
from experiments.schema import (
    ALL_LABEL_COLUMNS,
    LABEL_COLUMNS,
    ConfigError,
    load_experiment,
    parse_experiment,
)
from sim.metrics import SUMMARY_COLUMNS, WALL_CLOCK_COLUMNS

BASE = """
name: c
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [1, 0.5], cpu_kv_gb: 0}
policies: [lru, fifo]
seeds: [1, 2]
cluster:
  replicas: [1, 2]
  router: [round-robin, kv-aware]
  router_params: {kv-aware: {load_weight: 0.5}}
"""
CLUSTER_COLUMNS = ("elsewhere_rate", "replica_jain_turns", "replica_ttft_p90_max_s")
# The label columns of a cluster without a store, disaggregation or kv_events section (store_gb,
# store_policy and store_write: test_exp_store.py, prefill_replicas: test_exp_disagg.py,
# kv_delay_ms: test_exp_kv_events.py).
CLUSTER_LABELS = [
    c
    for c in ALL_LABEL_COLUMNS
    if c
    not in ("groups", "store_gb", "store_policy", "store_write", "prefill_replicas", "kv_delay_ms")
]


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return info.value


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("replicas: [1, 2]", "replicas: [1, 0]", "cluster.replicas[1]", "must be >= 1, got 0"),
        ("replicas: [1, 2]", "replicas: two", "cluster.replicas", "expected an integer"),
        ("replicas: [1, 2]", "replicas: [1, 1]", "cluster.replicas", "duplicate value 1"),
        (
            "router: [round-robin, kv-aware]",
            "router: [round-robin, kv-awar]",
            "cluster.router[1]",
            "unknown router 'kv-awar' (did you mean 'kv-aware'?)",
        ),
        (
            "router: [round-robin, kv-aware]",
            "router: nosuch.module:R",
            "cluster.router",
            "'nosuch.module:R': cannot import R from nosuch.module",
        ),
        (
            "router_params: {kv-aware: {load_weight: 0.5}}",
            "router_params: {kv-aware: {weight: 1}}",
            "cluster.router_params.kv-aware",
            "weight not a parameter of router 'kv-aware'",
        ),
        (
            "router_params: {kv-aware: {load_weight: 0.5}}",
            "router_params: {kv-aware: {load_weight: -1}}",
            "cluster.router_params.kv-aware.load_weight",
            "must be a number >= 0, got -1",
        ),
        (
            "router_params: {kv-aware: {load_weight: 0.5}}",
            "router_params: {kv-aware: 3}",
            "cluster.router_params.kv-aware",
            "expected a mapping",
        ),
        (
            "router_params: {kv-aware: {load_weight: 0.5}}",
            "router_params: {session-affinity: {overload: 2}}",
            "cluster.router_params.session-affinity",
            "'session-affinity' is not one of cluster.router (round-robin, kv-aware)",
        ),
        ("replicas: [1, 2]", "replica: [1, 2]", "cluster.replica", "did you mean 'replicas'?"),
        # what a cluster cannot run with is refused at its own key
        ("seeds: [1, 2]", "seeds: [1]\nengine: {kind: vllm-v1}", "engine.kind", "kvsim replicas"),
        (
            "seeds: [1, 2]",
            "seeds: [1]\nbudgets: [{kind: full}, {kind: streamingllm, sink: 4, window: 64}]",
            "budgets[1]",
            "give budgets only kind full",
        ),
        (
            "seeds: [1, 2]",
            "seeds: [1]\nsparse: [{kind: 'off'}, {kind: quest, k: 4}]",
            "sparse[1]",
            "give sparse kind off",
        ),
        ("policies: [lru, fifo]", "policies: [lru, belady]", "policies[1]", "offline bound"),
        ("seeds: [1, 2]", "seeds: [1]\nstep_log: true", "step_log", "writes no step log"),
    ],
)
def test_cluster_errors_name_file_and_key(write_yaml, old, new, key, words):
    assert old in BASE
    text = BASE.replace(old, new)
    if "quest" in new:  # decode from CPU memory needs a CPU tier
        text = text.replace("cpu_kv_gb: 0", "cpu_kv_gb: 2")
    path = write_yaml(text, "bad.yaml")
    err = error_of(path)
    first = str(err).splitlines()[0]
    assert first.startswith(f"{path}: {key}: "), str(err)
    assert words in first, str(err)
    assert err.key == key


def test_cluster_axes_come_after_gpu_kv_gb_and_before_seed(write_yaml):
    grid = load_experiment(write_yaml(BASE)).grid()
    assert len(grid) == 2 * 2 * 2 * 2 * 2  # policy, gpu_kv_gb, router, replicas, seed
    order = [
        (p.policy, p.memory.gpu_kv_gb, p.cluster.router, p.cluster.replicas, p.seed) for p in grid
    ]
    assert order[:6] == [
        ("lru", 1.0, "round-robin", 1, 1),
        ("lru", 1.0, "round-robin", 1, 2),
        ("lru", 1.0, "round-robin", 2, 1),
        ("lru", 1.0, "round-robin", 2, 2),
        ("lru", 1.0, "kv-aware", 1, 1),
        ("lru", 1.0, "kv-aware", 1, 2),
    ]
    assert order[8][:2] == ("lru", 0.5) and order[16][0] == "fifo"
    # each router gets its own parameters
    assert {p.cluster.router: dict(p.cluster.router_params) for p in grid} == {
        "round-robin": {},
        "kv-aware": {"load_weight": 0.5},
    }
    labels = grid[2].labels()
    assert list(labels) == CLUSTER_LABELS
    assert (labels["router"], labels["replicas"], labels["seed"]) == ("round-robin", 2, 1)
    # a checkpoint is keyed by the cluster too: points that differ only there never share one
    ckpt = Checkpoints("unused")
    assert len({ckpt.key(p) for p in grid}) == len(grid)


def test_without_a_cluster_section_nothing_changes(write_yaml):
    text = BASE[: BASE.index("cluster:")]
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 8 and all(p.cluster is None for p in grid)
    assert list(grid[0].labels()) == list(LABEL_COLUMNS)
    # the router_params order written does not change a point (nor its checkpoint key)
    two = "router_params: {kv-aware: {load_weight: 0.5, prefill_weight: 2}}"
    swapped = "router_params: {kv-aware: {prefill_weight: 2, load_weight: 0.5}}"
    a = load_experiment(
        write_yaml(BASE.replace("router_params: {kv-aware: {load_weight: 0.5}}", two), "a.yaml")
    )
    b = load_experiment(
        write_yaml(BASE.replace("router_params: {kv-aware: {load_weight: 0.5}}", swapped), "b.yaml")
    )
    assert [repr(p) for p in a.grid()] == [repr(p) for p in b.grid()]


TINY = """
name: tiny-cluster
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.25, cpu_kv_gb: 0}
policies: [lru]
cluster: {replicas: [1, 2], router: [round-robin, kv-aware]}
"""


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    cfg = folder / "tiny.yaml"
    cfg.write_text(TINY, encoding="utf-8")
    out = folder / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    return out


def test_a_cluster_experiment_runs_end_to_end(cluster_run):
    summary = pd.read_csv(cluster_run / "summary.csv")
    cols = list(summary.columns)
    assert cols[: len(CLUSTER_LABELS)] == CLUSTER_LABELS
    assert cols[len(CLUSTER_LABELS) : len(CLUSTER_LABELS) + len(SUMMARY_COLUMNS)] == list(
        SUMMARY_COLUMNS
    )
    assert set(CLUSTER_COLUMNS) <= set(cols)
    assert not {"store_gb", "store_hit_rate", "store_loaded_gb"} & set(cols)  # no store section
    assert list(zip(summary.router, summary.replicas)) == [
        ("round-robin", 1),
        ("round-robin", 2),
        ("kv-aware", 1),
        ("kv-aware", 2),
    ]
    one = summary[summary.replicas == 1]
    assert (one.elsewhere_rate == 0).all() and (one.replica_jain_turns == 1).all()
    rr2 = summary[(summary.router == "round-robin") & (summary.replicas == 2)].iloc[0]
    assert rr2.elsewhere_rate > 0  # round robin splits conversations over the two replicas
    assert ((summary.elsewhere_rate >= 0) & (summary.elsewhere_rate <= 1)).all()
    turns = pd.read_parquet(cluster_run / "turns.parquet")
    assert {"router", "replicas", "replica", "elsewhere_tokens"} <= set(turns.columns)
    assert set(turns.replica) == {0, 1}
    assert (cluster_run / "plots" / "routers_vs_replicas.png").is_file()


def test_replicas_csv_holds_each_replicas_own_summary(cluster_run):
    summary = pd.read_csv(cluster_run / "summary.csv")
    replicas = pd.read_csv(cluster_run / "replicas.csv")
    assert len(replicas) == summary.replicas.sum()  # one row per grid point and replica
    assert list(replicas.columns[: len(CLUSTER_LABELS) + 1]) == [*CLUSTER_LABELS, "replica"]
    assert {"ttft_p90_s", "tbt_p90_s", "reprefill_rate", "elsewhere_rate"} <= set(replicas.columns)
    keys = ["router", "replicas"]
    per_point = replicas.groupby(keys)[["turns", "rejected_turns"]].sum().sort_index()
    whole = summary.set_index(keys).sort_index()
    pd.testing.assert_frame_equal(per_point, whole[["turns", "rejected_turns"]], check_dtype=False)
    # the worst replica's TTFT p90 is the cluster's replica_ttft_p90_max_s
    worst = replicas.groupby(keys)["ttft_p90_s"].max().sort_index()
    assert worst.to_numpy() == pytest.approx(whole["replica_ttft_p90_max_s"].to_numpy())


def test_the_report_shows_the_routers_figure(cluster_run, tmp_path):
    page = tmp_path / "report.html"
    assert main(["report", str(cluster_run), "--out", str(page)]) == 0
    assert 'data-file="routers_vs_replicas.png"' in page.read_text(encoding="utf-8")


def test_compare_matches_on_router_and_replicas(cluster_run):
    assert {"router", "replicas"} <= set(AXES)
    folder = read_folder(cluster_run)
    comp = compare(folder, folder)
    assert {"router", "replicas"} <= set(comp.matched_on)
    assert "router" not in comp.metrics and "elsewhere_rate" not in comp.metrics
    assert len(comp.points) == 4


def test_step_log_flag_is_refused_for_a_cluster(write_yaml, tmp_path, capsys):
    cfg = write_yaml(TINY)
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--step-log", "--quiet"]) == 2
    assert "--step-log: a cluster" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_one_replica_summary_equals_the_single_engines():
    base = {
        "name": "eq",
        "trace": {"kind": "synthetic", "sessions": 30, "seed": 3},
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "memory": {"gpu_kv_gb": 0.5, "cpu_kv_gb": 1},
        "policies": ["lru"],
    }
    (plain,) = parse_experiment(base).grid()
    (one,) = parse_experiment({**base, "cluster": {"replicas": 1, "router": "kv-aware"}}).grid()
    a, b = run_point(0, plain).summary, run_point(0, one).summary
    assert a["reprefill_rate"] > 0  # the GPU is short: evictions happened
    shared = [k for k in a if k in b and k not in WALL_CLOCK_COLUMNS]
    assert set(a) - set(shared) == set(WALL_CLOCK_COLUMNS)
    for k in shared:
        assert a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])), k
    assert b["elsewhere_rate"] == 0.0 and b["replica_jain_turns"] == 1.0
    assert b["replica_ttft_p90_max_s"] == a["ttft_p90_s"]
