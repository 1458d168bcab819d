"""The executor with the fake simulator (in-process): order, labels, caching, progress, errors."""

from __future__ import annotations

import dataclasses

import pytest

from experiments import executor
from experiments.executor import PointError, run_point, run_points
from experiments.schema import LABEL_COLUMNS, load_experiment
from sim.metrics import SUMMARY_COLUMNS
from sim.results import TURN_COLUMNS


def test_points_run_in_grid_order_with_labels(fake_backend, tiny_yaml):
    exp = load_experiment(tiny_yaml)
    grid = exp.grid()
    results = run_points(grid, exp.executor, show_progress=False)
    assert [r.index for r in results] == list(range(len(grid)))
    assert [r.point for r in results] == grid
    r = results[3]
    assert r.labels == grid[3].labels()
    assert list(r.turns.columns) == list(LABEL_COLUMNS) + list(TURN_COLUMNS)
    assert (r.turns["policy"] == grid[3].policy).all()
    assert (r.turns["gpu_kv_gb"] == grid[3].memory.gpu_kv_gb).all()
    assert list(r.sessions.columns[: len(LABEL_COLUMNS)]) == list(LABEL_COLUMNS)
    assert set(SUMMARY_COLUMNS) <= set(r.summary)
    assert fake_backend["simulate"] == len(grid)
    assert fake_backend["load_trace"] == 1  # one trace spec: loaded once, then cached


def test_progress_counts_every_turn(fake_backend, tiny_yaml, monkeypatch):
    totals, updates = [], []

    class Bar:
        def __init__(self, total, **kw):
            totals.append(total)

        def update(self, n):
            updates.append(n)

        def close(self):
            pass

    monkeypatch.setattr(executor, "_progress_bar", Bar)  # the bar a run that shows progress gets
    exp = load_experiment(tiny_yaml)
    results = run_points(exp.grid(), exp.executor)
    assert totals == [sum(r.summary["turns"] for r in results)]
    assert sum(updates) == totals[0]


def test_failure_names_the_grid_point(fake_backend, tiny_yaml):
    bad = dataclasses.replace(load_experiment(tiny_yaml).grid()[1], policy="boom")
    with pytest.raises(PointError) as info:
        run_point(7, bad)
    msg = str(info.value)
    assert msg.startswith("grid point 7 (policy=boom ") and "gpu_kv_gb=1.0" in msg
    assert "RuntimeError: the fake simulator exploded" in msg
