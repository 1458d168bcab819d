"""`kvsim cost`'s per-layer schedule (JSON) and table (text): which layers waited for their copy,
and that the schedule adds up to the iteration the cost model prices."""

from __future__ import annotations

import json
import re

import pytest
from cost_hand import cost_argv

from experiments.cli import main

ROW = re.compile(r"^\s+(\d+)\s+\d+\.\d{3}\s")  # a layer's row of the table: its index, then ms


def _run(argv: list[str], capsys) -> tuple[dict, str]:
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    return data, capsys.readouterr().out


def _adds_up(r: dict) -> None:
    sched = r["schedule"]
    end = sched["layers_end_s"] + r["lm_head_s"] + r["step_overhead_s"]
    assert end == pytest.approx(r["total_s"], rel=1e-12)
    assert sched["wait_s"] + sched["slowdown_s"] == pytest.approx(r["stall_s"], rel=1e-9)


def test_compute_bound_only_layer_zero_waits(tmp_path, capsys) -> None:
    # Llama-3-8B, 1024 new tokens after 4096 (~0.9 ms a layer) and 64 MiB of swap-in (~84 us a
    # layer): layer 0 waits for its copy, every later copy is in before the layer before ends.
    argv = cost_argv(
        tmp_path, "--prefill", "1024", "--ctx", "4096", "--swap-bytes", str(64 << 20),
        "--swap-copies", "32", model="llama-3-8b",
    )  # fmt: skip
    r, text = _run(argv, capsys)
    rows = r["schedule"]["layers"]
    t_x = r["h2d_s"] / 32
    assert len(rows) == 32 and r["schedule"]["pipelined"]
    assert rows[0]["critical"] == "copy" and rows[0]["wait_s"] == pytest.approx(t_x, rel=1e-12)
    assert all(row["critical"] == "compute" and row["wait_s"] == 0 for row in rows[1:])
    assert r["schedule"]["slowdown_s"] == 0  # the profile has no slowdown
    _adds_up(r)
    # Folded: layer 0, then the run of alike layers 1..31 as its first and last rows.
    assert [int(m.group(1)) for m in map(ROW.match, text.splitlines()) if m] == [0, 1, 31]
    assert "layers 2-30: 29 layers like layers 1 and 31" in text
    assert "(1 of 32 layers)" in text
    assert main([*argv, "--all-layers"]) == 0
    rows_shown = [
        int(m.group(1)) for m in map(ROW.match, capsys.readouterr().out.splitlines()) if m
    ]
    assert rows_shown == list(range(32))


def test_copy_bound_every_layer_waits(tmp_path, capsys) -> None:
    argv = cost_argv(
        tmp_path, "--decode-batch", "4", "--decode-ctx", "1000", "--swap-bytes", str(96 << 20)
    )
    r, _ = _run(argv, capsys)
    t_x, t_c = r["h2d_s"] / 3, r["per_layer"]["layer_s"]
    rows = r["schedule"]["layers"]
    assert [row["critical"] for row in rows] == ["copy"] * 3
    assert rows[0]["wait_s"] == pytest.approx(t_x, rel=1e-12)
    for row in rows[1:]:  # each waits for the part of its copy the layer before did not cover
        assert row["wait_s"] == pytest.approx(t_x - t_c, rel=1e-9)
        assert row["compute_start_s"] == row["copy_end_s"]
    _adds_up(r)


def test_without_pipelining_copies_come_first(tmp_path, capsys) -> None:
    argv = cost_argv(tmp_path, "--prefill", "512", "--swap-bytes", str(8 << 20), "--no-pipelining")
    r, text = _run(argv, capsys)
    rows = r["schedule"]["layers"]
    assert not r["schedule"]["pipelined"] and "copies first" in text
    assert rows[0]["compute_start_s"] == rows[-1]["copy_end_s"] == pytest.approx(r["h2d_s"])
    assert [row["critical"] for row in rows] == ["copy", "compute", "compute"]
    _adds_up(r)


def test_slowdown_under_copies_is_part_of_the_stall(capsys) -> None:
    # h100-public slows compute by epsilon while copies run: the stall is waits plus slowdown.
    argv = ["cost", "--profile", "h100-public", "--model", "llama-3-8b", "--prefill", "2048"]
    r, _ = _run([*argv, "--swap-bytes", "100000000", "--swap-copies", "4096"], capsys)
    eps = r["schedule"]["compute_slowdown"]
    assert eps > 0 and r["schedule"]["slowdown_s"] > 0
    for row in r["schedule"]["layers"]:
        assert 0 <= row["slowdown_s"] <= eps * r["per_layer"]["layer_s"] * (1 + 1e-9)
    _adds_up(r)


def test_no_copies_no_waits(tmp_path, capsys) -> None:
    r, _ = _run(cost_argv(tmp_path, "--decode-batch", "8", "--decode-ctx", "100"), capsys)
    assert r["schedule"]["wait_s"] == 0 and r["stall_s"] == pytest.approx(0, abs=1e-15)
    _adds_up(r)


def test_time_outside_the_listed_terms_shows_as_other(tmp_path, capsys) -> None:
    from experiments.cost_layers import layer_table

    r, _ = _run(cost_argv(tmp_path, "--prefill", "64"), capsys)
    pl = r["per_layer"]
    pl["layer_s"] = (
        pl["linear_s"] + pl["prefill_attn_s"] + pl["decode_attn_s"] + pl["elementwise_s"]
    )
    assert "other" not in layer_table(r)[1]  # the four terms make up the layer
    pl["layer_s"] += 20e-6  # a term the table does not list, e.g. an all-reduce
    header, first = layer_table(r)[1:3]
    assert header.split()[7] == "other" and first.split()[5] == "0.020"  # "pf attn": 2 words
