"""SIEVE (Zhang et al., NSDI'24), as libCacheSim's Sieve.c.

Units sit in FIFO order of entry and never move. A hit sets the unit's visited bit. A hand sweeps
from the oldest unit towards the newest: a visited unit has its bit cleared and is passed over, the
first unvisited unit is the victim, and the hand stays where the victim was (the next sweep resumes
at the next newer unit). Past the newest unit the hand wraps to the oldest. New units enter at the
newest end with the bit clear, so the hand reaches them in this sweep if it has not finished it.

Implementation: the sweep order is the entry sequence number; units the hand has not yet passed in
this sweep are in the ``ahead`` ``LazyHeap``, those it has passed (bit cleared) in ``behind``, both
keyed by sequence number. Wrapping makes ``behind`` the new ``ahead``. Each unit is passed at most
once per sweep, so a victim costs O(log n) amortised; there is no scan. ``evict`` clears the bits it
passes (as libCacheSim's eviction does) and takes the victim; ``peek`` is that sweep on a copy
(pure, O(n): only tests and users peek). When the unit the hand points at leaves and nothing newer
is left, the hand wraps at once (libCacheSim's pointer becomes NULL), so units that enter later are
swept after the older ones.

Pins: a pinned unit leaves the sweep but keeps its place and its bit; on unpin it returns to its
place: ahead of the hand if the hand has not passed that place in this sweep, behind it otherwise.
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import LazyHeap


@register("sieve")
class Sieve(EvictionPolicy):
    reads_last_access = False
    # pins keep their entry number; evictions assign none: a batch of pages equals them one by one
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._ahead = LazyHeap()  # candidates the hand has not passed, by seq
        self._behind = LazyHeap()  # candidates passed in this sweep, by seq
        self._visited: dict[int, bool] = {}  # every member, pinned or not
        self._pinned_seq: dict[int, int] = {}
        self._hand = -1  # seq of the last unit the hand passed in this sweep
        self._seq = 0

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        self._visited[uid] = False
        self._seq += 1
        if pinned:
            self._pinned_seq[uid] = self._seq
        else:
            self._enter(uid, self._seq)

    def access(self, uid: int, now: float) -> None:
        if uid in self._visited:
            self._visited[uid] = True

    def pin(self, uid: int) -> None:
        seq = self._leave(uid)
        if seq is not None:
            self._pinned_seq[uid] = seq

    def unpin(self, uid: int, now: float) -> None:
        seq = self._pinned_seq.pop(uid, None)
        if seq is None:
            self.insert(uid, now)
            return
        self._enter(uid, seq)

    def remove(self, uid: int, pinned: bool = False) -> None:
        if self._ahead.min() == uid:
            self._hand = self._ahead.key(uid)  # the hand stays where the unit it points at was
        if self._leave(uid) is None:
            self._pinned_seq.pop(uid, None)
        self._visited.pop(uid, None)

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    # -- the sweep -------------------------------------------------------------------------------
    def _enter(self, uid: int, seq: int) -> None:
        (self._ahead if seq > self._hand else self._behind).push(uid, seq)

    def _leave(self, uid: int) -> int | None:
        seq = self._ahead.key(uid)
        if seq is not None:
            self._ahead.discard(uid)
            if not self._ahead:
                self._wrap()
            return seq
        seq = self._behind.key(uid)
        if seq is not None:
            self._behind.discard(uid)
        return seq

    def _wrap(self) -> None:
        """The hand went past the newest unit: the next sweep starts at the oldest."""
        self._ahead, self._behind = self._behind, LazyHeap()
        self._hand = -1

    def peek(self, now: float) -> int | None:
        return self._peek_by_dry_run(now)

    def evict(self, now: float) -> int | None:
        visited, ahead = self._visited, self._ahead
        while True:
            if not ahead:
                if not self._behind:
                    return None
                self._wrap()
                ahead = self._ahead
            uid = ahead.min()
            if not visited[uid]:
                self.remove(uid)  # the hand stays where the victim was
                return uid
            visited[uid] = False  # passed over: to the next sweep
            seq = ahead.key(uid)
            ahead.discard(uid)
            self._hand = seq
            self._behind.push(uid, seq)

    def __len__(self) -> int:
        return len(self._ahead) + len(self._behind)

    def __contains__(self, uid: int) -> bool:
        return uid in self._ahead or uid in self._behind
