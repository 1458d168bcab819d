"""The canonical trace records every loader and generator yields (docs/semantics.md section 1).

A session is an ordered tuple of turns. Turn 0 carries the session's start in ``arrival_s``; a later
turn carries ``think_s`` (closed-loop replay: it arrives think_s after the previous turn completes)
and/or an absolute ``arrival_s`` (open-loop replay). The replay mode picks which one counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable


class TraceError(ValueError):
    """A trace record is malformed; the message names the file and line (or record) where known."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: the new prompt tokens p_k and the reply's o_k tokens, plus its timing."""

    prompt_tokens: int
    output_tokens: int
    arrival_s: float | None = None
    think_s: float | None = None
    priority: int = 0
    prefix_hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Session:
    """A conversation: turns in order. ``block_tokens`` is the page size of ``prefix_hashes``."""

    session_id: str
    turns: tuple[Turn, ...]
    block_tokens: int | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def start_s(self) -> float:
        return self.turns[0].arrival_s or 0.0

    def history_tokens(self, k: int) -> int:
        """H_k = sum over j<k of (p_j + o_j): the context turn k finds from earlier turns."""
        return sum(t.prompt_tokens + t.output_tokens for t in self.turns[:k])


def validate_session(session: Session, where: str = "") -> Session:
    """Raise TraceError naming ``where`` (file:line or record id) if the session breaks the format."""
    prefix = f"{where}: " if where else ""
    if not session.turns:
        raise TraceError(f"{prefix}session {session.session_id!r} has no turns")
    if session.turns[0].arrival_s is None:
        raise TraceError(f"{prefix}session {session.session_id!r}: turn 0 needs arrival_s")
    for k, t in enumerate(session.turns):
        label = f"{prefix}session {session.session_id!r} turn {k}"
        if t.prompt_tokens < 0 or t.output_tokens < 1:
            raise TraceError(
                f"{label}: need prompt_tokens >= 0 and output_tokens >= 1, "
                f"got {t.prompt_tokens} and {t.output_tokens}"
            )
        if t.think_s is not None and t.think_s < 0:
            raise TraceError(f"{label}: think_s must be >= 0, got {t.think_s}")
        if k > 0 and t.think_s is None and t.arrival_s is None:
            raise TraceError(f"{label}: a later turn needs think_s or arrival_s")
    return session


# --- helpers shared by every loader (added with the loaders; the record fields above are unchanged) ---

ON_ERROR_CHOICES = ("raise", "skip")


def check_on_error(on_error: str) -> str:
    """Every loader takes on_error="raise" (stop at the first bad record) or "skip" (drop and count)."""
    if on_error not in ON_ERROR_CHOICES:
        raise TraceError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
    return on_error


def sort_sessions(sessions: Iterable[Session]) -> tuple[Session, ...]:
    """The one order every loader returns: start time, then session id (a deterministic tie-break)."""
    return tuple(sorted(sessions, key=lambda s: (s.start_s, s.session_id)))


@dataclass(frozen=True)
class TraceLoad:
    """What every loader and generator returns.

    ``sessions`` are sorted by start time then id. ``skipped`` counts sessions dropped because one of
    their records was malformed (on_error="skip"); a malformed record that names no session counts as
    one. ``source`` names where the trace came from (a path or a generator config). ``info`` holds
    loader-specific counts (merged messages, clamped outputs, reconstructed continuations, ...).
    """

    sessions: tuple[Session, ...]
    skipped: int = 0
    source: str = ""
    info: dict = field(default_factory=dict, compare=False)

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


def scale_time(load: TraceLoad, factor: float) -> TraceLoad:
    """Stretch every arrival and think time by ``factor`` (2.0: half the request rate).

    Real traces were served by clusters: replaying one on a single simulated GPU needs their
    arrivals slowed down, or the queue, not the KV policy, decides every latency.
    """
    if factor == 1.0:
        return load

    def turn(t: Turn) -> Turn:
        return replace(
            t,
            arrival_s=None if t.arrival_s is None else t.arrival_s * factor,
            think_s=None if t.think_s is None else t.think_s * factor,
        )

    sessions = tuple(replace(s, turns=tuple(turn(t) for t in s.turns)) for s in load.sessions)
    return replace(load, sessions=sessions, info={**load.info, "time_scale": factor})


def read_csv_columns(
    path: Path, columns: Sequence[str], max_rows: int | None = None, also: str = ""
):
    """A CSV read as strings (the loader parses and checks each column), or a TraceError naming
    the file: unreadable, or missing one of ``columns`` (``also``: what else it may hold)."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, nrows=max_rows)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise TraceError(f"{path}: cannot read CSV: {e}") from e
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TraceError(
            f"{path.name}:1: missing column(s) {missing}; expected {list(columns)}"
            + (f" ({also})" if also else "")
        )
    return df


def raise_first_problem(path: Path, problem) -> None:
    """With on_error="raise": the first row whose problem (a Series of messages, '' for a good
    row) is not empty, as a TraceError naming the file and line (header is line 1)."""
    bad = (problem != "").to_numpy()
    if bad.any():
        i = int(bad.argmax())
        raise TraceError(f"{path.name}:{i + 2}: {problem.iloc[i]}")
