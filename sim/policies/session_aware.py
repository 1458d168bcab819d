"""session-aware: evict whole idle sessions, the longest-idle first, tail pages before head pages.

Sessions are ranked by their most recent use in this tier, a_s = max over the session's candidate
units of their last use (``unit.last_access_s`` when it became a candidate, ``now`` on a hit): the
session idle longest goes first (ties: lower ``SessionKV.index``, the trace order). Once chosen, a
session keeps being chosen until none of its units is left in this tier -- it does not become
"fresher" by losing pages -- so the engine's repeated ``victim``/``remove`` calls empty it whole
before touching the next (unless the engine needs less room). Within a session: the highest page
first (a tail page is the cheapest to lose: recomputing it needs the head anyway, and dropping the
head first would make the whole tail unusable without recompute of the head), then the back layer
first, then the higher unit key.

Why "longest idle" rather than "lowest expected reuse per byte": it needs no model and no size
trade-off, and within a multi-turn trace idle time is the strongest single signal of an abandoned
conversation (``predictive`` is the model-based alternative). An object without a session
(``kvsim cachesim``) is its own session, so objects rank by idle time (LRU).

O(log S + log u) per operation: a heap of sessions keyed (a_s, index) and, per session, a heap of
its units keyed (-first_page, -layer, -key); both with lazy deletion and compaction. A session's
a_s can only change while it gains units (the max over a multiset of times, kept as counts).
"""
from __future__ import annotations

import heapq

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register


class _Sess:
    __slots__ = ("index", "units", "heap", "times", "a", "version")

    def __init__(self, index: int) -> None:
        self.index = index
        self.units: dict[int, int] = {}                      # unit key -> seq of its heap entry
        self.heap: list[tuple[int, int, int, int, object]] = []  # (-first_page, -layer, -key, seq, unit)
        self.times: dict[float, int] = {}                    # last-use time -> units with it
        self.a = -float("inf")
        self.version = 0


@register("session-aware")
class SessionAware(EvictionPolicy):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._sessions: dict[int, _Sess] = {}                # session index -> state
        self._heap: list[tuple[float, int, int, _Sess]] = []  # (a_s, index, version, state)
        self._where: dict[int, tuple[_Sess, float]] = {}     # unit key -> (session, its time)
        self._seq = 0

    def _add(self, unit, now: float) -> None:
        a = unit.last_access_s
        self._put(unit, a if a < now else now)

    def access(self, unit, now: float) -> None:
        if unit.key in self._where:  # a hit on a candidate (cachesim): the session is used now
            self._discard(unit)
            self._put(unit, now)

    def _put(self, unit, a: float) -> None:
        if unit.key in self._where:
            self._discard(unit)
        idx = unit.session.index if unit.session is not None else unit.key  # a cachesim object
        s = self._sessions.get(idx)
        if s is None:
            s = self._sessions[idx] = _Sess(idx)
        self._seq += 1
        s.units[unit.key] = self._seq
        heapq.heappush(s.heap, (-unit.first_page, -unit.layer, -unit.key, self._seq, unit))
        s.times[a] = s.times.get(a, 0) + 1
        self._where[unit.key] = (s, a)
        if len(s.units) == 1 or a > s.a:
            s.a = a
            self._push(s)

    def _push(self, s: _Sess) -> None:
        self._seq += 1
        s.version = self._seq  # globally unique: heap tuples never compare two session states
        heapq.heappush(self._heap, (s.a, s.index, s.version, s))
        if len(self._heap) > 2 * len(self._sessions) + 32:
            self._heap = [e for e in self._heap if e[3].version == e[2] and e[3].units]
            heapq.heapify(self._heap)

    def _discard(self, unit) -> None:
        entry = self._where.pop(unit.key, None)
        if entry is None:
            return
        s, a = entry
        del s.units[unit.key]
        n = s.times[a] - 1
        if n:
            s.times[a] = n
        else:
            del s.times[a]
        if not s.units:
            del self._sessions[s.index]
            s.version = -1  # its heap entries are stale
            return
        if not n and a == s.a:
            s.a = max(s.times)
            self._push(s)
        if len(s.heap) > 2 * len(s.units) + 16:
            s.heap = [e for e in s.heap if s.units.get(-e[2]) == e[3]]
            heapq.heapify(s.heap)

    def victim(self, now: float):
        heap = self._heap
        while heap:
            a, idx, version, s = heap[0]
            if version == s.version and s.units:
                uh = s.heap
                while uh:
                    _, _, negkey, seq, unit = uh[0]
                    if s.units.get(-negkey) == seq:
                        return unit
                    heapq.heappop(uh)
            heapq.heappop(heap)
        return None

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, unit) -> bool:
        return unit.key in self._where
