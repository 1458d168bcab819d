"""Prefix sharing: pages that identical prefix hashes name hold one KV, shared across sessions.

A trace may name the blocks of a turn's input by prefix-chained hashes (``Turn.prefix_hashes``,
blocks of ``Session.block_tokens`` tokens; block i's hash identifies tokens 0 .. B(i+1) of the input,
as in Mooncake's traces and vLLM's block hashes). The simulator's pages need not be the trace's
blocks, so the hashes are remapped:

- A session's *shared prefix* is the leading pages of its FIRST turn's input that lie wholly inside
  the input's full hashed blocks (a last, partial block is not shared: its tokens change as the
  session goes on). With B trace tokens per block and b per page that is
  ``(min(len(hashes), input // B) * B) // b`` pages.
- Page j's key is (hash of the block that holds its last token, j): that hash fixes every token up
  to the page's end, and j tells the pages of one block apart. Equal keys are equal KV.

The pool is one ``SessionKV`` whose units are the keys' pages, each with a reference count of the
running turns that hold it: a held page is never a candidate, an unheld one is evicted by the
policies like any other page (to the CPU, or dropped). A key first seen is a DROPPED page of the
pool until a turn computes it. A session's own array starts with SHARED placeholders for its prefix
pages, so its page indices, token counts and positions are those of its whole context.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.memory import DROPPED, GPU, TieredMemory
from sim.units import SessionKV
from traces.records import Session

POOL_ID = "<shared prefixes>"


def prefix_keys(session: Session, page_tokens: int) -> list[tuple[int, int]]:
    """The keys of ``session``'s shared-prefix pages (empty when its first turn has no hashes)."""
    first = session.turns[0]
    trace_block = session.block_tokens
    if not first.prefix_hashes or not trace_block:
        return []
    hashes = first.prefix_hashes
    full_blocks = min(len(hashes), first.prompt_tokens // trace_block)
    pages = full_blocks * trace_block // page_tokens
    return [(hashes[((j + 1) * page_tokens - 1) // trace_block], j) for j in range(pages)]


class SharedPrefixes:
    """The pool and each session's pages in it."""

    def __init__(self, mem: TieredMemory, pool_index: int) -> None:
        self.mem = mem
        self.pool = SessionKV(pool_index, POOL_ID, 0)
        self._unit: dict[tuple[int, int], int] = {}  # key -> pool unit index
        self.units: dict[int, np.ndarray] = {}  # session index -> its prefix's pool units

    def register(self, index: int, keys: Sequence[tuple[int, int]]) -> int:
        """Session ``index`` has these prefix keys: name their pool units (a new key gets a DROPPED
        unit). Returns its prefix pages."""
        if not keys:
            return 0
        new = [k for k in dict.fromkeys(keys) if k not in self._unit]
        if new:
            first = self.mem.new_shared_units(self.pool, len(new))
            self._unit.update(zip(new, range(first, first + len(new)), strict=True))
        self.units[index] = np.fromiter(
            (self._unit[k] for k in keys), dtype=np.int64, count=len(keys)
        )
        return len(keys)

    def pages(self, index: int) -> int:
        got = self.units.get(index)
        return 0 if got is None else len(got)

    def counts(self, index: int) -> tuple[int, int, int, int]:
        """(on the GPU, on the CPU, DROPPED, on the GPU and held by no turn) pages of the session's
        prefix: what admitting it finds, must fetch, and will pin."""
        units = self.units.get(index)
        if units is None:
            return 0, 0, 0, 0
        codes = np.frombuffer(self.pool.tier, dtype=np.uint8)[units]
        g, c, d = np.bincount(codes, minlength=3).tolist()  # by Tier: GPU 0, CPU 1, DROPPED 2
        free = 0
        if g:
            assert self.pool.refs is not None  # a shared pool has reference counts
            refs = np.frombuffer(self.pool.refs, dtype=np.uint32)[units]
            free = int(np.count_nonzero((codes == GPU) & (refs == 0)))
        return g, c, d, free

    def hold(self, index: int, now: float) -> None:
        """A turn of the session runs: its prefix pages stop being candidates (before room is
        made for it, so that no eviction takes them)."""
        units = self.units.get(index)
        if units is not None:
            self.pool.last_access_s = now
            self.mem.hold(self.pool, units.tolist(), now)

    def fetch(self, index: int, now: float) -> tuple[int, np.ndarray]:
        """Bring the held prefix to the GPU (room was made): (pages swapped in from the CPU, the
        prefix pages computed now, as page indices of the session)."""
        units = self.units.get(index)
        if units is None:
            return 0, np.empty(0, dtype=np.int64)
        computed = np.flatnonzero(np.frombuffer(self.pool.tier, dtype=np.uint8)[units] == DROPPED)
        swapped = self.mem.bring_shared_to_gpu(self.pool, units, now)
        return len(swapped), computed

    def release(self, index: int, now: float) -> None:
        """The turn finished or was preempted: the last holder makes each page a candidate."""
        units = self.units.get(index)
        if units is not None:
            self.mem.unhold(self.pool, units.tolist(), now)
