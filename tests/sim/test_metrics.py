"""Hand-computed checks of every metric in sim.metrics on tiny hand-built ledgers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from sim.config import GIB
from sim.metrics import (
    DEFAULT_SLO,
    SUMMARY_COLUMNS,
    Slo,
    jain_index,
    session_table,
    slo_met,
    summarize,
)
from sim.results import TURN_COLUMNS, EngineStats, SimResult
from sim.samples import Samples, weighted_percentile


def turn(sid, k, *, H=0, g=0, c=0, d=0, ttft=0.1, ideal=0.1, e2e=1.0, prio=0, p=10, o=5):
    assert g + c + d == H
    return dict(
        session_id=sid,
        turn=k,
        priority=prio,
        arrival_s=0.0,
        admit_s=0.0,
        first_token_s=ttft,
        finish_s=e2e,
        prompt_tokens=p,
        output_tokens=o,
        history_tokens=H,
        gpu_hit_tokens=g,
        cpu_hit_tokens=c,
        recomputed_tokens=d,
        swap_in_bytes=0,
        preemptions=0,
        preempt_recompute_tokens=0,
        ttft_s=ttft,
        ttft_ideal_s=ideal,
        tbt_mean_s=0.01,
        e2e_s=e2e,
        queue_s=0.0,
    )


def stats(**kw):
    base = dict(
        sim_time_s=10.0,
        steps=3,
        output_tokens=1000,
        gpu_capacity_bytes=GIB,
        cpu_capacity_bytes=0,
        gpu_util=0.5,
        swap_in_bytes=0,
        swap_out_bytes=0,
        dropped_bytes=0,
        gpu_peak_bytes=GIB // 4,
        preemptions=0,
        preempt_recompute_tokens=0,
        tbt=Samples.of([0.01, 0.02, 0.05], [3, 1, 0]),
        wall_s=0.5,
    )
    base.update(kw)
    for f in dataclasses.fields(EngineStats):  # fields added to the contract later: 0
        if (
            f.name not in base
            and dataclasses.MISSING is f.default
            and dataclasses.MISSING is f.default_factory
        ):
            base[f.name] = 0
    return EngineStats(**base)


def result(rows, **kw):
    df = pd.DataFrame(rows, columns=list(TURN_COLUMNS))
    return SimResult(turns=df, stats=stats(**kw))


# Session A: 3 turns, slowdowns 2, 3, 1 (mean 2 -> x = 0.5), hit (60+20+200)/300.
# Session B: 2 turns, slowdowns 1, 1 (x = 1), hit 0/100. Session C: 1 turn (left out of Jain).
LEDGER = [
    turn("A", 0, ttft=0.2, e2e=1.0),
    turn("A", 1, H=100, g=60, c=20, d=20, ttft=0.3, e2e=2.0),
    turn("A", 2, H=200, g=200, ttft=0.1, e2e=3.0),
    turn("B", 0, ttft=0.1, e2e=4.0),
    turn("B", 1, H=100, d=100, ttft=0.1, e2e=5.0),
    turn("C", 0, ttft=0.5, ideal=0.25, e2e=6.0),
]


def test_jain_index_known_values():
    assert jain_index([3, 3, 3, 3]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([1, 0, 0, 0, 0]) == pytest.approx(0.2)
    assert jain_index([1, 2, 3]) == pytest.approx(36 / 42)
    assert jain_index([0.5, 1.0]) == pytest.approx(0.9)
    assert math.isnan(jain_index([]))
    assert jain_index([0, 0]) == 1.0
    assert jain_index([1.0, np.nan, 1.0]) == pytest.approx(1.0)  # non-finite left out


def test_jain_index_is_scale_free_past_the_float_range():
    # squares of 1e200 overflow and of 1e-200 underflow; the index of x is the index of c * x
    for c in (1e200, 1e-200):
        assert jain_index([c, c, c, c]) == pytest.approx(1.0)
        assert jain_index([c, 0, 0, 0]) == pytest.approx(0.25)
        assert jain_index([c, 2 * c, 3 * c]) == pytest.approx(36 / 42)
    x = [0.37, 1.5, 2.25, 9.0]
    assert jain_index(x) == float(np.sum(x) ** 2 / (4 * np.sum(np.square(x))))  # same bits


def test_weighted_percentile_hand_values():
    assert weighted_percentile([0.01, 0.02, 0.05], [3, 1, 0], 50) == 0.01
    assert weighted_percentile([0.01, 0.02, 0.05], [3, 1, 0], 75) == 0.01
    assert weighted_percentile([0.01, 0.02, 0.05], [3, 1, 0], 76) == 0.02
    assert weighted_percentile([0.01, 0.02, 0.05], [3, 1, 0], 99) == 0.02
    assert weighted_percentile([5.0, 1.0], [1, 1], 0) == 1.0
    assert weighted_percentile([5.0, 1.0], [1, 1], 100) == 5.0
    assert math.isnan(weighted_percentile([1.0], [0], 50))
    with pytest.raises(ValueError):
        weighted_percentile([1.0, 2.0], [1], 50)


def test_weighted_percentile_matches_repeated_values():
    rng = np.random.default_rng(3)
    v = rng.random(40)
    w = rng.integers(0, 5, 40)
    expanded = np.repeat(v, w)
    for q in (1, 10, 50, 90, 99, 100):
        assert weighted_percentile(v, w, q) == np.percentile(expanded, q, method="inverted_cdf")


def test_token_ratios_and_reprefill_share():
    s = summarize(result(LEDGER))
    assert s["turns"] == 6 and s["sessions"] == 3
    assert s["reprefill_rate"] == pytest.approx(120 / 400)
    assert s["gpu_hit_rate"] == pytest.approx(260 / 400)
    assert s["cpu_hit_rate"] == pytest.approx(20 / 400)
    assert s["reprefill_rate"] + s["gpu_hit_rate"] + s["cpu_hit_rate"] == pytest.approx(1.0)
    assert s["turns_with_reprefill"] == pytest.approx(2 / 3)  # A1 and B1 of A1, A2, B1
    assert s["recompute_tokens"] == 120


def test_jain_service_and_hit():
    s = summarize(result(LEDGER))
    assert s["jain_service"] == pytest.approx(0.9)  # x = (0.5, 1)
    assert s["jain_hit"] == pytest.approx(0.5)  # (280/300, 0): one takes all of n = 2
    assert "jain_service_p0" not in s  # one class only


def test_jain_per_priority_class():
    rows = [dict(r, priority=1) if r["session_id"] == "B" else r for r in LEDGER]
    s = summarize(result(rows))
    assert s["jain_service_p0"] == pytest.approx(1.0) and s["jain_service_p1"] == pytest.approx(1.0)
    assert s["jain_hit_p1"] == pytest.approx(1.0)  # a single session
    assert s["jain_service"] == pytest.approx(0.9)  # the overall index is unchanged


def test_latency_percentiles_throughput_and_engine_figures():
    s = summarize(
        result(
            LEDGER,
            swap_in_bytes=2 * GIB,
            swap_out_bytes=GIB // 2,
            preemptions=4,
            preempt_recompute_tokens=77,
            evict_ns=Samples.of([10_000, 20_000, 30_000]),
            gpu_util=0.93,
        )
    )
    ttft = [0.2, 0.3, 0.1, 0.1, 0.1, 0.5]
    for q in (50, 90, 99):
        assert s[f"ttft_p{q}_s"] == pytest.approx(np.percentile(ttft, q))
        assert s[f"e2e_p{q}_s"] == pytest.approx(np.percentile([1, 2, 3, 4, 5, 6], q))
    assert s["tbt_p50_s"] == 0.01 and s["tbt_p99_s"] == 0.02
    assert s["throughput_tok_s"] == pytest.approx(100.0)
    assert s["evict_calls"] == 3 and s["evict_us_p50"] == 20.0
    assert s["evict_us_p99"] == pytest.approx(np.percentile([10, 20, 30], 99))
    assert s["swap_in_gb"] == 2.0 and s["swap_out_gb"] == 0.5
    assert s["preemptions"] == 4 and s["preempt_recompute_tokens"] == 77
    assert s["gpu_peak_gb"] == 0.25
    assert s["gpu_util"] == 0.93 and s["sim_time_s"] == 10.0 and s["wall_s"] == 0.5
    assert list(s)[: len(SUMMARY_COLUMNS)] == list(SUMMARY_COLUMNS)


def test_no_history_gives_zero_ratios_and_nan_jain():
    s = summarize(result([turn("A", 0), turn("B", 0)]))
    assert s["reprefill_rate"] == 0.0 and s["gpu_hit_rate"] == 0.0
    assert s["turns_with_reprefill"] == 0.0
    assert math.isnan(s["jain_service"]) and math.isnan(s["jain_hit"])
    assert s["evict_calls"] == 0 and math.isnan(s["evict_us_p50"])


def test_empty_ledger():
    s = summarize(result([], tbt=Samples(weighted=True), sim_time_s=0.0))
    assert s["turns"] == 0 and s["sessions"] == 0
    assert math.isnan(s["ttft_p50_s"]) and math.isnan(s["tbt_p50_s"])
    assert math.isnan(s["throughput_tok_s"])
    assert set(SUMMARY_COLUMNS) <= set(s)


def test_session_table():
    tab = session_table(result(LEDGER)).set_index("session_id")
    assert list(tab.index) == ["A", "B", "C"]
    assert tab.loc["A", "turns"] == 3 and tab.loc["A", "history_tokens"] == 300
    assert tab.loc["A", "gpu_hit_tokens"] == 260 and tab.loc["A", "cpu_hit_tokens"] == 20
    assert tab.loc["A", "recomputed_tokens"] == 20
    assert tab.loc["A", "hit_fraction"] == pytest.approx(280 / 300)
    assert tab.loc["A", "mean_slowdown"] == pytest.approx(2.0)
    assert tab.loc["A", "ttft_mean_s"] == pytest.approx(0.2)
    assert tab.loc["B", "hit_fraction"] == 0.0
    assert math.isnan(tab.loc["C", "hit_fraction"])  # no history
    assert tab.loc["C", "mean_slowdown"] == pytest.approx(2.0)


# SLO ledger: (ttft_s, TPOT, output tokens). Under Slo(1.0, 0.1): A0 meets; A1 meets, both on the
# bound (inclusive); B0 misses TTFT; B1 misses TPOT; C0 has one output token, no TPOT: meets.
SLO_LEDGER = [
    dict(turn("A", 0, ttft=0.5, o=10), tbt_mean_s=0.05),
    dict(turn("A", 1, ttft=1.0, o=20), tbt_mean_s=0.1),
    dict(turn("B", 0, ttft=1.5, o=40), tbt_mean_s=0.02),
    dict(turn("B", 1, ttft=0.2, o=80), tbt_mean_s=0.3),
    dict(turn("C", 0, ttft=0.3, o=1), tbt_mean_s=math.nan),
]


def test_slo_attainment_and_goodput_by_hand():
    s = summarize(result(SLO_LEDGER, rejected_turns=3), slo=Slo(ttft_s=1.0, tpot_s=0.1))
    assert s["slo_attainment"] == pytest.approx(3 / 8)  # A0, A1, C0 of 5 completed + 3 rejected
    assert s["goodput_turns_s"] == pytest.approx(3 / 10.0)  # sim_time_s = 10
    assert s["goodput_tok_s"] == pytest.approx((10 + 20 + 1) / 10.0)
    assert list(slo_met(result(SLO_LEDGER).turns, Slo(1.0, 0.1))) == [
        True,
        True,
        False,
        False,
        True,
    ]


def test_slo_one_bound_only():
    ttft_only = summarize(result(SLO_LEDGER), slo=Slo(ttft_s=1.0, tpot_s=None))
    assert ttft_only["slo_attainment"] == pytest.approx(4 / 5)  # all but B0
    assert ttft_only["goodput_tok_s"] == pytest.approx((10 + 20 + 80 + 1) / 10.0)
    tpot_only = summarize(result(SLO_LEDGER), slo=Slo(ttft_s=None, tpot_s=0.1))
    assert tpot_only["slo_attainment"] == pytest.approx(4 / 5)  # all but B1
    assert tpot_only["goodput_tok_s"] == pytest.approx((10 + 20 + 40 + 1) / 10.0)
    none = summarize(result(SLO_LEDGER), slo=Slo(ttft_s=None, tpot_s=None))
    assert none["slo_attainment"] == 1.0 and none["goodput_turns_s"] == pytest.approx(0.5)


def test_slo_defaults_when_the_caller_gives_none():
    assert (DEFAULT_SLO.ttft_s, DEFAULT_SLO.tpot_s) == (2.0, 0.1)
    s = summarize(result(SLO_LEDGER))
    assert s["slo_attainment"] == pytest.approx(4 / 5)  # B0's 1.5 s is within 2 s; B1 misses
    assert s["goodput_tok_s"] == pytest.approx((10 + 20 + 40 + 1) / 10.0)


def test_slo_on_an_empty_ledger():
    empty = summarize(result([], tbt=Samples(weighted=True), sim_time_s=0.0))
    assert math.isnan(empty["slo_attainment"]) and math.isnan(empty["goodput_turns_s"])
    assert math.isnan(empty["goodput_tok_s"]) and math.isnan(empty["tpot_p50_s"])
    rejected = summarize(result([], tbt=Samples(weighted=True), rejected_turns=2))
    assert rejected["slo_attainment"] == 0.0 and rejected["goodput_turns_s"] == 0.0


@pytest.mark.parametrize(
    "kw", [dict(ttft_s=0.0), dict(tpot_s=-0.1), dict(ttft_s=math.nan), dict(tpot_s=True)]
)
def test_slo_refuses_a_bound_that_is_not_positive(kw):
    with pytest.raises(ValueError, match=r"slo\.(ttft|tpot)_s: must be a number > 0"):
        Slo(**kw)


def test_tpot_and_itl_percentiles_by_hand():
    # ITL record: 10 decoded tokens, 5 waited 10 ms, 3 20 ms, 1 30 ms, 1 40 ms (inverted CDF:
    # ranks 5, 9 and 10 of 10)
    tbt = Samples.of([0.01, 0.02, 0.03, 0.04], [5, 3, 1, 1])
    s = summarize(result(SLO_LEDGER, tbt=tbt))
    assert (s["tbt_p50_s"], s["tbt_p90_s"], s["tbt_p99_s"]) == (0.01, 0.03, 0.04)
    # TPOT over the four turns that have one, sorted 0.02, 0.05, 0.1, 0.3 (linear interpolation;
    # C0's single token has none)
    assert s["tpot_p50_s"] == pytest.approx(0.075)  # halfway between 0.05 and 0.1
    assert s["tpot_p90_s"] == pytest.approx(0.1 + 0.7 * 0.2)  # rank 2.7
    assert s["tpot_p99_s"] == pytest.approx(0.1 + 0.97 * 0.2)  # rank 2.97
