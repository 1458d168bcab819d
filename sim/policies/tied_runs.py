"""A ``KineticMin`` over layer units in which a page's units of one cost and one time tie: the
tournament holds the first of each such run only.

The kinetic order is the value (cost over a time difference), then the cost, then the time, then
the uid. Two units of equal cost and equal time have equal values at every moment, so nothing
comes between them but a unit of that same cost and time whose uid lies between theirs. A page's
units are consecutive uids (``page * layers + offset``), so a page's units of one cost and one time
(a *run*) follow each other in uid order, at every moment, and only the run's first (its lowest
uid) can be the minimum: it alone sits in the tournament, standing for the run, and when it is
taken the rest of the run comes next, in uid order, without asking the tournament.

At ``pensieve-flat``'s layer units every layer of a page has the page's cost, so a released page
is one run: the tournament holds a session's pages, not its page-layers, and an eviction of a
page's layers is one tournament minimum.

``TiedRuns`` has the interface of ``KineticMin`` that ``KineticPolicy`` uses, with the same
answers (victims, their order, costs and times).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort

import numpy as np

from sim.policies.kinetic import INF, KineticMin
from sim.units import UNIT_MASK, UnitView, extents_of, join_extents


def page_layers(view) -> int:
    """The layers of a page's units when the engine's units are page-layers (``layers`` > 1),
    else 0 (units of all layers, whole sessions, or no pages)."""
    if isinstance(view, UnitView) and not view.per_session and view.layers > 1:
        return view.layers
    return 0


class _Run:
    """A page's candidates of one cost and one time: their uids ascending (a range while
    consecutive); the first is in the tournament."""

    __slots__ = ("cost", "members", "tau")

    def __init__(self, members: list[int] | range, cost: float, tau: float) -> None:
        self.members = members
        self.cost = cost
        self.tau = tau


def members_without(members: list[int] | range, uid: int) -> list[int] | range:
    """``members`` (ascending) less ``uid``, one of them."""
    if type(members) is range:
        if uid == members[0]:
            return members[1:]
        if uid == members[-1]:
            return members[:-1]
    out = list(members)
    del out[bisect_left(out, uid)]
    return out


def members_with(members: list[int] | range, uid: int) -> list[int] | range:
    """``members`` (ascending) and ``uid``, not one of them."""
    if type(members) is range and members:
        if uid == members.stop:
            return range(members.start, uid + 1)
        if uid == members.start - 1:
            return range(uid, members.stop)
    out = list(members)
    insort(out, uid)
    return out


def _check_cost(uid: int, cost: float) -> None:
    if not (0.0 <= cost < INF):
        raise ValueError(f"unit {uid}: cost must be finite and >= 0, got {cost!r}")


class TiedRuns:
    """``KineticMin``'s answers over the engine's layer units (``layers`` units a page), with one
    tournament entry per run of a page's units of one cost and one time (module docstring)."""

    def __init__(self, kin: KineticMin, layers: int) -> None:
        self._kin = kin
        self._layers = layers
        self._pages: dict[int, list[_Run]] = {}  # page's first uid -> its runs
        self._front: dict[int, _Run] = {}  # a run's first uid (in the tournament) -> the run
        self._n = 0  # candidates
        self._t = -INF  # the latest time seen (the tournament's clock)

    # -- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: int) -> bool:
        return self._run_of(uid) is not None

    def _page(self, uid: int) -> int:
        return uid - (uid & UNIT_MASK) % self._layers

    def _run_of(self, uid: int) -> _Run | None:
        for run in self._pages.get(self._page(uid), ()):
            if uid in run.members:
                return run
        return None

    def _get(self, uid: int) -> _Run:
        run = self._run_of(uid)
        if run is None:
            raise KeyError(uid)
        return run

    def cost_of(self, uid: int) -> float:
        return self._get(uid).cost

    def tau_of(self, uid: int) -> float:
        return self._get(uid).tau

    def uids(self) -> list[int]:
        """Every candidate."""
        return [u for runs in self._pages.values() for run in runs for u in run.members]

    def peek(self, now: float) -> int | None:
        self._t = max(self._t, now)
        return self._kin.peek(now)

    def begin_batch(self, now: float) -> None:
        self._t = max(self._t, now)
        self._kin.begin_batch(now)

    def end_batch(self) -> None:
        self._kin.end_batch()

    # -- membership ------------------------------------------------------------------------------
    def add(self, uid: int, cost: float, tau: float, now: float) -> None:
        _check_cost(uid, cost)
        if math.isnan(tau):
            raise ValueError(f"unit {uid}: its time (last or next access) is NaN")
        self._t = max(self._t, now)
        self.discard(uid)
        page = self._page(uid)
        runs = self._pages.setdefault(page, [])
        self._n += 1
        for run in runs:
            if run.tau == tau and run.cost == cost:
                first = run.members[0]
                run.members = members_with(run.members, uid)
                if uid < first:  # the run's new first stands for it
                    self._set_front(run, first)
                return
        run = _Run(range(uid, uid + 1), cost, tau)
        runs.append(run)
        self._set_front(run, None)

    def _set_front(self, run: _Run, old: int | None) -> None:
        """The run's first (``members[0]``) in the tournament in place of ``old``."""
        kin = self._kin
        if old is not None:
            del self._front[old]
            kin.discard(old)
        first = run.members[0]
        self._front[first] = run
        kin.add(first, run.cost, run.tau, self._t)

    def add_many(
        self, uids: list[int] | range, costs: list[float] | np.ndarray, tau: float, now: float
    ) -> None:
        """``add`` each (uid, cost) with one time ``tau``; whole pages none of which holds a
        candidate, each page's units of one cost, as one run a page and one batch of firsts."""
        if not uids:
            return
        if len(uids) != len(costs):
            raise ValueError(f"{len(uids)} uids but {len(costs)} costs")
        cost = np.asarray(costs, dtype=np.float64)
        if not (0.0 <= cost.min() and cost.sum() < INF):  # a NaN makes the sum NaN
            for uid, c in zip(uids, cost.tolist(), strict=True):
                _check_cost(uid, c)
        if math.isnan(tau):
            raise ValueError(f"units {uids[0]}..: their time (last or next access) is NaN")
        self._t = max(self._t, now)
        firsts = self._free_pages(uids)
        if firsts is not None:
            by_page = cost.reshape(len(firsts), self._layers)
            if (by_page == by_page[:, :1]).all():
                self._add_pages(firsts, by_page[:, 0], tau, now)
                return
        for uid, c in zip(uids, cost.tolist(), strict=True):
            self.add(uid, c, tau, now)

    def _free_pages(self, uids: list[int] | range) -> range | None:
        """The first uids of the pages ``uids`` make up when they are whole pages, consecutive,
        none of which holds a candidate; else None."""
        L = self._layers
        lo, n = uids[0], len(uids)
        if (lo & UNIT_MASK) % L or n % L or uids[-1] != lo + n - 1:
            return None
        if type(uids) is not range and uids != list(range(lo, lo + n)):
            return None
        firsts = range(lo, lo + n, L)
        if not self._pages.keys().isdisjoint(firsts):
            return None
        return firsts

    def _add_pages(self, firsts: range, costs: np.ndarray, tau: float, now: float) -> None:
        L, pages, front = self._layers, self._pages, self._front
        for first, c in zip(firsts, costs.tolist(), strict=True):
            run = _Run(range(first, first + L), c, tau)
            pages[first] = [run]
            front[first] = run
        self._n += len(firsts) * L
        self._kin.add_many(firsts, costs, tau, now)

    def discard(self, uid: int) -> bool:
        run = self._run_of(uid)
        if run is None:
            return False
        first = run.members[0]
        run.members = members_without(run.members, uid)
        self._n -= 1
        if not run.members:
            self._drop_run(run, uid)
            del self._front[uid]
            self._kin.discard(uid)
        elif uid == first:
            self._set_front(run, first)
        return True

    def _drop_run(self, run: _Run, uid: int) -> None:
        """An empty run leaves its page, that of ``uid`` (one of its members until now); its first
        leaves the tournament elsewhere."""
        page = self._page(uid)
        runs = self._pages[page]
        runs.remove(run)
        if not runs:
            del self._pages[page]

    def discard_many(self, uids) -> None:
        """``discard`` each; whole pages leave at once, their firsts in one batch."""
        L, pages = self._layers, self._pages
        if type(uids) is not range:
            uids = list(uids)
            if (
                uids
                and uids[-1] - uids[0] == len(uids) - 1
                and uids == list(range(uids[0], uids[-1] + 1))
            ):
                uids = range(uids[0], uids[-1] + 1)
        if type(uids) is range and uids.step == 1 and uids:
            lo, hi = uids.start, uids.stop
            page = self._page(lo)
            fronts: list[int] = []
            while page < hi:
                if lo <= page and page + L <= hi:  # the whole page leaves
                    for run in pages.pop(page, ()):
                        self._n -= len(run.members)
                        first = run.members[0]
                        del self._front[first]
                        fronts.append(first)
                else:
                    for uid in range(max(lo, page), min(hi, page + L)):
                        self.discard(uid)
                page += L
            if fronts:
                self._kin.discard_many(fronts)
            return
        for uid in uids:
            self.discard(uid)

    # -- the minima ------------------------------------------------------------------------------
    def pop_many(self, n: int, now: float, in_uid_order: bool = False) -> list[int]:
        """``KineticMin.pop_many``: the ``n`` successive minima at ``now``, taken out."""
        out: list[int] = []
        for run in self.pop_runs(n, now):
            out += run
        if in_uid_order:
            out.sort()
        return out

    def pop_runs(self, n: int, now: float) -> list[list[int] | range]:
        """``pop_many``'s victims as the runs they leave in, in order (each ascending). A run
        follows its first at once, so the tournament's next ``k`` minima, ``k`` the pages that
        the victims still wanted fill at least, stand for whole runs but maybe the last."""
        self._t = max(self._t, now)
        out: list[list[int] | range] = []
        kin, L, front = self._kin, self._layers, self._front
        while n > 0:
            firsts = kin.pop_many(-(-n // L), now)
            if not firsts:
                break
            for first in firsts:
                run = front.pop(first)
                members = run.members
                if len(members) <= n:
                    out.append(members)
                    n -= len(members)
                    self._n -= len(members)
                    self._drop_run(run, first)
                else:  # the last: its rest stays, its new first in the tournament
                    out.append(members[:n])
                    self._n -= n
                    run.members = members[n:]
                    n = 0
                    front[run.members[0]] = run
                    kin.add(run.members[0], run.cost, run.tau, now)
        return out


def extents_of_runs(runs: list[list[int] | range], in_uid_order: bool) -> list[tuple[int, int]]:
    """``extents_of`` of the runs' uids in order (``in_uid_order``: sorted), each range one extent
    where ``extents_of`` would list it: runs are disjoint, so sorting them by their first uid sorts
    their uids."""
    pieces: list[tuple[int, int]] = []
    for run in runs:
        if type(run) is range:
            pieces.append((run.start, run.stop))
        elif run:
            pieces += extents_of(run)
    if in_uid_order:
        pieces.sort()
    return join_extents(pieces)
