"""LRU: evict the unit whose last use is oldest.

Units are appended when they become candidates, i.e. when their turn releases them, and moved to
the end on a hit, so the order is last-use order. The order is a ``RunQueue``: a session's pages
released together are one run, so a release, an eviction of many pages and a whole session's pin
are O(runs), not O(pages) (vLLM v1's free-block queue is the per-block form of the same list).
Demotions into the CPU tier arrive in last-use order too (the GPU instance hands them over oldest
first).
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy, ReplayHooks
from sim.policies.registry import register
from sim.policies.structures import RunQueue


@register("lru")
class LRU(EvictionPolicy):
    reads_last_access = False
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._q = RunQueue()

    def _add(self, uid: int, now: float) -> None:
        self._q.push(uid)

    def access(self, uid: int, now: float) -> None:
        if self._q.discard(uid):
            self._q.push(uid)

    def acquire(self, uids, now: float) -> None:
        # access (move to the end) then pin (remove) is just a removal
        q = self._q
        if len(uids) > 1 and q.holds_exactly(uids):
            q.discard_bucket(q.bucket(uids[0]))  # a whole session: its runs, not its pages
            return
        for uid in uids:
            q.discard(uid)

    def release(self, uids, now: float) -> None:
        self._q.extend(uids)  # absent while pinned: appended at the end

    def _discard(self, uid: int) -> None:
        self._q.discard(uid)

    def peek(self, now: float) -> int | None:
        return self._q.first()

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is not None:  # equal sizes: one count, runs at a time
            return self._q.pop(n)
        return super().evict_bytes(nbytes, now)

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if n is not None:
            return self._q.pop_runs(n)
        return super().evict_extents(nbytes, now)

    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes:
            return super().take_in(uids, free_bytes, now)
        # Appending all, then popping the oldest, is the interleaved evict/insert of a queue.
        self._q.extend(uids)
        return self._q.pop(max(0, len(uids) - free_bytes // unit_bytes))

    def take_in_extents(self, extents, free_bytes: int, now: float) -> list[tuple[int, int]]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes:
            return super().take_in_extents(extents, free_bytes, now)
        q, n = self._q, 0
        for a, b in extents:
            q.push_run(a, b)
            n += b - a
        return q.pop_runs(max(0, n - free_bytes // unit_bytes))

    def replay_hooks(self) -> ReplayHooks:
        members, move_to_newest, push, pop_oldest = self._q.replay_view()
        return ReplayHooks(members=members, on_hit=move_to_newest, insert=push, evict=pop_oldest)

    def __len__(self) -> int:
        return len(self._q)

    def __contains__(self, uid: int) -> bool:
        return uid in self._q
