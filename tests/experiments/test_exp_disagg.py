"""The experiment YAML's ``cluster.disaggregation`` section: its errors name keys (a prefill pool
that leaves a grid point no decode replica names the cluster size it conflicts with), its
``prefill_replicas`` axis and label in the grid (0: colocated), its summary columns and replicas.csv
roles against the ledger, a colocated point equal to the same point without the section, the
bundled experiments/cluster_disagg.yaml, and the disaggregation figure through `kvsim run`,
`kvsim plot` and `kvsim report`."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import costmodels
from experiments.checkpoint import Checkpoints
from experiments.cli import main
from experiments.cluster_plots import DISAGG_FIGURE, cluster_figures, disagg_lines
from experiments.compare import AXES
from experiments.executor import load_sessions, run_point
from experiments.schema import (
    ALL_LABEL_COLUMNS,
    DISAGG_DEFAULTS,
    ConfigError,
    load_experiment,
    parse_experiment,
)
from sim.cluster import simulate_cluster
from sim.cluster.disagg import DisaggConfig
from sim.cluster.store import StoreConfig
from sim.metrics import WALL_CLOCK_COLUMNS

REPO = Path(__file__).resolve().parents[2]
BASE = """
name: d
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.5, cpu_kv_gb: 0}
policies: [lru]
seeds: [1, 2]
cluster:
  replicas: [2, 3]
  router: [round-robin, kv-aware]
  disaggregation: {prefill_replicas: [0, 1], bandwidth_gb_s: 10, latency_us: 5, layerwise: true}
