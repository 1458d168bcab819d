"""The canonical JSON Lines trace format (docs/semantics.md section 1): one turn per line.

    {"session_id": "s1", "turn": 0, "arrival_s": 0.0, "prompt_tokens": 120, "output_tokens": 300}
    {"session_id": "s1", "turn": 1, "think_s": 12.5, "prompt_tokens": 40, "output_tokens": 210}

Optional keys: ``arrival_s`` on later turns, ``think_s``, ``priority`` (int), ``prefix_hashes`` (list
of int block hashes), ``block_tokens`` (page size of those hashes; the same on every line of a session).
Lines of different sessions may interleave (a file sorted by time does), but within a session the
turn indices must appear as 0, 1, 2, ... in file order. Every error names ``file:line``.

``read_jsonl`` reads a whole file. ``iter_jsonl`` streams one: it yields one session at a time and
holds only the session being read, so it needs each session's lines together and the sessions in
order of first arrival, then session_id (the loaders' order: what ``write_jsonl`` writes from any
loader's or generator's sessions); a file that breaks either rule is an error naming the line. Both
check every line alike and give the same sessions in the same order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, Iterable, Iterator

import numpy as np

from traces.records import (
    Session,
    TraceError,
    TraceLoad,
    Turn,
    check_on_error,
    sort_sessions,
    validate_session,
)

REQUIRED_KEYS = ("session_id", "turn", "prompt_tokens", "output_tokens")
OPTIONAL_KEYS = ("arrival_s", "think_s", "priority", "prefix_hashes", "block_tokens")
ALL_KEYS = frozenset(REQUIRED_KEYS + OPTIONAL_KEYS)


@dataclass(slots=True)
class _Pending:
    """A session being assembled: its turns so far and where they came from (for error messages)."""

    first_line: int
    turns: list[Turn] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    block_tokens: int | None = None
    hashes_line: int | None = None  # first line that carries prefix_hashes


def _is_int(v: object) -> bool:
    # bool is an int subclass in Python; true/false in a token count is a type error, not 1/0.
    return isinstance(v, int) and not isinstance(v, bool)


def _int(obj: dict, key: str, minimum: int) -> int:
    v = obj[key]
    if not _is_int(v):
        raise ValueError(f"{key!r} must be an integer, got {type(v).__name__} {v!r}")
    if v < minimum:
        raise ValueError(f"{key!r} must be >= {minimum}, got {v}")
    return v


def _seconds(obj: dict, key: str) -> float | None:
    if key not in obj or obj[key] is None:
        return None
    v = obj[key]
    if not (_is_int(v) or isinstance(v, float)):
        raise ValueError(f"{key!r} must be a number, got {type(v).__name__} {v!r}")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{key!r} must be finite and >= 0, got {v}")
    return float(v)


def _parse_line(obj: object) -> tuple[str, int, Turn, int | None]:
    """Check one decoded line; return (session_id, turn index, Turn, block_tokens). Raises ValueError."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - ALL_KEYS)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}"
        )
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(map(repr, missing))}")
    sid = obj["session_id"]
    if not isinstance(sid, str) or not sid:
        raise ValueError(f"'session_id' must be a non-empty string, got {sid!r}")
    k = _int(obj, "turn", 0)
    hashes = obj.get("prefix_hashes", [])
    if not isinstance(hashes, list) or not all(_is_int(h) for h in hashes):
        raise ValueError("'prefix_hashes' must be a list of integers")
    block_tokens = _int(obj, "block_tokens", 1) if obj.get("block_tokens") is not None else None
    turn = Turn(
        prompt_tokens=_int(obj, "prompt_tokens", 0),
        output_tokens=_int(obj, "output_tokens", 1),
        arrival_s=_seconds(obj, "arrival_s"),
        think_s=_seconds(obj, "think_s"),
        priority=_int(obj, "priority", -(2**63)) if obj.get("priority") is not None else 0,
        prefix_hashes=tuple(hashes),
    )
    if k == 0 and turn.arrival_s is None:
        raise ValueError("turn 0 needs 'arrival_s' (the session's start)")
    if k > 0 and turn.arrival_s is None and turn.think_s is None:
        raise ValueError(f"turn {k} needs 'think_s' or 'arrival_s'")
    return sid, k, turn, block_tokens


