"""``kvsim cachesim``: replay an object request stream through one eviction policy (DESIGN.md 4).

A synchronous, libCacheSim-compatible cache simulation, so that kvsim's policies can be compared
with libCacheSim request by request:

- the first request to an object is a miss; a hit calls the policy's ``access``;
- a miss admits the object: the policy's victims are removed (``victim`` then ``remove``) until the
  object fits, then it is ``insert``-ed;
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
``admitting(unit, now)``
    Called on every miss before anything else, as libCacheSim's ``find`` sees the request: ghost
    lookups and adaptation (ARC's target p, S3-FIFO's and 2Q's ghost FIFOs) happen here, and the
    incoming object's size is known to the victim choice (ARC's case IV).
``admit(unit) -> bool``
    libCacheSim's per-policy ``can_insert``: False refuses the object without evicting anything
    (S3-FIFO and 2Q do not take an object larger than their small queue, SLRU one larger than a
    segment).

Offline policies (a class attribute ``offline = True``, e.g. belady) get ``unit.next_access_s`` set to
the index of the object's next request (``inf`` if none), computed with numpy from the whole stream.
Time (``now``) is the request index, or the trace's ``time`` column when it has one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.policies import EvictionPolicy, PolicyContext, policy_class
from sim.units import Tier

REQUIRED_COLUMNS = ("obj_id", "size")


class CacheTraceError(ValueError):
    """A request-stream file that cannot be read; the message names the file (and line)."""


@dataclass(slots=True, eq=False)
class CacheObject:
    """A cached object: the unit fields policies read, without the engine's session bookkeeping."""

    key: int
    size: int
    pinned: bool = False
    tier: Tier = Tier.GPU
    tier_seq: int = 0             # order of entries into the cache (FIFO order)
    tier_since_s: float = 0.0
    created_s: float = 0.0
    last_access_s: float = 0.0
    hits: int = 0                 # uses since it was last admitted (1 on admission)
    next_access_s: float = math.inf
    layer: int = -1
    first_page: int = 0
    pages: int = 1
    session: Any = None


@dataclass(frozen=True, slots=True)
class RequestStream:
    """An object request stream: parallel arrays, one entry per request."""

    obj_ids: np.ndarray            # int64
    sizes: np.ndarray              # int64, >= 1
    times: np.ndarray | None = None  # float64, when the trace has a time column
    source: str = "<memory>"

    def __post_init__(self) -> None:
        if len(self.obj_ids) != len(self.sizes) or (self.times is not None and len(self.times) != len(self.sizes)):
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
    hit_flags: np.ndarray = field(repr=False, compare=False)   # bool, one per request

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def byte_hit_ratio(self) -> float:
        return self.byte_hits / self.byte_requests if self.byte_requests else 0.0

    def summary(self) -> dict[str, Any]:
        """The figures ``kvsim cachesim --json`` prints (DESIGN.md 4), exactly these keys."""
        return {"policy": self.policy, "capacity": self.capacity, "requests": self.requests,
                "hits": self.hits, "misses": self.misses, "byte_requests": self.byte_requests,
                "byte_hits": self.byte_hits}


