"""vLLM v1's block pool: fixed blocks, a free queue that doubles as the prefix cache's eviction
order, and a map from block key (the hash of the context up to and including the block) to the
cached blocks that hold it.

The rules, as vLLM 0.33.0's ``BlockPool`` and ``FreeKVCacheBlockQueue`` apply them:

* blocks are numbered 0..N-1 and start in the free queue in that order; block 0 is taken out for
  good (vLLM's null block), so N-1 blocks serve requests;
* allocation pops blocks from the queue's head; a popped block that still holds a key loses it
  (its cached content is evicted) and is then owned by one request;
* a hit on a cached block *touches* it: one more holder, and out of the free queue if it was in it;
* freeing drops one holder per block; a block with no holder left goes back to the queue, to its
  tail if it holds a key (reused last: least recently freed first, an LRU of freed blocks) and to
  its head if it does not (reused first);
* one key can map to several blocks (two requests that computed the same block); a lookup returns
  the first of them that was cached.

The free queue is a queue of *runs* (``FreeQueue``): a request frees its blocks together and
takes them together, so blocks come and go as lists, each free block with the key it holds (the
caller of ``release`` names them), and no block -> key map is kept. The key -> block map keeps a
session's own keys (``(index << 32) | j``, ``sim.vllm_v1.tokens``) in per-session *chains*, lists
indexed by j, and any other key in a dict: a request's own keys come as a range, so caching its
blocks, the run it frees and evicting a slice of that run are slice operations, not one dict
operation a block. Holder counts are a list indexed by block. The queue's observable order is
vLLM's, block by block.

``PolicyBlockPool`` hands the choice among free *cached* blocks to a kvsim eviction policy: what
vLLM would do with ARC, S3-FIFO or a Pensieve value in its prefix cache. Free blocks without a key
are still reused first, so with ``lru`` it makes vLLM's choices exactly.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import cast

from sim.cachesim import ObjectView
from sim.samples import Samples

Key = Hashable


class FreeQueue:
    """vLLM's ``FreeKVCacheBlockQueue`` as a deque of runs (lists of blocks in queue order, each
    with the keys its blocks hold): blocks join a run at a time (a freed request's, at the tail
    or at the head) and leave from the head in slices, with their keys (the ones to evict). A
    block taken out of the middle (a prefix hit on a free block) stays in its run as a *stale*
    entry, counted in ``pulled`` and skipped when the head reaches it: its live entry, if it is
    freed again, joins the tail, behind every stale one (a hit block holds a key, so it can only
    come back to the tail, and it loses its key only when the head takes it)."""

    def __init__(self, blocks: Iterable[int] = ()) -> None:
        first = list(blocks)
        self.runs: deque[list[int]] = deque([first] if first else [])
        # each run's keys, block by block (None: a block without one; a run of None: none has; a
        # range: a session's own keys, sliced without a copy)
        self.run_keys: deque[Sequence[Key | None] | None] = deque([None] if first else [])
        self.pos = 0  # entries of runs[0] already taken
        self.size = len(first)  # live entries
        self.pulled: dict[int, int] = {}  # block -> its stale entries still queued

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        """The free blocks, head first (for tests and checks: it walks every entry)."""
        return (block for block, _ in self.entries())

    def entries(self) -> Iterator[tuple[int, Key | None]]:
        """The free blocks with their keys, head first."""
        stale = dict(self.pulled)
        for i, (run, keys) in enumerate(zip(self.runs, self.run_keys)):
            start = self.pos if i == 0 else 0
            for j in range(start, len(run)):
                block = run[j]
                if stale.get(block):
                    stale[block] -= 1
                else:
                    yield block, None if keys is None else keys[j]

    def push_back(self, blocks: list[int], keys: Sequence[Key | None] | None = None) -> None:
        """``blocks`` join the tail in this order, holding ``keys`` (None: no key; a list or a
        range). The queue keeps both: pass fresh lists."""
        if blocks:
            self.runs.append(blocks)
            self.run_keys.append(keys)
            self.size += len(blocks)

    def push_front(self, blocks: list[int]) -> None:
        """``blocks`` (no keys) join the head, ``blocks[0]`` first (a fresh list)."""
        if not blocks:
            return
        if self.pulled and not self.pulled.keys().isdisjoint(blocks):
            raise AssertionError("a block with a stale entry cannot rejoin the head before it")
        if self.pos:
            del self.runs[0][: self.pos]
            keys = self.run_keys[0]
            if isinstance(keys, list):
                del keys[: self.pos]
            elif keys is not None:
                self.run_keys[0] = keys[self.pos :]
            self.pos = 0
        self.runs.appendleft(blocks)
        self.run_keys.appendleft(None)
        self.size += len(blocks)

    def remove(self, block: int) -> None:
        """Take ``block`` (free) out of the queue: its entry goes stale where it is."""
        self.pulled[block] = self.pulled.get(block, 0) + 1
        self.size -= 1

    def pop(self) -> tuple[int, Key | None]:
        """The head block and its key."""
        if not self.size:
            raise IndexError("pop from an empty free queue")
        runs, pulled = self.runs, self.pulled
        while True:
            run, keys, i = runs[0], self.run_keys[0], self.pos
            self.pos += 1
            if self.pos == len(run):
                runs.popleft()
                self.run_keys.popleft()
                self.pos = 0
            block = run[i]
            if not pulled or not self._is_stale(block):
                self.size -= 1
                return block, None if keys is None else keys[i]

    def pop_many(self, n: int) -> tuple[list[int], list[Key | None]]:
        """The ``n`` blocks at the head, head first, and their keys."""
        out, parts = self.pop_parts(n)
        out_keys: list[Key | None] = []
        for part in parts:
            out_keys += part
        return out, out_keys

    def pop_parts(self, n: int) -> tuple[list[int], list[Sequence[Key | None]]]:
        """The ``n`` blocks at the head, head first, and their keys in parts (a list, or a range
        of a session's own keys) that follow the blocks in order."""
        if n > self.size:
            raise IndexError(f"cannot take {n} blocks from a free queue of {self.size}")
        runs, run_keys = self.runs, self.run_keys
        out: list[int] = []
        out_keys: list[Sequence[Key | None]] = []
        while len(out) < n:
            run, keys, start = runs[0], run_keys[0], self.pos
            end = start + n - len(out)
            if end >= len(run):  # the whole rest of the run
                end = len(run)
                runs.popleft()
                run_keys.popleft()
                self.pos = 0
            else:
                self.pos = end
            part = run[start:end]
            part_keys = [None] * (end - start) if keys is None else keys[start:end]
            if self.pulled and not self.pulled.keys().isdisjoint(part):
                live = [not self._is_stale(b) for b in part]
                part = [b for b, ok in zip(part, live) if ok]
                part_keys = [k for k, ok in zip(part_keys, live) if ok]
            out += part
            out_keys.append(part_keys)
        self.size -= n
        return out, out_keys

    def _is_stale(self, block: int) -> bool:
        """Whether this entry of ``block`` (reached by the head) is a stale one; it is consumed.
        A block's stale entries all come before its live one."""
        count = self.pulled.get(block, 0)
        if not count:
            return False
        if count == 1:
            del self.pulled[block]
        else:
            self.pulled[block] = count - 1
        return True


# A session's own block key is (index << 32) | j (``sim.vllm_v1.tokens``): the pool keeps such keys
# in per-session chains, lists indexed by j, so that caching, evicting and looking up a request's
# blocks are slice operations; any other key lives in a dict.
_J_BITS = 32
_J_MASK = (1 << _J_BITS) - 1
_CHAIN_LEN = 1 << 24  # positions a chain may reach; a key beyond goes to the dict


def _chain_slot(key: Key) -> tuple[int, int] | None:
    """(chain, position) of a key kept in a chain, or None (a dict key)."""
    if type(key) is int and key >= 0 and key & _J_MASK < _CHAIN_LEN:
        return key >> _J_BITS, key & _J_MASK
    return None


def _chain_span(keys: Sequence[Key]) -> tuple[int, int, int] | None:
    """(chain, first position, end) of a range of consecutive chain keys, ascending or
    descending; None for anything else."""
    if type(keys) is not range or not keys or abs(keys.step) != 1:
        return None
    low = keys[0] if keys.step == 1 else keys[-1]
    slot = _chain_slot(low)
    if slot is None or slot[1] + len(keys) > _CHAIN_LEN:
        return None
    return slot[0], slot[1], slot[1] + len(keys)


class BlockPool:
    # No one hears of a caching or an allocation but the pool: in a span of decode steps the
    # scheduler may take the blocks at once and cache them after (``take_each``).
    caching_commutes = True

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"a block pool needs >= 2 blocks (block 0 is reserved), got {num_blocks}"
            )
        self.num_blocks = num_blocks
        self.free = FreeQueue(range(1, num_blocks))  # a free block's key travels with it
        # block -> its holders (0: free); a list, as a block is taken and freed by the hundred
        self.held = [0] * num_blocks
        # key -> the first block cached under it: session chains (0: none), and a dict
        self.chains: dict[int, list[int]] = {}
        self.cached: dict[Key, int] = {}
        self.more: dict[Key, list[int]] = {}  # key -> its later blocks, in caching order (rare)
        self.evictions = 0  # cached blocks whose key was dropped to reuse them
        # wall time of each allocation that evicted (the values of a sim.samples.Samples)
        self.evict_samples = Samples(typecode="q")
        self.evict_ns = self.evict_samples.values
        self.num_free_cached = 0  # free blocks that still hold a key (the prefix cache's spare)

    @property
    def num_free(self) -> int:
        return self.free.size

    def holders(self, block: int) -> int:
        return self.held[block]

    def count_free(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` are free (a hit on them takes free capacity)."""
        held = self.held
        return sum(1 for block in blocks if not held[block])

    def cached_blocks(self) -> set[int]:
        """The blocks that hold a key, held or free (for tests and checks)."""
        out = set(self.cached.values()).union(*self.more.values(), *self.chains.values())
        out.discard(0)
        return out

    def lookup(self, key: Key) -> int | None:
        """The first block cached under ``key``, or None."""
        slot = _chain_slot(key)
        if slot is None:
            return self.cached.get(key)
        chain = self.chains.get(slot[0])
        if chain is None or slot[1] >= len(chain):
            return None
        return chain[slot[1]] or None

    def cached_prefix(self, keys: Sequence[Key]) -> list[int]:
        """The blocks cached under ``keys``' leading keys, up to the first not cached."""
        span = _chain_span(keys)
        if span is not None and cast(range, keys).step == 1:
            chain = self.chains.get(span[0])
            if chain is None:
                return []
            got = chain[span[1] : span[2]]
            return got[: got.index(0)] if 0 in got else got
        out = []
        for key in keys:
            block = self.lookup(key)
            if block is None:
                break
            out.append(block)
        return out

    def _set(self, key: Key, block: int) -> None:
        """The first block cached under ``key`` is now ``block``."""
        slot = _chain_slot(key)
        if slot is None:
            self.cached[key] = block
            return
        chain = self.chains.setdefault(slot[0], [])
        if slot[1] >= len(chain):
            chain += [0] * (slot[1] + 1 - len(chain))
        chain[slot[1]] = block

    def _unset(self, key: Key) -> None:
        """No block is cached under ``key`` any more."""
        slot = _chain_slot(key)
        if slot is None:
            del self.cached[key]
            return
        idx, j = slot
        chain = self.chains[idx]
        if not chain[j]:
            raise KeyError(key)
        chain[j] = 0
        if j == len(chain) - 1:
            self._trim(idx, chain)

    def _trim(self, idx: int, chain: list[int]) -> None:
        """Drop a chain's trailing empty positions (and the chain, once empty)."""
        while chain and not chain[-1]:
            chain.pop()
        if not chain:
            del self.chains[idx]

    def allocate(self, n: int, now: float = 0.0) -> list[int]:
        """``n`` blocks from the queue's head, each with one holder and no key."""
        if n > self.free.size:
            raise ValueError(f"cannot take {n} blocks: {self.free.size} free")
        if n == 1:  # a decode's new block
            block, key = self.free.pop()
            if key is not None:
                t0 = time.perf_counter_ns()
                self._drop_key(block, key)
                self._evicted(1, t0)
            self.held[block] = 1
            return [block]
        out, parts = self.free.pop_parts(n)
        evicted = _keyed(parts)
        if evicted:
            t0 = time.perf_counter_ns()
            self._drop_keys(out, parts)
            self._evicted(evicted, t0)
        held = self.held
        for block in out:
            held[block] = 1
        return out

    def take_each(self, n: int) -> tuple[list[int], list[bool]]:
        """``n`` allocations of one block each (as ``allocate(1)`` n times, with one eviction
        sample per block that evicted), at once: the blocks, and which ones held a key."""
        if n > self.free.size:
            raise ValueError(f"cannot take {n} blocks: {self.free.size} free")
        out, parts = self.free.pop_parts(n)
        evicted = _keyed(parts)
        if evicted:
            t0 = time.perf_counter_ns()
            self._drop_keys(out, parts)
            self.num_free_cached -= evicted
            self.evictions += evicted
            each = (time.perf_counter_ns() - t0) // evicted
            self.evict_ns.extend([each] * evicted)
        held = self.held
        for block in out:
            held[block] = 1
        held_key: list[bool] = []
        for part in parts:
            held_key += [True] * len(part) if type(part) is range else [k is not None for k in part]
        return out, held_key

    def _evicted(self, n: int, t0: int) -> None:
        self.num_free_cached -= n
        self.evictions += n
        self.evict_ns.append(time.perf_counter_ns() - t0)

    def _drop_keys(self, blocks: list[int], parts: list[Sequence[Key | None]]) -> None:
        """Drop the map entries of ``blocks``, which held the keys of ``parts`` in order (None:
        no key)."""
        at = 0
        for part in parts:
            n = len(part)
            if not self._drop_span(blocks, at, part):
                for block, key in zip(blocks[at : at + n], part):
                    if key is not None:
                        self._drop_key(block, key)
            at += n

    def _drop_span(self, blocks: list[int], at: int, keys: Sequence[Key | None]) -> bool:
        """Drop a range of chain keys, each held by its one block (``blocks[at:]``) at once;
        False (nothing done) for any other part."""
        span = _chain_span(keys)
        if span is None or (self.more and not self.more.keys().isdisjoint(keys)):
            return False
        idx, j0, j1 = span
        chain = self.chains[idx]
        held = blocks[at : at + j1 - j0]
        if cast(range, keys).step < 0:
            held.reverse()
        if chain[j0:j1] != held:
            raise AssertionError(f"chain {idx}: positions {j0}..{j1 - 1} hold other blocks")
        if j1 >= len(chain):
            del chain[j0:]
            self._trim(idx, chain)
        else:
            chain[j0:j1] = [0] * (j1 - j0)
        return True

    def _drop_key(self, block: int, key: Key) -> None:
        """``block`` no longer holds ``key``: the key's next block, if any, is found first now."""
        later = self.more.get(key)
        if later is None:
            self._unset(key)
            return
        if self.lookup(key) == block:
            self._set(key, later.pop(0))
        else:
            later.remove(block)
        if not later:
            del self.more[key]

    def touch(self, blocks: Sequence[int], now: float = 0.0) -> None:
        """A hit: one more holder for each block, taken out of the free queue if it was there."""
        held, free = self.held, self.free
        for block in blocks:
            count = held[block]
            if not count:
                free.remove(block)
                self.num_free_cached -= 1  # only a keyed block is hit
            held[block] = count + 1

    def release(self, ordered: Sequence[int], keys: Sequence[Key | None], now: float = 0.0) -> None:
        """One holder fewer for each block of ``ordered``, which hold ``keys`` (None: no key);
        blocks left with none rejoin the queue, keyed ones at the tail in this order, unkeyed
        ones at the head in this order (the first at the head)."""
        blocks, keys = list(ordered), list(keys)
        if len(keys) != len(blocks):
            raise ValueError(f"{len(keys)} keys for {len(blocks)} blocks")
        self._release_counted(blocks, keys, self._unhold(blocks))

    def free_request(
        self, blocks: list[int], unkeyed: int, parts: Sequence[Sequence[Key]], now: float = 0.0
    ) -> None:
        """``release`` of a request's blocks, tail first: the first ``unkeyed`` hold no key, the
        rest the keys of ``parts`` in order. A part joins the queue's tail as one run, a range
        of keys without a copy. ``blocks`` is the caller's to give."""
        if sum(map(len, parts)) != len(blocks) - unkeyed:
            raise ValueError(f"keys for {len(blocks) - unkeyed} of {len(blocks)} blocks expected")
        counts = self._unhold(blocks)
        if counts.count(1) != len(counts):  # others hold some of them
            keys: list[Key | None] = [None] * unkeyed
            for part in parts:
                keys += part
            self._release_counted(blocks, keys, counts)
            return
        free = self.free
        if unkeyed:
            free.push_front(blocks[:unkeyed])
        at = unkeyed
        for part in parts:
            free.push_back(blocks[at : at + len(part)], part)
            at += len(part)
        self.num_free_cached += len(blocks) - unkeyed

    def _unhold(self, blocks: list[int]) -> list[int]:
        """The blocks' holder counts, each now 0."""
        held = self.held
        counts = list(itemgetter(*blocks)(held)) if len(blocks) > 1 else [held[b] for b in blocks]
        if 0 in counts:
            raise KeyError(f"block {blocks[counts.index(0)]} is not held")
        for block in blocks:
            held[block] = 0
        return counts

    def _release_counted(
        self, blocks: list[int], keys: list[Key | None], counts: list[int]
    ) -> None:
        """The blocks' holder counts were taken (``counts``): queue the ones now free."""
        if counts.count(1) != len(counts):
            blocks, keys = self._still_held(blocks, keys, counts)
        unkeyed = keys.count(None)
        if unkeyed:
            # a request's unkeyed blocks are its last ones: the first freed, a slice
            if keys[:unkeyed].count(None) == unkeyed:
                self.free.push_front(blocks[:unkeyed])
                blocks, keys = blocks[unkeyed:], keys[unkeyed:]
            else:
                self.free.push_front([b for b, k in zip(blocks, keys) if k is None])
                blocks = [b for b, k in zip(blocks, keys) if k is not None]
                keys = [k for k in keys if k is not None]
        self.free.push_back(blocks, keys)
        self.num_free_cached += len(blocks)

    def _still_held(
        self, blocks: list[int], keys: list[Key | None], counts: list[int]
    ) -> tuple[list[int], list[Key | None]]:
        """Give back the holders left to blocks that others hold too; the blocks now free."""
        held = self.held
        out: list[int] = []
        out_keys: list[Key | None] = []
        for block, key, count in zip(blocks, keys, counts):
            if count > 1:
                held[block] = count - 1
            else:
                out.append(block)
                out_keys.append(key)
        return out, out_keys

    def cache(self, block: int, key: Key, index: int = 0, now: float = 0.0) -> None:
        """``block`` now holds the content ``key`` names (vLLM caches a block when it is allocated
        for tokens being scheduled, before they are computed)."""
        slot = _chain_slot(key)
        if slot is not None:  # a session's own key: its chain, inline (a decode's block)
            chain = self.chains.get(slot[0])
            if chain is None:
                chain = self.chains[slot[0]] = []
            j = slot[1]
            if j >= len(chain):
                chain += [0] * (j - len(chain))
                chain.append(block)
                return
            if not chain[j]:
                chain[j] = block
                return
        first = self.lookup(key)
        if first is None:
            self._set(key, block)
        elif first != block and block not in self.more.get(key, ()):
            self.more.setdefault(key, []).append(block)  # two requests computed the same block

    def cache_blocks(
        self, blocks: list[int], first: int, keys: Sequence[Key], now: float = 0.0
    ) -> None:
        """``cache(blocks[first + i], keys[i], first + i, now)`` for each key, in order."""
        targets = blocks[first : first + len(keys)]
        if len(targets) != len(keys):
            raise ValueError(f"{len(keys)} keys for {len(targets)} blocks")
        if len(keys) == 1:  # a decode's block
            self.cache(targets[0], keys[0])
            return
        if self._cache_span(targets, keys):
            return
        cached = self.cached
        if (
            type(keys) is range
            or int in set(map(type, keys))  # chain keys among them
            or not cached.keys().isdisjoint(keys)  # a key cached already
        ):
            for block, key in zip(targets, keys):
                self.cache(block, key)
            return
        before = len(cached)
        cached.update(zip(keys, targets))
        if len(cached) - before < len(keys):  # a key repeated in ``keys``: its first block first
            self._first_block_first(targets, keys)

    def _cache_span(self, blocks: list[int], keys: Sequence[Key]) -> bool:
        """Cache an ascending range of chain keys none of which is cached, as one slice; False
        (nothing done) otherwise."""
        span = _chain_span(keys)
        if span is None or cast(range, keys).step != 1:
            return False
        idx, j0, j1 = span
        chain = self.chains.get(idx)
        if chain is None:
            chain = self.chains[idx] = []
        if len(chain) <= j0:
            chain += [0] * (j0 - len(chain))
            chain += blocks
            return True
        was = chain[j0:j1]
        if was.count(0) != len(was):
            return False
        chain[j0:j1] = blocks
        return True

    def _first_block_first(self, blocks: list[int], keys: Sequence[Key]) -> None:
        """``keys`` (new to the map) held a key more than once: the map names its first block, the
        later ones are its other blocks."""
        first: dict[Key, int] = {}
        for block, key in zip(blocks, keys):
            if key in first:
                self.more.setdefault(key, []).append(block)
            else:
                first[key] = block
        self.cached.update(first)


def _keyed(parts: Sequence[Sequence[Key | None]]) -> int:
    """How many keys ``parts`` hold (None: no key)."""
    return sum(len(p) if type(p) is range else len(p) - p.count(None) for p in parts)


class BlockView(ObjectView):
    """What a policy may know about a cached block (``sim.policies.base``): as an object of a
    cache (``ObjectView``: its last use in ``last``), of size 1, at position j in its sequence. A
    block at position j stands for a session whose context reaches its end, so cost-aware policies
    (Pensieve) price recomputing it as a chunk of ``block_size`` tokens after ``j * block_size``."""

    def __init__(self, block_size: int) -> None:
        super().__init__(unit_bytes=1)
        self.bs = block_size
        self.index: dict[int, int] = {}  # uid -> position in its sequence

    def size(self, uid: int) -> int:
        return 1

    def session(self, uid: int) -> _Context:
        return _Context((self.index[uid] + 1) * self.bs)

    def first_page(self, uid: int) -> int:
        return self.index[uid]

    def next_access_s(self, uid: int) -> float:
        raise ValueError("no offline policy inside vLLM's prefix cache: the future is not known")


class _Context:
    """The context a block's recompute would attend to: the tokens through its end."""

    __slots__ = ("tokens",)

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def pages(self, block_size: int) -> int:
        return -(-self.tokens // block_size)


class PolicyBlockPool(BlockPool):
    """A block pool whose free cached blocks are ordered by an eviction policy.

    The policy's units are cached *contents*, not physical blocks: a content keeps its id when it
    leaves the cache and comes back (ghost lists recognise it). It hears of a content when a block
    is cached (``insert``, pinned: a request holds the block), of each hit (``access``, and ``pin``
    when the block was free), and of each block freed with its content (``unpin``); allocation
    takes the free blocks without a key first (vLLM's head of queue), then asks the policy for a
    victim."""

    caching_commutes = False  # the policy hears of each, in order

    def __init__(self, num_blocks: int, policy, view: BlockView) -> None:
        super().__init__(num_blocks)
        self.policy = policy
        self.view = view
        self.uid_of = [-1] * num_blocks  # block -> the uid of its content (-1: no key)
        self.block_of: dict[int, int] = {}  # uid -> block, for contents cached now
        self.content: dict[Key, int] = {}  # key -> its uid, for every key ever cached
        self.key_of: dict[int, Key] = {}  # block -> its key (its free queue holds no keyed block)

    @property
    def num_free(self) -> int:
        return self.free.size + self.num_free_cached  # its queue holds the unkeyed ones only

    def allocate(self, n: int, now: float = 0.0) -> list[int]:
        if n > self.num_free:
            raise ValueError(f"cannot take {n} blocks: {self.num_free} free")
        free, held = self.free, self.held
        out = []
        t0 = 0
        for _ in range(n):
            if free.size:
                block, _ = free.pop()
            else:
                t0 = t0 or time.perf_counter_ns()
                uid = self.policy.evict(now)
                block = self.block_of.pop(uid)
                self.num_free_cached -= 1
                self.uid_of[block] = -1
                self._uncache(block)
            held[block] = 1
            out.append(block)
        if t0:
            self.evict_ns.append(time.perf_counter_ns() - t0)
        return out

    def touch(self, blocks: Sequence[int], now: float = 0.0) -> None:
        held, uid_of, pol, last = self.held, self.uid_of, self.policy, self.view.last
        for block in blocks:
            uid = uid_of[block]
            pol.access(uid, now)
            last[uid] = now
            count = held[block]
            if not count:
                pol.pin(uid)
                self.num_free_cached -= 1
            held[block] = count + 1

    def release(self, ordered: Sequence[int], keys: Sequence[Key | None], now: float = 0.0) -> None:
        held, uid_of, pol, last = self.held, self.uid_of, self.policy, self.view.last
        first: list[int] = []
        for block in ordered:
            count = held[block]
            if not count:
                raise KeyError(f"block {block} is not held")
            held[block] = count - 1
            if count > 1:
                continue
            uid = uid_of[block]
            if uid < 0:
                first.append(block)
            else:
                last[uid] = now
                pol.unpin(uid, now)
                self.num_free_cached += 1
        self.free.push_front(first)

    def free_request(
        self, blocks: list[int], unkeyed: int, parts: Sequence[Sequence[Key]], now: float = 0.0
    ) -> None:
        self.release(blocks, (), now)  # its queue holds no key

    def cache_blocks(
        self, blocks: list[int], first: int, keys: Sequence[Key], now: float = 0.0
    ) -> None:
        for j, k in enumerate(keys, first):
            self.cache(blocks[j], k, j, now)

    def cache(self, block: int, key: Key, index: int = 0, now: float = 0.0) -> None:
        old = self.key_of.get(block)
        if old == key:
            return
        if old is not None:  # vLLM lets a block carry more keys (partial blocks)
            raise AssertionError(f"block {block} holds {old!r}, not {key!r}")
        self.key_of[block] = key
        super().cache(block, key, index, now)
        uid = self.content.setdefault(key, len(self.content))
        if uid in self.block_of:  # a second block with the same content: a content of its own
            uid = self.content[("copy", block, len(self.content))] = len(self.content)
        self.uid_of[block] = uid
        self.block_of[uid] = block
        self.view.index[uid] = index
        self.view.last[uid] = now
        self.policy.insert(uid, now, pinned=True)

    def _uncache(self, block: int) -> None:
        self._drop_key(block, self.key_of.pop(block))
        self.evictions += 1