def _add(p: _Pending, sid: str, k: int, turn: Turn, block_tokens: int | None, line: int) -> None:
    """Append a parsed line to its session; raise ValueError if it breaks the session's order."""
    if k != len(p.turns):
        raise ValueError(
            f"session {sid!r}: expected turn {len(p.turns)} (turns must appear in "
            f"order 0, 1, 2, ...), got turn {k}"
        )
    prev = p.turns[-1] if p.turns else None
    if (
        prev is not None
        and turn.arrival_s is not None
        and prev.arrival_s is not None
        and turn.arrival_s < prev.arrival_s
    ):
        raise ValueError(
            f"session {sid!r} turn {k}: arrival_s {turn.arrival_s} is before "
            f"turn {k - 1}'s arrival_s {prev.arrival_s}"
        )
    if block_tokens is not None:
        if p.block_tokens is not None and block_tokens != p.block_tokens:
            raise ValueError(
                f"session {sid!r}: block_tokens {block_tokens} differs from "
                f"{p.block_tokens} on an earlier line"
            )
        p.block_tokens = block_tokens
    if turn.prefix_hashes and p.hashes_line is None:
        p.hashes_line = line
    p.turns.append(turn)
    p.lines.append(line)


class _LineError(ValueError):
    """A problem found at the end of a session, reported at one of its lines."""

    def __init__(self, line: int, msg: str) -> None:
        super().__init__(msg)
        self.line, self.msg = line, msg


