"""The experiment's ``slo:`` section (the thresholds of the SLO columns) and the request-rate axis
(``trace.time_scale`` as a list): validation, the grid, and a real run end to end."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from exp_fakes import BASE, error_of

from experiments.cli import main
from experiments.schema import LABEL_COLUMNS, load_experiment
from sim.metrics import Slo


def test_slo_defaults_reach_every_point_and_the_resolved_config(write_yaml):
    exp = load_experiment(write_yaml(BASE))
    assert {p.slo for p in exp.grid()} == {Slo(ttft_s=2.0, tpot_s=0.1)}
    assert exp.resolved()["slo"] == {"ttft_s": 2.0, "tpot_s": 0.1}


def test_slo_section_sets_the_thresholds_and_null_drops_one(write_yaml):
    exp = load_experiment(write_yaml(BASE + "slo: {ttft_s: 0.5, tpot_s: null}\n"))
    assert {p.slo for p in exp.grid()} == {Slo(ttft_s=0.5, tpot_s=None)}
    assert exp.resolved()["slo"] == {"ttft_s": 0.5, "tpot_s": None}  # the null bound is shown


@pytest.mark.parametrize(
    "slo,message",
    [
        ("{ttft_s: 0}", "slo.ttft_s: must be > 0, got 0"),
        ("{tpot_s: -0.1}", "slo.tpot_s: must be > 0, got -0.1"),
        ("{tpot_s: fast}", "slo.tpot_s: expected a number, got str 'fast'"),
        (
            "{ttft: 1}",
            "slo.ttft: unknown key (did you mean 'ttft_s'?); allowed: tpot_s, ttft_s",
        ),
        ("2.0", "slo: expected a mapping, got float 2.0"),
    ],
)
def test_slo_errors_name_the_file_and_the_key(write_yaml, slo, message):
    path = write_yaml(BASE + f"slo: {slo}\n")
    assert error_of(path) == f"{path}: {message}"


def test_a_time_scale_list_is_a_grid_axis_with_its_own_label(write_yaml):
    text = BASE.replace("seed: 1}", "seed: 1, time_scale: [4, 0.5]}")
    points = load_experiment(write_yaml(text)).grid()
    assert len(points) == 2 * 2 * 2  # time_scale x policy x gpu_kv_gb
    assert LABEL_COLUMNS.index("time_scale") == LABEL_COLUMNS.index("trace") + 1
    # the order written; time_scale varies slower than the policy
    assert [(p.labels()["time_scale"], p.policy) for p in points[::2]] == [
        (4.0, "lru"),
        (4.0, "fifo"),
        (0.5, "lru"),
        (0.5, "fifo"),
    ]
    assert [p.trace.to_dict()["time_scale"] for p in points[::4]] == [4, 0.5]
    assert {p.labels()["trace"] for p in points} == {"synthetic"}  # the label is the trace's


def test_a_single_time_scale_is_loaded_as_written_and_none_is_one(write_yaml):
    one = load_experiment(write_yaml(BASE.replace("seed: 1}", "seed: 1, time_scale: 20}")))
    assert one.grid()[0].trace.to_dict() == {
        "kind": "synthetic",
        "sessions": 5,
        "seed": 1,
        "time_scale": 20,
    }
    assert one.grid()[0].labels()["time_scale"] == 20.0
    plain = load_experiment(write_yaml(BASE)).grid()[0]
    assert "time_scale" not in plain.trace.to_dict() and plain.labels()["time_scale"] == 1.0


@pytest.mark.parametrize(
    "value,message",
    [
        ("[1, -2]", "entry 1: must be a finite number > 0, got -2"),
        ("[1, 0]", "entry 1: must be a finite number > 0, got 0"),
        ("[]", "must not be empty (a number > 0, or a list of them)"),
        ("[2, 2]", "duplicate value 2 (each grid value once)"),
        ("fast", "must be a finite number > 0 or a list of them, got 'fast'"),
        (".inf", "must be a finite number > 0 or a list of them, got inf"),
        ("true", "must be a finite number > 0 or a list of them, got True"),
    ],
)
def test_time_scale_errors_name_the_file_and_the_key(write_yaml, value, message):
    path = write_yaml(BASE.replace("seed: 1}", f"seed: 1, time_scale: {value}}}"))
    assert error_of(path) == f"{path}: trace.time_scale: {message}"


def test_time_scale_error_in_a_list_of_traces_names_the_entry(write_yaml):
    text = BASE.replace(
        "trace: {kind: synthetic, sessions: 5, seed: 1}",
        "trace: [{kind: synthetic, sessions: 5}, {kind: synthetic, sessions: 6, time_scale: [0]}]",
    )
    path = write_yaml(text)
    assert error_of(path) == (
        f"{path}: trace[1].time_scale: entry 0: must be a finite number > 0, got 0"
    )


SWEEP = """
name: sweep
trace: {kind: synthetic, sessions: 8, seed: 5, max_context_tokens: 4096, time_scale: [0.25, 2]}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 0.5, cpu_kv_gb: 0}
policies: [lru, fifo]
slo: {ttft_s: 0.01, tpot_s: 0.0068}
"""


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    path = folder / "sweep.yaml"
    path.write_text(SWEEP.lstrip(), encoding="utf-8")
    out = folder / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = main(["run", str(path), "--out", str(out)])
    assert rc == 0
    return out, printed.getvalue()


def test_a_sweep_runs_each_rate_with_the_experiment_s_slo(sweep_run):
    out, _ = sweep_run
    summary = pd.read_csv(out / "summary.csv")
    turns = pd.read_parquet(out / "turns.parquet")
    assert sorted(summary["time_scale"]) == [0.25, 0.25, 2.0, 2.0]
    # the axis reaches the loader: each session starts 8x later at time_scale 2 than at 0.25
    first = turns[(turns["turn"] == 0) & (turns["policy"] == "lru")]
    start = first.pivot(index="session_id", columns="time_scale", values="arrival_s")
    np.testing.assert_allclose(start[2.0], 8 * start[0.25])
    # each row's SLO columns, from its own ledger with the experiment's thresholds
    for _, row in summary.iterrows():
        t = turns[(turns["policy"] == row["policy"]) & (turns["time_scale"] == row["time_scale"])]
        tpot = t["tbt_mean_s"].to_numpy()
        met = (t["ttft_s"].to_numpy() <= 0.01) & (np.isnan(tpot) | (tpot <= 0.0068))
        assert row["slo_attainment"] == pytest.approx(met.sum() / (len(t) + row["rejected_turns"]))
        assert row["goodput_tok_s"] == pytest.approx(
            t["output_tokens"].to_numpy()[met].sum() / row["sim_time_s"]
        )
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["slo"] == {"ttft_s": 0.01, "tpot_s": 0.0068}
    assert resolved["trace"][0]["time_scale"] == [0.25, 2]
    assert sorted(t["time_scale"] for t in resolved["traces_loaded"]) == [0.25, 2.0]


def test_a_sweep_draws_latency_against_load_and_a_single_rate_does_not(sweep_run, tmp_path):
    out, printed = sweep_run
    assert (out / "plots" / "latency_vs_load.png").stat().st_size > 0
    path = tmp_path / "one.yaml"
    path.write_text(SWEEP.replace("time_scale: [0.25, 2]", "time_scale: 2").lstrip())
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", str(path), "--out", str(tmp_path / "one"), "--quiet"]) == 0
    assert not (tmp_path / "one" / "plots" / "latency_vs_load.png").exists()
    assert list((tmp_path / "one" / "plots").glob("*.png"))  # the other figures are there


def test_the_console_table_shows_the_time_scale_and_slo_columns(sweep_run):
    out, printed = sweep_run
    lines = printed.splitlines()
    header = next(line.split() for line in lines if line.split()[:1] == ["policy"])
    assert "time_scale" in header and "trace.time_scale" not in header
    col = header.index("time_scale")
    start = lines.index(next(line for line in lines if line.split()[:1] == ["policy"]))
    rows = [line.split() for line in lines[start + 1 : start + 5]]
    assert sorted(r[col] for r in rows) == ["0.25", "0.25", "2", "2"]
    # the share of turns within the slo, as summary.csv has it, in the same row order
    summary = pd.read_csv(out / "summary.csv")
    met = header.index("slo_met")
    assert [r[met] for r in rows] == [f"{v:.1%}" for v in summary["slo_attainment"]]


def test_the_sweep_splits_turns_on_both_sides_of_the_slo(sweep_run):
    """The thresholds above put some turns on each side, so the hand check tests both branches."""
    out, _ = sweep_run
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["slo_attainment"] > 0).all() and (summary["slo_attainment"] < 1).all()
    for col in ("goodput_turns_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "tbt_p90_s"):
        assert summary[col].map(math.isfinite).all(), col
