"""The console table of `kvsim run`: every grid axis that varies has a column, so no two rows read
the same; keys of trace, budget and sparse mappings that their labels do not show get one too
(fake simulator)."""

from __future__ import annotations

import pandas as pd
from exp_fakes import TINY

from experiments.cli import main

BASE = TINY.replace("cpu_kv_gb: [0, 4]", "cpu_kv_gb: 4").replace(
    "gpu_kv_gb: [0.5, 1, 2]", "gpu_kv_gb: 1"
)


def _table(write_yaml, tmp_path, capsys, text: str) -> tuple[list[str], list[list[str]]]:
    """Run ``text`` through `kvsim run`; the console table's header and rows, split on blanks."""
    out = tmp_path / "out"
    assert main(["run", str(write_yaml(text)), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["policy"])
    n = len(pd.read_csv(out / "summary.csv"))
    header, *rows = [line.split() for line in lines[start : start + 1 + n]]
    return header, rows


def _distinct(header: list[str], rows: list[list[str]]) -> None:
    """Every row tells its grid point apart: the label part of no two rows is the same."""
    labels = header.index("reprefill")  # the first metric column
    assert len({tuple(r[:labels]) for r in rows}) == len(rows)


def test_a_list_of_traces_shows_the_trace_keys_that_differ(
    write_yaml, tmp_path, capsys, fake_backend
):
    text = BASE.replace(
        "trace: {kind: synthetic, sessions: 6, seed: 3}",
        "trace: [{kind: synthetic, sessions: 6, seed: 3}, {kind: synthetic, sessions: 6, seed: 4}]",
    )
    header, rows = _table(write_yaml, tmp_path, capsys, text)
    assert "trace.seed" in header and "trace.sessions" not in header  # the same in both
    col = header.index("trace.seed")
    assert sorted({r[col] for r in rows}) == ["3", "4"]
    _distinct(header, rows)


def test_sparse_modes_whose_labels_are_equal_show_the_key_that_differs(
    write_yaml, tmp_path, capsys, fake_backend
):
    text = BASE + (
        "sparse:\n"
        "  - {kind: quest, k: 4}\n"
        "  - {kind: quest, k: 4, scorer: random}\n"
        "  - {kind: quest, k: 8}\n"
    )
    header, rows = _table(write_yaml, tmp_path, capsys, text)
    assert "sparse" in header and "sparse.scorer" in header
    assert "sparse.k" not in header and "sparse.ring_slots" not in header  # the label shows them
    scorer, sparse = header.index("sparse.scorer"), header.index("sparse")
    assert {(r[sparse], r[scorer]) for r in rows} == {
        ("quest-k4-r16", "recency"),
        ("quest-k4-r16", "random"),
        ("quest-k8-r16", "recency"),
    }
    _distinct(header, rows)


def test_budgets_whose_labels_are_equal_show_the_key_that_differs(
    write_yaml, tmp_path, capsys, fake_backend
):
    text = BASE + (
        "budgets:\n"
        "  - {kind: smartkv, sink: 4, window: 64, budget: 188, scorer: random}\n"
        "  - {kind: smartkv, sink: 4, window: 64, budget: 188, scorer: random, quality_sample: 50}\n"
    )
    header, rows = _table(write_yaml, tmp_path, capsys, text)
    assert "budget.quality_sample" in header  # the two budgets' label is the same
    col = header.index("budget.quality_sample")
    assert sorted({r[col] for r in rows}) == ["200", "50"]
    _distinct(header, rows)
