"""Result tables and the atomic results folder (fake simulator)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml
from exp_fakes import TINY

from experiments import plots, results
from experiments.executor import run_points
from experiments.results import collect, write_results
from experiments.runner import run_experiment
from experiments.schema import LABEL_COLUMNS, load_experiment
from sim.metrics import SUMMARY_COLUMNS

# summary.csv has at least these columns.
DESIGN_SUMMARY_COLUMNS = [
    "name",
    "policy",
    "gpu_kv_gb",
    "cpu_kv_gb",
    "block_tokens",
    "evict_unit",
    "seed",
    "turns",
    "reprefill_rate",
    "turns_with_reprefill",
    "gpu_hit_rate",
    "cpu_hit_rate",
    "jain_service",
    "jain_hit",
    "ttft_p50_s",
    "ttft_p99_s",
    "tbt_p50_s",
    "throughput_tok_s",
    "evict_us_p50",
    "evict_us_p99",
    "gpu_util",
    "swap_in_gb",
    "swap_out_gb",
    "recompute_tokens",
    "preemptions",
]
FILES = {"summary.csv", "turns.parquet", "sessions.parquet", "config.resolved.yaml"}


def _tables(exp):
    return collect(
        run_points(exp.grid() + exp.baseline_points(), exp.executor, show_progress=False)
    )


def test_summary_columns(fake_backend, tiny_yaml):
    summary = _tables(load_experiment(tiny_yaml)).summary
    assert set(DESIGN_SUMMARY_COLUMNS) <= set(summary.columns)
    cols = list(summary.columns)
    assert cols[: len(LABEL_COLUMNS)] == list(LABEL_COLUMNS)
    assert cols[len(LABEL_COLUMNS) : len(LABEL_COLUMNS) + len(SUMMARY_COLUMNS)] == list(
        SUMMARY_COLUMNS
    )
    assert [c for c in cols if c.startswith("pass_")] == [
        "pass_evict_us",
        "pass_reprefill",
        "pass_jain",
        "pass_gpu_util",
    ]
    assert cols[-4:] == ["pass_evict_us", "pass_reprefill", "pass_jain", "pass_gpu_util"]
    assert "throughput_impact" not in cols  # no infinite-memory baseline was run
    assert len(summary) == 12


def test_throughput_impact_against_infinite_memory(fake_backend, write_yaml):
    exp = load_experiment(write_yaml(TINY + "baseline_infinite: true\n"))
    summary = _tables(exp).summary
    assert len(summary) == 12 + 4  # + one baseline per (policy, cpu_kv_gb)
    base = summary[summary["gpu_kv_gb"] == math.inf]
    assert (base["throughput_impact"] == 0.0).all()
    row = summary[
        (summary["policy"] == "fifo")
        & (summary["gpu_kv_gb"] == 0.5)
        & (summary["cpu_kv_gb"] == 4.0)
    ].iloc[0]
    ref = base[(base["policy"] == "fifo") & (base["cpu_kv_gb"] == 4.0)].iloc[0]
    assert row["throughput_impact"] == pytest.approx(
        1 - row["throughput_tok_s"] / ref["throughput_tok_s"]
    )
    assert row["throughput_impact"] > 0  # the fake recomputes more with less memory
    assert row["pass_throughput_impact"] == (row["throughput_impact"] < 0.05)
    assert list(summary.columns)[-5:] == [
        "pass_evict_us",
        "pass_reprefill",
        "pass_jain",
        "pass_gpu_util",
        "pass_throughput_impact",
    ]


def test_results_folder_contents(fake_backend, tiny_yaml, tmp_path):
    exp = load_experiment(tiny_yaml)
    out = tmp_path / "res" / "tiny"
    written = write_results(out, exp, _tables(exp))
    assert written.out_dir == out
    names = {p.name for p in out.iterdir()}
    assert names == FILES | {"plots"}
    assert {str(f) for f in written.files} >= FILES
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert pngs == [
        "hit_rate_by_tier.png",
        "jain_vs_capacity.png",
        "reprefill_vs_capacity.png",
        "ttft_cdf.png",
    ]
    for p in (out / "plots").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 12
    turns = pd.read_parquet(out / "turns.parquet")
    assert len(turns) == summary["turns"].sum()
    assert set(LABEL_COLUMNS) <= set(turns.columns)
    sessions = pd.read_parquet(out / "sessions.parquet")
    assert len(sessions) == summary["sessions"].sum()
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["kvsim_version"] == "0.1.0" or resolved["kvsim_version"]
    assert resolved["engine"]["max_batch_tokens"] == 8192  # defaults filled in
    assert resolved["memory"]["gpu_kv_gb"] == [0.5, 1.0, 2.0]
    assert list(tmp_path.joinpath("res").iterdir()) == [out]  # no temporary left behind


def test_failure_while_writing_leaves_no_out_folder(fake_backend, tiny_yaml, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(plots, "make_plots", broken)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="plotting failed"):
        run_experiment(load_experiment(tiny_yaml), out, show_progress=False)
    assert not out.exists()
    # the temporary folder is gone; the finished points wait in out.partial for a rerun, each
    # a checkpoint, its ledger and its session table, nothing half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml", "out.partial"]
    left = sorted(p.name for p in (tmp_path / "out.partial").iterdir())
    checkpoints = [n for n in left if n.endswith(".pkl")]
    ledgers = [n for n in left if n.endswith(".turns.parquet")]
    tables = [n for n in left if n.endswith(".sessions.parquet")]
    assert len(checkpoints) == len(ledgers) == len(tables) > 0 and len(left) == 3 * len(ledgers)


def test_failure_while_simulating_leaves_no_out_folder(fake_backend, write_yaml, tmp_path):
    # The fake simulator raises for policy "boom" (set past validation, which would refuse it).
    exp = load_experiment(write_yaml(TINY)).model_copy(update={"policies": ["lru", "boom"]})
    out = tmp_path / "out"
    with pytest.raises(Exception, match="grid point 3 .*policy=boom"):
        run_experiment(exp, out, show_progress=False)
    assert not out.exists()


def test_existing_out_is_refused_unless_forced(fake_backend, tiny_yaml, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    exp = load_experiment(tiny_yaml)
    with pytest.raises(FileExistsError, match="pass --force"):
        run_experiment(exp, out, show_progress=False)
    assert (out / "keep.txt").read_text() == "old"
    run_experiment(exp, out, force=True, show_progress=False)
    assert not (out / "keep.txt").exists() and (out / "summary.csv").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml", "out"]


def test_forced_replacement_that_fails_keeps_the_old_results(
    fake_backend, tiny_yaml, tmp_path, monkeypatch
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    monkeypatch.setattr(
        results, "write_sessions", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full"))
    )
    with pytest.raises(OSError, match="disk full"):
        run_experiment(load_experiment(tiny_yaml), out, force=True, show_progress=False)
    assert (out / "keep.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml", "out", "out.partial"]


def _summary_rows(jain_b: float) -> pd.DataFrame:
    rows = [
        {
            "trace": trace,
            "policy": pol,
            "gpu_kv_gb": cap,
            "reprefill_rate": 0.1 * cap,
            "jain_service": 0.9 if trace == "a" else jain_b,
            "gpu_hit_rate": 0.5,
            "cpu_hit_rate": 0.1,
        }
        for trace in ("a", "b")
        for pol in ("lru", "fifo")
        for cap in (1.0, 2.0)
    ]
    return pd.DataFrame(rows)


def test_plots_mark_a_panel_without_data(tmp_path):
    """Trace b's Jain index is undefined (single-turn sessions): its panel says so, no crash."""
    turns = pd.DataFrame([{"trace": "a", "policy": "lru", "gpu_kv_gb": 1.0, "ttft_s": 0.1}])
    notes: list[str] = []
    written = plots.make_plots(_summary_rows(math.nan), turns, tmp_path, notes)
    assert sorted(p.name for p in written) == [
        "hit_rate_by_tier.png",
        "jain_vs_capacity.png",
        "reprefill_vs_capacity.png",
        "ttft_cdf.png",
    ]
    assert notes == [
        "plots: jain_vs_capacity.png: panel trace b has no data",
        "plots: ttft_cdf.png: panel trace b has no data",
    ]


def test_plots_skip_what_is_undefined_everywhere(tmp_path):
    """Jain undefined at every point and no completed turn: those figures are skipped, noted."""
    summary = _summary_rows(math.nan)
    summary["jain_service"] = math.nan
    summary["reprefill_rate"] = math.nan
    notes: list[str] = []
    written = plots.make_plots(summary, pd.DataFrame(), tmp_path, notes)
    assert [p.name for p in written] == ["hit_rate_by_tier.png"]
    assert len(notes) == 3 and all(n.startswith("plots: ") and " not drawn: " in n for n in notes)
    assert "jain_service is undefined at every grid point" in " ".join(notes)
    assert "ttft_cdf.png not drawn: no turn completed" in " ".join(notes)


def test_plots_with_only_infinite_capacity_draw_nothing(tmp_path):
    summary = _summary_rows(0.9)
    summary["gpu_kv_gb"] = math.inf
    notes: list[str] = []
    assert plots.make_plots(summary.iloc[:1], pd.DataFrame(), tmp_path, notes) == []
    assert notes == ["plots: no grid point with a finite GPU capacity; no figures drawn"]
