"""``cluster.store.policy`` as a grid axis: a list of store policies expands into grid points (after
the store's capacity, one point of capacity 0 whatever the list), each labelled by summary.csv's
``store_policy`` (``none`` without a store); every policy of the list is checked as a single one
is, at its own index; and each point of a two-policy run is the single-policy run of that point,
ledger and summary row alike."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.checkpoint import Checkpoints
from experiments.cli import main
from experiments.cluster_plots import cluster_figures, router_lines, store_variants
from experiments.schema import ALL_LABEL_COLUMNS, ConfigError, load_experiment
from sim.cluster.store import StoreConfig
from sim.metrics import WALL_CLOCK_COLUMNS

BASE = """
name: sp
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.5, cpu_kv_gb: 0}
policies: [lru]
seeds: [1, 2]
cluster:
  replicas: [1, 2]
  router: [round-robin, kv-aware]
  store: {capacity_gb: [0, 8], policy: [lru, s3fifo], chunk_tokens: 32}
"""
STORE_LABELS = [
    c for c in ALL_LABEL_COLUMNS if c not in ("groups", "prefill_replicas", "kv_delay_ms")
]


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return info.value


def test_a_policy_list_is_an_axis_after_the_capacity(write_yaml):
    grid = load_experiment(write_yaml(BASE)).grid()
    # per router, size and seed: no store once, then the 8 GB store under each policy
    assert len(grid) == 2 * 2 * 3 * 2
    order = [(p.cluster.router, p.cluster.replicas, p.store_gb, p.labels()["store_policy"], p.seed)
             for p in grid[:8]]  # fmt: skip
    assert order == [
        ("round-robin", 1, 0.0, "none", 1),
        ("round-robin", 1, 0.0, "none", 2),
        ("round-robin", 1, 8.0, "lru", 1),
        ("round-robin", 1, 8.0, "lru", 2),
        ("round-robin", 1, 8.0, "s3fifo", 1),
        ("round-robin", 1, 8.0, "s3fifo", 2),
        ("round-robin", 2, 0.0, "none", 1),
        ("round-robin", 2, 0.0, "none", 2),
    ]
    for p in grid:
        labels = p.labels()
        assert list(labels) == STORE_LABELS
        if p.store_gb == 0:
            assert p.cluster.store is None and labels["store_policy"] == "none"
        else:
            policy = labels["store_policy"]
            assert p.cluster.store == StoreConfig(capacity_gb=8.0, policy=policy, chunk_tokens=32)
    # the two policies' points never share a checkpoint
    ckpt = Checkpoints("unused")
    assert len({ckpt.key(p) for p in grid}) == len(grid)


def test_one_policy_written_as_a_list_or_a_scalar_is_the_same_grid(write_yaml):
    scalar = load_experiment(write_yaml(BASE.replace("[lru, s3fifo]", "s3fifo"), "a.yaml"))
    listed = load_experiment(write_yaml(BASE.replace("[lru, s3fifo]", "[s3fifo]"), "b.yaml"))
    assert scalar.grid() == listed.grid()
    assert {p.labels()["store_policy"] for p in scalar.grid()} == {"none", "s3fifo"}


@pytest.mark.parametrize(
    ("new", "key", "words"),
    [
        ("[lru, lruu]", "cluster.store.policy[1]", "did you mean 'lru'?"),
        ("[no-such-policy, lru]", "cluster.store.policy[0]", "no-such-policy"),
        # what a store cannot give: its future requests
        (
            "[lru, cost-belady]",
            "cluster.store.policy[1]",
            "'cost-belady' reads what a stored chunk",
        ),
        ("[belady, lru]", "cluster.store.policy[0]", "'belady' reads what"),
        ("[lru, lru]", "cluster.store.policy", "duplicate value 'lru'"),
        ("[]", "cluster.store.policy", "must not be empty"),
        ("[lru, 3]", "cluster.store.policy[1]", "expected a string"),
    ],
)
def test_each_policy_of_the_list_is_checked_at_its_index(write_yaml, new, key, words):
    path = write_yaml(BASE.replace("[lru, s3fifo]", new), "bad.yaml")
    err = error_of(path)
    first = str(err).splitlines()[0]
    assert first.startswith(f"{path}: {key}: "), str(err)
    assert words in first, str(err)
    assert err.key == key


TINY = """
name: tiny-store-policy
trace: {kind: synthetic, sessions: 24, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.25, cpu_kv_gb: 0}
policies: [lru]
cluster:
  replicas: [2]
  router: round-robin
  store: {capacity_gb: [0, 0.5], policy: POLICY, chunk_tokens: 32}
executor: {kind: local, workers: 1}
"""
POLICIES = ("lru", "s3fifo")


def _run(folder, name: str, policy: str):
    cfg = folder / f"{name}.yaml"
    cfg.write_text(TINY.replace("POLICY", policy), encoding="utf-8")
    out = folder / name
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    return pd.read_csv(out / "summary.csv"), pd.read_parquet(out / "turns.parquet"), out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two-policy run, and each policy's own run (a store of 0.5 GB: short, so it evicts)."""
    folder = tmp_path_factory.mktemp("store-policy")
    both = _run(folder, "both", f"[{', '.join(POLICIES)}]")
    single = {p: _run(folder, p, p) for p in POLICIES}
    return both, single


