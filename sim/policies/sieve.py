"""SIEVE (Zhang et al., NSDI'24), as libCacheSim's Sieve.c.

Units sit in FIFO order of entry and never move. A hit sets the unit's visited bit. A hand sweeps
from the oldest unit towards the newest: a visited unit has its bit cleared and is passed over, the
first unvisited unit is the victim, and the hand stays where the victim was (the next sweep resumes
at the next newer unit). Past the newest unit the hand wraps to the oldest. New units enter at the
newest end with the bit clear, so the hand reaches them in this sweep if it has not finished it.

Implementation: the sweep order is the entry sequence number; units the hand has not yet passed in
this sweep are in the ``ahead`` heap, those it has passed (bit cleared) in ``behind``. Wrapping makes
``behind`` the new ``ahead``. Each unit is passed at most once per sweep, so a victim costs
O(log n) amortised; there is no scan. ``evict`` clears the bits it passes (as libCacheSim's eviction
does) and takes the victim; ``peek`` is that sweep on a copy (pure, O(n): only tests and users
peek). When the unit the hand points at leaves and nothing newer is left, the hand wraps at once
(libCacheSim's pointer becomes NULL), so units that enter later are swept after the older ones.

Pins: a pinned unit leaves the sweep but keeps its place and its bit; on unpin it returns to its
place: ahead of the hand if the hand has not passed that place in this sweep, behind it otherwise.
"""
from __future__ import annotations

import heapq

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


@register("sieve")
class Sieve(EvictionPolicy):
    reads_last_access = False

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._ahead: list[tuple[int, int, int]] = []      # (seq, token, uid), not yet passed
        self._behind: list[tuple[int, int, int]] = []     # passed in this sweep
        self._live: dict[int, list] = {}                  # uid -> [seq, token, round] of candidates
        self._visited: dict[int, bool] = {}               # every member, pinned or not
        self._pinned_seq: dict[int, int] = {}
        self._round = 0          # entries of ``ahead`` carry this round, of ``behind`` round + 1
        self._hand = -1          # seq of the last unit the hand passed in this sweep
        self._n_ahead = 0
        self._n_behind = 0
        self._seq = 0
        self._tok = 0

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
        e = self._leave(uid)
        if e is not None:
            self._pinned_seq[uid] = e[0]

    def unpin(self, uid: int, now: float) -> None:
        seq = self._pinned_seq.pop(uid, None)
        if seq is None:
            self.insert(uid, now)
            return
        self._enter(uid, seq)

    def remove(self, uid: int, pinned: bool = False) -> None:
        e = self._live.get(uid)
        if e is not None and e[2] == self._round and self._top() == uid:
            self._hand = e[0]    # the hand stays where the unit it points at was
        if self._leave(uid) is None:
            self._pinned_seq.pop(uid, None)
        self._visited.pop(uid, None)

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    # -- the sweep -------------------------------------------------------------------------------
    def _enter(self, uid: int, seq: int) -> None:
        self._tok += 1
        if seq > self._hand:
            self._live[uid] = [seq, self._tok, self._round]
            heapq.heappush(self._ahead, (seq, self._tok, uid))
            self._n_ahead += 1
        else:
            self._live[uid] = [seq, self._tok, self._round + 1]
            heapq.heappush(self._behind, (seq, self._tok, uid))
            self._n_behind += 1
        if len(self._ahead) + len(self._behind) > 2 * len(self._live) + 64:
            self._compact()

    def _leave(self, uid: int):
        e = self._live.pop(uid, None)
        if e is None:
            return None
        if e[2] == self._round:
            self._n_ahead -= 1
            if self._n_ahead == 0:
                self._wrap()
        else:
            self._n_behind -= 1
        return e

    def _wrap(self) -> None:
        """The hand went past the newest unit: the next sweep starts at the oldest."""
        self._round += 1
        self._ahead, self._behind = self._behind, []
        self._n_ahead, self._n_behind = self._n_behind, 0
        self._hand = -1

    def _top(self) -> int | None:
        """The unit the hand reaches next (stale heap entries are dropped on the way)."""
        heap, live = self._ahead, self._live
        while heap:
            seq, tok, uid = heap[0]
            e = live.get(uid)
            if e is not None and e[1] == tok:
                return uid
            heapq.heappop(heap)
        return None

    def _compact(self) -> None:
        ahead, behind = [], []
        for uid, (seq, tok, rnd) in self._live.items():
            (ahead if rnd == self._round else behind).append((seq, tok, uid))
        heapq.heapify(ahead)
        heapq.heapify(behind)
        self._ahead, self._behind = ahead, behind

    def peek(self, now: float) -> int | None:
        return self._peek_by_dry_run(now)

    def evict(self, now: float) -> int | None:
        visited = self._visited
        while True:
            if self._n_ahead == 0:
                if self._n_behind == 0:
                    return None
                self._wrap()
            uid = self._top()
            if not visited[uid]:
                self.remove(uid)                    # the hand stays where the victim was
                return uid
            visited[uid] = False                    # passed over: to the next sweep
            seq, _, _ = heapq.heappop(self._ahead)
            self._hand = seq
            self._n_ahead -= 1
            self._tok += 1
            self._live[uid] = [seq, self._tok, self._round + 1]
            heapq.heappush(self._behind, (seq, self._tok, uid))
            self._n_behind += 1

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, uid: int) -> bool:
        return uid in self._live
