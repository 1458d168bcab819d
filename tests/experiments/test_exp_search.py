"""`kvsim search`: bisection of memory.gpu_kv_gb for an SLO attainment target, on a trace whose
answer is known by hand.

The trace: ten one-turn sessions, session i (1..10) needing exactly i pages of KV (16 i tokens:
prompt 16 i - 4, output 4), arriving 100 s apart, so they never share the GPU. A turn longer than
the whole GPU KV is rejected (it misses its SLO); with no latency bound (slo: both null) every other
turn meets it. At a capacity of N pages, sessions 1..N complete: slo_attainment = min(N, 10) / 10.
One page of Llama-3-8B at 16 tokens is 16 x 128 KiB = 2 MiB = 1/512 GiB.
"""

from __future__ import annotations

import json

import pytest

from experiments.cli import main
from experiments.schema import ConfigError, load_experiment
from experiments.search import gb_of_pages, page_bytes, search, search_point
from sim.config import GIB, MemoryConfig

PAGE = 2 * 2**20

YAML = """
name: search
trace: {kind: jsonl, path: ten.jsonl}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [0.001953125, 0.01953125], cpu_kv_gb: 0, block_tokens: 16}
policies: [lru, fifo]
slo: {ttft_s: null, tpot_s: null}
"""


@pytest.fixture
def experiment_file(tmp_path):
    lines = [
        {
            "session_id": f"s{i:02d}",
            "turn": 0,
            "arrival_s": 100.0 * i,
            "prompt_tokens": 16 * i - 4,
            "output_tokens": 4,
        }
        for i in range(1, 11)
    ]
    (tmp_path / "ten.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    path = tmp_path / "search.yaml"
    path.write_text(YAML.lstrip())
    return path


def test_the_page_and_the_gib_of_n_pages():
    point = load_experiment_point()
    assert page_bytes(point) == PAGE
    for n in (1, 7, 10, 1000, 12345):
        gb = gb_of_pages(n, PAGE)
        assert MemoryConfig.capacity_bytes(gb) // PAGE == n
    assert gb_of_pages(7, PAGE) == 7 / 512


def load_experiment_point():
    from experiments.schema import parse_experiment

    exp = parse_experiment(
        {
            "name": "p",
            "trace": {"kind": "synthetic", "sessions": 2},
            "model": "llama-3-8b",
            "hardware": "h100-sxm",
            "memory": {"gpu_kv_gb": 1},
            "policies": ["lru"],
        }
    )
    return search_point(exp)


@pytest.mark.parametrize(
    "target,walk,answer",
    [
        # pages probed, in order: hi, lo, then midpoints of (lo, hi)
        (0.7, [10, 1, 5, 7, 6], 7),  # 5: 0.5 no; 7: 0.7 yes; 6: 0.6 no -> 7 pages
        (0.35, [10, 1, 5, 3, 4], 4),  # 5 yes; 3: 0.3 no; 4: 0.4 yes -> 4
        (0.1, [10, 1], 1),  # one page already serves session 1 of 10
        (1.0, [10, 1, 5, 7, 8, 9], 10),
    ],
)
def test_bisection_finds_the_hand_answer(experiment_file, target, walk, answer):
    exp = load_experiment(experiment_file)
    result = search(exp, target=target, policy="lru")
    assert [p.pages for p in result.probes] == walk
    for p in result.probes:  # every probe as computed by hand
        assert p.slo_attainment == pytest.approx(min(p.pages, 10) / 10)
        assert p.turns == min(p.pages, 10) and p.rejected_turns == 10 - p.turns
        assert p.gpu_kv_gb == p.pages / 512
    assert result.answer is not None and result.answer.pages == answer
    assert result.answer.gpu_kv_gb == pytest.approx(answer * PAGE / GIB)


def test_a_target_missed_at_hi_has_no_answer_and_exits_1(experiment_file, capsys):
    rc = main(
        ["search", str(experiment_file), "--policy", "fifo", "--target", "0.7", "--hi", "0.0117"]
    )
    out = capsys.readouterr().out
    assert rc == 1  # 0.0117 GiB holds 5 pages: 0.5 < 0.7
    assert "probe: 0.00976562 GiB (5 pages): slo_attainment 0.5000 misses" in out
    assert "not met: 0.5000 at the largest capacity" in out


def test_the_command_prints_the_curve_and_the_answer(experiment_file, capsys):
    assert main(["search", str(experiment_file), "--policy", "lru", "--target", "0.7"]) == 0
    out = capsys.readouterr().out
    rows = [r for r in (line.split() for line in out.splitlines()) if r and r[0].isdigit()]
    # by capacity, each with its order of probing
    assert [(int(r[2]), int(r[0]), r[3], r[-1]) for r in rows] == [
        (1, 2, "0.1000", "no"),
        (5, 3, "0.5000", "no"),
        (6, 5, "0.6000", "no"),
        (7, 4, "0.7000", "yes"),
        (10, 1, "1.0000", "yes"),
    ]
    assert (
        "smallest memory.gpu_kv_gb meeting it: 0.0136719 GiB (7 pages), slo_attainment 0.7000"
        in out
    )


def test_the_policy_must_be_named_among_several(experiment_file):
    exp = load_experiment(experiment_file)
    with pytest.raises(ConfigError, match=r"policies: 2 policies \(lru, fifo\); name one"):
        search(exp, target=0.9)
    with pytest.raises(ConfigError, match=r"'belady' is not one of this experiment's"):
        search(exp, target=0.9, policy="belady")


def test_another_axis_with_several_values_is_refused(experiment_file):
    text = experiment_file.read_text().replace("cpu_kv_gb: 0", "cpu_kv_gb: [0, 4]")
    experiment_file.write_text(text)
    exp = load_experiment(experiment_file)
    with pytest.raises(ConfigError, match=r"varies memory.gpu_kv_gb alone, but cpu_kv_gb has"):
        search(exp, target=0.9, policy="lru")


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--target", "1.5"], "a share in (0, 1]"),
        (["--target", "0"], "a share in (0, 1]"),
        (["--hi", "-1"], "a GPU KV size > 0 in GiB"),
        (["--lo", "x"], "expected a number of GiB"),
    ],
)
def test_bad_options_are_input_errors(experiment_file, capsys, argv, words):
    with pytest.raises(SystemExit) as info:
        main(["search", str(experiment_file), "--policy", "lru", *argv])
    assert info.value.code == 2 and words in capsys.readouterr().err


