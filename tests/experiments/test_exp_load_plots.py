"""The latency-against-load figure of a request-rate sweep (experiments.load_plots), on hand-made
summary rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.load_plots import load_figures, load_lines, varies


def rows(**extra):
    """lru and fifo at time_scale 4, 2, 1 (request rate 0.25, 0.5, 1), two seeds each."""
    out = []
    for policy, base in (("lru", 1.0), ("fifo", 2.0)):
        for scale in (4.0, 2.0, 1.0):
            for seed in (1, 2):
                out.append(
                    dict(
                        policy=policy,
                        time_scale=scale,
                        gpu_kv_gb=1.0,
                        seed=seed,
                        ttft_p50_s=base / scale + seed,  # the seeds' mean: base / scale + 1.5
                        ttft_p90_s=2 * base / scale,
                        slo_attainment=1.0 / scale,
                        goodput_turns_s=base * seed,
                        **extra,
                    )
                )
    return pd.DataFrame(out)


def test_one_line_per_policy_by_request_rate_averaged_over_seeds():
    lines = load_lines(rows(), "ttft_p50_s")
    assert list(lines) == ["lru", "fifo"]
    assert list(lines["lru"].index) == [0.25, 0.5, 1.0]  # 1 / time_scale, ascending
    assert list(lines["lru"]) == pytest.approx([0.25 + 1.5, 0.5 + 1.5, 1.0 + 1.5])
    assert list(lines["fifo"]) == pytest.approx([0.5 + 1.5, 1.0 + 1.5, 2.0 + 1.5])


def test_another_varying_label_splits_the_lines_and_names_them():
    summary = pd.concat([rows(), rows().assign(gpu_kv_gb=2.0)], ignore_index=True)
    assert list(load_lines(summary, "goodput_turns_s")) == [
        "lru, gpu_kv_gb=1",
        "fifo, gpu_kv_gb=1",
        "lru, gpu_kv_gb=2",
        "fifo, gpu_kv_gb=2",
    ]


def test_points_that_are_not_finite_are_left_out():
    summary = rows()
    summary.loc[(summary["policy"] == "lru") & (summary["time_scale"] == 2.0), "ttft_p90_s"] = (
        math.nan
    )
    assert list(load_lines(summary, "ttft_p90_s")["lru"].index) == [0.25, 1.0]


def test_the_figure_is_written_only_when_the_rate_varies(tmp_path):
    notes: list[str] = []
    assert varies(rows())
    assert load_figures(rows(), tmp_path, notes) == [tmp_path / "latency_vs_load.png"]
    assert (tmp_path / "latency_vs_load.png").stat().st_size > 0 and notes == []
    one_rate = rows()[rows()["time_scale"] == 1.0]
    assert not varies(one_rate)
    assert load_figures(one_rate, tmp_path / "none", notes) == []
    assert not varies(rows().drop(columns="time_scale"))  # a results folder from before the axis


def test_no_finite_point_writes_nothing_and_says_so(tmp_path):
    summary = rows()
    for col in ("ttft_p50_s", "ttft_p90_s", "slo_attainment", "goodput_turns_s"):
        summary[col] = math.nan
    notes: list[str] = []
    assert load_figures(summary, tmp_path, notes, fmt="svg") == []
    assert notes == ["plots: latency_vs_load.svg: no finite latency or goodput at any request rate"]
    assert not list(tmp_path.iterdir())
