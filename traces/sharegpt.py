"""ShareGPT JSON -> sessions.

Input: a JSON list of ``{"id": "QWJhYvA_0", "conversations": [{"from": "human", "value": "..."}]}``.
Split records (``abc_0``, ``abc_9``, ...) are joined back into session ``abc`` and messages are paired
into turns by the rules in ``traces.conversation`` (system text prepended to the next prompt,
consecutive prompts or replies merged, a leading reply and a trailing prompt dropped, an empty reply
counted as 1 output token). Token counts come from ``tokenizer`` (default: the fitted CharEstimate).

A record with an empty ``conversations`` list is valid and contributes nothing (the split script
emits one before a first exchange that is too long on its own). A malformed record (not an object,
no string id, no conversations list, a message without a string "from"/"value", an unknown role)
raises TraceError naming the record index and id; with on_error="skip" its whole session is
dropped and counted.

ShareGPT has no timestamps: session starts are a seeded Poisson process (``arrival_rate`` sessions/s)
and think times come from ``think`` (default: the synthetic generator's ThinkTime, an assumption).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from traces.conversation import (
    KNOWN_ROLES,
    Message,
    PairStats,
    join_pieces,
    pair_turns,
    role_kind,
    split_record_id,
)
from traces.dists import ThinkTime
from traces.records import Session, TraceError, TraceLoad, Turn, check_on_error, sort_sessions
from traces.synthetic import SyntheticConfig, poisson_starts
from traces.tokenize import Tokenizer, make_tokenizer

DEFAULT_ARRIVAL_RATE = SyntheticConfig().arrival_rate_per_s


def _record_messages(rec: object, tok: Tokenizer) -> tuple[str, list[Message]]:
    """Validate one record; return its id and tokenised messages. Raises ValueError with the reason."""
    if not isinstance(rec, dict):
        raise ValueError(f"expected an object, got {type(rec).__name__}")
    rid = rec.get("id")
    if not isinstance(rid, str) or not rid:
        raise ValueError(f"'id' must be a non-empty string, got {rid!r}")
    conv = rec.get("conversations")
    if not isinstance(conv, list):
        raise ValueError(
            "no 'conversations' list"
            if conv is None
            else f"'conversations' must be a list, got {type(conv).__name__}"
        )
    msgs = []
    for j, m in enumerate(conv):
        if not isinstance(m, dict):
            raise ValueError(f"message {j}: expected an object, got {type(m).__name__}")
        role, value = m.get("from"), m.get("value")
        if not isinstance(role, str):
            raise ValueError(f"message {j}: 'from' must be a string, got {role!r}")
        if not isinstance(value, str):
            raise ValueError(f"message {j}: 'value' must be a string, got {type(value).__name__}")
        kind = role_kind(role)
        if kind is None:
            raise ValueError(f"message {j}: unknown role {role!r} (known: {sorted(KNOWN_ROLES)})")
        msgs.append(Message(kind, tok.count(value), (kind, value)))
    return rid, msgs


def load_sharegpt(
    path: str | Path,
    tokenizer: Tokenizer | str | None = None,
    on_error: str = "raise",
    max_sessions: int | None = None,
    seed: int = 0,
    arrival_rate: float = DEFAULT_ARRIVAL_RATE,
    think: ThinkTime | None = None,
) -> TraceLoad:
    """Load ShareGPT sessions (file order of first appearance; at most ``max_sessions`` of them)."""
    check_on_error(on_error)
    if max_sessions is not None and max_sessions < 0:
        raise TraceError(f"max_sessions must be >= 0 or None, got {max_sessions}")
    if not arrival_rate > 0:
        raise TraceError(f"arrival_rate must be > 0 sessions/s, got {arrival_rate}")
    tok = make_tokenizer(tokenizer)
    think = think if think is not None else SyntheticConfig().think
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as fh:
            records = json.load(fh)
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise TraceError(f"{path.name}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from e
    if not isinstance(records, list):
        raise TraceError(
            f"{path.name}: expected a JSON list of records, got {type(records).__name__}"
        )

    # base id -> [(suffix, record index, messages)], in order of first appearance
    pieces: dict[str, list[tuple[int, int, list[Message]]]] = {}
    bad: set[str] = set()
    orphans = empty = 0
    for i, rec in enumerate(records):
        rid = rec.get("id") if isinstance(rec, dict) else None
        try:
            rid, msgs = _record_messages(rec, tok)
        except ValueError as e:
            if on_error == "raise":
                raise TraceError(f"{path.name}: record {i} (id {rid!r}): {e}") from None
            if isinstance(rid, str) and rid:
                bad.add(split_record_id(rid)[0])
            else:
                orphans += 1
            continue
        empty += not msgs
        base, suffix = split_record_id(rid)
        pieces.setdefault(base, []).append((-1 if suffix is None else suffix, i, msgs))

    stats = PairStats()
    built: list[tuple[str, list, int]] = []
    no_turns = 0
    for base, plist in pieces.items():
        if base in bad:
            continue
        if max_sessions is not None and len(built) >= max_sessions:
            break
        plist.sort(key=lambda p: (p[0], p[1]))  # numeric suffix, then file order
        turns = pair_turns(join_pieces([p[2] for p in plist], stats), stats)
        if turns:
            built.append((base, turns, len(plist)))
        else:
            no_turns += 1

    ss = np.random.SeedSequence(seed).spawn(2)
    starts = poisson_starts(np.random.default_rng(ss[0]), len(built), arrival_rate).tolist()
    thinks = think.sample(
        np.random.default_rng(ss[1]), sum(len(t) - 1 for _, t, _ in built)
    ).tolist()
    sessions, j = [], 0
    for (base, turns, n_pieces), start in zip(built, starts):
        out = [Turn(prompt_tokens=turns[0].prompt, output_tokens=turns[0].output, arrival_s=start)]
        for t in turns[1:]:
            out.append(Turn(prompt_tokens=t.prompt, output_tokens=t.output, think_s=thinks[j]))
            j += 1
        sessions.append(Session(session_id=base, turns=tuple(out), meta={"pieces": n_pieces}))
    info = {
        "records": len(records),
        "empty_records": empty,
        "sessions_without_turns": no_turns,
        **stats.as_dict(),
    }
    return TraceLoad(
        sessions=sort_sessions(sessions), skipped=len(bad) + orphans, source=str(path), info=info
    )