"""
DISAGG_COLUMNS = ("transfer_gb", "transfer_stall_p90_s", "decoded_share")
LEDGER_COLUMNS = ("decode_replica", "transfer_tokens", "transfer_bytes", "transfer_stall_s")
# The labels of a point with a cluster and a disaggregation section but no store section.
DISAGG_LABELS = [
    c
    for c in ALL_LABEL_COLUMNS
    if c not in ("groups", "store_gb", "store_policy", "store_write", "kv_delay_ms")
]


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return info.value


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        # a prefill pool as large as a cluster size: no decode replica at that grid point
        (
            "prefill_replicas: [0, 1]",
            "prefill_replicas: [0, 2]",
            "cluster.disaggregation.prefill_replicas[1]",
            "2 prefill replicas leave no decode replica with cluster.replicas[0] = 2",
        ),
        (
            "prefill_replicas: [0, 1]",
            "prefill_replicas: 3",
            "cluster.disaggregation.prefill_replicas",
            "3 prefill replicas leave no decode replica with cluster.replicas[0] = 2",
        ),
        (
            "prefill_replicas: [0, 1]",
            "prefill_replicas: [0, -1]",
            "cluster.disaggregation.prefill_replicas[1]",
            ">= 0",
        ),
        (
            "prefill_replicas: [0, 1]",
            "prefill_replicas: [1, 1]",
            "cluster.disaggregation.prefill_replicas",
            "duplicate",
        ),
        (
            "prefill_replicas: [0, 1]",
            "prefill_replicas: [0, 1.5]",
            "cluster.disaggregation.prefill_replicas[1]",
            "an integer",
        ),
        (
            "prefill_replicas: [0, 1], ",
            "",
            "cluster.disaggregation.prefill_replicas",
            "required key is missing",
        ),
        (
            "bandwidth_gb_s: 10",
            "bandwidth_gb_s: 0",
            "cluster.disaggregation.bandwidth_gb_s",
            "> 0, got 0",
        ),
        (
            "latency_us: 5",
            "latency_us: -1",
            "cluster.disaggregation.latency_us",
            ">= 0, got -1",
        ),
        (
            "layerwise: true",
            "layerwise: 1",
            "cluster.disaggregation.layerwise",
            "expected true or false",
        ),
        (
            "layerwise: true",
            "layerwise: 'yes'",
            "cluster.disaggregation.layerwise",
            "expected true or false",
        ),
        (
            "layerwise: true",
            "layerwize: true",
            "cluster.disaggregation.layerwize",
            "did you mean 'layerwise'?",
        ),
        ("disaggregation: {", "disaggregation: 3 #{", "cluster.disaggregation", "a mapping"),
        (
            "layerwise: true",
            "layerwise: true, link: pcie",
            "cluster.disaggregation.link",
            "must be one of network, pcie-host",
        ),
        (
            "layerwise: true",
            "layerwise: true, link: pcie-host",
            "cluster.disaggregation.bandwidth_gb_s",
            "with link pcie-host the cost model prices the copies",
        ),
    ],
)
def test_disaggregation_errors_name_file_and_key(write_yaml, old, new, key, words):
    assert old in BASE
    path = write_yaml(BASE.replace(old, new), "bad.yaml")
    err = error_of(path)
    first = str(err).splitlines()[0]
    assert first.startswith(f"{path}: {key}: "), str(err)
    assert words in first, str(err)
    assert err.key == key


def test_every_conflicting_cluster_size_is_named(write_yaml):
    # replicas [2, 3] and prefill 2 and 3: (2, 2), (3, 2) and (3, 3) have no decode replica
    err = error_of(write_yaml(BASE.replace("[0, 1]", "[0, 2, 3]"), "bad.yaml"))
    lines = [line.split(": ", 1)[1] for line in str(err).splitlines()]
    assert lines == [
        "cluster.disaggregation.prefill_replicas[1]: 2 prefill replicas leave no decode replica "
        "with cluster.replicas[0] = 2: give every cluster size more replicas than the prefill "
        "pool (0: colocated)",
        "cluster.disaggregation.prefill_replicas[2]: 3 prefill replicas leave no decode replica "
        "with cluster.replicas[0] = 2: give every cluster size more replicas than the prefill "
        "pool (0: colocated)",
        "cluster.disaggregation.prefill_replicas[2]: 3 prefill replicas leave no decode replica "
        "with cluster.replicas[1] = 3: give every cluster size more replicas than the prefill "
        "pool (0: colocated)",
    ]


def test_colocated_alone_refuses_nothing(write_yaml):
    # what a disaggregated point cannot run with is refused only where a point disaggregates,
    # and a one-replica cluster is fine colocated
    text = (
        BASE.replace("[0, 1]", "0")
        .replace("[2, 3]", "[1, 2]")
        .replace("cpu_kv_gb: 0}", "cpu_kv_gb: 0, evict_unit: session}")
    )
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 8
    assert all(p.cluster.disaggregation is None and p.prefill_replicas == 0 for p in grid)
    assert {p.labels()["prefill_replicas"] for p in grid} == {0}


def test_the_prefill_axis_comes_after_replicas_and_before_seed(write_yaml):
    grid = load_experiment(write_yaml(BASE)).grid()
    assert len(grid) == 2 * 2 * 2 * 2  # router, replicas, prefill replicas, seed
    order = [(p.cluster.router, p.cluster.replicas, p.prefill_replicas, p.seed) for p in grid]
    assert order[:6] == [
        ("round-robin", 2, 0, 1),
        ("round-robin", 2, 0, 2),
        ("round-robin", 2, 1, 1),
        ("round-robin", 2, 1, 2),
        ("round-robin", 3, 0, 1),
        ("round-robin", 3, 0, 2),
    ]
    assert order[8][0] == "kv-aware"
    # 0: colocated (no disaggregation); n: a pool of n with the section's link
    for p in grid:
        if p.prefill_replicas == 0:
            assert p.cluster.disaggregation is None
        else:
            assert p.cluster.disaggregation == DisaggConfig(1, 10.0, 5.0, True)
    labels = grid[2].labels()
    assert list(labels) == DISAGG_LABELS
    assert (labels["replicas"], labels["prefill_replicas"], labels["seed"]) == (2, 1, 1)
    assert "prefill_replicas" in AXES  # kvsim compare matches on it
    # points that differ only in the prefill pool never share a checkpoint
    ckpt = Checkpoints("unused")
    assert len({ckpt.key(p) for p in grid}) == len(grid)
    other = load_experiment(
        write_yaml(BASE.replace("layerwise: true", "layerwise: false"), "b.yaml")
    )
    mine = {ckpt.key(p) for p in grid if p.prefill_replicas}
    assert mine & {ckpt.key(p) for p in other.grid()} == set()


def test_with_a_store_the_prefill_axis_comes_after_the_store_capacity(write_yaml):
    text = BASE + "  store: {capacity_gb: [0, 8], chunk_tokens: 32}\n"
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 32
    order = [(p.cluster.replicas, p.store_gb, p.prefill_replicas, p.seed) for p in grid[:8]]
    assert order[::2] == [(2, 0.0, 0, 1), (2, 0.0, 1, 1), (2, 8.0, 0, 1), (2, 8.0, 1, 1)]
    assert list(grid[0].labels()) == [
        c for c in ALL_LABEL_COLUMNS if c not in ("groups", "kv_delay_ms")
    ]
    p = grid[6]
    assert p.cluster.store == StoreConfig(capacity_gb=8.0, chunk_tokens=32)
    assert p.cluster.disaggregation == DisaggConfig(1, 10.0, 5.0, True)


def test_the_disaggregation_defaults_are_disagg_configs():
    fields = {
        f.name: f.default for f in dataclasses.fields(DisaggConfig) if f.name != "prefill_replicas"
    }
    assert DISAGG_DEFAULTS == fields
    (point,) = parse_experiment(_tiny(1)).grid()
    assert point.cluster.disaggregation == DisaggConfig(prefill_replicas=1)


def test_without_a_disaggregation_section_there_is_no_prefill_label(write_yaml):
    text = BASE[: BASE.index("  disaggregation:")]
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 8
    assert all(p.prefill_replicas is None and p.cluster.disaggregation is None for p in grid)
    assert "prefill_replicas" not in grid[0].labels()


def test_the_bundled_experiment_loads_and_expands():
    exp = load_experiment(REPO / "experiments" / "cluster_disagg.yaml")
    grid = exp.grid()
    assert len(grid) == 24
    assert {p.cluster.replicas for p in grid} == {2, 4, 8}
    assert {p.cluster.router for p in grid} == {"session-affinity", "kv-aware"}
    assert {(p.store_gb, p.prefill_replicas) for p in grid} == {
        (0.0, 0),
        (0.0, 1),
        (64.0, 0),
        (64.0, 1),
    }
    for p in grid:
        assert (p.cluster.disaggregation is None) == (p.prefill_replicas == 0)
        assert (p.cluster.store is None) == (p.store_gb == 0)
        assert p.labels()["prefill_replicas"] == p.prefill_replicas
    # the trace, model, hardware and memory of cluster.yaml
    ref = load_experiment(REPO / "experiments" / "cluster.yaml")
    assert exp.trace == ref.trace and exp.model == ref.model and exp.hardware == ref.hardware
    assert exp.memory == ref.memory


TINY = """
name: tiny-disagg
trace: {kind: synthetic, sessions: 16, seed: 3, max_context_tokens: 1536}  # every turn fits
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.25, cpu_kv_gb: 0}
policies: [lru]
cluster:
  replicas: [2, 3]
  router: round-robin
  disaggregation: {prefill_replicas: [0, 1], bandwidth_gb_s: 0.5, layerwise: false}
