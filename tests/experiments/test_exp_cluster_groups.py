"""The experiment YAML's ``cluster.groups``: one fleet or a grid axis of fleets, its replicas and
``groups`` label in the grid, each group as the simulator takes it, its errors at their keys, and
a run whose groups equal the point's values giving the summary of the run without groups."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.executor import run_point
from experiments.schema import ALL_LABEL_COLUMNS, ConfigError, load_experiment
from sim.cluster.groups import ReplicaGroup

BASE = """
name: g
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 1, cpu_kv_gb: 0}
policies: [lru]
cluster:
  router: [round-robin, session-affinity]
  groups:
    - {replicas: 1}
    - {replicas: 2, hardware: a100-sxm, gpu_kv_gb: 0.5, cpu_kv_gb: 2, policy: arc}
"""
FLEETS = """
  groups:
    - [{replicas: 2}]
    - [{replicas: 1, hardware: h200}, {replicas: 3, hardware: a100-sxm}]
"""


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return info.value


def test_one_fleet_of_groups_gives_each_point_its_groups_and_a_label(write_yaml):
    grid = load_experiment(write_yaml(BASE)).grid()
    assert [p.cluster.router for p in grid] == ["round-robin", "session-affinity"]
    p = grid[0]
    assert p.cluster.replicas == 3  # the groups' sum: cluster.replicas left out
    assert p.cluster.groups == (
        ReplicaGroup(1),
        ReplicaGroup(2, "a100-sxm", 0.5, 2.0, "arc"),
    )
    labels = p.labels()
    without = ("store_gb", "store_policy", "store_write", "prefill_replicas", "kv_delay_ms")
    assert list(labels) == [c for c in ALL_LABEL_COLUMNS if c not in without]
    assert labels["groups"] == "1x h100-sxm + 2x a100-sxm gpu=0.5 cpu=2 policy=arc"
    assert labels["hardware"] == "h100-sxm" and labels["policy"] == "lru"  # the point's own


def test_a_list_of_fleets_is_a_grid_axis_in_the_place_of_replicas(write_yaml):
    text = (
        BASE[: BASE.index("  groups:")] + FLEETS + "  disaggregation: {prefill_replicas: [0, 1]}\n"
    )
    grid = load_experiment(write_yaml(text)).grid()
    assert len(grid) == 2 * 2 * 2  # router, fleet, prefill pool
    order = [(p.cluster.router, p.cluster.replicas, p.prefill_replicas) for p in grid[:4]]
    assert order == [("round-robin", 2, 0), ("round-robin", 2, 1), ("round-robin", 4, 0),
                     ("round-robin", 4, 1)]  # fmt: skip
    assert [p.labels()["groups"] for p in grid[:4:2]] == [
        "2x h100-sxm",
        "1x h200 + 3x a100-sxm",
    ]
    assert grid[3].cluster.disaggregation.prefill_replicas == 1  # the H200 prefills


def test_replicas_beside_groups_must_be_their_sum(write_yaml):
    ok = BASE.replace("cluster:\n", "cluster:\n  replicas: 3\n")
    assert load_experiment(write_yaml(ok)).grid()[0].cluster.replicas == 3


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("cluster:\n", "cluster:\n  replicas: 2\n", "cluster.groups",
         "the groups' replicas sum to 3, but cluster.replicas is 2"),
        ("cluster:\n", "cluster:\n  replicas: [3, 4]\n", "cluster.replicas",
         "with cluster.groups give one value"),
        ("hardware: a100-sxm", "hardware: z80", "cluster.groups[1].hardware", "unknown profile 'z80'"),
        ("gpu_kv_gb: 0.5", "gpu_kb_gb: 0.5", "cluster.groups[1].gpu_kb_gb", "unknown key"),
        ("gpu_kv_gb: 0.5", "gpu_kv_gb: 0", "cluster.groups[1].gpu_kv_gb", "must be > 0, got 0"),
        ("policy: arc", "policy: arcc", "cluster.groups[1].policy", "unknown policy 'arcc'"),
        ("gpu_kv_gb: 0.5", "gpu_kv_gb: 70", "cluster.groups[1]",
         "+ 75.2 GB of KV (70 GiB / tp 1) = 91.2 GB, more than the 80.0 GB of HBM of one a100-sxm"),
        ("policy: arc", "policy: belady", "cluster.groups[1].policy", "must be an online one"),
        ("- {replicas: 1}", "- {replicas: 0}", "cluster.groups[0].replicas", "must be >= 1, got 0"),
    ],
)  # fmt: skip
def test_bad_groups_name_file_and_key(write_yaml, old, new, key, words):
    assert old in BASE
    path = write_yaml(BASE.replace(old, new, 1), "bad.yaml")
    err = error_of(path)
    first = str(err).splitlines()[0]
    assert first.startswith(f"{path}: {key}: "), str(err)
    assert words in first, str(err)


def test_bad_fleets_name_their_index(write_yaml):
    text = BASE[: BASE.index("  groups:")] + FLEETS
    bad = write_yaml(text.replace("hardware: a100-sxm", "hardware: z80"), "bad.yaml")
    assert str(error_of(bad)).startswith(f"{bad}: cluster.groups[1][1].hardware: unknown profile")
    sums = write_yaml(text.replace("cluster:\n", "cluster:\n  replicas: 2\n"), "sums.yaml")
    first = str(error_of(sums)).splitlines()[0]
    assert (
        first
        == f"{sums}: cluster.groups[1]: the groups' replicas sum to 4, but cluster.replicas is 2"
    )
    small = text + "  disaggregation: {prefill_replicas: [2]}\n"
    msg = str(error_of(write_yaml(small, "small.yaml")))
    assert (
        "cluster.disaggregation.prefill_replicas[0]: 2 prefill replicas leave no decode replica"
        in msg
    )
    assert "with cluster.groups[0] (2 replicas)" in msg


def test_a_profile_file_resolves_beside_the_yaml(write_yaml):
    write_yaml(open_profile(), "profiles/fast.yaml")
    text = BASE.replace("hardware: a100-sxm", "hardware: profiles/fast.yaml")
    p = load_experiment(write_yaml(text)).grid()[0]
    hw = p.cluster.groups[1].hardware
    assert hw.endswith("profiles/fast.yaml") and hw.startswith("/")
    assert p.labels()["groups"].startswith("1x h100-sxm + 2x fast ")


def open_profile() -> str:
    from pathlib import Path

    import costmodels

    return (Path(costmodels.__file__).parent / "profiles" / "a100-vidur.yaml").read_text()


def test_groups_equal_to_the_points_values_give_its_summary():
    """Through run_point: the groups label aside, the summary and the ledger are the run's
    without groups."""
    base = {
        "name": "eq",
        "trace": {"kind": "synthetic", "sessions": 30, "seed": 3},
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "memory": {"gpu_kv_gb": 0.5, "cpu_kv_gb": 1},
        "policies": ["lru"],
    }
    from experiments.schema import parse_experiment

    plain = parse_experiment(base | {"cluster": {"replicas": 3, "router": "kv-aware"}})
    groups = [{"replicas": 2, "hardware": "h100-sxm", "policy": "lru"}, {"gpu_kv_gb": 0.5}]
    grouped = parse_experiment(base | {"cluster": {"router": "kv-aware", "groups": groups}})
    a = run_point(0, plain.grid()[0])
    b = run_point(0, grouped.grid()[0])
    assert b.labels == a.labels | {"groups": "2x h100-sxm policy=lru + 1x h100-sxm gpu=0.5"}
    skip = {"wall_s", "turns_per_s_wall", "evict_us_p50", "evict_us_p99"}
    for key, value in a.summary.items():
        if key in skip or "wall" in key:
            continue
        other = b.summary[key]
        assert value == other or (math.isnan(value) and math.isnan(other)), key
    pd.testing.assert_frame_equal(a.turns, b.turns.drop(columns=["groups"]), check_like=False)


def test_each_fleet_is_a_line_of_its_own_in_the_cluster_figures():
    """Two fleets of three replicas each: one line each (one point), never their mean."""
    from experiments.cluster_plots import disagg_lines, router_lines

    summary = pd.DataFrame(
        {
            "router": ["kv-aware"] * 4,
            "replicas": [3, 3, 3, 3],
            "groups": ["3x h100-sxm"] * 2 + ["1x h100-sxm + 2x a100-sxm"] * 2,
            "prefill_replicas": [0, 1, 0, 1],
            "ttft_p90_s": [0.1, 0.2, 0.3, 0.4],
        }
    )
    lines = router_lines(summary, "ttft_p90_s")
    assert sorted(name for *_, name in lines) == [
        "kv-aware, 1x h100-sxm + 2x a100-sxm, 1 prefill replica",
        "kv-aware, 1x h100-sxm + 2x a100-sxm, colocated",
        "kv-aware, 3x h100-sxm, 1 prefill replica",
        "kv-aware, 3x h100-sxm, colocated",
    ]
    by_name = {name: s.to_dict() for (*_, name), s in lines.items()}
    assert by_name["kv-aware, 1x h100-sxm + 2x a100-sxm, 1 prefill replica"] == {3: 0.4}
    disagg = {name: s.to_dict() for (*_, name), s in disagg_lines(summary, "ttft_p90_s").items()}
    assert disagg["kv-aware, colocated, 3x h100-sxm"] == {3: 0.1}
    assert len(disagg) == 4


def test_replicas_csv_gives_each_replica_of_a_fleet_its_own_setup(write_yaml):
    """A fleet's per-replica rows say what each replica ran on: its group's hardware, policy and
    KV, the point's where the group names none; a run without groups has no such columns."""
    exp = load_experiment(write_yaml(BASE))
    rows = run_point(0, exp.grid()[0]).replicas
    assert [r["replica_hardware"] for r in rows] == ["h100-sxm", "a100-sxm", "a100-sxm"]
    assert [r["replica_policy"] for r in rows] == ["lru", "arc", "arc"]
    assert [r["replica_gpu_kv_gb"] for r in rows] == [1, 0.5, 0.5]
    assert [r["replica_cpu_kv_gb"] for r in rows] == [0, 2, 2]
    plain = load_experiment(
        write_yaml(BASE.split("  groups:")[0] + "  replicas: 2\n", "plain.yaml")
    )
    assert not any("replica_hardware" in r for r in run_point(0, plain.grid()[0]).replicas)
