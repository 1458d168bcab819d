"""A shared KV store behind every replica (Mooncake Store, LMCache's server): what it holds, how a
replica reads from it and writes to it.

The store keeps conversations' KV in *chunks* of ``chunk_tokens`` (whole pages), one object per
(session, chunk), under its own capacity and eviction policy (any of kvsim's online policies,
replayed as ``kvsim cachesim`` does). A replica writes a session's full chunks that the store lacks
when a turn of it completes there; a turn admitted on a replica loads, over the replica's link to
the store, the dropped pages that the store's *unbroken run of chunks from the session's start*
covers (a lookup by chained prefix keys stops at the first missing chunk), and recomputes the rest
(docs/semantics.md, "A shared KV store").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.cachesim import CacheSim
from sim.memory import DROPPED
from sim.policies import policy_class
from sim.pricing import NetworkLink, Prefill
from sim.recovery import PageRecovery

if TYPE_CHECKING:
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun
    from sim.units import SessionKV

_DROPPED_BYTE = bytes([DROPPED])
_CHUNK_BITS = 24  # an object's id: session index << _CHUNK_BITS | chunk index


def check_number(key: str, value, above: float | None = None, at_least: float | None = None):
    """A finite number (not a bool) > ``above`` or >= ``at_least``, else an error naming ``key``."""
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if ok and above is not None:
        ok = value > above
    if ok and at_least is not None:
        ok = value >= at_least
    if not ok:
        bound = f"> {above:g}" if above is not None else f">= {at_least:g}"
        raise ValueError(f"{key}: must be a finite number {bound}, got {value!r}")


# The policies that order plain objects (the ones libCacheSim has); the others order a session's
# pages by what only the engine knows of them.
STORE_POLICIES = ("lru", "fifo", "lfu", "arc", "clock", "sieve", "s3fifo", "slru", "twoq")
_NEEDS_A_UNITS_PLACE = (
    "pensieve",
    "pensieve-depth",
    "pensieve-flat",
    "pensieve-physics",
    "predictive",
)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    capacity_gb: float  # the store's KV capacity (GB = 1e9 bytes)
    policy: str = "lru"  # its eviction policy: any online kvsim policy
    bandwidth_gb_s: float = 25.0  # each replica's link to it (GB/s): a 200 Gb/s RDMA NIC
    latency_us: float = 20.0  # before a load's first byte arrives
    chunk_tokens: int = 256  # tokens per stored object (LMCache's default chunk)

    def __post_init__(self) -> None:
        check_number("cluster.store.capacity_gb", self.capacity_gb, above=0)
        check_number("cluster.store.bandwidth_gb_s", self.bandwidth_gb_s, above=0)
        check_number("cluster.store.latency_us", self.latency_us, at_least=0)
        chunk = self.chunk_tokens
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"cluster.store.chunk_tokens: must be an integer >= 1, got {chunk!r}")
        try:
            cls = policy_class(self.policy)
        except (KeyError, ValueError) as e:
            raise ValueError(f"cluster.store.policy: {e}") from None
        if cls.offline or cls.reads_session or self.policy in _NEEDS_A_UNITS_PLACE:
            raise ValueError(
                f"cluster.store.policy: {self.policy!r} reads what a stored chunk does not carry "
                f"(next accesses, its session, its layer and position, or a lifetime model); "
                f"the store takes one of {', '.join(STORE_POLICIES)} or a module:Class"
            )

    @property
    def link(self) -> NetworkLink:
        """A replica's link to the store (``sim.pricing.Pricer.remote_link``): loads arrive
        layer by layer, as LMCache's layer-wise retrieval sends them."""
        return NetworkLink(self.latency_us * 1e-6, self.bandwidth_gb_s * 1e9)


@dataclass(slots=True)
class StoreStats:
    loaded_bytes: int = 0  # read by replicas
    written_bytes: int = 0  # written by replicas
    written_chunks: int = 0
    evicted_chunks: int = 0