"""


@pytest.fixture(scope="module")
def disagg_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("disagg")
    cfg = folder / "tiny.yaml"
    cfg.write_text(TINY, encoding="utf-8")
    out = folder / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    return cfg, out


def _by_hand(turns: pd.DataFrame) -> dict[str, float]:
    """The three disaggregation columns from a point's ledger, turn by turn."""
    stalls, decoded, sent = [], 0, 0
    for row in turns.itertuples():
        sent += row.transfer_bytes
        if row.decode_replica >= 0:
            decoded += 1
            stalls.append(row.transfer_stall_s)
    return {
        "transfer_gb": sent / 1e9,
        "transfer_stall_p90_s": float(np.percentile(stalls, 90)) if stalls else 0.0,
        "decoded_share": decoded / len(turns),
    }


def test_a_disaggregation_experiment_runs_end_to_end(disagg_run):
    _, out = disagg_run
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns[: len(DISAGG_LABELS)]) == DISAGG_LABELS
    assert set(DISAGG_COLUMNS) <= set(summary.columns)
    assert list(zip(summary.replicas, summary.prefill_replicas)) == [(2, 0), (2, 1), (3, 0), (3, 1)]
    assert (summary.rejected_turns == 0).all() and (summary.reprefill_rate > 0).all()
    turns = pd.read_parquet(out / "turns.parquet")
    assert turns[list(LEDGER_COLUMNS)].notna().all().all()  # colocated points: -1, 0, 0, 0.0
    for row in summary.itertuples():
        mine = turns[
            (turns.replicas == row.replicas) & (turns.prefill_replicas == row.prefill_replicas)
        ]
        assert len(mine) == row.turns
        want = _by_hand(mine)
        for column in DISAGG_COLUMNS:
            assert getattr(row, column) == pytest.approx(want[column], rel=1e-12), column
        if row.prefill_replicas == 0:
            assert (mine.decode_replica == -1).all() and (mine.transfer_bytes == 0).all()
            assert (row.transfer_gb, row.transfer_stall_p90_s, row.decoded_share) == (0, 0, 0)
        else:
            # every turn of more than one output token went on to a decode replica
            assert ((mine.decode_replica >= 1) == (mine.output_tokens > 1)).all()
            assert 0.5 < row.decoded_share <= 1 and row.transfer_gb > 0
            assert row.transfer_stall_p90_s > 0  # a 0.5 GB/s link, whole transfers: it shows
    for name in (f"{DISAGG_FIGURE}.png", "routers_vs_replicas.png"):
        assert (out / "plots" / name).is_file()


