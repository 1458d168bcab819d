"""FIFO: evict the unit that entered this tier first; uses and pins do not reorder it.

The key is the order of entry into the tier (``insert``), remembered while the unit is in the tier,
pinned or not, so a unit that is pinned and released keeps its place (``EntryOrder``: O(1) for
units never pinned since they entered, O(log n) for those that come back).
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy, ReplayHooks
from sim.policies.registry import register
from sim.policies.structures import EntryOrder


@register("fifo")
class FIFO(EvictionPolicy):
    reads_last_access = False
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._order = EntryOrder()
        self._seq: dict[int, int] = {}  # uid -> entry order, for every member
        self._n = 0

    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._n += 1
        self._seq[uid] = self._n
        if not pinned:
            self._order.push_new(uid, self._n)

    def remove(self, uid: int, pinned: bool = False) -> None:
        self._seq.pop(uid, None)
        self._order.discard(uid)

    def _add(self, uid: int, now: float) -> None:
        seq = self._seq.get(uid)
        if seq is None:  # a member the policy never saw enter (adapters)
            self.insert(uid, now)
        else:
            self._order.push_back(uid, seq)

    def release(self, uids, now: float) -> None:
        seq = self._seq
        self._order.push_back_many([(uid, seq[uid]) for uid in uids])

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes:
            return super().evict_bytes(nbytes, now)
        order, seq = self._order, self._seq
        out = []
        for _ in range(min(len(order), -(-nbytes // unit_bytes))):
            uid = order.pop_first()
            del seq[uid]
            out.append(uid)
        return out

    def _discard(self, uid: int) -> None:
        self._order.discard(uid)

    def _evicted(self, uid: int) -> None:
        self._order.discard(uid)
        del self._seq[uid]

    def take_in(self, uids, free_bytes: int, now: float) -> list[int]:
        unit_bytes = self.view.unit_bytes
        if not unit_bytes:
            return super().take_in(uids, free_bytes, now)
        # New entries come last in the queue, so inserting all and then evicting the first is the
        # interleaved evict/insert.
        for uid in uids:
            self.insert(uid, now)
        n = max(0, len(uids) - free_bytes // unit_bytes)
        return [self.evict(now) for _ in range(n)]

    def peek(self, now: float) -> int | None:
        return self._order.min()

    def replay_hooks(self) -> ReplayHooks:
        members, push, pop_oldest = self._order.replay_view()
        return ReplayHooks(members=members, on_hit=None, insert=push, evict=pop_oldest)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, uid: int) -> bool:
        return uid in self._order
