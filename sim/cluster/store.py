"""A shared KV store behind every replica (Mooncake Store, LMCache's server): what it holds, how a
replica reads from it and writes to it.

The store keeps conversations' KV in *chunks* of ``chunk_tokens`` (whole pages), one object per
(session, chunk), under its own capacity and eviction policy (any of kvsim's online policies,
replayed as ``kvsim cachesim`` does). A replica writes a session's full chunks that the store lacks
when a turn of it completes there; a turn admitted on a replica loads, over the replica's link to
the store, the dropped pages that the store's *unbroken run of chunks from the session's start*
covers (a lookup by chained prefix keys stops at the first missing chunk), and recomputes the rest
(docs/semantics.md, "A shared KV store"). With ``write: eviction`` (or ``both``) a replica also
writes a chunk when its KV leaves the replica (``DropWriting``): evicted KV goes to the store
instead of being lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.cachesim import CacheSim, ObjectView
from sim.cluster.outside import (
    OutsideRecovery,
    dropped_pages,
    dropped_pages_below,
    layer_bring_in,
)
from sim.memory import CPU, DROPPED, GPU, SHARED, Tier, TieredMemory
from sim.policies import PolicyContext, policy_class
from sim.pricing import NetworkLink, Prefill
from sim.recovery import LayerRecovery
from sim.units import UNIT_BITS, UNIT_MASK, extents_of

if TYPE_CHECKING:
    from costmodels import CostModel
    from sim.parts.sharing import PrefixSharing
    from sim.prefix import SharedPrefixes
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun
    from sim.units import SessionKV

_DROPPED_BYTE = bytes([DROPPED])
_SHARED_BYTE = bytes([SHARED])
_CHUNK_BITS = 24  # an object's id: session index << _CHUNK_BITS | chunk index
_CHUNK_MASK = (1 << _CHUNK_BITS) - 1
# When a replica writes to the store: when a turn completes (the whole context), when its KV is
# dropped from the replica's last tier (the chunks it still holds whole), or both.
STORE_WRITES = ("completion", "eviction", "both")


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


# The policies that order plain objects (the ones libCacheSim has): they read nothing of a chunk
# but its requests, so the store need not tell them what it knows of conversations.
STORE_POLICIES = ("lru", "fifo", "lfu", "arc", "clock", "sieve", "s3fifo", "slru", "twoq")
# Those that price a chunk with the cost model: the store builds them once a replica lends it one.
_PRICED = ("pensieve", "pensieve-depth", "pensieve-flat", "pensieve-physics")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    capacity_gb: float  # the store's KV capacity (GB = 1e9 bytes)
    policy: str = "lru"  # its eviction policy: any online kvsim policy
    bandwidth_gb_s: float = 25.0  # each replica's link to it (GB/s): a 200 Gb/s RDMA NIC
    latency_us: float = 20.0  # before a load's first byte arrives
    chunk_tokens: int = 256  # tokens per stored object (LMCache's default chunk)
    write: str = "completion"  # when a replica writes: one of STORE_WRITES

    def __post_init__(self) -> None:
        if self.write not in STORE_WRITES:
            raise ValueError(
                f"cluster.store.write: must be one of {', '.join(STORE_WRITES)}, got {self.write!r}"
            )
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
        if cls.offline:
            raise ValueError(
                f"cluster.store.policy: {self.policy!r} reads what a stored chunk does not carry: "
                f"its next access, which depends on where the router sends its conversation; the "
                f"store takes an online policy"
            )

    @property
    def on_completion(self) -> bool:
        """Does a replica write a session's context when its turn completes?"""
        return self.write != "eviction"

    @property
    def on_drop(self) -> bool:
        """Does a replica write the chunks its dropped pages leave (``DropWriting``)?"""
        return self.write != "completion"

    @property
    def link(self) -> NetworkLink:
        """A replica's link to the store (``sim.pricing.Pricer.remote_link``): loads arrive
        layer by layer, as LMCache's layer-wise retrieval sends them."""
        return NetworkLink(self.latency_us * 1e-6, self.bandwidth_gb_s * 1e9)


@dataclass(slots=True)
class StoreStats:
    loaded_bytes: int = 0  # read by replicas
    written_bytes: int = 0  # written by replicas (at completions and at drops)
    written_chunks: int = 0
    evicted_chunks: int = 0
    # of those written, the ones written as a replica dropped them (``write: eviction``, ``both``)
    drop_written_bytes: int = 0
    drop_written_chunks: int = 0