def test_the_disaggregation_columns_are_the_simulators_ledger(disagg_run):
    """The summary's columns against a run of simulate_cluster itself: the experiment passes the
    section's link on, and reads the ledger simulate_cluster writes."""
    cfg, out = disagg_run
    summary = pd.read_csv(out / "summary.csv")
    point = next(
        p for p in load_experiment(cfg).grid() if p.prefill_replicas and p.cluster.replicas == 3
    )
    assert point.cluster.disaggregation == DisaggConfig(1, 0.5, 20.0, False)
    result = simulate_cluster(
        list(load_sessions(point.trace)),
        costmodels.cost_model(point.model, point.hardware),
        point.memory,
        point.engine,
        point.policy,
        point.seed,
        point.cluster,
    )
    row = summary[(summary.replicas == 3) & (summary.prefill_replicas == 1)].iloc[0]
    want = _by_hand(result.turns)
    assert want["transfer_gb"] == pytest.approx(result.turns.transfer_bytes.sum() / 1e9)
    for column in DISAGG_COLUMNS:
        assert row[column] == pytest.approx(want[column], rel=1e-12), column


def test_replicas_csv_names_each_replicas_role(disagg_run):
    _, out = disagg_run
    replicas = pd.read_csv(out / "replicas.csv")
    cols = list(replicas.columns)
    assert cols[cols.index("replica") + 1] == "role"
    got = {
        (r.replicas, r.prefill_replicas): list(g.role)
        for r, g in [(g.iloc[0], g) for _, g in replicas.groupby(["replicas", "prefill_replicas"])]
    }
    assert got == {
        (2, 0): ["colocated"] * 2,
        (2, 1): ["prefill", "decode"],
        (3, 0): ["colocated"] * 3,
        (3, 1): ["prefill", "decode", "decode"],
    }
    # a prefill replica's ledger stops at one output token; a decode replica's brings no prompt
    turns = pd.read_parquet(out / "turns.parquet")
    pool = replicas[(replicas.replicas == 3) & (replicas.prefill_replicas == 1)]
    mine = turns[(turns.replicas == 3) & (turns.prefill_replicas == 1)]
    prefill = pool[pool.role == "prefill"].iloc[0]
    decode = pool[pool.role == "decode"]
    assert prefill.turns == len(mine)  # every turn starts on the prefill replica
    assert decode.turns.sum() == (mine.decode_replica >= 0).sum()
    for r in decode.itertuples():
        assert r.turns == (mine.decode_replica == r.replica).sum()


def test_plot_and_report_draw_the_disaggregation_figure(disagg_run, tmp_path):
    _, out = disagg_run
    (out / "plots" / f"{DISAGG_FIGURE}.png").unlink()
    assert main(["plot", str(out)]) == 0
    assert (out / "plots" / f"{DISAGG_FIGURE}.png").stat().st_size > 10_000
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    assert f'data-file="{DISAGG_FIGURE}.png"' in page.read_text(encoding="utf-8")


def _summary(prefill: list[int], stores: list[float] | None = None) -> pd.DataFrame:
    rows = []
    for router in ("session-affinity", "kv-aware"):
        for n in (2, 4):
            for gb in stores or [None]:
                for p in prefill:
                    rows.append(
                        {
                            "policy": "lru",
                            "gpu_kv_gb": 4.0,
                            "router": router,
                            "replicas": n,
                            **({} if gb is None else {"store_gb": gb}),
                            "prefill_replicas": p,
                            "ttft_p90_s": 0.01 * n + p + (gb or 0),
                            "tbt_p90_s": 0.007,
                            "reprefill_rate": 0.1 * p,
                        }
                    )
    return pd.DataFrame(rows)


def test_the_figure_needs_two_prefill_pools(tmp_path):
    notes: list[str] = []
    drawn = cluster_figures(_summary([0, 1], [0.0, 64.0]), tmp_path / "two", notes)
    assert f"{DISAGG_FIGURE}.png" in {p.name for p in drawn}
    (tmp_path / "one").mkdir()
    drawn = cluster_figures(_summary([1]), tmp_path / "one", notes)
    assert [p.name for p in drawn] == ["routers_vs_replicas.png"]