def test_lo_above_hi_is_an_input_error(experiment_file, capsys):
    rc = main(["search", str(experiment_file), "--policy", "lru", "--lo", "0.02", "--hi", "0.01"])
    assert rc == 2
    assert "--lo (0.02 GiB) is above --hi (0.01 GiB)" in capsys.readouterr().err


def test_a_cluster_searches_each_replicas_gpu_kv(experiment_file, monkeypatch):
    """With a cluster section every probe runs the cluster, and the axis is each replica's GPU
    KV: the ten sessions never overlap, so whichever replica a session goes to, sessions 1..N
    complete at N pages a replica, as on one engine."""
    import sim.cluster

    text = experiment_file.read_text().replace("policies: [lru, fifo]", "policies: [lru]")
    experiment_file.write_text(text + "cluster: {replicas: 2, router: round-robin}\n")
    calls = []
    real = sim.cluster.simulate_cluster

    def counted(*args, **kwargs):
        calls.append(kwargs["cluster"])
        return real(*args, **kwargs)

    monkeypatch.setattr(sim.cluster, "simulate_cluster", counted)
    result = search(load_experiment(experiment_file), target=0.7)
    assert [p.pages for p in result.probes] == [10, 1, 5, 7, 6]
    assert all(p.slo_attainment == pytest.approx(min(p.pages, 10) / 10) for p in result.probes)
    assert result.answer is not None and result.answer.pages == 7
    assert len(calls) == 5 and {(c.replicas, c.router) for c in calls} == {(2, "round-robin")}
