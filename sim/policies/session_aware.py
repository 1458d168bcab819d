"""session-aware: evict whole idle sessions, the longest-idle first, tail pages before head pages.

Sessions are ranked by their most recent use in this tier, a_s = max over the session's candidate
units of their last use (``view.last_access_s`` when it became a candidate, ``now`` on a hit): the
session idle longest goes first (ties: lower ``SessionKV.index``, the trace order). Once chosen, a
session keeps being chosen until none of its units is left in this tier -- it does not become
"fresher" by losing pages -- so the engine's repeated evictions empty it whole before touching the
next (unless the engine needs less room). Within a session: the highest page first (a tail page is
the cheapest to lose: recomputing it needs the head anyway, and dropping the head first would make
the whole tail unusable without recompute of the head), then the back layer first, then the higher
uid.

Why "longest idle" rather than "lowest expected reuse per byte": it needs no model and no size
trade-off, and within a multi-turn trace idle time is the strongest single signal of an abandoned
conversation (``predictive`` is the model-based alternative). An object without a session
(``kvsim cachesim``) is its own session, so objects rank by idle time (LRU).

O(log S + log u) per operation: a ``LazyHeap`` of sessions keyed (a_s, index) and, per session, a
``LazyHeap`` of its units keyed (-first_page, -layer, -uid). A session's a_s can only change while
it gains units (the max over a multiset of times, kept as counts).
"""

from __future__ import annotations

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import LazyHeap


class _Sess:
    __slots__ = ("a", "index", "times", "units")

    def __init__(self, index: int) -> None:
        self.index = index
        self.units = LazyHeap()  # uid keyed (-first_page, -layer, -uid)
        self.times: dict[float, int] = {}  # last-use time -> units with it
        self.a = -float("inf")


@register("session-aware")
class SessionAware(EvictionPolicy):
    reads_session = True  # its units are evicted together, by its last use
    grows_in_bulk = True  # a session's rank is fixed while it loses units; pins are not heard

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._sessions: dict[int, _Sess] = {}  # session index -> state
        self._order = LazyHeap()  # session index keyed (a_s, index)
        self._where: dict[int, tuple[_Sess, float]] = {}  # uid -> (session, its time)

    def _add(self, uid: int, now: float) -> None:
        a = self.view.last_access_s(uid)
        self._put(uid, min(now, a))

    def access(self, uid: int, now: float) -> None:
        if uid in self._where:  # a hit on a candidate (cachesim): the session is used now
            self._discard(uid)
            self._put(uid, now)

    def _put(self, uid: int, a: float) -> None:
        if uid in self._where:
            self._discard(uid)
        view = self.view
        sess = view.session(uid)
        idx = sess.index if sess is not None else uid  # a cachesim object
        s = self._sessions.get(idx)
        if s is None:
            s = self._sessions[idx] = _Sess(idx)
        s.units.push(uid, (-view.first_page(uid), -view.layer(uid), -uid))
        s.times[a] = s.times.get(a, 0) + 1
        self._where[uid] = (s, a)
        if len(s.units) == 1 or a > s.a:
            s.a = a
            self._order.push(idx, (a, idx))

    def _discard(self, uid: int) -> None:
        entry = self._where.pop(uid, None)
        if entry is None:
            return
        s, a = entry
        s.units.discard(uid)
        n = s.times[a] - 1
        if n:
            s.times[a] = n
        else:
            del s.times[a]
        if not s.units:
            del self._sessions[s.index]
            self._order.discard(s.index)
            return
        if not n and a == s.a:
            s.a = max(s.times)
            self._order.push(s.index, (s.a, s.index))

    def peek(self, now: float) -> int | None:
        idx = self._order.min()
        return None if idx is None else self._sessions[idx].units.min()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, uid: int) -> bool:
        return uid in self._where
