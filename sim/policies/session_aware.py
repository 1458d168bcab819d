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

Structure: a ``LazyHeap`` of sessions keyed (a_s, index) and, per session, a list of its candidate
units sorted so that the next victim is last. A session's units come and go together (released at
a turn's end, pinned at its next admission, evicted from the tail), so those are list slices, not
one heap operation a unit. A turn's release of whole pages is kept as the range of their keys
until a call needs the list (victims from its top and a unit leaving its top keep it a range), so
neither the release nor the victims list the units (at layer units, a page's 32). A session's a_s
can only change while it gains units (the max over a multiset of times, kept as counts).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from itertools import chain

import numpy as np

from sim.policies.base import Memoryless
from sim.policies.registry import register
from sim.policies.structures import LazyHeap, UnitSet
from sim.units import UNIT_BITS, UNIT_MASK, UnitView, extents_of


class _Sess:
    __slots__ = ("a", "cand", "index", "span", "times", "when")

    def __init__(self, index: int) -> None:
        self.index = index
        self.cand: list[int] = []  # candidate uids, sorted: the next victim last
        # the engine's: the candidates as a range of keys when they are one (``cand`` is then
        # empty): a turn's release of whole pages and what is left as victims go from its end
        self.span: range | None = None
        self.times: dict[float, int] = {}  # last-use time -> units with it
        self.a = -float("inf")
        # the engine's uids: each candidate's time, kept only while they have more than one
        # (with one, it is ``a``)
        self.when: dict[int, float] | None = None


@register("session-aware")
class SessionAware(Memoryless):
    reads_session = True  # its units are evicted together, by its last use
    grows_in_bulk = True  # a session's rank is fixed while it loses units; pins are not heard

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._sessions: dict[int, _Sess] = {}  # session index -> state
        self._order = LazyHeap()  # session index keyed (a_s, index)
        view = self.view
        # The engine's uids carry their session and page, so the in-session order is the uid's
        # (one layer) or a number made of it; another view is asked for page and layer.
        self._engine_uids = isinstance(view, UnitView)
        # The candidates: the engine's a byte a unit per session (a session's units come and go
        # together: slices), with their times on the session; any other view's by uid.
        self._held = UnitSet()
        self._where: dict[int, tuple[_Sess, float]] = {}  # uid -> (session, its time)
        if self._engine_uids and view.layers == 1:
            self._key = None
        elif self._engine_uids:
            layers = view.layers
            self._key = lambda u: u + layers - 1 - 2 * ((u & UNIT_MASK) % layers)
        else:
            self._key = lambda u: (view.first_page(u), view.layer(u), u)

    # -- one unit --------------------------------------------------------------------------------
    def _add(self, uid: int, now: float) -> None:
        self._put(uid, min(now, self.view.last_access_s(uid)))

    def access(self, uid: int, now: float) -> None:
        if uid in self:  # a hit on a candidate (cachesim): the session is used now
            self._discard(uid)
            self._put(uid, now)

    def _state(self, uid: int) -> _Sess:
        sess = self.view.session(uid)
        idx = sess.index if sess is not None else uid  # a cachesim object
        s = self._sessions.get(idx)
        if s is None:
            s = self._sessions[idx] = _Sess(idx)
        return s

    # -- the candidates' sessions and times ------------------------------------------------------
    def _entry(self, uid: int) -> tuple[_Sess, float] | None:
        """(session, time) of a candidate, None for any other uid."""
        if not self._engine_uids:
            return self._where.get(uid)
        if uid not in self._held:
            return None
        s = self._sessions[self.view.session(uid).index]
        return s, (s.a if s.when is None else s.when[uid])

    def _hold(self, s: _Sess, uids, a: float) -> None:
        """``uids`` (none a candidate; not yet in ``s.cand`` nor ``s.times``) become candidates
        of ``s`` with time ``a``."""
        if not self._engine_uids:
            self._where.update(dict.fromkeys(uids, (s, a)))
            return
        self._held.add_many(uids)
        if s.when is None and s.times and a not in s.times:  # a second time: list them
            s.when = dict.fromkeys(self._listed(s), s.a)
        if s.when is not None:
            s.when.update(dict.fromkeys(uids, a))

    def _unhold(self, s: _Sess, uids) -> list[float]:
        """``uids`` (candidates of ``s``) stop being candidates: their times."""
        if not self._engine_uids:
            return [e[1] for e in map(self._where.pop, uids)]
        if len(uids) == 1:  # (a preemption drops a session's units one at a time)
            self._held.discard_one(uids[0])
        else:
            self._held.discard_many(uids)
        if s.when is None:
            return [s.a] * len(uids)
        return list(map(s.when.pop, uids))

    def _put(self, uid: int, a: float) -> None:
        if uid in self:
            self._discard(uid)
        s = self._state(uid)
        self._hold(s, (uid,), a)
        insort(self._listed(s), uid, key=self._key)
        s.times[a] = s.times.get(a, 0) + 1
        if len(s.cand) == 1 or a > s.a:
            s.a = a
            self._order.push(s.index, (a, s.index))

    def _discard(self, uid: int) -> None:
        entry = self._entry(uid)
        if entry is not None:
            s = entry[0]
            span = s.span
            if span is not None and uid == self._uid_of_key(span[-1]):  # (a preemption's tail)
                s.span = range(span.start, span.stop - 1) if len(span) > 1 else None
            else:
                self._unlist(self._listed(s), uid)
            self._untime(s, self._unhold(s, (uid,)))

    def _unlist(self, cand: list[int], uid: int) -> None:
        """Take ``uid`` out of ``cand`` (its first occurrence). The engine's keys are distinct per
        uid, so a binary search finds it: a preemption drops a session's tail one unit at a time,
        which a scan from the front made quadratic."""
        if not self._engine_uids:
            cand.remove(uid)
            return
        i = bisect_left(cand, uid if self._key is None else self._key(uid), key=self._key)
        if i == len(cand) or cand[i] != uid:
            raise ValueError(f"{uid} is not a candidate")
        del cand[i]

    def _untime(self, s: _Sess, ts: list[float]) -> None:
        """Units with last-use times ``ts`` left ``s`` (its ``cand`` already without them)."""
        times = s.times
        groups = ((ts[0], len(ts)),) if ts.count(ts[0]) == len(ts) else Counter(ts).items()
        top_gone = False
        for a, k in groups:
            n = times[a] - k
            if n:
                times[a] = n
            else:
                del times[a]
                top_gone = top_gone or a == s.a
        if not s.cand and s.span is None:
            del self._sessions[s.index]
            self._order.discard(s.index)
            return
        if top_gone:
            s.a = max(times)
            self._order.push(s.index, (s.a, s.index))
        if s.when is not None and len(times) == 1:  # one time again: it is ``a``
            s.when = None

    # -- batches: a session's units at once ------------------------------------------------------
    def _one_session(self, uids) -> bool:
        lo, hi = (uids[0], uids[-1]) if isinstance(uids, range) else (min(uids), max(uids))
        return self._engine_uids and lo >> UNIT_BITS == hi >> UNIT_BITS

    def release(self, uids, now: float) -> None:
        if not isinstance(uids, range):  # a range's min and max are free
            uids = list(uids)
        if not uids:
            return
        if not self._one_session(uids) or not self._none_held(uids):
            for uid in uids:
                self._add(uid, now)
            return
        a = min(now, self.view.last_access_s(uids[0]))  # the engine's: its session's last use
        s = self._state(uids[0])
        self._hold(s, uids, a)
        s.times[a] = s.times.get(a, 0) + len(uids)
        fresh = not s.cand and s.span is None
        if fresh and self._whole_pages(uids):
            s.span = uids  # (their keys are the same range)
        else:
            s.cand = self._sorted(uids) if fresh else self._sorted(self._listed(s) + list(uids))
        if fresh or a > s.a:
            s.a = a
            self._order.push(s.index, (a, s.index))

    def _none_held(self, uids) -> bool:
        """Is none of one session's ``uids`` a candidate? A session with no candidates (the usual
        release: its units were pinned) holds none, with no look-up per unit."""
        sess = self.view.session(uids[0])
        if sess.index not in self._sessions:
            return True
        if self._engine_uids:
            return self._held.count_in(uids) == 0
        return self._where.keys().isdisjoint(uids)

    def _whole_pages(self, uids) -> bool:
        """Are the engine's ``uids`` a range of whole pages (a range at one layer a page)?"""
        if type(uids) is not range or uids.step != 1:
            return False
        layers = self.view.layers
        return layers == 1 or not ((uids.start & UNIT_MASK) % layers or len(uids) % layers)

    def _uid_of_key(self, key: int) -> int:
        """The engine's uid with this key (the key maps a page's layers onto themselves,
        reversed: it is its own inverse)."""
        return key if self._key is None else self._key(key)

    def _listed(self, s: _Sess) -> list[int]:
        """``s.cand``, listed from ``s.span`` first if the candidates are a range of keys."""
        span = s.span
        if span is not None:
            s.span = None
            if self._key is None:
                s.cand = list(span)
            else:
                keys = np.arange(span.start, span.stop, dtype=np.int64)
                s.cand = self._key(keys).tolist()
        return s.cand

    def _size(self, s: _Sess) -> int:
        return len(s.cand) if s.span is None else len(s.span)

    def _sorted(self, uids) -> list[int]:
        """The engine's ``uids`` in ``cand``'s order (the next victim last)."""
        if self._key is None:
            return list(uids) if isinstance(uids, range) and uids.step == 1 else sorted(uids)
        layers = self.view.layers
        if isinstance(uids, range) and uids.step == 1 and not (uids.start & UNIT_MASK) % layers:
            if not len(uids) % layers:  # whole pages: each page's layers reversed, no sort
                pages = np.arange(uids.start, uids.stop, dtype=np.int64).reshape(-1, layers)
                return pages[:, ::-1].ravel().tolist()
        cand = np.asarray(uids, dtype=np.int64)  # page-layer units: the same key on an array, in C
        return cand[np.argsort(self._key(cand), kind="stable")].tolist()

    def _forget(self, uids) -> None:
        if not isinstance(uids, range):
            uids = list(uids)
        if not uids:
            return
        if self._forget_session(uids):
            return
        entry = self._entry(uids[0])
        if entry is None or not self._all_of(entry[0], uids):  # not one session's candidates
            for uid in uids:
                self._discard(uid)
            return
        s = entry[0]
        ts = self._unhold(s, uids)
        if len(uids) == self._size(s):
            s.cand, s.span = [], None
        else:
            gone = set(uids)
            s.cand = [u for u in self._listed(s) if u not in gone]
        self._untime(s, ts)

    def _forget_session(self, uids) -> bool:
        """``_forget`` of exactly every candidate of one session (the engine's acquire of a
        session whose candidates are its units in this tier): its members' flags go at once and
        the session with them, the list of uids read once (one numpy array), not once for its
        session, again to count and again to clear. False, changing nothing, otherwise."""
        if not self._engine_uids or (type(uids) is not range and len(uids) < 64):
            return False
        if type(uids) is range:
            if uids.step != 1:
                return False
            lo, hi, at = uids.start, uids.stop - 1, None
        else:
            at = np.asarray(uids, dtype=np.int64)
            lo, hi = int(at.min()), int(at.max())
        b = lo >> UNIT_BITS
        if hi >> UNIT_BITS != b:
            return False
        s = self._sessions.get(self.view.session(lo).index)
        n = len(uids)
        if s is None or self._size(s) != n or self._held.session_count(b) != n:
            return False
        if at is None:
            held = self._held.count_in(uids)
        else:
            held = self._held.count_at(b, at & UNIT_MASK)
        if held != n:  # (uids distinct: they are the session's n members)
            return False
        self._held.drop_session(b)
        s.cand, s.span, s.when = [], None, None
        del self._sessions[s.index]
        self._order.discard(s.index)
        return True

    def _all_of(self, s: _Sess, uids) -> bool:
        """Are all of ``uids`` candidates of ``s``?"""
        if self._engine_uids:
            return self._one_session(uids) and self._held.count_in(uids) == len(uids)
        where = self._where
        return all(e is not None and e[0] is s for e in map(where.get, uids))

    # -- the choice ------------------------------------------------------------------------------
    def peek(self, now: float) -> int | None:
        idx = self._order.min()
        if idx is None:
            return None
        s = self._sessions[idx]
        return s.cand[-1] if s.span is None else self._uid_of_key(s.span[-1])

    def _take(
        self, n: int, listed: bool = True
    ) -> list[tuple[list[int] | None, list[range] | None]]:
        """Evict ``n`` units (fewer when the candidates run out): each session's share, as the
        slice of its ``cand`` it lost (ascending; the victims went from its end), with the same
        units as increasing runs of uids when they are consecutive in ``cand``'s order (the
        engine's: whole pages, and a part of one at either end). Not ``listed``: a share taken
        from a range of keys (``span``) gives its runs alone (None for the slice)."""
        out: list[tuple[list[int] | None, list[range] | None]] = []
        order, sessions = self._order, self._sessions
        while n > 0:
            idx = order.min()
            if idx is None:
                break
            s = sessions[idx]
            span = s.span
            if span is not None:  # the top k keys: their runs, with no list of the units
                k = min(n, len(span))
                s.span = range(span.start, span.stop - k) if k < len(span) else None
                keys = range(span.stop - k, span.stop)
                whole = self._key_runs(keys.start, keys.stop - 1)
                self._untime(s, self._unhold_runs(s, whole))
                out.append(([self._uid_of_key(key) for key in keys] if listed else None, whole))
                n -= k
                continue
            k = min(n, len(s.cand))
            taken = s.cand[-k:]
            del s.cand[-k:]
            runs = self._runs_of(taken) if self._engine_uids else None
            self._untime(s, self._unhold(s, taken) if runs is None else self._unhold_runs(s, runs))
            out.append((taken, runs))
            n -= k
        return out

    def _runs_of(self, taken: list[int]) -> list[range] | None:
        """The engine's ``taken`` (a slice of ``cand``: keys ascending, distinct) as increasing
        runs of uids, when their keys are consecutive (no candidate of the session between them
        is missing); else None. A run of keys is whole pages plus a part of a page at either end,
        and a part of a page, its layers reversed, is consecutive uids too: at most three runs."""
        key = self._key
        first, last = (taken[0], taken[-1]) if key is None else (key(taken[0]), key(taken[-1]))
        if last - first != len(taken) - 1:
            return None
        return self._key_runs(first, last)

    def _key_runs(self, first: int, last: int) -> list[range]:
        """The engine's units with keys ``first .. last`` as increasing runs of uids."""
        if self._key is None:
            return [range(first, last + 1)]
        layers = self.view.layers
        base, lo, hi = first & ~UNIT_MASK, first & UNIT_MASK, (last & UNIT_MASK) + 1
        p, q = lo // layers * layers, (hi - 1) // layers * layers  # the first and last pages
        if p == q:  # keys p + o (o in [lo - p, hi - p)) are layers layers - 1 - o
            pieces = [(p + layers - (hi - p), p + layers - (lo - p))]
        else:  # the first page's last keys: its first layers; the last page's first keys: last
            pieces = [
                (p, p + layers - (lo - p)),
                (p + layers, q),
                (q + layers - (hi - q), q + layers),
            ]
        runs: list[range] = []
        for a, b in pieces:
            if a == b:
                continue
            if runs and runs[-1].stop == base + a:
                runs[-1] = range(runs[-1].start, base + b)
            else:
                runs.append(range(base + a, base + b))
        return runs

    def _unhold_runs(self, s: _Sess, runs: list[range]) -> list[float]:
        """``_unhold`` of the units of ``runs``."""
        if len(runs) == 1:
            return self._unhold(s, runs[0])
        if s.when is not None:
            return list(chain.from_iterable(self._unhold(s, run) for run in runs))
        for run in runs:  # one time in the session: each unit's is ``a``
            self._held.discard_many(run)
        return [s.a] * sum(map(len, runs))

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        n = self._units_in(nbytes)
        if n is None:
            return super().evict_bytes(nbytes, now)
        return [uid for taken, _ in self._take(n) for uid in reversed(taken or ())]

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if n is None or not self.drops_victims or not self._engine_uids:
            return super().evict_extents(nbytes, now)
        out: list[tuple[int, int]] = []
        for taken, runs in self._take(n, listed=False):  # dropped: their order is nobody's, so
            if runs is not None:  # increasing runs
                out.extend((run.start, run.stop) for run in runs)
            elif taken is None:
                raise AssertionError("a share with neither its units nor their runs")
            elif len(taken) > 2048:  # (page-layer units come in pages, layers reversed)
                out.extend(extents_of(np.sort(np.asarray(taken, dtype=np.int64))))
            else:
                out.extend(extents_of(sorted(taken)))
        return out

    def __len__(self) -> int:
        return len(self._held) if self._engine_uids else len(self._where)

    def __contains__(self, uid: int) -> bool:
        return uid in self._held if self._engine_uids else uid in self._where
