"""notebooks/compare_policies.ipynb, executed top to bottom on a small results folder of `kvsim run`.

The folder is made in-process by `kvsim run` with the fake simulator of tests/experiments (fast and
deterministic; the notebook only reads the folder). The fake is wrapped so that re-prefill depends
on the seed, so every confidence interval the notebook reports has a width to check. The test
recomputes each number of the notebook's comparison table and figure from summary.csv on its own
(mean over seeds; the 95 % interval from scipy's Student's t), so a notebook that computes the wrong
thing fails here, as does a cell that raises.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "compare_policies.ipynb"

CONFIG = """
name: nb
trace: {kind: synthetic, sessions: 8, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [0.5, 1, 2], cpu_kv_gb: [0, 4], block_tokens: 16, evict_unit: block}
policies: [lru, fifo]
seeds: [1, 2, 3]
baseline_infinite: true
executor: {kind: local, workers: 1}
targets: {reprefill: 0.35, jain: null}
"""
METRICS = ("reprefill_rate", "jain_service")
KEYS = ["cpu_kv_gb", "policy", "gpu_kv_gb"]  # cpu_kv_gb is the one other axis that varies

# Run after the notebook's own cells: what it computed, as JSON on stdout.
PROBE = """
import json as _json
_lines = [(ax.get_ylabel(), line.get_label(), [float(x) for x in line.get_xdata()],
           [float(y) for y in line.get_ydata()])
          for ax in fig.axes for line in ax.lines if not line.get_label().startswith("_")]
_targets = [(ax.get_ylabel(), [float(y) for y in line.get_ydata()])
            for ax in fig.axes for line in ax.lines if line.get_label().startswith("_")]
_stamp = [t.get_text() for t in fig.texts if t.get_gid() == "stamp"]
print(_json.dumps({"table": _json.loads(comparison.reset_index().to_json(orient="records",
                                                                        double_precision=15)),
                   "metrics": METRICS, "lines": _lines, "gap": gap, "facets": facets,
                   "results": str(RESULTS), "targets": _targets, "stamp": _stamp,
                   "colours": [line.get_color() for ax in fig.axes for line in ax.lines
                               if not line.get_label().startswith("_")]}))
"""


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """A results folder of `kvsim run` (fake backend, 3 seeds, infinite baselines)."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "experiments"))
    import exp_fakes

    import costmodels
    import sim
    import sim.run
    import traces
    from experiments import executor
    from experiments.cli import main

    def simulate(sessions, cost, memory, *args, seed: int = 0, **kwargs):
        # A little more memory for a higher seed: the re-prefill rate differs between seeds.
        if math.isfinite(memory.gpu_kv_gb):
            memory = dataclasses.replace(memory, gpu_kv_gb=memory.gpu_kv_gb * (1 + 0.1 * seed))
        return exp_fakes.fake_simulate(sessions, cost, memory, *args, seed=seed, **kwargs)

    def simulate_to_file(path, sessions, cost, memory, *args, seed: int = 0, **kwargs):
        if math.isfinite(memory.gpu_kv_gb):
            memory = dataclasses.replace(memory, gpu_kv_gb=memory.gpu_kv_gb * (1 + 0.1 * seed))
        return exp_fakes.fake_simulate_to_file(
            path, sessions, cost, memory, *args, seed=seed, **kwargs
        )

    monkeypatch.setattr(traces, "load_trace", exp_fakes.fake_load_trace, raising=False)
    monkeypatch.setattr(costmodels, "cost_model", exp_fakes.fake_cost_model, raising=False)
    monkeypatch.setattr(sim, "simulate", simulate)
    monkeypatch.setattr(sim.run, "simulate_to_file", simulate_to_file)  # a point's spooled run
    monkeypatch.setattr(executor, "_TRACES", {})
    monkeypatch.setattr(executor, "_COSTS", {})
    cfg = tmp_path / "nb.yaml"
    cfg.write_text(CONFIG)
    out = tmp_path / "results"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A `python3` kernel spec that runs this interpreter (ahead of any user or system spec of the
    same name), and the kernel's state kept in tmp_path."""
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (kvsim tests)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("MPLBACKEND", raising=False)


