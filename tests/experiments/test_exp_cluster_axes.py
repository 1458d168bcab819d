"""``cluster.kv_events.delay_ms`` and ``cluster.store.write`` as grid axes: the grid against a plain
nested loop of the documented order, each point's cluster and labels (``kv_delay_ms``,
``store_write``), bad entries named by their index, and a run that writes both columns."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.checkpoint import Checkpoints
from experiments.cli import main
from experiments.compare import AXES
from experiments.executor import run_point
from experiments.schema import ConfigError, parse_experiment
from sim.metrics import WALL_CLOCK_COLUMNS

BASE = {
    "name": "axes",
    "trace": {"kind": "synthetic", "sessions": 12, "seed": 3},
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "memory": {"gpu_kv_gb": 0.5, "cpu_kv_gb": 0},
    "policies": ["lru"],
}
WRITES = ["completion", "eviction", "both"]


def grid_of(cluster: dict, **top):
    return parse_experiment({**BASE, **top, "cluster": cluster}).grid()


@settings(max_examples=60, deadline=None)
@given(
    routers=st.lists(st.sampled_from(["round-robin", "kv-aware"]), min_size=1, unique=True),
    capacities=st.lists(st.sampled_from([0.0, 4.0, 8.0]), min_size=1, unique=True),
    policies=st.lists(st.sampled_from(["lru", "arc"]), min_size=1, unique=True),
    writes=st.lists(st.sampled_from(WRITES), min_size=1, unique=True),
    prefill=st.lists(st.sampled_from([0, 1]), min_size=1, unique=True),
    delays=st.lists(st.sampled_from([0.0, 5.0, 50.0]), min_size=1, unique=True),
    seeds=st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True),
)
def test_the_grid_is_the_plain_nested_loop(
    routers, capacities, policies, writes, prefill, delays, seeds
):
    """router, store capacity, store policy, store write, prefill replicas, delay, seed (the
    last fastest); capacity 0 is one point (no policy, no write)."""
    store = {"capacity_gb": capacities, "policy": policies, "write": writes, "chunk_tokens": 32}
    cluster = {
        "replicas": [2],
        "router": routers,
        "store": store,
        "disaggregation": {"prefill_replicas": prefill},
        "kv_events": {"delay_ms": delays},
    }
    grid = grid_of(cluster, seeds=seeds)
    plain = [
        (router, gb, policy, write, pf, delay, seed)
        for router in routers
        for gb in capacities
        for policy in ([None] if gb == 0 else policies)
        for write in ([None] if gb == 0 else writes)
        for pf in prefill
        for delay in delays
        for seed in seeds
    ]
    got = []
    for p in grid:
        c, labels = p.cluster, p.labels()
        store_cfg = c.store
        got.append(
            (
                c.router,
                p.store_gb,
                None if store_cfg is None else store_cfg.policy,
                None if store_cfg is None else store_cfg.write,
                p.prefill_replicas,
                c.kv_events_delay_ms,
                p.seed,
            )
        )
        assert labels["kv_delay_ms"] == c.kv_events_delay_ms == p.kv_delay_ms
        assert labels["store_write"] == ("none" if store_cfg is None else store_cfg.write)
    assert got == plain
    # no two points share a checkpoint
    ckpt = Checkpoints("unused")
    assert len({ckpt.key(p) for p in grid}) == len(grid)


def test_the_labels_come_with_their_sections_only():
    plain = grid_of({"replicas": [2]})[0].labels()
    assert not {"kv_delay_ms", "store_write"} & set(plain)
    delayed = grid_of({"replicas": [2], "kv_events": {"delay_ms": 50}})[0].labels()
    assert delayed["kv_delay_ms"] == 50.0 and "store_write" not in delayed
    labels = list(delayed)
    assert labels.index("kv_delay_ms") == labels.index("seed") - 1
    stored = grid_of({"replicas": [2], "store": {"capacity_gb": 8, "chunk_tokens": 32}})
    assert stored[0].labels()["store_write"] == "completion"  # the store's default
    assert "kv_delay_ms" not in stored[0].labels()
    assert {"kv_delay_ms", "store_write"} <= set(AXES)  # kvsim compare matches on them


@pytest.mark.parametrize(
    ("cluster", "key", "words"),
    [
        (
            {"store": {"capacity_gb": 8, "chunk_tokens": 32, "write": ["both", "evict"]}},
            "cluster.store.write[1]",
            "must be one of completion, eviction, both, got 'evict'",
        ),
        (
            {"store": {"capacity_gb": 8, "write": ["both", "both"]}},
            "cluster.store.write",
            "duplicate",
        ),
        ({"kv_events": {"delay_ms": [0, -1]}}, "cluster.kv_events.delay_ms[1]", ">= 0"),
        ({"kv_events": {"delay_ms": [5, 5]}}, "cluster.kv_events.delay_ms", "duplicate"),
        ({"kv_events": {"delay_ms": [0, ".inf"]}}, "cluster.kv_events.delay_ms", "number"),
        ({"kv_events": {"delay_ms": [0, math.inf]}}, "cluster.kv_events.delay_ms", "finite"),
    ],
)
def test_a_bad_entry_names_its_key(cluster, key, words):
    with pytest.raises(ConfigError) as info:
        grid_of({"replicas": [2], **cluster})
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"<memory>: {key}"), str(info.value)
    assert words in str(info.value)


def test_a_zero_delay_is_the_run_without_the_section():
    (plain,) = grid_of({"replicas": [2], "router": "kv-aware"})
    zero, late = grid_of(
        {"replicas": [2], "router": "kv-aware", "kv_events": {"delay_ms": [0, 50]}}
    )
    a, b = run_point(0, plain), run_point(0, zero)
    shared = [k for k in a.summary if k not in WALL_CLOCK_COLUMNS]
    assert set(b.summary) - set(a.summary) == set()
    for k in shared:
        x, y = a.summary[k], b.summary[k]
        assert x == y or (math.isnan(x) and math.isnan(y)), k
    pd.testing.assert_frame_equal(a.turns, b.turns.drop(columns=["kv_delay_ms"]))
    assert late.cluster.kv_events_delay_ms == 50.0


TINY = """
name: axes
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.5, cpu_kv_gb: 0}
policies: [lru]
cluster:
  replicas: [2]
  router: [kv-aware]
  store: {capacity_gb: [0, 2], chunk_tokens: 32, write: [completion, eviction]}
  kv_events: {delay_ms: [0, 50]}
