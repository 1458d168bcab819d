"""``kvsim cachesim``: replay an object request stream through one eviction policy.

A synchronous, libCacheSim-compatible cache simulation, so that kvsim's policies can be compared
with libCacheSim request by request:

- the first request to an object is a miss; a hit calls the policy's ``access``;
- a miss admits the object: the policy evicts (``evict``) until the object fits, then it is
  ``insert``-ed;
- an object larger than the capacity is not admitted (the request is a miss and nothing changes);
- an object keeps the size it was admitted with while it is cached (libCacheSim does not resize an
  object on a hit); byte counts use each request's own size, as libCacheSim's ``process_trace`` does;
- no per-object metadata is charged to the capacity (libCacheSim's default,
  ``consider_obj_metadata=False``).

Optional policy hooks (duck-typed; the engine does not call them, cachesim does when a policy has
them), mirroring what a libCacheSim policy sees of the incoming request:

``set_capacity(capacity)``
    Called once before the replay. Policies whose structure is sized from the capacity (ARC's
    target and directory, S3-FIFO's queues, SLRU's segments, 2Q's queues) use it; without it they
    size themselves from the high-water mark of the bytes they have held (the engine fills a tier
    before it evicts, so the mark reaches the capacity by the first eviction).
``admitting(uid, now)``
    Called on every miss before anything else, as libCacheSim's ``find`` sees the request: ghost
    lookups and adaptation (ARC's target p, S3-FIFO's and 2Q's ghost FIFOs) happen here, and the
    incoming object's size is known to the victim choice (ARC's case IV).
``admit(uid) -> bool``
    libCacheSim's per-policy ``can_insert``: False refuses the object without evicting anything
    (S3-FIFO and 2Q do not take an object larger than their small queue, SLRU one larger than a
    segment).

Objects are units whose uid is the object id; policies read sizes and times through ``ObjectView``.
Offline policies (a class attribute ``offline = True``, e.g. belady) read ``view.next_access_s(uid)``:
the index of the object's next request (``inf`` if none), computed with numpy from the whole stream.
Time (``now``) is the request index, or the trace's ``time`` column when it has one.

LRU, where every object keeps one size, is not replayed request by request: its hits follow from
the stream alone (``sim.stack_distance``), computed in numpy; the same hits (tested).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.stack_distance import lru_hit_flags

if TYPE_CHECKING:
    from sim.policies import EvictionPolicy, PolicyContext

REQUIRED_COLUMNS = ("obj_id", "size")


class CacheTraceError(ValueError):
    """A request-stream file that cannot be read; the message names the file (and line)."""


class ObjectView:
    """The unit view of a cache of objects: each object is one unit, its uid the object id.

    Sizes vary per object (``unit_bytes`` is None unless the replay says they are all equal); the
    replay keeps each cached object's size, last request time and next request index here.
    """

    per_session = True
    layers = 1

    def __init__(self, unit_bytes: int | None = None) -> None:
        self.sizes: dict[int, int] = {}
        self.last: dict[int, float] = {}
        self.next: dict[int, float] = {}
        self.unit_bytes = unit_bytes
        self.page_bytes = unit_bytes or 1

    def size(self, uid: int) -> int:
        return self.sizes[uid]

    def session(self, uid: int):
        return None

    def first_page(self, uid: int) -> int:
        return 0

    def pages(self, uid: int) -> int:
        return 1

    def layer(self, uid: int) -> int:
        return -1

    def last_access_s(self, uid: int) -> float:
        return self.last.get(uid, 0.0)

    def next_access_s(self, uid: int) -> float:
        return self.next.get(uid, math.inf)


@dataclass(frozen=True, slots=True)
class RequestStream:
    """An object request stream: parallel arrays, one entry per request."""

    obj_ids: np.ndarray  # int64
    sizes: np.ndarray  # int64, >= 1
    times: np.ndarray | None = None  # float64, when the trace has a time column
    source: str = "<memory>"

    def __post_init__(self) -> None:
        if len(self.obj_ids) != len(self.sizes) or (
            self.times is not None and len(self.times) != len(self.sizes)
        ):
            raise ValueError(f"{self.source}: obj_ids, sizes and times differ in length")

    def __len__(self) -> int:
        return len(self.obj_ids)


@dataclass(frozen=True, slots=True)
class CacheSimResult:
    policy: str
    capacity: int
    requests: int
    hits: int
    misses: int
    byte_requests: int
    byte_hits: int
    hit_flags: np.ndarray = field(repr=False, compare=False)  # bool, one per request

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def byte_hit_ratio(self) -> float:
        return self.byte_hits / self.byte_requests if self.byte_requests else 0.0

    def summary(self) -> dict[str, Any]:
        """The figures ``kvsim cachesim --json`` prints, exactly these keys."""
        return {
            "policy": self.policy,
            "capacity": self.capacity,
            "requests": self.requests,
            "hits": self.hits,
            "misses": self.misses,
            "byte_requests": self.byte_requests,
            "byte_hits": self.byte_hits,
        }


# -- reading a stream ------------------------------------------------------------------------------
def read_trace(path: str | Path) -> RequestStream:
    """Read a CSV with header ``obj_id,size`` (optional ``time``). Errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise CacheTraceError(f"{path}: no such file")
    fast = _read_numeric(path)
    return fast if fast is not None else _read_with_pandas(path)


