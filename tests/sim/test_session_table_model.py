"""sim.metrics.session_table against a plain pandas model (a groupby of the whole ledger by
session): each session's sums, first priority, mean TTFT and mean slowdown (ttft / ideal, left out
where ideal <= 0 or NaN), to the bit, on ledgers hypothesis draws with zero, negative, NaN and
infinite latencies."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.metrics import SESSION_COLUMNS, session_table
from sim.results import TURN_COLUMNS, TURN_DTYPES, SimResult

# NaN and infinities among them: pandas' mean of a group may differ in its last bit with NaN
# grouped beside it, which a grouping in chunks must not change
TIMES = st.sampled_from([0.0, -1.0, 0.25, 1.5, 3.0, math.nan, math.inf, 1e-300])


@st.composite
def ledgers(draw):
    keys = sorted(
        {(draw(st.sampled_from(["a", "b", "c", "é"])), draw(st.integers(0, 4))) for _ in range(12)}
    )
    rows = []
    for sid, k in keys:
        row = {c: 0 for c in TURN_COLUMNS}
        row.update(session_id=sid, turn=k, priority=draw(st.integers(0, 2)))
        for c in ("history_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "recomputed_tokens"):
            row[c] = draw(st.integers(0, 50))
        row["ttft_s"], row["ttft_ideal_s"] = draw(TIMES), draw(TIMES)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(TURN_COLUMNS)).astype(TURN_DTYPES)


def model(turns: pd.DataFrame) -> pd.DataFrame:
    g = turns.assign(
        slowdown=(turns["ttft_s"] / turns["ttft_ideal_s"]).where(turns["ttft_ideal_s"] > 0)
    ).groupby("session_id", sort=True)
    out = pd.DataFrame(
        {
            "turns": g["turn"].size(),
            "priority": g["priority"].first(),
            **{
                c: g[c].sum()
                for c in ("history_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "recomputed_tokens")
            },
            "ttft_mean_s": g["ttft_s"].mean(),
            "mean_slowdown": g["slowdown"].mean(),
        }
    )
    hist = out["history_tokens"].astype(float)
    out["hit_fraction"] = ((out["gpu_hit_tokens"] + out["cpu_hit_tokens"]) / hist).where(hist > 0)
    return out.reset_index()[list(SESSION_COLUMNS)]


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(turns=ledgers())
def test_session_table_is_the_groupby_model(turns):
    got = session_table(SimResult(turns=turns, stats=None))  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(got, model(turns), check_exact=True, check_index_type=False)