# -- reading a stream ------------------------------------------------------------------------------
def read_trace(path: str | Path) -> RequestStream:
    """Read a CSV with header ``obj_id,size`` (optional ``time``). Errors name the file and line."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise CacheTraceError(f"{path}: no such file")
    try:
        df = pd.read_csv(path, skip_blank_lines=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise CacheTraceError(f"{path}: empty file (expected a header obj_id,size)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CacheTraceError(f"{path}: not a CSV file: {exc}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise CacheTraceError(f"{path}: missing column {', '.join(map(repr, missing))} "
                              f"(header is {','.join(df.columns)}; expected obj_id,size[,time])")
    lines = np.arange(len(df)) + 2                      # line 1 is the header
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
            raise CacheTraceError(f"{path}, line {lines[i]}: time {_show(df['time'].iloc[i])} is not a number")
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
        raise CacheTraceError(f"{path}, line {lines[i]}: {name} {_show(col.iloc[i])} is not an integer")
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
def _make_policy(policy: str | type[EvictionPolicy], capacity, seed: int,
                 ctx: PolicyContext | None) -> tuple[str, type[EvictionPolicy], EvictionPolicy, int]:
    cls = policy_class(policy) if isinstance(policy, str) else policy
    name = policy if isinstance(policy, str) else (cls.name or cls.__name__)
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
    pol = cls(ctx or PolicyContext(tier=Tier.GPU, block_tokens=1, num_layers=1, seed=seed))
    if hasattr(pol, "set_capacity"):
        pol.set_capacity(int(capacity))
    return name, cls, pol, int(capacity)


class CacheSim:
    """The same replay one request at a time (libcachesim's ``cache.get``), for tests and notebooks.

    ``simulate_cache`` is the fast path for a whole stream; both give the same hits (tested).
    """

    def __init__(self, policy: str | type[EvictionPolicy], capacity: int, *, seed: int = 0,
                 ctx: PolicyContext | None = None) -> None:
        self.name, self.cls, self.policy, self.capacity = _make_policy(policy, capacity, seed, ctx)
        self.used = 0
        self.cached: dict[int, CacheObject] = {}
        self._known: dict[int, CacheObject] = {}
        self._seq = 0
        self._n = 0

    def get(self, obj_id: int, size: int = 1, next_access_s: float = math.inf,
            now: float | None = None) -> bool:
        """One request: True on a hit. ``next_access_s`` matters to offline policies only."""
        pol = self.policy
        now = float(self._n) if now is None else now
        self._n += 1
        obj = self.cached.get(obj_id)
        if obj is not None:
            obj.last_access_s = now
            obj.hits += 1
            obj.next_access_s = next_access_s
            pol.access(obj, now)
            return True
        obj = self._known.get(obj_id)
        if obj is None:
            obj = self._known[obj_id] = CacheObject(obj_id, size, created_s=now)
        obj.size = size
        obj.last_access_s = obj.tier_since_s = now
        obj.hits = 1
        obj.next_access_s = next_access_s
        if hasattr(pol, "admitting"):
            pol.admitting(obj, now)
        if size > self.capacity or (hasattr(pol, "admit") and not pol.admit(obj)):
            return False
        while self.used + size > self.capacity:
            v = pol.victim(now)
            if v is None or v.key not in self.cached or v.pinned:
                raise AssertionError(f"{self.name}: victim {v!r} with {self.used} of "
                                     f"{self.capacity} used")
            pol.remove(v)
            del self.cached[v.key]
            self.used -= v.size
        self._seq += 1
        obj.tier_seq = self._seq
        pol.insert(obj, now)
        self.cached[obj_id] = obj
        self.used += size
        return False


def simulate_cache(stream: RequestStream, policy: str | type[EvictionPolicy], capacity: int,
                   *, seed: int = 0, ctx: PolicyContext | None = None) -> CacheSimResult:
    """Replay ``stream`` through a fresh ``policy`` of ``capacity`` (in the units of ``size``)."""
    name, cls, pol, capacity = _make_policy(policy, capacity, seed, ctx)
    n = len(stream)
    ids = stream.obj_ids.tolist()
    sizes = stream.sizes.tolist()
    nows = (stream.times if stream.times is not None else np.arange(n, dtype=np.float64)).tolist()
    if getattr(cls, "offline", False):
        nxt_idx = next_access(stream.obj_ids)
        nxt = np.where(nxt_idx < n, nxt_idx.astype(np.float64), np.inf).tolist()
    else:
        nxt = None

    # In a replay nothing is pinned, so the base class's insert/remove are just _add/_discard,
    # and a policy that keeps the base class's no-op access needs no call on a hit.
    insert = pol._add if type(pol).insert is EvictionPolicy.insert else pol.insert
    remove = pol._discard if type(pol).remove is EvictionPolicy.remove else pol.remove
    access = None if type(pol).access is EvictionPolicy.access else pol.access
    victim = pol.victim
    admitting = getattr(pol, "admitting", None)
    admit = getattr(pol, "admit", None)

    flags = bytearray(b"\x01") * n           # a hit unless the request misses
    cached: dict[int, CacheObject] = {}     # resident objects
    known: dict[int, CacheObject] = {}      # every object seen (reused on re-admission)
    cached_get, known_get = cached.get, known.get
    used = 0
    seq = 0
    for i, oid in enumerate(ids):
        obj = cached_get(oid)
        if obj is not None:                 # hit
            now = nows[i]
            obj.last_access_s = now
            obj.hits += 1
            if nxt is not None:
                obj.next_access_s = nxt[i]
            if access is not None:
                access(obj, now)
            continue
        flags[i] = 0
        size = sizes[i]
        now = nows[i]
        obj = known_get(oid)
        if obj is None:
            obj = known[oid] = CacheObject(oid, size, created_s=now)
        else:
            obj.size = size
        obj.last_access_s = obj.tier_since_s = now
        obj.hits = 1
        if nxt is not None:
            obj.next_access_s = nxt[i]
        if admitting is not None:
            admitting(obj, now)
        if size > capacity or (admit is not None and not admit(obj)):
            continue
        while used + size > capacity:
            v = victim(now)
            if v is None:
                raise AssertionError(f"{name}: no victim with {used} of {capacity} used and "
                                     f"{len(cached)} objects cached")
            remove(v)
            if cached.pop(v.key, None) is None:
                raise AssertionError(f"{name}: victim {v!r} is not cached")
            used -= v.size
        seq += 1
        obj.tier_seq = seq
        insert(obj, now)
        cached[oid] = obj
        used += size

    hit = np.frombuffer(bytes(flags), dtype=np.uint8).astype(bool)
    size_arr = stream.sizes
    hits = int(hit.sum())
    return CacheSimResult(policy=name, capacity=capacity, requests=n, hits=hits, misses=n - hits,
                          byte_requests=int(size_arr.sum()), byte_hits=int(size_arr[hit].sum()),
                          hit_flags=hit)


def stream_from_arrays(obj_ids, sizes=None, times=None) -> RequestStream:
    """A stream from sequences (sizes default to 1)."""
    ids = np.asarray(obj_ids, dtype=np.int64)
    sz = np.ones(len(ids), dtype=np.int64) if sizes is None else np.asarray(sizes, dtype=np.int64)
    if len(sz) and sz.min() < 1:
        raise ValueError("sizes must be positive integers")
    t = None if times is None else np.asarray(times, dtype=np.float64)
    return RequestStream(ids, sz, t)