class StoreSession:
    """What the store knows of a conversation it holds chunks of, under ``SessionKV``'s names (the
    ones policies read): its trace index, id and priority, ``tokens``: the longest context its
    requests have covered (a completed turn's context, the chunks written or read), and
    ``next_turn``: its turns completed, as the replicas serving it know them."""

    __slots__ = ("index", "next_turn", "priority", "session_id", "tokens")

    def __init__(self, kv: SessionKV) -> None:
        self.index, self.session_id, self.priority = kv.index, kv.session_id, kv.priority
        self.next_turn = self.tokens = 0

    def pages(self, block_tokens: int) -> int:
        return -(-self.tokens // block_tokens)


class StoreView(ObjectView):
    """The store's objects as its policy reads them: object ``session << 24 | c`` is chunk c of
    that session, its pages ``c * chunk_pages`` on, every layer of them; its session is the
    store's ``StoreSession`` (None before the store has met it)."""

    def __init__(self, chunk_pages: int) -> None:
        super().__init__()
        self.chunk_pages = chunk_pages
        self.known: dict[int, StoreSession] = {}  # session index -> what the store knows of it

    def session(self, uid: int) -> StoreSession | None:  # type: ignore[override]
        return self.known.get(uid >> _CHUNK_BITS)

    def first_page(self, uid: int) -> int:
        return (uid & _CHUNK_MASK) * self.chunk_pages

    def pages(self, uid: int) -> int:
        return self.chunk_pages


class SharedStore:
    """The store's contents: chunk objects under a byte capacity and a kvsim policy."""

    def __init__(
        self, cfg: StoreConfig, page_bytes: int, block_tokens: int, predictor=None
    ) -> None:
        """``page_bytes``: a page of the whole model (every GPU's shard of it); ``predictor``: the
        lifetime model a predictive policy reads (None: the unlearned prior)."""
        if cfg.chunk_tokens % block_tokens:
            raise ValueError(
                f"cluster.store.chunk_tokens: {cfg.chunk_tokens} is not a whole number of pages "
                f"of {block_tokens} tokens"
            )
        self.cfg = cfg
        self.predictor = predictor
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
        self.capacity = capacity
        self.view = StoreView(self.chunk_pages)
        # Policies that order plain objects read only their requests' order; the others read a
        # chunk's conversation, which the store hears of from the replicas' sessions (``serve``),
        # and the times of requests (a drop's write is dated when its page drops).
        self.reads_sessions = cfg.policy not in STORE_POLICIES
        self._tables: list[dict[int, SessionKV]] = []  # the replicas' sessions, by index
        self.cache: CacheSim | None = None  # a priced policy waits for a replica's cost model
        if cfg.policy not in _PRICED:
            self.cache = self._policy(None, 1)
        self.stats = StoreStats()
        self.version = 0  # changes whenever the contents do (memo of ``prefix_pages``)
        self._prefix: dict[int, tuple[int, int]] = {}  # session -> (version, stored chunks)

    def _policy(self, cost: CostModel | None, layers: int) -> CacheSim:
        """The store's policy over its objects: a victim is lost, so its price is a recompute
        (no CPU tier behind the store)."""
        ctx = PolicyContext(
            tier=GPU,
            block_tokens=self.block_tokens,
            num_layers=layers,
            cost=cost,
            predictor=self.predictor,
        )
        return CacheSim(self.cfg.policy, self.capacity, ctx=ctx, view=self.view)

    def serve(self, sessions: dict[int, SessionKV], cost: CostModel) -> None:
        """A replica in front of the store: the store reads what it knows of a conversation from
        its ``sessions`` (each replica's ``Scheduler.kv``), and a priced policy is built with its
        cost model (every replica has the same one)."""
        if self.cache is None:
            self.cache = self._policy(cost, cost.model.num_layers)
        if self.reads_sessions and not any(t is sessions for t in self._tables):
            self._tables.append(sessions)

    def _meet(self, session: int, tokens: int) -> None:
        """Before a request of ``session`` covering ``tokens`` of its context: what the store
        knows of it, brought up to date. Its turns completed are the most any replica serving it
        has seen (the one running it now, or the last to). A drop's write reaches the store
        before that count changes: a replica flushes its drops before a turn is delivered to it,
        and a completion is an event of its own, after the flush of the iteration's drops."""
        if not self.reads_sessions:
            return
        known = self.view.known.get(session)
        for table in self._tables:
            kv = table.get(session)
            if kv is None:
                continue
            if known is None:
                known = self.view.known[session] = StoreSession(kv)
            if kv.next_turn > known.next_turn:
                known.next_turn = kv.next_turn
        if known is not None and tokens > known.tokens:  # (None: no replica has it)
            known.tokens = tokens

    def _uid(self, session: int, chunk: int) -> int:
        return session << _CHUNK_BITS | chunk

    def prefix_pages(self, session: int) -> int:
        """Pages of the session's unbroken run of stored chunks from its start."""
        got = self._prefix.get(session)
        if got is None or got[0] != self.version:
            if self.cache is None:  # nothing written yet
                return 0
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
        assert cache is not None, "the store's priced policy has no cost model yet (serve)"
        chunks = range(tokens // self.block_tokens // self.chunk_pages - 1, -1, -1)
        self._meet(session, tokens)
        missing = []
        for chunk in chunks:
            uid = self._uid(session, chunk)
            if uid in cache.cached:
                cache.get(uid, self.chunk_bytes, math.inf, now)  # a hit
            else:
                missing.append(uid)
        for uid in missing:
            self._insert(uid, now)

    def _insert(self, uid: int, now: float) -> None:
        """Write a chunk the store lacks: the policy admits it, evicting until it fits."""
        cache = self.cache
        assert cache is not None
        before = len(cache.cached)
        cache.get(uid, self.chunk_bytes, math.inf, now)
        self.stats.written_chunks += 1
        self.stats.written_bytes += self.chunk_bytes
        self.stats.evicted_chunks += before + 1 - len(cache.cached)
        self.version += 1

    def write_dropped(self, session: int, chunks: list[int], now: float) -> None:
        """A replica drops pages of these whole chunks of the session (each held whole on the
        replica until now), in the order it drops them: each chunk the store lacks is written (an
        insert that may evict); one it holds is left alone, with no hit for its policy (the
        replica asks whether it is there, which is no use of it)."""
        assert self.cache is not None, "the store's priced policy has no cost model yet (serve)"
        cached = self.cache.cached
        self._meet(session, (max(chunks) + 1) * self.cfg.chunk_tokens if chunks else 0)
        for chunk in chunks:
            uid = self._uid(session, chunk)
            if uid not in cached:
                self._insert(uid, now)
                self.stats.drop_written_chunks += 1
                self.stats.drop_written_bytes += self.chunk_bytes

    def read(self, session: int, pages: np.ndarray, now: float) -> None:
        """A replica loads these pages (indices under ``prefix_pages``): the lookup walked the
        chunks from the session's first to the last it loads from, each a hit (tail first, as
        ``write``)."""
        assert self.cache is not None
        last = int(pages[-1]) // self.chunk_pages
        self._meet(session, (last + 1) * self.cfg.chunk_tokens)
        for chunk in range(last, -1, -1):
            hit = self.cache.get(self._uid(session, chunk), self.chunk_bytes, math.inf, now)
            assert hit, "a chunk of the stored run is missing"
        self.stats.loaded_bytes += len(pages) * self.page_bytes


class StoreReads:
    """What a replica's recovery reads of the store behind it, at any eviction unit: the
    session's unbroken run of stored chunks, and its dropped pages in it (``dropped_pages``)."""

    core: Scheduler
    store: SharedStore

    def __init__(self, core: Scheduler, store: SharedStore, hits: dict) -> None:
        super().__init__(core)  # type: ignore[call-arg]  # the recovery beside it in the MRO
        self.store = store
        self.hits = hits
        store.serve(core.kv, core.cost)

    def split(self, sess: SessionKV) -> tuple[int, int, int]:
        """The recovery's split, less the dropped pages the store sends."""
        g, c, d = super().split(sess)  # type: ignore[misc]
        return g, c, d - self.stored_dropped_pages(sess) * self.core.bt

    def outside_tokens(self, sess: SessionKV) -> int:
        return self.stored_dropped_pages(sess) * self.core.bt

    def stored_dropped_pages(self, sess: SessionKV) -> int:
        """The session's dropped pages that the store would send now (all full pages)."""
        if not sess.tier_pages[DROPPED]:
            return 0
        return dropped_pages_below(self.core, sess, self.stored_run(sess))

    def stored_run(self, sess: SessionKV) -> int:
        """Pages of the session's history the store's unbroken run covers (whole pages)."""
        return min(self.store.prefix_pages(sess.index), sess.tokens // self.core.bt)


class StoreRecovery(StoreReads, OutsideRecovery):
    """A replica's recovery with the store behind it: of a session's dropped pages, those the
    store holds are loaded over the replica's link, not recomputed. The history split's third
    part (recompute) leaves them out; ``hits`` records them per (session, turn) at a turn's first
    admission. At ``session`` units the session's dropped unit is loaded where the run covers it
    and recomputed past it (``OutsideRecovery``)."""

    def dropped_tokens(self, sess: SessionKV) -> int:
        return super().dropped_tokens(sess) - self.stored_dropped_pages(sess) * self.core.bt

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


class StoreLayerRecovery(StoreReads, LayerRecovery):
    """``StoreRecovery`` at ``layer_block`` units: of the session's pages with a dropped layer,
    those in the store's run are loaded whole (every layer of them at once: no layer of them
    recomputed, none swapped in), the rest recomputed through their deepest dropped layer."""

    def dropped_tokens(self, sess: SessionKV) -> int:
        # not LayerRecovery's memo: what the store holds changes with the session's dropped
        # units unchanged (a write, an eviction), and its memo is of ``split``, which already
        # leaves the stored pages out
        return self.split(sess)[DROPPED]

    def bring_in(
        self,
        run: TurnRun,
        share: PrefixSharing | None,
        dropped: int,
        new: int,
        old_tokens: int,
        now: float,
        pf: Prefill,
    ) -> tuple[int, int]:
        sess = run.sess
        pages = dropped_pages(self.core, sess)
        loaded = pages[pages < self.stored_run(sess)]
        if len(loaded):
            self.store.read(sess.index, loaded, now)
            pf.remote_bytes += len(loaded) * self.core.page_bytes
        if not run.admitted_once:
            self.hits[sess.index, run.k] = len(loaded) * self.core.bt
        return layer_bring_in(self, run, new, old_tokens, now, pf, loaded), 0


class DropWriting(TieredMemory):
    """A replica's memory that writes to the store the KV it drops (``write: eviction``, ``both``):
    when pages of a session leave the replica's last tier (a GPU victim with no CPU tier to take
    it, a CPU victim, a preemption's discard), each whole chunk they touch is written if the
    chunk is full (every token of its pages computed) and the replica holds every page of it at
    that moment (on its GPU or CPU, a shared prefix's pages in the pool), in the order the pages
    drop (the policy's victims' order, pages in order within a run of them). A chunk any page of
    which was already gone, or which is not full, is lost as before. A shared prefix's pool pages
    belong to no conversation: dropping them writes nothing. Nothing else changes: which pages
    leave, and when, is the single engine's (``attach`` makes a replica's ``TieredMemory`` one of
    these in place, since the scheduler's parts hold it)."""

    store: SharedStore
    sched: Scheduler
    now: float
    pending: list[tuple[int, list[int], float]]  # (session, chunks, when) dropped, not yet sent

    @classmethod
    def attach(cls, mem: TieredMemory, store: SharedStore, sched: Scheduler) -> None:
        mem.__class__ = cls
        assert isinstance(mem, cls)
        mem.store, mem.sched, mem.now, mem.pending = store, sched, 0.0, []
        store.serve(sched.kv, sched.cost)
        if store.reads_sessions:  # a decode span's drops in one call would be dated at its start;
            sched.grows_in_bulk = False  # the store's policy reads each drop's own time

    # every path that drops a page passes through one of these with the moment it happens
    def make_room(self, nbytes: int, now: float) -> bool:
        self.now = now
        return super().make_room(nbytes, now)

    def drop_at(self, schedule: list[tuple[float, int]]) -> None:
        # one call at a time, so that each call's drops are written at its time and in its order
        for now, nbytes in schedule:
            self.now = now
            super().drop_at([(now, nbytes)])

    def offload_pinned(self, sess: SessionKV, first: int, stop: int, now: float) -> bool:
        self.now = now
        return super().offload_pinned(sess, first, stop, now)

    def drop_from(self, sess: SessionKV, first_unit: int, now: float) -> None:
        self.now = now
        codes = np.frombuffer(sess.tier, dtype=np.uint8)[first_unit:]
        leaving = np.flatnonzero((codes == GPU) | (codes == CPU)) + first_unit
        del codes
        if len(leaving):
            self._write(((sess, *self._pages(sess, a, b)) for a, b in extents_of(leaving)), set())
        super().drop_from(sess, first_unit, now)

    def _drop_gpu_victim(self, sess: SessionKV, idx: int, size: int, ppu: int) -> None:
        # a session unit that no CPU tier can take (``make_room``): before it leaves, the replica
        # still holds every page of it
        self._write(((sess, *self._pages(sess, idx, idx + 1)),), set())
        super()._drop_gpu_victim(sess, idx, size, ppu)

    def _drop_cpu_victim(self, uid: int | None) -> None:
        # a session unit the CPU gives up to take a GPU victim (``make_room``)
        if uid is not None:
            sess, idx = self.view.sessions[uid >> UNIT_BITS], uid & UNIT_MASK
            if idx < len(sess.tier) and sess.tier[idx] == CPU:  # (else: super's error)
                self._write(((sess, *self._pages(sess, idx, idx + 1)),), set())
        super()._drop_cpu_victim(uid)

    def _move_extents(
        self, extents: list[tuple[int, int]], frm: Tier, to: Tier, policy: Tier = GPU
    ) -> None:
        if to == DROPPED and extents:  # before they leave: the replica still holds them
            sessions = self.view.sessions
            self._write(
                (
                    (
                        sess := sessions[a >> UNIT_BITS],
                        *self._pages(sess, a & UNIT_MASK, (a & UNIT_MASK) + b - a),
                    )
                    for a, b in extents
                ),
                set(),
            )
        super()._move_extents(extents, frm, to, policy)

    def _pages(self, sess: SessionKV, first: int, stop: int) -> tuple[int, int]:
        """The pages (first, stop) that the session's units ``first .. stop-1`` lie on: a session
        unit spans all the session's pages, a ``layer_block`` unit one layer of one page."""
        view = self.view
        if view.per_session:
            return 0, sess.unit_pages
        layers = view.layers
        if layers == 1:
            return first, stop
        return first // layers, (stop - 1) // layers + 1

    def _write(self, runs, seen: set[tuple[int, int]]) -> None:
        """Write the chunks that these runs of dropped pages (session, first, stop) touch."""
        store, share = self.store, self.sched.share
        pool = share.pool if share is not None else None
        cp, ct = store.chunk_pages, store.cfg.chunk_tokens
        for sess, first, stop in runs:
            if sess is pool:
                continue
            chunks = []
            for chunk in range(first // cp, min((stop - 1) // cp + 1, sess.tokens // ct)):
                if (sess.index, chunk) not in seen and self._holds(sess, chunk * cp, cp, share):
                    seen.add((sess.index, chunk))
                    chunks.append(chunk)
            if chunks:
                self.pending.append((sess.index, chunks, self.now))

    def flush(self) -> None:
        """The writes of the drops since the last flush reach the store, in the order of the
        drops. The replica flushes when its planning of an iteration is over (after the lookups
        of the turns it admits: a lookup keeps what it found until it is loaded, as LMCache's
        does), after a decode span, and after any other event of it."""
        if self.pending:
            for session, chunks, now in self.pending:
                self.store.write_dropped(session, chunks, now)
            self.pending.clear()

    def _holds(self, sess: SessionKV, first: int, count: int, share: SharedPrefixes | None) -> bool:
        """Does the replica hold every page ``first .. first + count - 1`` of the session (every
        layer of it; a session unit holds all its pages or none)?"""
        tier, view = sess.tier, self.view
        if view.per_session:
            return tier[0] != DROPPED
        if view.layers > 1:
            return not tier.count(_DROPPED_BYTE, first * view.layers, (first + count) * view.layers)
        if tier.count(_DROPPED_BYTE, first, first + count):
            return False
        if share is None or not tier.count(_SHARED_BYTE, first, first + count):
            return True
        codes = np.frombuffer(tier, dtype=np.uint8)[first : first + count]
        pages = np.flatnonzero(codes == SHARED) + first
        del codes
        units = share.units.get(sess.index)
        if units is None:  # a finished session's prefix, let go of: its pool pages are not its
            return False
        pool = np.frombuffer(share.pool.tier, dtype=np.uint8)[units[pages]]
        return not np.any(pool == DROPPED)