def _read_numeric(path: Path) -> RequestStream | None:
    """The common file, read by numpy's C parser without importing pandas (half a second saved
    in a whole-process replay): a header of only these columns, integer ids and sizes, numeric
    times, no blank line, every size positive. None for anything else: pandas then reads the file
    and names the offending line."""
    # In numpy's memory, which asks for huge pages: half the page faults of a bytes object
    raw = np.fromfile(path, dtype=np.uint8)
    if (fast := _read_digit_pairs(raw, path)) is not None:
        return fast
    data = raw.tobytes()  # a scan for the header and the line count (milliseconds)
    header, _, body = data.partition(b"\n")
    lines = body.count(b"\n") + (not body.endswith(b"\n"))
    if not body or body.isspace():  # no rows: pandas explains (isspace: no copy, as strip made)
        return None
    names = [c.strip() for c in header.decode("utf-8", "replace").split(",")]
    if sorted(names) not in (["obj_id", "size"], ["obj_id", "size", "time"]):
        return None
    if len(names) == 2 and (plain := _plain_pairs(body, lines)) is not None:
        ids, sizes = (plain[:, 0], plain[:, 1]) if names[0] == "obj_id" else plain.T[::-1]
        if sizes.min() < 1:
            return None
        return RequestStream(
            np.ascontiguousarray(ids), np.ascontiguousarray(sizes), None, str(path)
        )
    kinds = {"obj_id": np.int64, "size": np.int64, "time": np.float64}
    dtype = np.dtype([(c, kinds[c]) for c in names])
    try:
        rows = np.loadtxt(  # from the path: its C reader is 3x faster than from a str
            path, delimiter=",", skiprows=1, dtype=dtype, comments=None, ndmin=1, encoding="utf-8"
        )
    except (ValueError, OverflowError, UnicodeDecodeError):  # not plain numbers: the general
        return None  # reader decides
    if len(rows) != lines:  # loadtxt skipped a blank line (pandas keeps it, as a row to drop)
        return None
    sizes = rows["size"]
    if len(sizes) and sizes.min() < 1:
        return None
    times = np.ascontiguousarray(rows["time"]) if "time" in names else None
    if times is not None and np.isnan(times).any():
        return None
    return RequestStream(
        np.ascontiguousarray(rows["obj_id"]), np.ascontiguousarray(sizes), times, str(path)
    )


def _read_digit_pairs(raw: np.ndarray, path: Path) -> RequestStream | None:
    """The usual generated stream (the file's bytes, ``raw``), a header ``obj_id,size`` (either
    order) over lines of two fields of 1-9 digits (the last newline optional), read by
    ``_digit_pairs``; None for any other file (``_read_numeric`` then reads it as before)."""
    nl = raw[:4096].tobytes().find(b"\n")  # a longer header: left to the general reader
    if nl < 0:
        return None
    names = [c.strip() for c in raw[:nl].tobytes().decode("utf-8", "replace").split(",")]
    if len(names) != 2 or sorted(names) != ["obj_id", "size"]:
        return None
    pairs = _digit_pairs(raw, nl + 1)
    if pairs is None:
        return None
    ids, sizes = pairs if names[0] == "obj_id" else pairs[::-1]
    if sizes.min() < 1:
        return None
    return RequestStream(ids, sizes, None, str(path))