class SharedStore:
    """The store's contents: chunk objects under a byte capacity and a kvsim policy."""

    def __init__(self, cfg: StoreConfig, page_bytes: int, block_tokens: int) -> None:
        """``page_bytes``: a page of the whole model (every GPU's shard of it)."""
        if cfg.chunk_tokens % block_tokens:
            raise ValueError(
                f"cluster.store.chunk_tokens: {cfg.chunk_tokens} is not a whole number of pages "
                f"of {block_tokens} tokens"
            )
        self.cfg = cfg
        self.block_tokens = block_tokens
        self.page_bytes = page_bytes
        self.chunk_pages = cfg.chunk_tokens // block_tokens
        self.chunk_bytes = self.chunk_pages * page_bytes
        capacity = int(cfg.capacity_gb * 1e9)
        if capacity < self.chunk_bytes:
            raise ValueError(
                f"cluster.store.capacity_gb: {cfg.capacity_gb} GB holds no chunk of "
                f"{cfg.chunk_tokens} tokens ({self.chunk_bytes} bytes)"
            )
        self.cache = CacheSim(cfg.policy, capacity)
        self.stats = StoreStats()
        self.version = 0  # changes whenever the contents do (memo of ``prefix_pages``)
        self._prefix: dict[int, tuple[int, int]] = {}  # session -> (version, stored chunks)

    def _uid(self, session: int, chunk: int) -> int:
        return session << _CHUNK_BITS | chunk

    def prefix_pages(self, session: int) -> int:
        """Pages of the session's unbroken run of stored chunks from its start."""
        got = self._prefix.get(session)
        if got is None or got[0] != self.version:
            cached, n = self.cache.cached, 0
            while self._uid(session, n) in cached:
                n += 1
            got = self._prefix[session] = (self.version, n)
        return got[1] * self.chunk_pages

    def write(self, session: int, tokens: int, now: float) -> None:
        """A replica holding ``tokens`` of the session's context (every page on its GPU: a turn
        just completed) puts its full chunks: those the store holds are hits, then those it lacks
        are written (each may evict), both from the last chunk to the first. Tail first, so that
        under a recency policy a conversation's later chunks go before its first ones (as vLLM
        frees a request's blocks tail first: a run of chunks that starts with a gap is of no
        use); hits first, so that a write does not evict the conversation's own chunks."""
        cache = self.cache
        chunks = range(tokens // self.block_tokens // self.chunk_pages - 1, -1, -1)
        missing = []
        for chunk in chunks:
            uid = self._uid(session, chunk)
            if uid in cache.cached:
                cache.get(uid, self.chunk_bytes, math.inf, now)  # a hit
            else:
                missing.append(uid)
        for uid in missing:
            before = len(cache.cached)
            cache.get(uid, self.chunk_bytes, math.inf, now)
            self.stats.written_chunks += 1
            self.stats.written_bytes += self.chunk_bytes
            self.stats.evicted_chunks += before + 1 - len(cache.cached)
            self.version += 1

    def read(self, session: int, pages: np.ndarray, now: float) -> None:
        """A replica loads these pages (indices under ``prefix_pages``): the lookup walked the
        chunks from the session's first to the last it loads from, each a hit (tail first, as
        ``write``)."""
        for chunk in range(int(pages[-1]) // self.chunk_pages, -1, -1):
            hit = self.cache.get(self._uid(session, chunk), self.chunk_bytes, math.inf, now)
            assert hit, "a chunk of the stored run is missing"
        self.stats.loaded_bytes += len(pages) * self.page_bytes


class StoreRecovery(PageRecovery):
    """A replica's recovery with the store behind it: of a session's dropped pages, those the
    store holds are loaded over the replica's link, not recomputed. The history split's third
    part (recompute) leaves them out; ``hits`` records them per (session, turn) at a turn's first
    admission."""

    def __init__(self, core: Scheduler, store: SharedStore, hits: dict) -> None:
        super().__init__(core)
        self.store = store
        self.hits = hits

    def stored_dropped_pages(self, sess: SessionKV) -> int:
        """The session's dropped pages that the store would send now (all full pages)."""
        if not sess.tier_pages[DROPPED]:
            return 0
        n = self.stored_run(sess)
        return sess.tier.count(_DROPPED_BYTE, 0, n) if n else 0

    def split(self, sess: SessionKV) -> tuple[int, int, int]:
        g, c, d = super().split(sess)
        return g, c, d - self.stored_dropped_pages(sess) * self.core.bt

    def dropped_tokens(self, sess: SessionKV) -> int:
        return super().dropped_tokens(sess) - self.stored_dropped_pages(sess) * self.core.bt

    def stored_run(self, sess: SessionKV) -> int:
        """Pages of the session's history the store's unbroken run covers (whole pages)."""
        return min(self.store.prefix_pages(sess.index), sess.tokens // self.core.bt)

    def shared_from_outside(self, sess: SessionKV) -> int:
        share = self.core.share
        units = None if share is None else share.units.get(sess.index)
        if units is None:
            return 0
        n = min(self.stored_run(sess), len(units))
        codes = np.frombuffer(share.pool.tier, dtype=np.uint8)[units[:n]]  # type: ignore[union-attr]
        return int(np.count_nonzero(codes == DROPPED))

    def fetch_shared(self, run: TurnRun, computed, now: float, pf: Prefill):
        rest, tokens = self._load(run, computed, now, pf)
        if not run.admitted_once:  # after fetch_dropped, which set the turn's count
            self.hits[run.sess.index, run.k] += tokens
        return rest

    def fetch_dropped(self, run: TurnRun, dropped_units, now: float, pf: Prefill):
        rest, tokens = self._load(run, dropped_units, now, pf)
        if not run.admitted_once:
            self.hits[run.sess.index, run.k] = tokens
        return rest

    def _load(self, run: TurnRun, pages, now: float, pf: Prefill) -> tuple[np.ndarray, int]:
        """Load the dropped ``pages`` (session page indices) that the store's run covers: (the
        rest, to recompute; the tokens loaded)."""
        pages, n = np.asarray(pages, dtype=np.int64), self.stored_run(run.sess)
        loaded = pages[pages < n]
        if len(loaded):
            self.store.read(run.sess.index, loaded, now)
            pf.remote_bytes += len(loaded) * self.core.page_bytes
        return pages[pages >= n], len(loaded) * self.core.bt
