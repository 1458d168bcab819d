"""vLLM's CPU offloading (``OffloadingConnector`` with its CPU manager), scheduler side, rule for
rule as vLLM 0.33.0 runs it for one group of full attention with its defaults (prompt chunks
only, asynchronous loads, no sync-load budget, no partial tails).

KV moves in *chunks* of ``blocks_per_chunk`` GPU blocks; a chunk's key is the key of its last
block. The CPU holds ``cpu_chunks`` of them.

* **Stores.** At the end of every ``schedule()``, each scheduled request offers the full chunks of
  its prompt that this step's tokens complete and that it has not offered yet; a finished request
  offers what is left. The manager stores the ones it does not hold (evicting idle chunks, never
  one of the offer), or refuses all of them when it cannot evict enough: then the request offers
  them again next step. A store is *pending* until the worker reports it; a pending chunk is
  neither loadable nor evictable.
* **Loads.** A waiting request that starts from scratch looks up, after its GPU prefix hit, the
  chunks that follow it: the longest run of held chunks, whole chunks only, up to all its tokens.
  A pending chunk in that run, an unfinished transfer of its own, or a chunk another load is
  bringing in defer the request (it is skipped this step). A hit allocates its GPU blocks now and
  the request waits, holding them, until the worker reports the load; then its blocks are cached
  and it is scheduled like a resumed request (all tokens loaded: the last is computed again).
* **Flushes.** A finished request's blocks go back to the free queue while its stores may still
  read them; a step that hands one of them out again, or that preempts a request with stores in
  flight, tells the worker to finish those stores first.
* **Eviction order.** ``lru``: ranks; a request's chunks share one rank drawn at its first
  access, later positions first, and on finishing get fresh ranks from its tail to its head (the
  head evicted last). ``arc``: T1/T2 with ghost lists B1/B2, a store a first access, a reuse by
  a request the second.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

Key = Hashable
PENDING = -1  # a chunk's ref count while its store is in flight


@dataclass(frozen=True, slots=True)
class OffloadConfig:
    cpu_chunks: int
    blocks_per_chunk: int = 1
    eviction_policy: str = "lru"

    def __post_init__(self) -> None:
        if self.cpu_chunks < 1:
            raise ValueError(f"offload.cpu_chunks must be >= 1, got {self.cpu_chunks}")
        if self.blocks_per_chunk < 1:
            raise ValueError(f"offload.blocks_per_chunk must be >= 1, got {self.blocks_per_chunk}")
        if self.eviction_policy not in CHUNK_POLICIES:
            raise ValueError(
                f"offload.eviction_policy must be one of {sorted(CHUNK_POLICIES)}, "
                f"got {self.eviction_policy!r}"
            )


class OffloadRequest(Protocol):
    """What the connector reads of a scheduler request."""

    rid: str
    num_prompt_tokens: int
    num_tokens: int
    blocks: list[int]

    def block_key(self, j: int) -> Key: ...


@dataclass(eq=False, slots=True)
class Access:
    """The chunks one request has seen, for the manager's policy (vLLM's request context)."""

    rank: int = 0  # lru: the request's rank, drawn at its first access (0: not yet)
    # key -> its position (the tokens through its chunk), in first-seen order
    seen: dict[Key, int] = field(default_factory=dict)
    inserted: set[Key] = field(default_factory=set)
    reused: set[Key] = field(default_factory=set)
    store_misses: set[Key] = field(default_factory=set)
    finished: bool = False


# --- the CPU manager's policies ---------------------------------------------------------------


class LruChunks:
    """vLLM's ``LRUCachePolicy``: the idle chunk of the lowest rank goes first. Ranks are pairs:
    ``(request rank, -position)`` while a request runs, ``(fresh, 0)`` once it finished."""

    def __init__(self, capacity: int) -> None:
        self.ref: dict[Key, int] = {}
        self.rank: dict[Key, tuple[int, int]] = {}
        self.idle: set[Key] = set()
        self.heap: list[tuple[tuple[int, int], int, Key]] = []  # lazy: stale entries skipped
        self.next_rank = 0
        self._tie = 0  # ranks are unique; this only keeps keys out of comparisons

    def _request_rank(self, acc: Access) -> int:
        if not acc.rank:
            self.next_rank += 1
            acc.rank = self.next_rank
        return acc.rank

    def _push(self, key: Key) -> None:
        self._tie += 1
        heapq.heappush(self.heap, (self.rank[key], self._tie, key))

    def insert(self, key: Key, position: int, acc: Access) -> None:
        self.ref[key] = PENDING
        self.rank[key] = (self._request_rank(acc), -position)

    def on_store_miss(self, keys: Sequence[Key], acc: Access) -> None:
        """A miss is a key it does not hold: a touch that changes nothing."""

    def on_request_access(self, keys: Sequence[Key], positions: Sequence[int], acc: Access) -> None:
        r = self._request_rank(acc)
        for key, pos in zip(keys, positions, strict=True):
            if key not in self.ref:
                continue
            rank = (r, -pos)
            if self.rank[key] >= rank:
                continue
            self.rank[key] = rank
            if key in self.idle:
                self._push(key)

    def on_request_finished(self, keys: Sequence[Key], acc: Access) -> None:
        for key in reversed(keys):  # tail first: the head gets the newest rank
            if key in self.ref:
                self.next_rank += 1
                self.rank[key] = (self.next_rank, 0)
                if key in self.idle:
                    self._push(key)

    def mark_idle(self, key: Key) -> None:
        self.idle.add(key)
        self._push(key)

    def mark_busy(self, key: Key) -> None:
        self.idle.remove(key)

    def evict(self, n: int, protected: set[Key]) -> list[Key] | None:
        heap = self.heap
        picked: list[tuple[tuple[int, int], int, Key]] = []
        kept: list[tuple[tuple[int, int], int, Key]] = []
        seen: set[Key] = set()
        while heap and len(picked) < n:
            entry = heapq.heappop(heap)
            rank, _, key = entry
            if key not in self.idle or self.rank[key] != rank or key in seen:
                continue
            seen.add(key)
            (kept if key in protected else picked).append(entry)
        for entry in kept:
            heapq.heappush(heap, entry)
        if len(picked) < n:
            for entry in picked:
                heapq.heappush(heap, entry)
            return None
        out = [key for _, _, key in picked]
        for key in out:
            self.idle.remove(key)
            del self.ref[key], self.rank[key]
        if len(heap) > max(64, 2 * len(self.idle)):  # drop the stale entries
            self.heap = [(self.rank[k], i, k) for i, k in enumerate(self.idle)]
            heapq.heapify(self.heap)
        return out


class ArcChunks:
    """vLLM's ``ARCCachePolicy``: T1 (seen once) and T2 (reused), each oldest first, ghost lists
    B1/B2 of what each evicted; a ghost hit on a store moves the target size of T1."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.target_t1 = 0.0
        self.t1: OrderedDict[Key, None] = OrderedDict()
        self.t2: OrderedDict[Key, None] = OrderedDict()
        self.b1: OrderedDict[Key, None] = OrderedDict()
        self.b2: OrderedDict[Key, None] = OrderedDict()
        self.ref: dict[Key, int] = {}

    def insert(self, key: Key, position: int, acc: Access) -> None:
        self.ref[key] = PENDING
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def on_store_miss(self, keys: Sequence[Key], acc: Access) -> None:
        for key in reversed(keys):
            if key in self.b1:
                self.target_t1 = min(
                    self.target_t1 + max(1, len(self.b2) / len(self.b1)), self.capacity
                )
                self.b1.move_to_end(key)
            elif key in self.b2:
                self.target_t1 = max(self.target_t1 - max(1, len(self.b1) / len(self.b2)), 0)
                self.b2.move_to_end(key)

    def on_request_access(self, keys: Sequence[Key], positions: Sequence[int], acc: Access) -> None:
        """ARC learns at the request's end."""

    def on_request_finished(self, keys: Sequence[Key], acc: Access) -> None:
        only_inserted = acc.inserted - acc.reused
        for key in reversed(keys):
            if key in only_inserted:  # a store is no reuse: recency only
                if key in self.t1:
                    self.t1.move_to_end(key)
                elif key in self.t2:
                    self.t2.move_to_end(key)
            elif key in acc.reused:
                if key in self.t1:
                    del self.t1[key]
                    self.t2[key] = None
                elif key in self.t2:
                    self.t2.move_to_end(key)

    def mark_idle(self, key: Key) -> None:
        pass

    def mark_busy(self, key: Key) -> None:
        pass

    def evict(self, n: int, protected: set[Key]) -> list[Key] | None:
        ref = self.ref

        def candidates(lst: OrderedDict[Key, None]) -> Iterator[Key]:
            return (k for k in lst if ref[k] == 0 and k not in protected)

        it1, it2 = candidates(self.t1), candidates(self.t2)
        picked: list[tuple[Key, bool]] = []
        t1_size = len(self.t1)
        for _ in range(n):
            got = None
            if t1_size >= int(self.target_t1):
                key = next(it1, None)
                if key is not None:
                    got, t1_size = (key, True), t1_size - 1
            if got is None:
                key = next(it2, None)
                if key is not None:
                    got = (key, False)
            if got is None:
                key = next(it1, None)
                if key is None:
                    return None
                got, t1_size = (key, True), t1_size - 1
            picked.append(got)
        for key, from_t1 in picked:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            del ref[key]
        for ghost in (self.b1, self.b2):
            for _ in range(len(ghost) - self.capacity):
                ghost.popitem(last=False)
        return [key for key, _ in picked]