def _digit_pairs(data: bytes | np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The two columns (int64) of ``data[start:]`` when it is one or more ``digits,digits`` lines
    with 1-9 digits a field, each line ending in a newline but the last, whose is optional; None
    otherwise (``data``: bytes, or their uint8 array). What ``_plain_pairs`` reads of such a body
    (its numbers fit int64: the same values), without its copies of the body or numpy's separator parser, which takes one number at a time:
    the separators are found in one pass (every byte below ``0`` is one, and they must alternate
    comma, newline), then each field's value is built from its last digit back, one gather of a
    digit per field and place, until the byte before every field (a separator, or the header's
    newline) is reached."""
    if start < 10:  # room before the first field for the nine places looked back
        return _digit_pairs(b"\n" * 10 + bytes(data[start:]), 10) if start else None
    a = np.frombuffer(data, dtype=np.uint8)
    if start >= len(a) or a[start - 1] != _NEWLINE:
        return None
    body = a[start:]
    if body.max() > _NINE:  # a byte above the digits
        return None
    seps = (body < _ZERO).nonzero()[0]
    seps += start
    if a[-1] != _NEWLINE:  # the last line's newline is optional: one past the end stands for it
        seps = np.append(seps, len(a))
        kinds = np.append(a[seps[:-1]], np.uint8(_NEWLINE))
    else:
        kinds = a[seps]
    if len(kinds) % 2 or (kinds.view(np.uint16) != _COMMA_NEWLINE).any():
        return None  # not comma, newline, comma, newline, ... (a blank line, a sign, a space)
    # Every field at once (an id, a size, an id, ...), in buffers reused from place to place.
    at = seps
    at -= 1
    digit = kinds
    np.take(a, at, out=digit)
    digit -= _ZERO  # a separator wraps above 9
    if (digit > 9).any():
        return None  # an empty field
    value = digit.astype(np.int32)
    alive = np.ones(len(at), dtype=bool)
    is_digit, term = np.empty_like(alive), np.empty_like(value)
    place = 1
    while True:
        at -= 1
        np.take(a, at, out=digit)
        digit -= _ZERO
        np.less_equal(digit, 9, out=is_digit)
        alive &= is_digit
        if not alive.any():
            break
        place *= 10
        if place >= 10**9:
            return None  # a tenth digit: left to the general reader (int32 would overflow)
        digit *= alive
        np.multiply(digit, np.int32(place), out=term)
        value += term
    return value[0::2].astype(np.int64), value[1::2].astype(np.int64)


_ZERO, _NINE, _NEWLINE = ord("0"), ord("9"), ord("\n")
_COMMA_NEWLINE = np.frombuffer(b",\n", dtype=np.uint16)[0]  # the two as one native uint16
_DIGITS = b"0123456789"
_INT64_MAX = np.iinfo(np.int64).max


def _plain_pairs(body: bytes, lines: int) -> np.ndarray | None:
    """The rows of a body made of ``digits,digits`` lines and nothing else (the usual generated
    stream), as a ``(lines, 2)`` int64 array; None for any other body (signs, spaces, blank lines,
    empty fields, ``\\r``, a number beyond int64), which ``np.loadtxt`` then reads. numpy's
    separator parser reads such a body twice as fast as ``loadtxt``: one C call, no per-row
    tokenising."""
    if body.translate(None, _DIGITS) != b",\n" * (lines - 1) + (
        b",\n" if body.endswith(b"\n") else b","
    ):
        return None  # separators other than one comma per line, or a byte that is not a digit
    with warnings.catch_warnings():
        # An empty field stops the parser (a warning, later an error): too few numbers, declined.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            flat = np.fromstring(body.replace(b"\n", b","), dtype=np.int64, sep=",")
        except ValueError:
            return None
    if len(flat) != 2 * lines or (flat == _INT64_MAX).any():
        return None  # numpy clips a number beyond int64 to its maximum; loadtxt refuses it
    return flat.reshape(lines, 2)


def _read_with_pandas(path: Path) -> RequestStream:
    import pandas as pd

    try:
        df = pd.read_csv(path, skip_blank_lines=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise CacheTraceError(f"{path}: empty file (expected a header obj_id,size)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CacheTraceError(f"{path}: not a CSV file: {exc}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise CacheTraceError(
            f"{path}: missing column {', '.join(map(repr, missing))} "
            f"(header is {','.join(df.columns)}; expected obj_id,size[,time])"
        )
    lines = np.arange(len(df)) + 2  # line 1 is the header
    blank = df.isna().all(axis=1).to_numpy()
    if blank.any():
        df, lines = df[~blank], lines[~blank]
    sizes = _integer_column(df["size"], "size", path, lines)
    if len(sizes) and sizes.min() < 1:
        i = int(np.argmax(sizes < 1))
        raise CacheTraceError(f"{path}, line {lines[i]}: size {sizes[i]} is not a positive integer")
    ids_col = df["obj_id"]
    if ids_col.isna().any():
        i = int(np.argmax(ids_col.isna().to_numpy()))
        raise CacheTraceError(f"{path}, line {lines[i]}: obj_id is empty")
    if pd.api.types.is_integer_dtype(ids_col.dtype):
        obj_ids = ids_col.to_numpy(dtype=np.int64)
    else:  # hashes or names: dense integer ids in order of first appearance
        obj_ids = pd.factorize(ids_col.astype(str))[0].astype(np.int64)
    times = None
    if "time" in df.columns:
        t = pd.to_numeric(df["time"], errors="coerce").to_numpy(dtype=np.float64)
        if np.isnan(t).any():
            i = int(np.argmax(np.isnan(t)))
            raise CacheTraceError(
                f"{path}, line {lines[i]}: time {_show(df['time'].iloc[i])} is not a number"
            )
        times = t
    return RequestStream(obj_ids, sizes, times, str(path))


def _integer_column(col, name: str, path: Path, lines: np.ndarray) -> np.ndarray:
    import pandas as pd

    if pd.api.types.is_integer_dtype(col.dtype):
        return col.to_numpy(dtype=np.int64)
    num = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(num) | (num != np.floor(num))
    if bad.any():
        i = int(np.argmax(bad))
        raise CacheTraceError(
            f"{path}, line {lines[i]}: {name} {_show(col.iloc[i])} is not an integer"
        )
    return num.astype(np.int64)


def _show(value) -> str:
    """A cell as the file had it: strings quoted, numbers plain."""
    if isinstance(value, str):
        return repr(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def next_access(obj_ids: np.ndarray) -> np.ndarray:
    """For each request, the index of the next request to the same object; ``len`` if none.

    O(n): the ids are hashed into dense group codes (``pandas.factorize``) and each request takes
    the index of its group's next request (a grouped shift); no sort, no Python loop.
    """
    import pandas as pd

    ids = np.asarray(obj_ids)
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    codes = pd.factorize(ids)[0]
    nxt = pd.Series(np.arange(n, dtype=np.int64)).groupby(codes, sort=False).shift(-1)
    return nxt.fillna(n).to_numpy(dtype=np.int64)


# -- the replay ------------------------------------------------------------------------------------
def _make_policy(
    policy: str | type[EvictionPolicy], capacity, ctx: PolicyContext | None, view: ObjectView
) -> tuple[str, type[EvictionPolicy], EvictionPolicy, int]:
    from sim.policies import PolicyContext, policy_class
    from sim.units import Tier

    cls = policy_class(policy) if isinstance(policy, str) else policy
    name = policy if isinstance(policy, str) else (cls.name or cls.__name__)
    _check_capacity(capacity)
    ctx = (
        replace(ctx, view=view)
        if ctx is not None
        else PolicyContext(tier=Tier.GPU, block_tokens=1, num_layers=1, view=view)
    )
    pol = cls(ctx)
    pol.set_capacity(int(capacity))
    return name, cls, pol, int(capacity)


def _check_capacity(capacity) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be a positive integer, got {capacity!r}")


class CacheSim:
    """The same replay one request at a time (libcachesim's ``cache.get``), for tests and notebooks.

    ``simulate_cache`` is the fast path for a whole stream; both give the same hits (tested).
    """

    def __init__(
        self,
        policy: str | type[EvictionPolicy],
        capacity: int,
        *,
        ctx: PolicyContext | None = None,
        view: ObjectView | None = None,
    ) -> None:
        """``view``: what the policy may read of the objects beyond their sizes and times (an
        ``ObjectView`` subclass, e.g. a KV store's chunks' sessions); a plain one by default."""
        self.view = ObjectView() if view is None else view
        self.name, self.cls, self.policy, self.capacity = _make_policy(
            policy, capacity, ctx, self.view
        )
        self.used = 0
        self.cached: set[int] = set()
        self._n = 0

    def get(
        self, obj_id: int, size: int = 1, next_access_s: float = math.inf, now: float | None = None
    ) -> bool:
        """One request: True on a hit. ``next_access_s`` matters to offline policies only."""
        pol, view = self.policy, self.view
        now = float(self._n) if now is None else now
        self._n += 1
        view.last[obj_id] = now
        view.next[obj_id] = next_access_s
        if obj_id in self.cached:
            pol.access(obj_id, now)
            return True
        view.sizes[obj_id] = size
        if hasattr(pol, "admitting"):
            pol.admitting(obj_id, now)
        if size > self.capacity or (hasattr(pol, "admit") and not pol.admit(obj_id)):
            return False
        while self.used + size > self.capacity:
            v = pol.evict(now)
            if v is None or v not in self.cached:
                raise AssertionError(
                    f"{self.name}: victim {v!r} with {self.used} of {self.capacity} used"
                )
            self.cached.discard(v)
            self.used -= view.sizes[v]
        pol.insert(obj_id, now)
        self.cached.add(obj_id)
        self.used += size
        return False


def simulate_cache(
    stream: RequestStream,
    policy: str | type[EvictionPolicy],
    capacity: int,
    *,
    ctx: PolicyContext | None = None,
) -> CacheSimResult:
    """Replay ``stream`` through a fresh ``policy`` of ``capacity`` (in the units of ``size``)."""
    if policy == "lru" and ctx is None:  # the registered LRU, without importing every policy
        _check_capacity(capacity)
        hit = lru_hit_flags(stream.obj_ids, stream.sizes, int(capacity))
        if hit is not None:
            return _result("lru", int(capacity), stream, hit)
    from sim.policies import EvictionPolicy
    from sim.policies.lru import LRU

    view = ObjectView()
    name, cls, pol, capacity = _make_policy(policy, capacity, ctx, view)
    if cls is LRU:  # exactly LRU: a subclass may decide otherwise
        hit = lru_hit_flags(stream.obj_ids, stream.sizes, capacity)
        if hit is not None:  # every object has one size: the whole stream at once in numpy
            return _result(name, capacity, stream, hit)
    n = len(stream)
    ids = stream.obj_ids.tolist()
    sizes = stream.sizes.tolist()
    if cls.offline:
        nxt_idx = next_access(stream.obj_ids)
        nxt = np.where(nxt_idx < n, nxt_idx.astype(np.float64), np.inf).tolist()
    else:
        nxt = None
    needs_last = getattr(cls, "reads_last_access", True)

    # In a replay nothing is pinned, so the base class's insert is just _add, and a policy that
    # keeps the base class's no-op access needs no call on a hit.
    insert = pol._add if type(pol).insert is EvictionPolicy.insert else pol.insert
    access = None if type(pol).access is EvictionPolicy.access else pol.access
    evict = pol.evict
    admitting = getattr(pol, "admitting", None)
    admit = getattr(pol, "admit", None)

    flags = bytearray(b"\x01") * n  # a hit unless the request misses
    hooks = pol.replay_hooks()
    if (
        hooks is not None
        and not cls.offline
        and not needs_last
        and admitting is None
        and admit is None
    ):
        uniform = n > 0 and int(stream.sizes.min()) == int(stream.sizes.max())
        _replay_direct(hooks, ids, sizes, capacity, flags, view.sizes, name, uniform)
        return _result(name, capacity, stream, _as_bools(flags))
    nows = (stream.times if stream.times is not None else np.arange(n, dtype=np.float64)).tolist()

    obj_size = view.sizes  # size of every object seen (kept while cached)
    last, nxt_of = view.last, view.next
    cached: set[int] = set()
    used = 0
    for i, oid in enumerate(ids):
        now = nows[i]
        if needs_last:
            last[oid] = now
        if nxt is not None:
            nxt_of[oid] = nxt[i]
        if oid in cached:  # hit
            if access is not None:
                access(oid, now)
            continue
        flags[i] = 0
        size = sizes[i]
        obj_size[oid] = size
        if admitting is not None:
            admitting(oid, now)
        if size > capacity or (admit is not None and not admit(oid)):
            continue
        while used + size > capacity:
            v = evict(now)
            if v is None:
                raise AssertionError(
                    f"{name}: no victim with {used} of {capacity} used and "
                    f"{len(cached)} objects cached"
                )
            if v not in cached:
                raise AssertionError(f"{name}: victim {v!r} is not cached")
            cached.discard(v)
            used -= obj_size[v]
        insert(oid, now)
        cached.add(oid)
        used += size

    return _result(name, capacity, stream, _as_bools(flags))


def _replay_direct(
    hooks,
    ids: list[int],
    sizes: list[int],
    capacity: int,
    flags: bytearray,
    obj_size: dict[int, int],
    name: str,
    uniform: bool,
) -> None:
    """The replay loop of ``simulate_cache`` on a policy's own structure (``replay_hooks``): the
    same requests, hits and victims, with no method dispatch on a hit (nor a size table when all
    sizes are equal)."""
    members, on_hit, insert, evict = hooks
    used = 0
    try:
        if uniform and sizes:
            size = sizes[0]
            if size > capacity:
                flags[:] = bytes(len(flags))
                return
            slots = capacity // size  # objects that fit
            if on_hit is None:  # a hit changes nothing (FIFO)
                for i, oid in enumerate(ids):
                    if oid not in members:
                        flags[i] = 0
                        if used == slots:
                            evict()
                        else:
                            used += 1
                        insert(oid)
                return
            for i, oid in enumerate(ids):
                if oid in members:  # hit
                    on_hit(oid)
                    continue
                flags[i] = 0
                if used == slots:
                    evict()
                else:
                    used += 1
                insert(oid)
            return
        on_hit = on_hit or _no_op
        for i, oid in enumerate(ids):
            if oid in members:  # hit
                on_hit(oid)
                continue
            flags[i] = 0
            size = sizes[i]
            if size > capacity:
                continue
            while used + size > capacity:
                used -= obj_size[evict()[0]]
            obj_size[oid] = size
            insert(oid)
            used += size
    except KeyError:
        raise AssertionError(f"{name}: no victim with {used} of {capacity} used") from None


def _no_op(uid: int) -> None:
    return None


def _as_bools(flags: bytearray) -> np.ndarray:
    return np.frombuffer(bytes(flags), dtype=np.uint8).astype(bool)


def _result(name: str, capacity: int, stream: RequestStream, hit: np.ndarray) -> CacheSimResult:
    n = len(stream)
    size_arr = stream.sizes
    hits = int(hit.sum())
    return CacheSimResult(
        policy=name,
        capacity=capacity,
        requests=n,
        hits=hits,
        misses=n - hits,
        byte_requests=int(size_arr.sum()),
        byte_hits=int(size_arr[hit].sum()),
        hit_flags=hit,
    )


def stream_from_arrays(obj_ids, sizes=None, times=None) -> RequestStream:
    """A stream from sequences (sizes default to 1)."""
    ids = np.asarray(obj_ids, dtype=np.int64)
    sz = np.ones(len(ids), dtype=np.int64) if sizes is None else np.asarray(sizes, dtype=np.int64)
    if len(sz) and sz.min() < 1:
        raise ValueError("sizes must be positive integers")
    t = None if times is None else np.asarray(times, dtype=np.float64)
    return RequestStream(ids, sz, t)