def _rows_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal in every column but the wall-clock ones, NaN equal to NaN."""
    cols = [c for c in a.columns if c not in WALL_CLOCK_COLUMNS]
    assert list(cols) == [c for c in b.columns if c not in WALL_CLOCK_COLUMNS]
    pd.testing.assert_frame_equal(
        a[cols].reset_index(drop=True), b[cols].reset_index(drop=True), check_exact=True
    )


@pytest.mark.slow
def test_each_point_of_a_policy_list_is_its_single_policy_run(runs):
    (summary, turns, _), single = runs
    assert list(zip(summary.store_gb, summary.store_policy)) == [
        (0.0, "none"),
        (0.5, "lru"),
        (0.5, "s3fifo"),
    ]
    for policy in POLICIES:
        one_summary, one_turns, _ = single[policy]
        assert list(one_summary.store_policy) == ["none", policy]
        _rows_equal(summary[summary.store_policy == policy], one_summary.iloc[[1]])
        _rows_equal(turns[turns.store_policy == policy], one_turns[one_turns.store_gb == 0.5])
    # the point without a store is the same in all three runs
    for policy in POLICIES:
        _rows_equal(summary.iloc[[0]], single[policy][0].iloc[[0]])
    # and the two policies did differ: the store evicted, under different rules
    by = summary.set_index("store_policy")
    assert by.loc["lru", "store_hit_rate"] != by.loc["s3fifo", "store_hit_rate"]
    assert (by.loc[["lru", "s3fifo"], "store_hit_rate"] > 0).all()
    lru, s3 = (turns[turns.store_policy == p].store_tokens.to_numpy() for p in POLICIES)
    assert (lru != s3).any()


@pytest.mark.slow
def test_the_store_figure_draws_a_line_per_store_policy(runs):
    (summary, _, out), single = runs
    assert (out / "plots" / "store_vs_replicas.png").stat().st_size > 10_000
    assert store_variants(summary) == [(0.0, "none"), (0.5, "lru"), (0.5, "s3fifo")]
    lines = router_lines(summary, "store_hit_rate")
    assert [name for *_, name in lines] == [
        "round-robin, no store",
        "round-robin, store 0.5 GB (lru)",
        "round-robin, store 0.5 GB (s3fifo)",
    ]
    for (_, store, _), series in lines.items():
        row = summary[summary.store_policy == store[1]]
        assert series.tolist() == row.store_hit_rate.tolist()  # one point each, never a mean
    # one policy at capacities 0 and 0.5: the lines are told apart by capacity alone
    one = router_lines(single["lru"][0], "store_hit_rate")
    assert [name for *_, name in one] == ["round-robin, no store", "round-robin, store 0.5 GB"]


def test_the_store_figure_compares_policies_at_one_capacity(tmp_path):
    rows = []
    for policy, rate in (("lru", 0.4), ("s3fifo", 0.3)):
        for n in (1, 2, 4):
            rows.append(
                {
                    "policy": "lru",
                    "gpu_kv_gb": 4.0,
                    "router": "kv-aware",
                    "replicas": n,
                    "store_gb": 16.0,
                    "store_policy": policy,
                    "ttft_p50_s": 0.01,
                    "ttft_p90_s": 0.02,
                    "reprefill_rate": rate / n,
                    "store_hit_rate": 1 - rate,
                }
            )
    summary = pd.DataFrame(rows)
    assert store_variants(summary) == [(None, "lru"), (None, "s3fifo")]
    lines = router_lines(summary, "reprefill_rate")
    assert [name for *_, name in lines] == ["kv-aware, store lru", "kv-aware, store s3fifo"]
    (s3,) = [s for (_, store, _), s in lines.items() if store == (None, "s3fifo")]
    assert all(math.isclose(v, 0.3 / n) for n, v in s3.items())
    drawn = cluster_figures(summary, tmp_path, [])
    assert sorted(p.name for p in drawn) == ["routers_vs_replicas.png", "store_vs_replicas.png"]


def test_the_bundled_scale_experiment_loads_and_expands():
    from pathlib import Path

    exp = load_experiment(
        Path(__file__).resolve().parents[2] / "experiments" / "cluster_scale.yaml"
    )
    grid = exp.grid()
    assert len(grid) == 4 * 5 * 3
    assert sorted({p.cluster.replicas for p in grid}) == [1, 2, 4, 8, 16]
    assert {p.cluster.router for p in grid} == {
        "round-robin",
        "least-loaded",
        "session-affinity",
        "kv-aware",
    }
    stores = {(p.store_gb, p.labels()["store_policy"]) for p in grid}
    assert stores == {(0.0, "none"), (16.0, "lru"), (16.0, "s3fifo")}
    for p in grid:
        store = p.cluster.store
        assert (store is None) == (p.store_gb == 0)
        if store is not None:
            assert store.policy == p.labels()["store_policy"]
