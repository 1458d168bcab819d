"""Fixtures for the experiments tests: YAML writing and the fake simulator backend."""

from __future__ import annotations

import textwrap
from pathlib import Path

import exp_fakes
import pytest
from exp_fakes import TINY


@pytest.fixture
def write_yaml(tmp_path):
    """write_yaml(text, name="exp.yaml") -> Path of a YAML file in tmp_path (text is dedented)."""

    def write(text: str, name: str = "exp.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path

    return write


@pytest.fixture
def fake_backend(monkeypatch):
    """Replace the trace loader, cost model and simulator with exp_fakes (in this process only)."""
    import costmodels
    import sim
    import sim.run
    import traces
    from experiments import executor

    monkeypatch.setattr(traces, "load_trace", exp_fakes.fake_load_trace, raising=False)
    monkeypatch.setattr(costmodels, "cost_model", exp_fakes.fake_cost_model, raising=False)
    monkeypatch.setattr(sim, "simulate", exp_fakes.fake_simulate)
    monkeypatch.setattr(sim.run, "simulate_to_file", exp_fakes.fake_simulate_to_file)
    monkeypatch.setattr(executor, "_TRACES", {})
    monkeypatch.setattr(executor, "_TIMED", {})
    monkeypatch.setattr(executor, "_COSTS", {})
    for k in exp_fakes.CALLS:
        exp_fakes.CALLS[k] = 0
    return exp_fakes.CALLS


@pytest.fixture
def tiny_yaml(write_yaml):
    return write_yaml(TINY)


@pytest.fixture
def drawn(monkeypatch):
    """Every Figure saved while the test runs, in order (the figure itself, not its pixels)."""
    from matplotlib.figure import Figure

    figures: list = []
    real = Figure.savefig

    def spy(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return figures
