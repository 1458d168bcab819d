"""The trace exporter of ``benchmarks/vidur_side_by_side.py``: the CSV it writes for Vidur holds
exactly the kvsim trace's requests (no Vidur needed)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import yaml

from traces import load_trace

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "single_turn_10k.yaml"


@pytest.fixture(scope="module")
def sbs():
    spec = importlib.util.spec_from_file_location(
        "vidur_side_by_side", ROOT / "benchmarks" / "vidur_side_by_side.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def config():
    return yaml.safe_load(CONFIG.read_text())


def test_the_csv_rows_are_the_kvsim_trace_s_requests(sbs, config, tmp_path):
    path = tmp_path / "trace.csv"
    sbs.write_vidur_trace(sbs.trace_rows(config), path)
    sessions = load_trace(config["trace"]).sessions
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == ["Date", "Time", "PromptTokenCount", "CompletionTokenCount"]
    body = lines[1:]
    assert len(body) == len(sessions) == 10_000
    for (date, t, p, d), s in zip(body, sessions):
        (turn,) = s.turns
        assert date == sbs.VIDUR_TRACE_DATE
        assert float(t) == turn.arrival_s  # to the bit
        assert (int(p), int(d)) == (turn.prompt_tokens, turn.output_tokens)
    assert sbs.read_vidur_trace(path) == sbs.trace_rows(config)


def test_vidur_s_reader_keeps_every_row_and_cuts_no_prompt(sbs, config, tmp_path):
    """What Vidur 0.0.26's TraceReplayRequestGenerator does with the file: keep the rows of the
    date it is given, cut each prompt so prompt + reply <= max_tokens."""
    rows = sbs.trace_rows(config)
    path = tmp_path / "trace.csv"
    sbs.write_vidur_trace(rows, path)
    df = pd.read_csv(path)
    df = df[df["Date"] == sbs.VIDUR_TRACE_DATE]
    assert len(df) == len(rows)
    max_tokens = sbs.vidur_max_tokens(rows, config["engine"]["max_batch_tokens"])
    over = (df["PromptTokenCount"] + df["CompletionTokenCount"] - max_tokens).clip(lower=0)
    assert (over == 0).all()
    assert df["PromptTokenCount"].tolist() == [r.num_prefill_tokens for r in rows]
    assert df["CompletionTokenCount"].tolist() == [r.num_decode_tokens for r in rows]
    assert df["Time"].is_monotonic_increasing
    assert df["Time"].sub([r.arrived_at for r in rows]).abs().max() < 1e-9


def test_max_tokens_rounds_the_longest_request_up_to_vidur_s_granularity(sbs):
    row = sbs.TraceRow
    g = sbs.KV_GRANULARITY
    assert sbs.vidur_max_tokens([row(0.0, 4000, 200)], 4096) == 4096 + g
    assert sbs.vidur_max_tokens([row(0.0, 4000, 96)], 4096) == 4096
    assert sbs.vidur_max_tokens([row(0.0, 10, 5), row(1.0, 3 * g, 1)], 64) == 4 * g
    assert sbs.vidur_max_tokens([], 4096) == 4096


def test_a_multi_turn_trace_is_refused(sbs):
    config = {"trace": {"kind": "synthetic", "sessions": 20, "seed": 1, "turns_pmf": [0, 1.0]}}
    with pytest.raises(ValueError, match="single-turn"):
        sbs.trace_rows(config)


def test_a_file_of_another_layout_is_refused(sbs, tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n")
    with pytest.raises(ValueError, match="header"):
        sbs.read_vidur_trace(path)
    path.write_text("Date,Time,PromptTokenCount,CompletionTokenCount\n2020-01-01,0.0,10,5\n")
    with pytest.raises(ValueError, match="date"):
        sbs.read_vidur_trace(path)


def test_the_attention_profile_is_the_verified_transcription_in_vidur_s_columns(sbs, tmp_path):
    from experiments.shared_data import shared_data_dir

    source = shared_data_dir() / sbs.ATTENTION_SAMPLE
    if not source.is_file():
        pytest.skip(f"shared data not found: {source}")
    out = tmp_path / "attention.csv"
    n = sbs.write_attention_profile(shared_data_dir(), out)
    src = pd.read_csv(source)
    src = src[src["copy_repo"] == sbs.VERIFIED_COPY].reset_index(drop=True)
    got = pd.read_csv(out)
    assert n == len(got) == len(src) > 0
    for col, value in sbs.LLAMA3_8B_ATTENTION.items():
        assert (got[col] == value).all()
    for ours, theirs in [
        ("time_stats.attn_prefill.median", "attn_prefill_median_ms"),
        ("time_stats.attn_decode.median", "attn_decode_median_ms"),
        ("time_stats.attn_kv_cache_save.median", "attn_kv_cache_save_median_ms"),
        ("batch_size", "batch_size"),
        ("prefill_chunk_size", "prefill_chunk_size"),
        ("kv_cache_size", "kv_cache_size"),
    ]:
        pd.testing.assert_series_equal(got[ours], src[theirs], check_names=False)
