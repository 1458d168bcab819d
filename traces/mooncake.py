"""Mooncake FAST'25 traces (``conversation_trace.jsonl``) -> sessions rebuilt from prefix chains.

Each line is one request: ``timestamp`` (ms), ``input_length``, ``output_length`` and ``hash_ids``,
the prefix-chained hashes of its input's 512-token blocks (block i's id identifies tokens
0..512(i+1)). The trace has no session ids, so sessions are rebuilt:

- Continuation rule. Request B continues request A (an earlier line) when B's hash_ids start with
  A's *full* blocks, hash_ids[:input_length // 512], and that is at least 2 blocks. A's last, partial
  block is excluded: its hash covers only part of a block, and the next turn fills that block with
  more tokens, so its id changes (comparing A's complete list matches only ~1 % of requests; the
  full-block rule matches 33.0 %, PROVENANCE's "33.3 % extend an earlier request"). 2 blocks: the
  first block (id 0) is a system prompt shared by nearly every request. Among several candidates the
  longest matching prefix wins, then the latest request.
- Chains are linear. If A already has a continuation (a branch: regenerate or edit) or B's input is
  shorter than A's (edited history), B starts a new session; its prefix_hashes still let a simulator
  share A's blocks.
- prompt_tokens of a continuation = input_length - (A.input_length + A.output_length) when that is
  >= 0 (the new user message; the history is A's input plus A's reply), else input_length -
  A.input_length (A's reply was not kept whole in the next input). Turn 0's prompt is its whole input.
  In the second case H_k (sum of earlier p + o) over-counts the real context by the dropped reply.
- Timing. Timestamps are quantised to ~3 s buckets (PROVENANCE 1.1), so with jitter=True each arrival
  is drawn uniformly in [t, t + bucket) (seeded; bucket_s=None estimates the bucket as the median gap
  between distinct timestamps when fewer than half the timestamps are distinct, else no jitter), then
  sorted within each session so turns stay in order. Every turn keeps its absolute arrival_s
  (open-loop); later turns also get think_s = the gap between arrivals, an UPPER BOUND on think time
  (it includes the previous turn's unknown service time).
- prefix_hashes = the request's hash_ids (covering its whole input); block_tokens = 512.
- ``chain: false`` skips the rebuilding: each request is a one-turn session.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces.records import Session, TraceError, TraceLoad, Turn, check_on_error, sort_sessions

BLOCK_TOKENS = 512
MIN_CHAIN_BLOCKS = 2


@dataclass(frozen=True, slots=True)
class _Row:
    line: int
    t_ms: float
    input_length: int
    output_length: int
    hashes: tuple[int, ...]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse(obj: object) -> tuple[float, int, int, tuple[int, ...]]:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    for key in ("timestamp", "input_length", "output_length", "hash_ids"):
        if key not in obj:
            raise ValueError(f"missing key {key!r}")
    ts = obj["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise ValueError(f"'timestamp' must be a number of ms >= 0, got {ts!r}")
    for key in ("input_length", "output_length"):
        if not _is_int(obj[key]) or obj[key] < 0:
            raise ValueError(f"{key!r} must be an integer >= 0, got {obj[key]!r}")
    h = obj["hash_ids"]
    if not isinstance(h, list) or not all(_is_int(x) for x in h):
        raise ValueError("'hash_ids' must be a list of integers")
    return float(ts), obj["input_length"], obj["output_length"], tuple(h)


def _read(path: Path, on_error: str) -> tuple[list[_Row], int]:
    rows, skipped = [], 0
    try:
        fh = path.open(encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror}") from e
    with fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    raise ValueError(f"invalid JSON: {e.msg} (column {e.colno})") from None
                rows.append(_Row(line_no, *_parse(obj)))
            except ValueError as e:
                if on_error == "raise":
                    raise TraceError(f"{path.name}:{line_no}: {e}") from None
                skipped += 1  # a request row is its own record: only it is dropped
    rows.sort(key=lambda r: (r.t_ms, r.line))
    return rows, skipped


def estimate_bucket_s(t_ms: np.ndarray) -> float:
    """Quantisation step of the timestamps in seconds, or 0.0 when they are not quantised."""
    distinct = np.unique(t_ms)
    if len(distinct) < 2 or len(distinct) * 2 > len(t_ms):
        return 0.0
    return float(np.median(np.diff(distinct))) / 1000.0


def load_mooncake(
    path: str | Path,
    seed: int = 0,
    jitter: bool = True,
    on_error: str = "raise",
    bucket_s: float | None = None,
    chain: bool = True,
) -> TraceLoad:
    """Rebuild multi-turn sessions from a Mooncake trace (rules in the module docstring);
    ``chain=False`` makes every request a one-turn session of its whole input (its reuse then
    comes from prefix sharing alone)."""
    check_on_error(on_error)
    path = Path(path)
    rows, skipped = _read(path, on_error)
    t_ms = np.array([r.t_ms for r in rows], dtype=float)
    if bucket_s is None:
        bucket_s = estimate_bucket_s(t_ms)
    if not (math.isfinite(bucket_s) and bucket_s >= 0):
        raise TraceError(f"bucket_s must be >= 0, got {bucket_s}")
    arrival = t_ms / 1000.0
    if jitter and bucket_s > 0:
        arrival = arrival + np.random.default_rng(seed).uniform(0.0, bucket_s, size=len(rows))

    # Chain building: (full-block prefix) -> latest row index with exactly that full-block prefix.
    by_prefix: dict[tuple[int, ...], int] = {}
    session_of: list[int] = []  # row -> session number
    chains: list[list[int]] = []  # session number -> row indices in turn order
    continuations = branches = shrunk = prompt_fallbacks = 0
    prompt: list[int] = []
    for i, r in enumerate(rows):
        parent = None
        for n in range(len(r.hashes) if chain else 0, MIN_CHAIN_BLOCKS - 1, -1):  # longest first
            parent = by_prefix.get(r.hashes[:n])
            if parent is not None:
                break
        p_tokens = r.input_length
        if parent is not None:
            a = rows[parent]
            parent_chain = chains[session_of[parent]]
            if parent_chain[-1] != parent:
                branches += 1
                parent = None
            elif r.input_length < a.input_length:
                shrunk += 1
                parent = None
            else:
                p_tokens = r.input_length - (a.input_length + a.output_length)
                if p_tokens < 0:
                    prompt_fallbacks += 1
                    p_tokens = r.input_length - a.input_length
        if parent is None:
            session_of.append(len(chains))
            chains.append([i])
        else:
            continuations += 1
            session_of.append(session_of[parent])
            parent_chain.append(i)
        prompt.append(p_tokens)
        full = r.hashes[: r.input_length // BLOCK_TOKENS]
        if len(full) >= MIN_CHAIN_BLOCKS:
            by_prefix[full] = i

    sessions, clamped = [], 0
    width = len(str(max((r.line for r in rows), default=0)))
    for rows_of_session in chains:
        times = sorted(
            float(arrival[i]) for i in rows_of_session
        )  # jitter must not reorder a session's turns
        turns = []
        for k, (i, t) in enumerate(zip(rows_of_session, times)):
            r = rows[i]
            clamped += r.output_length < 1
            turns.append(
                Turn(
                    prompt_tokens=prompt[i],
                    output_tokens=max(1, r.output_length),
                    arrival_s=t,
                    think_s=None if k == 0 else t - times[k - 1],
                    prefix_hashes=r.hashes,
                )
            )
        first = rows[rows_of_session[0]].line
        sessions.append(
            Session(
                session_id=f"mc-{first:0{width}d}",
                turns=tuple(turns),
                block_tokens=BLOCK_TOKENS,
                meta={"lines": [rows[i].line for i in rows_of_session]},
            )
        )
    info = {
        "requests": len(rows),
        "sessions": len(sessions),
        "continuations": continuations,
        "multi_turn_sessions": sum(1 for c in chains if len(c) > 1),
        "branches_started_new_session": branches,
        "shrunk_inputs_started_new_session": shrunk,
        "prompt_fallbacks": prompt_fallbacks,
        "clamped_outputs": clamped,
        "bucket_s": bucket_s if jitter else 0.0,
    }
    return TraceLoad(sessions=sort_sessions(sessions), skipped=skipped, source=str(path), info=info)
