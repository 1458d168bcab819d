"""Shared helpers of the policy tests: seeded request streams, the Mooncake block stream, and
libCacheSim stepped request by request."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from sim.cachesim import RequestStream, next_access, stream_from_arrays

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
MOONCAKE = DATA / "mooncake" / "conversation_trace.jsonl"
INT64_MAX = 2**63 - 1

# kvsim policy -> libcachesim class name (same semantics; see each policy's docstring)
LCS_CLASS = {
    "lru": "LRU",
    "fifo": "FIFO",
    "lfu": "LFU",
    "arc": "ARC",
    "clock": "Clock",
    "sieve": "Sieve",
    "s3fifo": "S3FIFO",
    "belady": "Belady",
    "slru": "SLRU",
    "twoq": "TwoQ",
}
CLASSIC = tuple(LCS_CLASS)
ONLINE_CLASSIC = tuple(p for p in CLASSIC if p != "belady")


def var_sizes(ids: np.ndarray, lo: int = 1, hi: int = 50, seed: int = 0) -> np.ndarray:
    """A fixed size per object in [lo, hi], drawn once per object id."""
    uniq, inv = np.unique(ids, return_inverse=True)
    per_obj = np.random.default_rng(seed + 1000).integers(lo, hi + 1, len(uniq))
    return per_obj[inv].astype(np.int64)


def zipf_ids(n: int, n_obj: int, alpha: float = 0.9, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_obj + 1) ** alpha
    ranks = rng.choice(n_obj, size=n, p=p / p.sum())
    return rng.permutation(n_obj)[ranks].astype(np.int64)  # popularity unrelated to the id


def scan_ids(
    n: int, hot: int = 60, scan_len: int = 400, period: int = 1000, seed: int = 0
) -> np.ndarray:
    """A hot Zipf set, interrupted every ``period`` requests by a scan of never-seen objects."""
    out = zipf_ids(n, hot, 0.8, seed).tolist()
    res, fresh = [], hot
    for i, x in enumerate(out):
        if i and i % period == 0:
            res.extend(range(fresh, fresh + scan_len))
            fresh += scan_len
        res.append(x)
    return np.asarray(res[:n], dtype=np.int64)


def loop_ids(n: int, length: int) -> np.ndarray:
    return (np.arange(n) % length).astype(np.int64)


def stream(kind: str, n: int, sized: bool, seed: int = 0) -> RequestStream:
    if kind == "zipf":
        ids = zipf_ids(n, 3000, 0.9, seed)
    elif kind == "scan":
        ids = scan_ids(n, seed=seed)
    elif kind == "loop":
        ids = loop_ids(n, 1300)
    else:
        raise ValueError(kind)
    return stream_from_arrays(ids, var_sizes(ids, seed=seed) if sized else None)


@lru_cache(maxsize=1)
def mooncake_blocks() -> np.ndarray:
    """The block hashes of Mooncake's conversation trace, request after request, as one stream."""
    if not MOONCAKE.is_file():
        pytest.skip(f"real data absent: {MOONCAKE}")
    ids: list[int] = []
    with MOONCAKE.open() as f:
        for line in f:
            ids.extend(json.loads(line)["hash_ids"])
    return np.asarray(ids, dtype=np.int64)


def lcs_cache(policy: str, capacity: int):
    lcs = pytest.importorskip("libcachesim")
    # a small initial hash table (it grows): the default 2^24 buckets cost more than a test stream
    return getattr(lcs, LCS_CLASS[policy])(capacity, hashpower=16)


def lcs_hit_flags(policy: str, s: RequestStream, capacity: int) -> np.ndarray:
    """libCacheSim's hit or miss for each request, stepping ``cache.get`` one request at a time."""
    lcs = pytest.importorskip("libcachesim")
    cache = lcs_cache(policy, capacity)
    req = lcs.Request()
    n = len(s)
    out = np.zeros(n, dtype=bool)
    get = cache.get
    if policy == "belady":
        na = next_access(s.obj_ids)
        nxt = np.where(na < n, na, INT64_MAX).tolist()
        for i, (o, z) in enumerate(zip(s.obj_ids.tolist(), s.sizes.tolist())):
            req.obj_id, req.obj_size, req.next_access_vtime = o, z, nxt[i]
            out[i] = get(req)
    else:
        for i, (o, z) in enumerate(zip(s.obj_ids.tolist(), s.sizes.tolist())):
            req.obj_id, req.obj_size = o, z
            out[i] = get(req)
    return out


def first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    d = np.flatnonzero(a != b)
    return int(d[0]) if len(d) else None


def hand_policy(name: str, sizes: dict[int, int] | None = None, **next_access):
    """A policy driven by hand on objects (uids) of the given sizes (default 1), with their next
    access times where given (``next_access={uid: t}``); returns (policy, view)."""
    from sim.cachesim import ObjectView
    from sim.policies import PolicyContext, make_policy
    from sim.units import Tier

    view = ObjectView()
    view.sizes.update(sizes or {})
    view.next.update(next_access.get("next_access", {}))
    pol = make_policy(name, PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32, view=view))
    return pol, view


def obj(view, uid: int, size: int = 1) -> int:
    """Register object ``uid`` of ``size`` in a hand-driven policy's view."""
    view.sizes[uid] = size
    return uid