def test_disagg_lines_are_one_per_router_and_prefill_pool():
    summary = _summary([0, 1])
    lines = disagg_lines(summary, "ttft_p90_s")
    assert list(lines) == [
        ("kv-aware", 0, "kv-aware, colocated"),
        ("kv-aware", 1, "kv-aware, 1 prefill replica"),
        ("session-affinity", 0, "session-affinity, colocated"),
        ("session-affinity", 1, "session-affinity, 1 prefill replica"),
    ]
    assert lines["kv-aware", 1, "kv-aware, 1 prefill replica"].tolist() == [1.02, 1.04]
    # another label that varies splits the lines and is named, never averaged over
    two = pd.concat([summary, summary.assign(policy="fifo", ttft_p90_s=9.0)])
    names = [name for *_, name in disagg_lines(two, "ttft_p90_s")]
    assert "kv-aware, colocated, policy=fifo" in names and len(names) == 8


def test_a_colocated_point_equals_the_same_point_without_the_section():
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
    section = {**cluster, "disaggregation": {"prefill_replicas": 0, "bandwidth_gb_s": 1}}
    (zero,) = parse_experiment({**base, "cluster": section}).grid()
    assert zero.cluster == plain.cluster and zero.prefill_replicas == 0
    a, b = run_point(0, plain), run_point(0, zero)
    assert a.summary["reprefill_rate"] > 0  # the GPU is short: the runs have work to differ on
    shared = [k for k in a.summary if k in b.summary and k not in WALL_CLOCK_COLUMNS]
    assert set(a.summary) - set(shared) == set(WALL_CLOCK_COLUMNS)
    assert set(b.summary) - set(shared) == set(WALL_CLOCK_COLUMNS) | set(DISAGG_COLUMNS)
    for k in shared:
        x, y = a.summary[k], b.summary[k]
        assert x == y or (math.isnan(x) and math.isnan(y)), k
    assert all(b.summary[k] == 0.0 for k in DISAGG_COLUMNS)
    # the ledgers too, but b's prefill_replicas label and transfer columns (nothing sent)
    pd.testing.assert_frame_equal(
        a.turns, b.turns.drop(columns=["prefill_replicas", *LEDGER_COLUMNS])
    )
    assert (b.turns.decode_replica == -1).all() and (b.turns.transfer_stall_s == 0).all()
    # each replica's row: the same, but b's role
    for x, y in zip(a.replicas, b.replicas, strict=True):
        assert y["role"] == "colocated"
        rest = {k: v for k, v in y.items() if k not in ("role", "prefill_replicas")}
        assert set(rest) == set(x)
        for k in x:
            if k not in WALL_CLOCK_COLUMNS:
                assert x[k] == rest[k] or (math.isnan(x[k]) and math.isnan(rest[k])), k


@pytest.mark.parametrize("prefetch", ["queue", "think"])
def test_what_the_yaml_refused_with_disaggregation_loads_and_runs(prefetch):
    """A prefetch with disaggregation (refused at load time and by simulate_cluster until the
    recovery told a prefetched split what a transfer sends): the YAML loads, its point runs and
    conserves the history on both pools."""
    data = _tiny(1)
    data["engine"] = {"prefetch": prefetch}
    (point,) = parse_experiment(data, source="x.yaml").grid()
    res = run_point(0, point)
    t = res.turns
    split = t.gpu_hit_tokens + t.cpu_hit_tokens + t.recomputed_tokens + t.pruned_tokens
    assert (split == t.history_tokens).all()
    assert (t.transfer_tokens > 0).any()


def _tiny(prefill: int) -> dict:
    return {
        "name": "t",
        "trace": {"kind": "synthetic", "sessions": 4, "seed": 3},
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "memory": {"gpu_kv_gb": 0.25, "cpu_kv_gb": 0},
        "policies": ["lru"],
        "cluster": {"replicas": 2, "disaggregation": {"prefill_replicas": prefill}},
    }


def test_the_worst_replicas_ttft_is_of_the_turns_whose_first_token_it_emitted(disagg_run):
    """With disaggregation a turn's first token comes from its decode replica (its TTFT runs from
    the prefill part's arrival); a turn of one output token ends on its prefill replica."""
    _, out = disagg_run
    summary = pd.read_csv(out / "summary.csv")
    turns = pd.read_parquet(out / "turns.parquet")
    for row in summary.itertuples():
        mine = turns[
            (turns.replicas == row.replicas) & (turns.prefill_replicas == row.prefill_replicas)
        ]
        emitter = mine.decode_replica.where(mine.decode_replica >= 0, mine.replica)
        worst = max(np.percentile(g.ttft_s, 90) for _, g in mine.groupby(emitter))
        assert row.replica_ttft_p90_max_s == pytest.approx(worst, rel=1e-12)
