"""BurstGPT (Azure OpenAI GPT service logs, Wang et al. 2024) -> sessions.

Columns ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`` and, in releases
that have it, ``Session ID``. Timestamp is in seconds from the start of the trace.

Mapping:
- A row with ``Response tokens`` = 0 is a failed request (BurstGPT logs failures that way): it is
  dropped and counted in ``info["failed_requests"]``. ``Total tokens`` must equal the sum of the
  other two.
- Without a session id (no column, or an empty cell) a row is a one-turn session: prompt_tokens =
  Request tokens, output_tokens = Response tokens, open-loop arrival_s = Timestamp less the
  earliest Timestamp. Its id is ``<file stem>-<row>`` (0-based data row).
- Rows sharing a session id are its turns, in Timestamp order (file order on ties), each with its
  own arrival. A chat API is stateless, so a request re-sends the conversation: ``Request tokens``
  of turn k is its history H_k (the earlier turns' prompts and replies) plus its new prompt, and
  p_k = Request tokens - H_k. A request shorter than H_k (the client dropped history) starts a new
  session ``<id>#<n>`` with p = Request tokens, counted in ``info["history_dropped_new_session"]``.
- ``log_type`` keeps only ``Conversation log`` or ``API log`` rows (default: all). Model and log
  type are kept in each session's ``meta``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from traces.records import (
    Session,
    TraceError,
    TraceLoad,
    Turn,
    check_on_error,
    raise_first_problem,
    read_csv_columns,
    sort_sessions,
)

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
SESSION_COLUMN = "Session ID"
LOG_TYPES = {"all": None, "conversation": "Conversation log", "api": "API log"}
_INTS = ("Request tokens", "Response tokens", "Total tokens")


def _problems(df: pd.DataFrame) -> tuple[pd.Series, dict[str, pd.Series], pd.Series]:
    """Parsed timestamps and token columns, and per row its first problem ('' when fine)."""
    ts = pd.to_numeric(df["Timestamp"].str.strip(), errors="coerce")
    ints = {c: pd.to_numeric(df[c].str.strip(), errors="coerce") for c in _INTS}
    problem = pd.Series("", index=df.index, dtype=object)
    total = ints["Request tokens"] + ints["Response tokens"]
    mismatch = ints["Total tokens"] != total
    problem[mismatch] = [
        f"Total tokens {t!r} is not Request + Response tokens ({r!r} + {o!r})"
        for t, r, o in zip(
            df.loc[mismatch, "Total tokens"],
            df.loc[mismatch, "Request tokens"],
            df.loc[mismatch, "Response tokens"],
            strict=True,
        )
    ]
    for name in reversed(_INTS):
        col = ints[name]
        bad = col.isna() | (col < 0) | (col != np.floor(col))
        problem[bad] = [f"{name} must be an integer >= 0, got {v!r}" for v in df.loc[bad, name]]
    bad_ts = ts.isna() | (ts < 0)
    problem[bad_ts] = [
        f"Timestamp must be seconds >= 0, got {v!r}" for v in df.loc[bad_ts, "Timestamp"]
    ]
    return ts, ints, problem


def load_burstgpt(
    path: str | Path, on_error: str = "raise", log_type: str = "all", max_rows: int | None = None
) -> TraceLoad:
    """Load a BurstGPT CSV (see the module docstring for the mapping)."""
    check_on_error(on_error)
    if log_type not in LOG_TYPES:
        raise TraceError(f"trace.log_type must be one of {', '.join(LOG_TYPES)}, got {log_type!r}")
    path = Path(path)
    df = read_csv_columns(path, COLUMNS, max_rows, also=f"and optionally {SESSION_COLUMN!r}")
    ts, ints, problem = _problems(df)
    bad = problem != ""
    if on_error == "raise":
        raise_first_problem(path, problem)
    keep = ~bad
    failed = keep & (ints["Response tokens"] == 0)
    keep &= ~failed
    wanted = LOG_TYPES[log_type]
    if wanted is not None:
        keep &= df["Log Type"].str.strip() == wanted
    info = {
        "rows": len(df),
        "failed_requests": int(failed.sum()),
        "skipped_rows": int(bad.sum()),
        "history_dropped_new_session": 0,
    }
    t0 = float(ts[keep].min()) if keep.any() else 0.0
    sids = (
        df[SESSION_COLUMN].str.strip()
        if SESSION_COLUMN in df.columns
        else pd.Series("", index=df.index)
    )
    width = len(str(max(len(df) - 1, 0)))
    rows = sorted(np.flatnonzero(keep.to_numpy()).tolist(), key=lambda i: (ts.iloc[i], i))
    singles: list[Session] = []
    grouped: dict[str, list[int]] = {}
    for i in rows:
        if sids.iloc[i]:
            grouped.setdefault(sids.iloc[i], []).append(i)
        else:
            singles.append(
                _session(
                    f"{path.stem}-{i:0{width}d}",
                    [(i, int(ints["Request tokens"].iloc[i]))],
                    df,
                    ts,
                    ints,
                    t0,
                )
            )
    sessions = singles
    for sid, idx in grouped.items():
        turns: list[tuple[int, int]] = []  # (row, new prompt tokens)
        part, h = 0, 0
        for i in idx:
            request = int(ints["Request tokens"].iloc[i])
            if request < h:  # history dropped: a new session from here
                sessions.append(_session(f"{sid}#{part}" if part else sid, turns, df, ts, ints, t0))
                info["history_dropped_new_session"] += 1
                part, turns, h = part + 1, [], 0
            turns.append((i, request - h))
            h = request + int(ints["Response tokens"].iloc[i])
        sessions.append(_session(f"{sid}#{part}" if part else sid, turns, df, ts, ints, t0))
    return TraceLoad(
        sessions=sort_sessions(sessions), skipped=int(bad.sum()), source=str(path), info=info
    )


def _session(sid: str, turns: list[tuple[int, int]], df, ts, ints, t0: float) -> Session:
    """A session of (row, new prompt tokens) turns, each arriving at its own Timestamp."""
    first = turns[0][0]
    return Session(
        sid,
        tuple(
            Turn(
                prompt_tokens=p,
                output_tokens=int(ints["Response tokens"].iloc[i]),
                arrival_s=float(ts.iloc[i]) - t0,
            )
            for i, p in turns
        ),
        meta={
            "model": df["Model"].iloc[first].strip(),
            "log_type": df["Log Type"].iloc[first].strip(),
        },
    )
