"""SIEVE (Zhang et al., NSDI'24), as libCacheSim's Sieve.c.

Units sit in FIFO order of entry and never move. A hit sets the unit's visited bit. A hand sweeps
from the oldest unit towards the newest: a visited unit has its bit cleared and is passed over, the
first unvisited unit is the victim, and the hand stays where the victim was (the next sweep resumes
at the next newer unit). Past the newest unit the hand wraps to the oldest. New units enter at the
newest end with the bit clear, so the hand reaches them in this sweep if it has not finished it.

Implementation: the sweep order is the entry sequence number; units the hand has not yet passed in
this sweep are in the ``ahead`` heap, those it has passed (bit cleared) in ``behind``. Wrapping makes
``behind`` the new ``ahead``. Each unit is passed at most once per sweep, so a victim costs
O(log n) amortised; there is no scan. ``victim`` clears the bits it passes (as libCacheSim's eviction
does) but removes nothing; asked twice it names the same unit. When the unit the hand points at
leaves and nothing newer is left, the hand wraps at once (libCacheSim's pointer becomes NULL), so
units that enter later are swept after the older ones.

Pins: a pinned unit leaves the sweep but keeps its place and its bit; on unpin it returns to its
place: ahead of the hand if the hand has not passed that place in this sweep, behind it otherwise.
"""
from __future__ import annotations

import heapq

from sim.policies._lazy_heap import first_live
from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


@register("sieve")
class Sieve(EvictionPolicy):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._ahead: list[tuple[int, int, object]] = []   # (seq, token, unit), not yet passed
        self._behind: list[tuple[int, int, object]] = []  # passed in this sweep
        self._live: dict[int, list] = {}                  # key -> [seq, token, round] of candidates
        self._visited: dict[int, bool] = {}               # every member, pinned or not
        self._pinned_seq: dict[int, int] = {}
        self._round = 0          # entries of ``ahead`` carry this round, of ``behind`` round + 1
        self._hand = -1          # seq of the last unit the hand passed in this sweep
        self._n_ahead = 0
        self._n_behind = 0
        self._seq = 0
        self._tok = 0

    # -- membership ------------------------------------------------------------------------------
    def insert(self, unit, now: float) -> None:
        self._visited[unit.key] = False
        self._seq += 1
        if unit.pinned:
            self._pinned_seq[unit.key] = self._seq
        else:
            self._enter(unit, self._seq)

    def access(self, unit, now: float) -> None:
        if unit.key in self._visited:
            self._visited[unit.key] = True

    def pin(self, unit) -> None:
        e = self._leave(unit.key)
        if e is not None:
            self._pinned_seq[unit.key] = e[0]

    def unpin(self, unit, now: float) -> None:
        seq = self._pinned_seq.pop(unit.key, None)
        if seq is None:
            self.insert(unit, now)
            return
        self._enter(unit, seq)

    def remove(self, unit) -> None:
        key = unit.key
        e = self._live.get(key)
        if e is not None and e[2] == self._round and self._top() is unit:
            self._hand = e[0]    # the hand stays where the victim was
        if self._leave(key) is None:
            self._pinned_seq.pop(key, None)
        self._visited.pop(key, None)

    def _add(self, unit, now: float) -> None:
        self.insert(unit, now)

    def _discard(self, unit) -> None:
        self.remove(unit)

    # -- the sweep -------------------------------------------------------------------------------
    def _enter(self, unit, seq: int) -> None:
        self._tok += 1
        if seq > self._hand:
            self._live[unit.key] = [seq, self._tok, self._round]
            heapq.heappush(self._ahead, (seq, self._tok, unit))
            self._n_ahead += 1
        else:
            self._live[unit.key] = [seq, self._tok, self._round + 1]
            heapq.heappush(self._behind, (seq, self._tok, unit))
            self._n_behind += 1
        if len(self._ahead) + len(self._behind) > 2 * len(self._live) + 64:
            self._compact()

    def _leave(self, key: int):
        e = self._live.pop(key, None)
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

    def _top(self):
        return first_live(self._ahead, self._live)

    def _compact(self) -> None:
        ahead, behind = [], []
        units = {}
        for heap in (self._ahead, self._behind):
            for seq, tok, unit in heap:
                units[unit.key] = unit
        for key, (seq, tok, rnd) in self._live.items():
            (ahead if rnd == self._round else behind).append((seq, tok, units[key]))
        heapq.heapify(ahead)
        heapq.heapify(behind)
        self._ahead, self._behind = ahead, behind

    def victim(self, now: float):
        visited = self._visited
        while True:
            if self._n_ahead == 0:
                if self._n_behind == 0:
                    return None
                self._wrap()
            unit = self._top()
            if not visited[unit.key]:
                return unit
            visited[unit.key] = False               # passed over: to the next sweep
            seq, _, _ = heapq.heappop(self._ahead)
            self._hand = seq
            self._n_ahead -= 1
            self._tok += 1
            self._live[unit.key] = [seq, self._tok, self._round + 1]
            heapq.heappush(self._behind, (seq, self._tok, unit))
            self._n_behind += 1

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, unit) -> bool:
        return unit.key in self._live