"""


def test_both_axes_run_end_to_end_with_their_columns(tmp_path):
    cfg = tmp_path / "axes.yaml"
    cfg.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    summary = pd.read_csv(out / "summary.csv")
    cols = list(summary.columns)
    assert cols.index("store_policy") < cols.index("store_write") < cols.index("kv_delay_ms")
    assert cols.index("kv_delay_ms") == cols.index("seed") - 1
    points = list(zip(summary.store_gb, summary.store_write, summary.kv_delay_ms))
    assert points == [
        (0.0, "none", 0.0),
        (0.0, "none", 50.0),
        *itertools.product([2.0], ["completion", "eviction"], [0.0, 50.0]),
    ]
    # eviction writes what the replicas drop; completion writes nothing at drops
    by_write = summary[summary.store_gb > 0].groupby("store_write").store_drop_written_gb.max()
    assert by_write["completion"] == 0.0
    turns = pd.read_parquet(out / "turns.parquet")
    assert {"store_write", "kv_delay_ms"} <= set(turns.columns)


def test_the_routers_figure_splits_its_lines_by_the_axes_that_vary():
    from experiments.cluster_plots import router_lines

    rows = pd.DataFrame(
        {
            "router": ["kv-aware"] * 4,
            "replicas": [1, 2, 1, 2],
            "store_gb": [8.0] * 4,
            "store_policy": ["lru"] * 4,
            "store_write": ["completion", "completion", "eviction", "eviction"],
            "kv_delay_ms": [0.0, 0.0, 50.0, 50.0],
            "ttft_p90_s": [1.0, 2.0, 3.0, 4.0],
        }
    )
    names = [name for _, _, name in router_lines(rows, "ttft_p90_s")]
    assert names == [
        "kv-aware, store writes at completion, KV events 0 ms late",
        "kv-aware, store writes at eviction, KV events 50 ms late",
    ]
    # one write beside points without a store ("none") is no axis of its own
    one = rows.assign(store_write=["none", "none", "completion", "completion"], kv_delay_ms=0.0)
    names = [name for _, _, name in router_lines(one, "ttft_p90_s")]
    assert names == ["kv-aware"]
