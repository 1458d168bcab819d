"""Azure LLM inference trace 2023 (Splitwise, ISCA'24; CC-BY-4.0) -> single-turn sessions.

Columns ``TIMESTAMP,ContextTokens,GeneratedTokens`` (``AzureLLMInferenceTrace_{conv,code}.csv``).
The trace has no session ids, so each request is a one-turn session: prompt_tokens = ContextTokens,
output_tokens = GeneratedTokens (0 is clamped to 1, counted in info), open-loop arrival_s = seconds
since the earliest TIMESTAMP (the first row in the published files, which are sorted).
Session ids are ``<file stem>-<row>`` with the 0-based data row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traces.records import (
    Session,
    TraceLoad,
    Turn,
    check_on_error,
    raise_first_problem,
    read_csv_columns,
    sort_sessions,
)

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _row_problems(df: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series, pd.Series]:
    """Parsed columns and, per row, the first problem found ('' when the row is fine)."""
    ts = pd.to_datetime(df["TIMESTAMP"].str.strip(), format="%Y-%m-%d %H:%M:%S.%f", errors="coerce")
    ctx = pd.to_numeric(df["ContextTokens"].str.strip(), errors="coerce")
    gen = pd.to_numeric(df["GeneratedTokens"].str.strip(), errors="coerce")
    problem = pd.Series("", index=df.index, dtype=object)
    for name, col in (("GeneratedTokens", gen), ("ContextTokens", ctx)):
        bad = col.isna() | (col < 0) | (col != np.floor(col))
        problem[bad] = [f"{name} must be an integer >= 0, got {v!r}" for v in df.loc[bad, name]]
    bad_ts = ts.isna()
    problem[bad_ts] = [
        f"TIMESTAMP {v!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'" for v in df.loc[bad_ts, "TIMESTAMP"]
    ]
    return ts, ctx, gen, problem


def load_azure(path: str | Path, on_error: str = "raise", max_rows: int | None = None) -> TraceLoad:
    """Load an Azure 2023 CSV as one single-turn session per request."""
    check_on_error(on_error)
    path = Path(path)
    df = read_csv_columns(path, COLUMNS, max_rows)
    ts, ctx, gen, problem = _row_problems(df)
    bad = problem != ""
    if on_error == "raise":
        raise_first_problem(path, problem)
    good = ~bad
    ts, ctx, gen = ts[good], ctx[good].astype(np.int64), gen[good].astype(np.int64)
    t0 = ts.min() if len(ts) else None
    rel = ((ts - t0).dt.total_seconds()).to_numpy() if len(ts) else np.array([])
    width = len(str(max(len(df) - 1, 0)))
    stem = path.stem
    sessions = [
        Session(
            session_id=f"{stem}-{row:0{width}d}",
            turns=(Turn(prompt_tokens=int(p), output_tokens=max(1, int(o)), arrival_s=float(a)),),
        )
        for row, a, p, o in zip(np.flatnonzero(good.to_numpy()), rel, ctx, gen)
    ]
    return TraceLoad(
        sessions=sort_sessions(sessions),
        skipped=int(bad.sum()),
        source=str(path),
        info={
            "rows": len(df),
            "clamped_outputs": int((gen < 1).sum()),
            "first_timestamp": str(t0) if t0 is not None else None,
        },
    )
