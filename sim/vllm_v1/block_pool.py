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

The free queue is an ``OrderedDict`` (block -> None): O(1) pop at the head, append at the tail,
move to the head, and removal from the middle, in C.

``PolicyBlockPool`` hands the choice among free *cached* blocks to a kvsim eviction policy: what
vLLM would do with ARC, S3-FIFO or a Pensieve value in its prefix cache. Free blocks without a key
are still reused first, so with ``lru`` it makes vLLM's choices exactly.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence

from sim.cachesim import ObjectView
from sim.samples import Samples

Key = Hashable


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"a block pool needs >= 2 blocks (block 0 is reserved), got {num_blocks}"
            )
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.key: list[Key | None] = [None] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self.cached: dict[Key, dict[int, None]] = {}  # key -> its blocks, in caching order
        self.evictions = 0  # cached blocks whose key was dropped to reuse them
        # wall time of each allocation that evicted (the values of a sim.samples.Samples)
        self.evict_samples = Samples(typecode="q")
        self.evict_ns = self.evict_samples.values
        self.num_free_cached = 0  # free blocks that still hold a key (the prefix cache's spare)

    @property
    def num_free(self) -> int:
        return len(self.free)

    def lookup(self, key: Key) -> int | None:
        """The first block cached under ``key``, or None."""
        blocks = self.cached.get(key)
        return next(iter(blocks)) if blocks else None

    def allocate(self, n: int, now: float = 0.0) -> list[int]:
        """``n`` blocks from the queue's head, each with one holder and no key."""
        if n > len(self.free):
            raise ValueError(f"cannot take {n} blocks: {len(self.free)} free")
        out = []
        pop, key, ref, cached = self.free.popitem, self.key, self.ref_cnt, self.cached
        t0 = evicted = 0
        for _ in range(n):
            block = pop(last=False)[0]
            k = key[block]
            if k is not None:  # _uncache, inline: the hot path of a cache under pressure
                t0 = t0 or time.perf_counter_ns()
                evicted += 1
                holders = cached[k]
                del holders[block]
                if not holders:
                    del cached[k]
                key[block] = None
            ref[block] = 1
            out.append(block)
        if t0:
            self.num_free_cached -= evicted
            self.evictions += evicted
            self.evict_ns.append(time.perf_counter_ns() - t0)
        return out

    def touch(self, blocks: Sequence[int], now: float = 0.0) -> None:
        """A hit: one more holder for each block, taken out of the free queue if it was there."""
        ref, free = self.ref_cnt, self.free
        for block in blocks:
            if ref[block] == 0:
                del free[block]
                self.num_free_cached -= 1  # only a keyed block is hit
            ref[block] += 1

    def release(self, ordered: Iterable[int], now: float = 0.0) -> None:
        """One holder fewer for each block; blocks left with none rejoin the queue, keyed ones at
        the tail in this order, unkeyed ones at the head in this order (the first at the head)."""
        ref, key = self.ref_cnt, self.key
        first: list[int] = []
        last: list[int] = []
        for block in ordered:
            ref[block] -= 1
            if ref[block] == 0:
                (first if key[block] is None else last).append(block)
        free = self.free
        for block in reversed(first):
            free[block] = None
            free.move_to_end(block, last=False)
        for block in last:
            free[block] = None
        self.num_free_cached += len(last)

    def cache(self, block: int, key: Key, index: int = 0, now: float = 0.0) -> None:
        """``block`` now holds the content ``key`` names (vLLM caches a block when it is allocated
        for tokens being scheduled, before they are computed)."""
        if self.key[block] == key:
            return
        if self.key[block] is not None:  # vLLM lets a block carry more keys (partial blocks)
            raise AssertionError(f"block {block} holds {self.key[block]!r}, not {key!r}")
        self.key[block] = key
        self.cached.setdefault(key, {})[block] = None

    def cache_blocks(
        self, blocks: list[int], first: int, keys: Sequence[Key], now: float = 0.0
    ) -> None:
        """``cache(blocks[first + i], keys[i], first + i, now)`` for each key, in order."""
        key_of, cached = self.key, self.cached
        for block, k in zip(blocks[first : first + len(keys)], keys, strict=True):
            old = key_of[block]
            if old == k:
                continue
            if old is not None:
                raise AssertionError(f"block {block} holds {old!r}, not {k!r}")
            key_of[block] = k
            holders = cached.get(k)
            if holders is None:
                cached[k] = {block: None}
            else:
                holders[block] = None

    def _uncache(self, block: int) -> None:
        key = self.key[block]
        holders = self.cached[key]
        del holders[block]
        if not holders:
            del self.cached[key]
        self.key[block] = None
        self.evictions += 1


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

    def __init__(self, num_blocks: int, policy, view: BlockView) -> None:
        super().__init__(num_blocks)
        self.policy = policy
        self.view = view
        self.uid_of = [-1] * num_blocks  # block -> the uid of its content (-1: no key)
        self.block_of: dict[int, int] = {}  # uid -> block, for contents cached now
        self.content: dict[Key, int] = {}  # key -> its uid, for every key ever cached

    @property
    def num_free(self) -> int:
        return len(self.free) + self.num_free_cached

    def allocate(self, n: int, now: float = 0.0) -> list[int]:
        if n > self.num_free:
            raise ValueError(f"cannot take {n} blocks: {self.num_free} free")
        free, ref = self.free, self.ref_cnt
        out = []
        t0 = 0
        for _ in range(n):
            if free:
                block = free.popitem(last=False)[0]
            else:
                t0 = t0 or time.perf_counter_ns()
                uid = self.policy.evict(now)
                block = self.block_of.pop(uid)
                self.num_free_cached -= 1
                self.uid_of[block] = -1
                self._uncache(block)
            ref[block] = 1
            out.append(block)
        if t0:
            self.evict_ns.append(time.perf_counter_ns() - t0)
        return out

    def touch(self, blocks: Sequence[int], now: float = 0.0) -> None:
        ref, uid_of, pol, last = self.ref_cnt, self.uid_of, self.policy, self.view.last
        for block in blocks:
            uid = uid_of[block]
            pol.access(uid, now)
            last[uid] = now
            if ref[block] == 0:
                pol.pin(uid)
                self.num_free_cached -= 1
            ref[block] += 1

    def release(self, ordered: Iterable[int], now: float = 0.0) -> None:
        ref, uid_of, pol, last = self.ref_cnt, self.uid_of, self.policy, self.view.last
        first: list[int] = []
        for block in ordered:
            ref[block] -= 1
            if ref[block] == 0:
                uid = uid_of[block]
                if uid < 0:
                    first.append(block)
                else:
                    last[uid] = now
                    pol.unpin(uid, now)
                    self.num_free_cached += 1
        free = self.free
        for block in reversed(first):
            free[block] = None
            free.move_to_end(block, last=False)

    def cache_blocks(
        self, blocks: list[int], first: int, keys: Sequence[Key], now: float = 0.0
    ) -> None:
        for j, k in enumerate(keys, first):
            self.cache(blocks[j], k, j, now)

    def cache(self, block: int, key: Key, index: int = 0, now: float = 0.0) -> None:
        if self.key[block] == key:
            return
        super().cache(block, key, index, now)
        uid = self.content.setdefault(key, len(self.content))
        if uid in self.block_of:  # a second block with the same content: a content of its own
            uid = self.content[("copy", block, len(self.content))] = len(self.content)
        self.uid_of[block] = uid
        self.block_of[uid] = block
        self.view.index[uid] = index
        self.view.last[uid] = now
        self.policy.insert(uid, now, pinned=True)
