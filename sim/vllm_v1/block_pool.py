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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence

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

    @property
    def num_free(self) -> int:
        return len(self.free)

    def lookup(self, key: Key) -> int | None:
        """The first block cached under ``key``, or None."""
        blocks = self.cached.get(key)
        return next(iter(blocks)) if blocks else None

    def allocate(self, n: int) -> list[int]:
        """``n`` blocks from the queue's head, each with one holder and no key."""
        if n > len(self.free):
            raise ValueError(f"cannot take {n} blocks: {len(self.free)} free")
        out = []
        pop, key, ref = self.free.popitem, self.key, self.ref_cnt
        for _ in range(n):
            block = pop(last=False)[0]
            if key[block] is not None:
                self._uncache(block)
            ref[block] = 1
            out.append(block)
        return out

    def touch(self, blocks: Sequence[int]) -> None:
        """A hit: one more holder for each block, taken out of the free queue if it was there."""
        ref, free = self.ref_cnt, self.free
        for block in blocks:
            if ref[block] == 0:
                del free[block]
            ref[block] += 1

    def release(self, ordered: Iterable[int]) -> None:
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

    def cache(self, block: int, key: Key) -> None:
        """``block`` now holds the content ``key`` names (vLLM caches a block when it is allocated
        for tokens being scheduled, before they are computed)."""
        if self.key[block] == key:
            return
        if self.key[block] is not None:  # vLLM lets a block carry more keys (partial blocks)
            raise AssertionError(f"block {block} holds {self.key[block]!r}, not {key!r}")
        self.key[block] = key
        self.cached.setdefault(key, {})[block] = None

    def _uncache(self, block: int) -> None:
        key = self.key[block]
        holders = self.cached[key]
        del holders[block]
        if not holders:
            del self.cached[key]
        self.key[block] = None
        self.evictions += 1
