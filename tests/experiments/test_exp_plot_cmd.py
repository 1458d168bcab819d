"""`kvsim plot DIR`: every figure of a results folder drawn again from its tables."""

from __future__ import annotations

import pytest

from experiments.cli import main

TINY = """name: tiny
trace: {kind: synthetic, sessions: 6, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [0.5, 1], cpu_kv_gb: 0}
policies: [lru, fifo]
"""


def test_plot_redraws_every_figure(tmp_path, capsys):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY)
    out = tmp_path / "results"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    before = {p.name: p.stat().st_size for p in (out / "plots").iterdir()}
    for p in (out / "plots").iterdir():
        p.unlink()
    (out / "plots" / "stale.png").write_bytes(b"not a figure")
    capsys.readouterr()
    assert main(["plot", str(out)]) == 0
    after = {p.name: p.stat().st_size for p in (out / "plots").iterdir()}
    assert set(after) == set(before) and len(after) >= 4  # the stale file is gone
    assert all(size > 10_000 for size in after.values())
    assert "plots/" in capsys.readouterr().out


def test_plot_of_a_folder_without_results_exits_2(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "summary.csv: no such file" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing half-written left behind


@pytest.mark.slow
def test_plot_draws_the_formats_the_folder_was_written_in(tmp_path, capsys):
    """Without --format, the figures come back in the folder's figures.format; --format (one or
    a comma-separated list) replaces them."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY.replace("policies: [lru, fifo]", "policies: [lru]"))
    out = tmp_path / "results"
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--format", "pdf,svg"]) == 0
    written = sorted(p.name for p in (out / "plots").iterdir())
    assert main(["plot", str(out)]) == 0
    assert sorted(p.name for p in (out / "plots").iterdir()) == written
    assert {p.suffix for p in (out / "plots").iterdir()} == {".pdf", ".svg"}
    assert main(["plot", str(out), "--format", "png"]) == 0
    assert {p.suffix for p in (out / "plots").iterdir()} == {".png"}