CHUNK_POLICIES: dict[str, type[LruChunks | ArcChunks]] = {"lru": LruChunks, "arc": ArcChunks}


class CpuChunks:
    """vLLM's ``CPUOffloadingManager``: ``capacity`` chunks, ref counts (``PENDING`` while a store
    is in flight, then the number of loads reading it), and a policy that orders the idle ones."""

    def __init__(self, capacity: int, policy: str) -> None:
        self.capacity = capacity
        self.policy = CHUNK_POLICIES[policy](capacity)
        self.ref = self.policy.ref  # key -> ref count, for every chunk held
        self.num_idle = 0

    def lookup(self, key: Key) -> int | None:
        """None: not held; PENDING: its store is in flight; else its loads."""
        return self.ref.get(key)

    def _access(
        self, keys: Sequence[Key], acc: Access, positions: dict[Key, int], reused: Sequence[Key]
    ) -> None:
        new = [k for k in keys if k not in acc.seen]
        for k in new:
            acc.seen[k] = positions[k]
        if new:
            self.policy.on_request_access(new, [positions[k] for k in new], acc)
        acc.reused.update(k for k in reused if k not in acc.inserted)

    def prepare_load(self, keys: Sequence[Key], acc: Access, positions: dict[Key, int]) -> None:
        ref = self.ref
        for key in keys:
            if ref[key] == 0:
                self.policy.mark_busy(key)
                self.num_idle -= 1
            ref[key] += 1
        self._access(keys, acc, positions, keys)

    def complete_load(self, keys: Iterable[Key]) -> None:
        ref = self.ref
        for key in keys:
            ref[key] -= 1
            if ref[key] == 0:
                self.num_idle += 1
                self.policy.mark_idle(key)

    def prepare_store(
        self, keys: Sequence[Key], acc: Access, positions: dict[Key, int]
    ) -> list[Key] | None:
        """The keys to store now (possibly none), or None if it cannot evict room for them."""
        ref = self.ref
        to_store = [k for k in keys if k not in ref]
        ready = [k for k in keys if ref.get(k, PENDING) >= 0]
        misses = [k for k in to_store if k not in acc.store_misses]
        if misses:
            self.policy.on_store_miss(misses, acc)
            acc.store_misses.update(misses)
        recorded = set(to_store) | set(ready)
        self._access([k for k in keys if k in recorded], acc, positions, ready)
        if not to_store:
            return []
        evict = len(to_store) - (self.capacity - len(ref))
        if evict > 0:
            if evict > self.num_idle:
                return None
            evicted = self.policy.evict(evict, set(keys))
            if evicted is None:
                return None
            self.num_idle -= len(evicted)
        for key in to_store:
            self.policy.insert(key, positions[key], acc)
        acc.inserted.update(to_store)
        return to_store

    def complete_store(self, keys: Iterable[Key]) -> None:
        ref = self.ref
        for key in keys:
            if ref.get(key, 0) == PENDING:
                ref[key] = 0
                self.num_idle += 1
                self.policy.mark_idle(key)

    def on_request_finished(self, acc: Access) -> None:
        if acc.finished:
            return
        acc.finished = True
        keys = sorted(acc.seen, key=acc.seen.__getitem__)  # head to tail
        self.policy.on_request_finished(keys, acc)