def _decode(text: str) -> tuple[object, str | None]:
    """One line's JSON value, or (None, the error message)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} (column {e.colno})"


def _finish(sid: str, p: _Pending, name: str) -> Session:
    """The session its lines make; ``_LineError`` at the line of a session-level problem."""
    if p.hashes_line is not None and p.block_tokens is None:
        raise _LineError(p.hashes_line, f"session {sid!r} has prefix_hashes but no block_tokens")
    s = Session(session_id=sid, turns=tuple(p.turns), block_tokens=p.block_tokens)
    # A backstop: the line checks already enforce these rules with precise line numbers.
    return validate_session(s, where=f"{name}:{p.first_line}")


def _open(path: Path):
    try:
        return path.open(encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{path}: cannot open trace: {e.strerror}") from e


def read_jsonl(path: str | Path, on_error: str = "raise") -> TraceLoad:
    """Read a canonical trace. on_error="skip" drops every session with a bad line and counts it."""
    check_on_error(on_error)
    path = Path(path)
    name = path.name
    pending: dict[str, _Pending] = {}
    bad_sessions: set[str] = set()
    orphans = 0  # bad lines that name no session (bad JSON, not an object, no session_id)

    def fail(line: int, msg: str, sid: object) -> None:
        nonlocal orphans
        if on_error == "raise":
            raise TraceError(f"{name}:{line}: {msg}")
        if isinstance(sid, str) and sid:
            bad_sessions.add(sid)
        else:
            orphans += 1

    with _open(path) as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue  # blank lines (e.g. a trailing newline) carry no record
            obj, err = _decode(text)
            if err is not None:
                fail(line_no, err, None)
                continue
            sid_hint = obj.get("session_id") if isinstance(obj, dict) else None
            if sid_hint in bad_sessions:
                continue
            try:
                sid, k, turn, block_tokens = _parse_line(obj)
                p = pending.setdefault(sid, _Pending(first_line=line_no))
                _add(p, sid, k, turn, block_tokens, line_no)
            except ValueError as e:
                fail(line_no, str(e), sid_hint)

    sessions = []
    for sid, p in pending.items():
        if sid in bad_sessions:
            continue
        try:
            sessions.append(_finish(sid, p, name))
        except _LineError as e:
            fail(e.line, e.msg, sid)
    return TraceLoad(
        sessions=sort_sessions(sessions),
        skipped=len(bad_sessions) + orphans,
        source=str(path),
        info={"bad_lines_without_session": orphans},
    )


_id_hash = hash  # (tests make every id collide)


class SeenIds:
    """The session ids a stream has met, kept as their 64-bit hashes (``hash``): 8 bytes an id in
    a sorted array, where a set of the ids held about 100 (the id and its entry: 15 MiB a million
    turns of the synthetic trace, 6.3 turns a session, kept to the run's end). The newest
    ``BATCH`` hashes wait in a set and join the array together (one pass over it). A hash met is
    a hint, not an answer: ``SessionStream`` confirms it by reading its file again
    (``_met_before``)."""

    __slots__ = ("_sorted", "_new")
    BATCH = 4096

    def __init__(self) -> None:
        self._sorted: np.ndarray | None = None
        self._new: set[int] = set()

    def add(self, sid: str) -> None:
        h = _id_hash(sid)
        if self._holds(h):  # (another id with its hash, met before)
            return
        self._new.add(h)
        if len(self._new) >= self.BATCH:
            self._merge()

    def __contains__(self, sid: object) -> bool:
        return self._holds(_id_hash(sid))

    def _holds(self, h: int) -> bool:
        if h in self._new:
            return True
        old = self._sorted
        if old is None:
            return False
        i = int(old.searchsorted(h))
        return i < old.size and int(old[i]) == h

    def __len__(self) -> int:
        """Distinct hashes held (the ids met, less any that share another's hash)."""
        return len(self._new) + (0 if self._sorted is None else self._sorted.size)

    @property
    def nbytes(self) -> int:
        """Bytes of the sorted array (the set of the newest holds under ``BATCH``)."""
        return 0 if self._sorted is None else self._sorted.nbytes

    def _merge(self) -> None:
        new = np.fromiter(self._new, dtype=np.int64, count=len(self._new))
        new.sort()
        old = self._sorted
        self._sorted = new if old is None else np.insert(old, old.searchsorted(new), new)
        self._new.clear()


class SessionStream:
    """The sessions of a canonical JSONL file, one at a time, in file order (``iter_jsonl``).

    An iterator (one pass). Every line is checked as ``read_jsonl`` checks it, with the same
    messages; on top, a session's lines must be contiguous and sessions must come in order of
    first arrival, then session_id: a break of either raises TraceError naming the line, whatever
    ``on_error`` says (the stream cannot reorder what it has already handed on). Held in memory:
    the session being read, and a hash of each session id seen (``SeenIds``: 8 bytes an id, to
    tell a session that comes back).
    ``skipped``, ``sessions`` and ``turns`` count what has been read so far (as TraceLoad's
    ``skipped``: sessions dropped under on_error="skip", and bad lines that name no session).
    """

    def __init__(self, path: str | Path, on_error: str = "raise") -> None:
        check_on_error(on_error)
        self.path = Path(path)
        self.source = str(self.path)
        self.on_error = on_error
        self.skipped = 0
        self.sessions = 0
        self.turns = 0
        self.info = {"bad_lines_without_session": 0}
        self._fh = _open(self.path)  # a missing file fails here, as read_jsonl would
        self._it = self._read()

    def __iter__(self) -> Iterator[Session]:
        return self

    def __next__(self) -> Session:
        return next(self._it)

    def close(self) -> None:
        self._it.close()
        self._fh.close()

    def __enter__(self) -> SessionStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _fail(self, line: int, msg: str, counts: bool) -> None:
        """A bad record: raise, or (on_error="skip") count it; ``counts``: it is the first of its
        session's problems, or a bad line that names no session."""
        if self.on_error == "raise":
            raise TraceError(f"{self.path.name}:{line}: {msg}")
        self.skipped += counts

    def _read(self) -> Generator[Session, None, None]:
        name = self.path.name
        # every session id met so far (a plain set where the file cannot be read again)
        seen: SeenIds | set[str] = SeenIds() if self.path.is_file() else set()
        sid: str | None = None  # the session being read
        p: _Pending | None = None
        bad = False  # it had a bad line (on_error="skip": dropped)
        last: tuple[float, str, int] | None = None  # (start, id, line) of the latest session
        with self._fh as fh:
            for line_no, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                obj, err = _decode(text)
                if err is not None:
                    self.info["bad_lines_without_session"] += 1
                    self._fail(line_no, err, True)
                    continue
                hint = obj.get("session_id") if isinstance(obj, dict) else None
                if isinstance(hint, str) and hint and hint != sid:
                    if p is not None and not bad:  # the session before it is complete
                        assert sid is not None  # p only exists once a line named its session
                        done = self._finish(sid, p, name)
                        if done is not None:
                            yield done
                    if hint in seen and (type(seen) is set or self._met_before(hint, line_no)):
                        raise TraceError(
                            f"{name}:{line_no}: session {hint!r} continues after other sessions: "
                            f"streaming (iter_jsonl) needs each session's lines together; "
                            f"read_jsonl reads interleaved files"
                        )
                    seen.add(hint)
                    sid, p, bad = hint, None, False
                elif hint == sid and bad:
                    continue  # as read_jsonl: the rest of a bad session is skipped
                try:
                    line_sid, k, turn, block_tokens = _parse_line(obj)
                    if p is None:
                        p = _Pending(first_line=line_no)
                    _add(p, line_sid, k, turn, block_tokens, line_no)
                except ValueError as e:
                    named = isinstance(hint, str) and bool(hint)
                    if not named:
                        self.info["bad_lines_without_session"] += 1
                    self._fail(line_no, str(e), True)
                    if named:
                        bad = True
                    continue
                if k == 0:
                    assert turn.arrival_s is not None  # _parse_line requires it on turn 0
                    key = (turn.arrival_s, line_sid)
                    if last is not None and key < last[:2]:
                        raise TraceError(
                            f"{name}:{line_no}: session {line_sid!r} starts at {turn.arrival_s} s, "
                            f"before session {last[1]!r} (line {last[2]}, {last[0]} s): streaming "
                            f"(iter_jsonl) needs sessions in order of first arrival, then "
                            f"session_id; read_jsonl reads any order (and write_jsonl of its "
                            f"sessions writes this one)"
                        )
                    last = (*key, line_no)
            if p is not None and not bad:
                assert sid is not None  # p only exists once a line named its session
                done = self._finish(sid, p, name)
                if done is not None:
                    yield done

    def _met_before(self, sid: str, line: int) -> bool:
        """Does a line before ``line`` name session ``sid``? The file read again up to it: a hash
        ``SeenIds`` has met is a session that comes back, or (about once in 2**64 / ids seen)
        another id with the same hash."""
        with _open(self.path) as fh:
            for line_no, text in enumerate(fh, start=1):
                if line_no >= line:
                    break
                if "\\" not in text and sid not in text:
                    continue  # without escapes, a line naming sid holds it verbatim
                obj, err = _decode(text)
                if err is None and isinstance(obj, dict) and obj.get("session_id") == sid:
                    return True
        return False

    def _finish(self, sid: str, p: _Pending, name: str) -> Session | None:
        try:
            s = _finish(sid, p, name)
        except _LineError as e:
            self._fail(e.line, e.msg, True)
            return None
        self.sessions += 1
        self.turns += len(s.turns)
        return s


def iter_jsonl(path: str | Path, on_error: str = "raise") -> SessionStream:
    """Stream a canonical trace: its sessions one at a time, each checked as ``read_jsonl`` checks
    it. The file must hold each session's lines together, the sessions in order of first arrival
    then session_id (what ``write_jsonl`` writes from a loader's sessions); see SessionStream.
    ``sim.simulate(iter_jsonl(path), ...)`` replays it without holding the trace in memory."""
    return SessionStream(path, on_error)


def _line(s: Session, k: int, t: Turn) -> dict:
    obj: dict = {"session_id": s.session_id, "turn": k}
    if t.arrival_s is not None:
        obj["arrival_s"] = t.arrival_s
    if t.think_s is not None:
        obj["think_s"] = t.think_s
    obj["prompt_tokens"] = t.prompt_tokens
    obj["output_tokens"] = t.output_tokens
    if t.priority:
        obj["priority"] = t.priority
    if t.prefix_hashes:
        obj["prefix_hashes"] = list(t.prefix_hashes)
    if s.block_tokens is not None:
        obj["block_tokens"] = s.block_tokens  # on every line: each line stands alone
    return obj


def write_jsonl(sessions: Iterable[Session], path: str | Path) -> int:
    """Write sessions in the given order, one turn per line (each session's lines together);
    return the number of lines written. Sessions in order of first arrival, then session_id (every
    loader's and generator's order) make a file ``iter_jsonl`` can stream."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as fh:
        for s in sessions:
            validate_session(s, where=str(path))
            for k, t in enumerate(s.turns):
                fh.write(json.dumps(_line(s, k, t)) + "\n")
                n += 1
    return n
