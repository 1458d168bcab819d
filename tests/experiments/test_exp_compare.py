"""`kvsim compare A B`: two results folders matched point by point, their metrics side by side.

Most folders here are written by hand (summary.csv and config.resolved.yaml, the two files compare
reads), so each expected number is known; one test compares folders written by `kvsim run`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.cli import main
from experiments.compare import HEADLINE_METRICS
from experiments.schema import LABEL_COLUMNS

LABELS = {
    "name": "exp",
    "policy": "lru",
    "engine": "kvsim",
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "tp": 1,
    "trace": "synthetic",
    "gpu_kv_gb": 1.0,
    "cpu_kv_gb": 0.0,
    "block_tokens": 16,
    "evict_unit": "block",
    "pipelining": True,
    "budget": "full",
    "sparse": "off",
    "seed": 1,
}
METRICS = {
    "turns": 100,
    "sessions": 20,
    "rejected_turns": 0,
    "reprefill_rate": 0.5,
    "gpu_hit_rate": 0.5,
    "cpu_hit_rate": 0.0,
    "jain_service": 0.8,
    "ttft_p50_s": 0.02,
    "ttft_p99_s": 0.5,
    "tbt_p50_s": 0.007,
    "tbt_p99_s": 0.008,
}
CONFIG = {
    "kvsim_version": "0.1.0",
    "name": "exp",
    "engine": {"kind": ["kvsim"], "max_batch_tokens": 8192, "chunked_prefill": False},
    "traces_loaded": [
        {"where": "trace", "label": "synthetic", "source": "synthetic(seed=7, sessions=20)",
         "sessions": 20, "turns": 100, "skipped": 0}
    ],
}  # fmt: skip


def write_folder(path: Path, rows: list[dict], config: dict | None = None) -> Path:
    """A results folder of ``rows`` (each: labels and metrics over the defaults above)."""
    path.mkdir(parents=True)
    table = pd.DataFrame([{**LABELS, **METRICS, **r} for r in rows])
    labels = [c for c in LABEL_COLUMNS if c in table.columns]
    table = table[[*labels, *(c for c in table.columns if c not in labels)]]
    table.to_csv(path / "summary.csv", index=False)
    (path / "config.resolved.yaml").write_text(yaml.safe_dump(config or CONFIG, sort_keys=False))
    return path


def run_compare(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["compare", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def two_by_two(reprefill: dict[tuple[str, float], float]) -> list[dict]:
    return [
        {"policy": p, "gpu_kv_gb": g, "reprefill_rate": r, "gpu_hit_rate": 1 - r}
        for (p, g), r in reprefill.items()
    ]


@pytest.fixture
def pair(tmp_path):
    a = write_folder(
        tmp_path / "a",
        two_by_two({("lru", 1.0): 0.5, ("lru", 2.0): 0.25, ("arc", 1.0): 0.4, ("arc", 2.0): 0.2}),
    )
    b = write_folder(
        tmp_path / "b",
        two_by_two({("lru", 1.0): 0.4, ("lru", 2.0): 0.25, ("arc", 1.0): 0.5, ("arc", 2.0): 0.1}),
    )
    return a, b


def test_each_matched_point_shows_a_b_the_difference_and_the_relative_change(
    pair, tmp_path, capsys
):
    a, b = pair
    csv = tmp_path / "cmp.csv"
    rc, out, err = run_compare(capsys, a, b, "--csv", csv)
    assert rc == 0, err
    assert "matched on: policy, gpu_kv_gb (4 points)" in out
    table = pd.read_csv(csv)
    assert list(table.columns) == ["policy", "gpu_kv_gb", "metric", "A", "B", "B-A", "change"]
    assert set(table["metric"]) == set(HEADLINE_METRICS)  # no rejected turns: no such row
    r = table[table["metric"] == "reprefill_rate"].set_index(["policy", "gpu_kv_gb"])
    assert r.loc[("lru", 1), "A"] == 0.5 and r.loc[("lru", 1), "B"] == 0.4
    assert r.loc[("lru", 1), "B-A"] == pytest.approx(-0.1)
    assert r.loc[("lru", 1), "change"] == pytest.approx(-0.2)
    assert r.loc[("arc", 2), "change"] == pytest.approx(-0.5)
    assert r.loc[("lru", 2), "B-A"] == 0
    # the printed line of lru at 1 GiB: 50.0% -> 40.0%, -10 percentage points, -20 %
    line = next(x for x in out.splitlines() if x.startswith("lru") and "reprefill_rate" in x)
    assert line.split() == ["lru", "1", "reprefill_rate", "50.0%", "40.0%", "-10.0", "pp", "-20.0%"]
    arc = next(x for x in out.splitlines() if x.split()[:2] == ["arc", "1"])
    assert "+10.0 pp" in arc and "+25.0%" in arc


def test_an_axis_only_one_side_has_is_named_and_compared_at_the_others_value(tmp_path, capsys):
    a = write_folder(
        tmp_path / "a",
        [
            {"policy": "lru", "cpu_kv_gb": c, "reprefill_rate": r}
            for c, r in ((0.0, 0.9), (16.0, 0.1))
        ],
    )
    b = write_folder(tmp_path / "b", [{"policy": "lru", "cpu_kv_gb": 16.0, "reprefill_rate": 0.2}])
    csv = tmp_path / "cmp.csv"
    rc, out, err = run_compare(capsys, a, b, "--csv", csv, "--metrics", "reprefill_rate")
    assert rc == 0, err
    assert "cpu_kv_gb: an axis of A only (0, 16); B has 16: compared at cpu_kv_gb = 16 only" in out
    table = pd.read_csv(csv)
    assert table[["A", "B"]].values.tolist() == [[0.1, 0.2]]  # not the 0 GiB point's 0.9


def test_an_axis_of_one_side_without_the_others_value_becomes_a_column(tmp_path, capsys):
    a = write_folder(tmp_path / "a", [{"cpu_kv_gb": 32.0, "reprefill_rate": 0.3}])
    b = write_folder(
        tmp_path / "b",
        [{"cpu_kv_gb": c, "reprefill_rate": r} for c, r in ((0.0, 0.9), (16.0, 0.1))],
    )
    csv = tmp_path / "cmp.csv"
    rc, out, err = run_compare(capsys, a, b, "--csv", csv, "--metrics", "reprefill_rate")
    assert rc == 0, err
    assert "cpu_kv_gb: an axis of B only (0, 16); A has 32: each compared with it" in out
    assert "matched on: policy (2 points)" in out  # A's one point is matched, twice
    table = pd.read_csv(csv)
    assert list(table.columns[:2]) == ["policy", "cpu_kv_gb"]
    assert table[["cpu_kv_gb", "A", "B"]].values.tolist() == [[0, 0.3, 0.9], [16, 0.3, 0.1]]


def test_what_differs_outside_the_grid_is_named(pair, tmp_path, capsys):
    a, _ = pair
    config = {**CONFIG, "engine": {**CONFIG["engine"], "chunked_prefill": True}}
    b = write_folder(
        tmp_path / "b2", [{"hardware": "h200", "gpu_kv_gb": 1.0, "policy": "lru"}], config
    )
    rc, out, err = run_compare(capsys, a, b)
    assert rc == 0, err
    assert "hardware: h100-sxm (A), h200 (B)" in out
    assert "engine.chunked_prefill: false (A), true (B)" in out
    assert "matched on: policy (" in out  # gpu_kv_gb varies in A only; B's 1 GiB is among A's
    assert "gpu_kv_gb: an axis of A only (1, 2); B has 1: compared at gpu_kv_gb = 1 only" in out


def test_one_trace_label_for_two_traces_is_named_among_the_settings(pair, tmp_path, capsys):
    a, _ = pair
    for folder, n in ((a, 20), (tmp_path / "b3", 40)):
        config = {**CONFIG, "trace": [{"kind": "synthetic", "sessions": n, "seed": 7}]}
        if folder == a:
            (a / "config.resolved.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        else:
            write_folder(folder, [{"policy": "lru", "gpu_kv_gb": 1.0}], config)
    rc, out, err = run_compare(capsys, a, tmp_path / "b3")
    assert rc == 0, err
    assert "trace[0].sessions: 20 (A), 40 (B)" in out


def test_nothing_to_match_is_one_line_and_status_2(pair, tmp_path, capsys):
    a, _ = pair
    b = write_folder(tmp_path / "other", [{"policy": "fifo"}, {"policy": "s3fifo"}])
    rc, out, err = run_compare(capsys, a, b)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kvsim: error: nothing to match")
    assert "policy" in err


@pytest.mark.parametrize("missing", ["summary.csv", "config.resolved.yaml"])
def test_a_folder_that_is_not_a_results_folder_names_the_missing_file(pair, missing, capsys):
    a, b = pair
    (b / missing).unlink()
    rc, out, err = run_compare(capsys, a, b)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and str(b / missing) in err and "not a results folder" in err


def test_a_column_of_numbers_on_one_side_and_text_on_the_other_is_refused(pair, capsys):
    a, b = pair
    table = pd.read_csv(b / "summary.csv")
    table["jain_service"] = "high"
    table.to_csv(b / "summary.csv", index=False)
    rc, out, err = run_compare(capsys, a, b)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert "column 'jain_service' differs in meaning: numbers in A, text in B" in err


def test_a_matched_trace_label_naming_two_different_traces_is_refused(tmp_path, capsys):
    def folder(name: str, sessions: int) -> Path:
        config = {
            **CONFIG,
            "traces_loaded": [
                {"label": lab, "source": f"{lab}(sessions={n})", "sessions": n, "turns": 5 * n}
                for lab, n in (("synthetic[0]", 20), ("synthetic[1]", sessions))
            ],
        }
        rows = [{"trace": "synthetic[0]"}, {"trace": "synthetic[1]"}]
        return write_folder(tmp_path / name, rows, config)

    same = run_compare(capsys, folder("a", 40), folder("b", 40))
    assert same[0] == 0, same[2]
    rc, out, err = run_compare(capsys, tmp_path / "a", folder("c", 80))
    assert rc == 2 and out == ""
    assert "column 'trace' differs in meaning: 'synthetic[1]' is synthetic[1](sessions=40)" in err


def test_rejected_turns_are_compared_and_flagged_when_either_side_has_any(pair, capsys):
    a, b = pair
    table = pd.read_csv(b / "summary.csv")
    table.loc[0, "rejected_turns"] = 3
    table.to_csv(b / "summary.csv", index=False)
    rc, out, err = run_compare(capsys, a, b)
    assert rc == 0, err
    assert any(x.split()[:1] == ["rejected_turns"] for x in out.splitlines())
    assert "compare only where it is 0 on both sides" in out
    rc, out, err = run_compare(capsys, a, b, "--metrics", "jain_service")
    assert rc == 0, err
    assert "compare only where it is 0 on both sides" in out  # said with any metrics


def test_unknown_or_label_metrics_are_refused(pair, capsys):
    a, b = pair
    rc, _, err = run_compare(capsys, a, b, "--metrics", "reprefill_rate,nope")
    assert rc == 2 and "no column 'nope' in the summary of A and B" in err
    rc, _, err = run_compare(capsys, a, b, "--metrics", "policy")
    assert rc == 2 and "not a metric" in err


def test_plot_writes_a_png_and_matplotlib_is_imported_only_for_it(pair, tmp_path):
    a, b = pair
    png = tmp_path / "fig" / "cmp.png"
    code = (
        "import sys; from experiments.cli import main; "
        f"rc = main(['compare', {str(a)!r}, {str(b)!r}]); "
        "assert rc == 0 and 'matplotlib' not in sys.modules, sys.modules.keys(); "
        f"rc = main(['compare', {str(a)!r}, {str(b)!r}, '--plot', {str(png)!r}]); "
        "assert rc == 0 and 'matplotlib' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"figure: {png}" in done.stdout


def test_folders_written_by_kvsim_run_compare(fake_backend, write_yaml, tmp_path, capsys):
    base = """
        name: {name}
        trace: {{kind: synthetic, sessions: 6, seed: 3}}
        model: llama-3-8b
        hardware: {hw}
        memory: {{gpu_kv_gb: [1, 2], cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}}
        policies: [lru, fifo]
        seeds: [1]
        executor: {{kind: local, workers: 1}}
        """
    for name, hw in (("one", "h100-sxm"), ("two", "h200")):
        cfg = write_yaml(base.format(name=name, hw=hw), f"{name}.yaml")
        assert main(["run", str(cfg), "--out", str(tmp_path / name), "--quiet"]) == 0
    capsys.readouterr()
    rc, out, err = run_compare(capsys, tmp_path / "one", tmp_path / "two")
    assert rc == 0, err
    assert "matched on: policy, gpu_kv_gb (4 points)" in out
    assert "hardware: h100-sxm (A), h200 (B)" in out


def test_every_grid_label_names_the_setting_it_comes_from():
    """A label compare cannot map to its YAML key is listed twice: as an axis and again as a
    setting that differs."""
    from experiments.compare import CONFIG_KEYS
    from experiments.schema import ALL_LABEL_COLUMNS

    assert set(ALL_LABEL_COLUMNS) - {"name"} == set(CONFIG_KEYS)