def _expected(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds and the 95 % interval of the mean (Student's t), per KEYS, finite capacity."""
    finite = summary[np.isfinite(summary["gpu_kv_gb"])]
    rows = []
    for key, g in finite.groupby(KEYS):
        row = dict(zip(KEYS, key), seeds=len(g))
        for m in METRICS:
            v = g[m].to_numpy(dtype=float)
            half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
            row |= {
                f"{m}_mean": v.mean(),
                f"{m}_ci_lo": v.mean() - half,
                f"{m}_ci_hi": v.mean() + half,
            }
        rows.append(row)
    return pd.DataFrame(rows).set_index(KEYS).sort_index()


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    intro = nb.cells[0].source
    assert nb.cells[0].cell_type == "markdown"
    assert "kvsim run experiments/quickstart.yaml" in intro and "KVSIM_RESULTS" in intro


@pytest.mark.slow
def test_notebook_reproduces_the_policy_comparison(results_dir, kernel_env, monkeypatch):
    monkeypatch.setenv("KVSIM_RESULTS", str(results_dir))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    n_cells = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    NotebookClient(
        nb,
        timeout=120,
        startup_timeout=60,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
    ).execute()  # raises if a cell does

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not [
        o for c in code for o in c.outputs if o.output_type == "stream" and o.name == "stderr"
    ]  # no warnings either
    images = [c for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3  # the notebook's figure, then the package's two line plots
    last = nb.cells[n_cells - 1]  # the notebook's own last cell shows the table
    assert last.cell_type == "code"
    shown = [o for o in last.outputs if o.output_type == "execute_result"]
    assert shown and "reprefill_rate_mean" in shown[0]["data"]["text/plain"]
    assert "jain_service_ci_hi" in shown[0]["data"]["text/plain"]

    probe = json.loads("".join(o.text for o in nb.cells[-1].outputs if o.output_type == "stream"))
    assert Path(probe["results"]) == results_dir
    assert probe["facets"] == ["cpu_kv_gb"]
    assert probe["gap"] < 1e-12  # the ledger gives back summary.csv's re-prefill rates

    summary = pd.read_csv(results_dir / "summary.csv")
    assert np.isinf(summary["gpu_kv_gb"]).any()  # baselines are there, and left out
    expected = _expected(summary)
    got = pd.DataFrame(probe["table"]).set_index(KEYS).sort_index()
    assert list(got.index) == list(expected.index)
    assert sorted(got.columns) == sorted(expected.columns)
    assert (got["seeds"] == 3).all()
    for col in expected.columns:
        # the package's t table has three decimals: 4.303 for t(0.975, 2) = 4.3027
        np.testing.assert_allclose(got[col], expected[col], rtol=2e-4, err_msg=col)
    for m in METRICS:  # the intervals have a width, so the check above means something
        assert (expected[f"{m}_ci_hi"] - expected[f"{m}_ci_lo"] > 1e-3).all(), m

    # The figure: one line per metric, panel and policy, through the means over seeds.
    ylabel = {label: m for m, label in probe["metrics"].items()}
    assert set(ylabel.values()) == set(METRICS)
    drawn = sorted((ylabel[y], pol, tuple(x), tuple(v)) for y, pol, x, v in probe["lines"])
    want = sorted(
        (m, pol, tuple(g.index.get_level_values("gpu_kv_gb")), tuple(g[f"{m}_mean"]))
        for m in METRICS
        for (_, pol), g in expected.groupby(["cpu_kv_gb", "policy"])
    )
    assert [d[:3] for d in drawn] == [w[:3] for w in want]
    np.testing.assert_allclose([d[3] for d in drawn], [w[3] for w in want], rtol=1e-12)

    # The dashed lines are the experiment's targets (re-prefill 0.35; jain set to null: none), the
    # policies look as in every kvsim figure, and the stamp names the run.
    assert sorted(ylabel[y] for y, _ in probe["targets"]) == ["reprefill_rate"] * 2
    assert all(ys == [0.35, 0.35] for _, ys in probe["targets"])
    from experiments.figure_style import policy_style

    assert {(pol, c) for (_, pol, _, _), c in zip(probe["lines"], probe["colours"])} == {
        (p, policy_style(p)["color"]) for p in ("lru", "fifo")
    }
    (stamp,) = probe["stamp"]
    assert stamp.startswith("nb · llama-3-8b · h100-sxm · trace synthetic")