# --- the connector, scheduler side --------------------------------------------------------------


@dataclass(slots=True)
class Job:
    job_id: int
    kind: str  # "load" or "store"
    rid: str
    keys: list[Key]
    blocks: list[int]  # the GPU blocks it copies


@dataclass(eq=False, slots=True)
class _ReqState:
    req: OffloadRequest
    acc: Access = field(default_factory=Access)
    blocks: list[int] = field(default_factory=list)  # its blocks as last scheduled
    next_stored: int = 0  # chunks before this one were offered
    local: int = 0  # its GPU hit at its last lookup
    jobs: set[int] = field(default_factory=set)  # in flight
    finished: bool = False


class OffloadConnector:
    """The scheduler side of vLLM's ``OffloadingConnector`` over a ``CpuChunks``."""

    def __init__(self, cfg: OffloadConfig, block_size: int, prefix_caching: bool = True) -> None:
        self.cfg = cfg
        self.prefix_caching = prefix_caching  # without it, loads of the same chunk do not wait
        self.bs = block_size
        self.b = cfg.blocks_per_chunk
        self.tpc = block_size * cfg.blocks_per_chunk  # tokens per chunk
        self.cpu = CpuChunks(cfg.cpu_chunks, cfg.eviction_policy)
        self.states: dict[str, _ReqState] = {}
        self.jobs: dict[int, Job] = {}
        self.next_job = 0
        self.being_loaded: set[Key] = set()
        self.block_jobs: dict[int, set[int]] = {}  # a finished request's block -> stores reading it
        # this step's
        self.new_jobs: list[Job] = []
        self.flush: set[int] = set()
        self.allocated: set[int] = set()

    # --- keys ---

    def _key(self, st: _ReqState, i: int) -> Key:
        return st.req.block_key(i * self.b + self.b - 1)

    def _keys(self, st: _ReqState, first: int, end: int) -> tuple[list[Key], dict[Key, int]]:
        """Chunks first..end-1: their keys and each key's position (the tokens through it)."""
        keys = [self._key(st, i) for i in range(first, end)]
        positions = range((first + 1) * self.tpc, (end + 1) * self.tpc, self.tpc)
        return keys, dict(zip(keys, positions, strict=True))

    # --- hooks ---

    def add(self, req: OffloadRequest) -> None:
        self.states[req.rid] = _ReqState(req)

    def lookup(self, req: OffloadRequest, local: int) -> int | None:
        """Tokens to load after a GPU hit of ``local`` tokens (0: none), or None to defer it."""
        st = self.states[req.rid]
        st.blocks = []
        st.next_stored = 0  # starting again from token 0: every chunk is offered again
        if st.jobs:
            return None
        st.local = local
        tpc = self.tpc
        nkeys = req.num_tokens // tpc
        max_hit = min(req.num_tokens, nkeys * tpc)
        if max_hit - local < tpc:
            return 0
        start = local // tpc
        hits, pending = 0, False
        for i in range(start, -(-max_hit // tpc)):
            ref = self.cpu.lookup(self._key(st, i))
            if ref is None:
                break
            hits += 1
            pending |= ref == PENDING
        if hits == 0:
            return 0
        if not pending:
            max_hit = min(max_hit, tpc * (start + hits))
        new = max_hit - local
        if new < tpc:
            return 0
        if pending:
            return None
        if self.being_loaded and any(
            self._key(st, i) in self.being_loaded for i in range(start, -(-(local + new) // tpc))
        ):
            return None
        return new

    def after_alloc(self, req: OffloadRequest, ext: int) -> None:
        """A waiting request got its blocks; ``ext`` tokens of them are to be loaded."""
        self.allocated.update(req.blocks)
        if not ext:
            return
        st = self.states[req.rid]
        cached = st.local + ext
        gpu_blocks = -(-cached // self.bs)
        first = -(-st.local // self.bs)  # the first block to load into
        chunks = -(-cached // self.tpc)
        keys, positions = self._keys(st, first // self.b, chunks)
        self.cpu.prepare_load(keys, st.acc, positions)
        st.next_stored = chunks  # the loaded chunks are not offered back
        self._job("load", st, keys, req.blocks[first:gpu_blocks])
        if self.prefix_caching:
            self.being_loaded.update(keys)

    def _job(self, kind: str, st: _ReqState, keys: list[Key], blocks: list[int]) -> Job:
        job = Job(self.next_job, kind, st.req.rid, keys, blocks)
        self.next_job += 1
        self.jobs[job.job_id] = job
        st.jobs.add(job.job_id)
        self.new_jobs.append(job)
        return job

    def request_finished(self, req: OffloadRequest) -> None:
        """Before its blocks are freed: its stores in flight now watch them."""
        st = self.states.get(req.rid)
        if st is None:
            return
        st.finished = True
        for jid in st.jobs:
            for b in self.jobs[jid].blocks:
                self.block_jobs.setdefault(b, set()).add(jid)

    def build(
        self,
        sched: Sequence[tuple[OffloadRequest, int, int]],
        preempted: Sequence[OffloadRequest],
        finished: Sequence[OffloadRequest],
    ) -> tuple[list[Job], list[int]]:
        """The end of ``schedule()``: this step's jobs and the jobs to flush. ``sched``: (request,
        tokens, computed before); ``finished``: requests finished since the last step, in the
        order they finished. ``allocated`` holds the blocks handed out in this step (a request
        admitted from the queue: all its blocks)."""
        for req, _, _ in sched:
            self.states[req.rid].blocks = req.blocks
        for req in preempted:
            st = self.states.get(req.rid)
            if st is not None:
                self.flush.update(j for j in st.jobs if self.jobs[j].kind == "store")
        if self.block_jobs and not self.block_jobs.keys().isdisjoint(self.allocated):
            for b in self.allocated:
                self.flush.update(self.block_jobs.get(b, ()))
        for req, n, c in sched:
            self._store(self.states[req.rid], c + n, False)
        for req in finished:
            st = self.states.get(req.rid)
            if st is not None:
                self._store(st, max(req.num_prompt_tokens, req.num_tokens - 1), True)
        for req in finished:
            st = self.states.get(req.rid)
            if st is None:
                continue
            self.cpu.on_request_finished(st.acc)
            if not st.jobs:
                del self.states[req.rid]
        jobs, flush = self.new_jobs, sorted(self.flush)
        self.new_jobs, self.flush, self.allocated = [], set(), set()
        return jobs, flush

    def _store(self, st: _ReqState, tokens_after: int, finished: bool) -> None:
        req, b = st.req, self.b
        offloadable = min(tokens_after, req.num_tokens, req.num_prompt_tokens)
        chunks = min(offloadable // self.tpc, len(st.blocks) // b, req.num_tokens // self.tpc)
        start = st.next_stored
        if chunks <= start:
            st.next_stored = max(start, chunks)
            return
        keys, positions = self._keys(st, start, chunks)
        stored = self.cpu.prepare_store(keys, st.acc, positions)
        if stored is None:
            return  # offered again next step
        st.next_stored = max(st.next_stored, chunks)
        if not stored:
            return
        # chunk i (position (i + 1) * tpc) is blocks i * b .. i * b + b - 1
        blocks = [
            st.blocks[(positions[k] // self.tpc - 1) * b + j] for k in stored for j in range(b)
        ]
        job = self._job("store", st, stored, blocks)
        if finished:
            for blk in blocks:
                self.block_jobs.setdefault(blk, set()).add(job.job_id)
                if blk in self.allocated:
                    self.flush.add(job.job_id)

    def complete(self, job_ids: Iterable[int]) -> list[OffloadRequest]:
        """The worker reported these jobs done; returns the requests whose load finished."""
        loaded = []
        for jid in job_ids:
            job = self.jobs.pop(jid)
            st = self.states[job.rid]
            if job.kind == "store":
                self.cpu.complete_store(job.keys)
            else:
                self.cpu.complete_load(job.keys)
                self.being_loaded.difference_update(job.keys)
                loaded.append(st.req)
            if self.block_jobs and st.finished:
                for blk in job.blocks:
                    watchers = self.block_jobs.get(blk)
                    if watchers is not None:
                        watchers.discard(jid)
                        if not watchers:
                            del self.block_jobs[blk]
            st.jobs.remove(jid)
            if st.acc.finished and not st.jobs:  # finished, its last stores planned and done
                del self.states[job.rid]
        return loaded
