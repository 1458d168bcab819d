"""Pensieve: evict the unit with the lowest retention value = cost / time inactive.

Pensieve (Yu et al., EuroSys'25, arXiv 2312.05516) keeps the KV whose loss would hurt most per second
of holding it. Three variants, all evicting the minimum of ``cost(u) / (now - a_u)``, where ``a_u`` is
the unit's last use (``view.last_access_s(uid)`` when it became a candidate; ``now`` on a hit):

``pensieve``
    cost = layer_weight * position_weight * base_cost, where
    base_cost = alpha * context_length + beta + non_attention, with (alpha, beta, non_attention) =
    ``ctx.cost.pensieve_constants(n_new=block_tokens)`` (recomputing a chunk is an append of one
    page of new tokens; with the default n_new = 1 the constants would price a decode step) and
    context_length = the tokens before the unit's (last) chunk, ``chunk * block_tokens`` capped at
    the session's tokens: recomputing chunk c attends to the c chunks before it, so leading chunks
    are cheap to recompute and trailing ones dear;
    layer_weight = (L - l) / L for a unit of layer l; a unit of all layers (layer = -1) takes the mean
    over l = 0..L-1, i.e. (L + 1) / (2L);
    position_weight = (chunk + 1) / total_chunks, chunk = the unit's page index in its session (for a
    unit of several pages, its last page: a whole-session unit has weight 1), total_chunks = the
    session's pages (at least the pages the unit reaches).
``pensieve-flat``
    cost = base_cost (no layer or position weight).
``pensieve-physics``
    cost = the unit's real recovery cost from the cost model (``costmodels.recovery_s``): what it
    costs to have it back if it is evicted from *this* tier. A CPU-tier victim is dropped, so it is the
    recompute time. A GPU-tier victim is demoted to the CPU tier when that tier can hold it (the engine
    demotes iff ``cpu capacity >= size``: every CPU unit is unpinned, so the CPU tier's reclaimable
    bytes are its capacity) and costs the pipelined swap-in time; otherwise it is dropped and costs the
    recompute time. The CPU capacity comes from ``ctx.cpu_kv_bytes`` (None or absent: no CPU tier, GPU
    victims are priced as drops). Transient exception the policy cannot see: during an admission the
    admitted session's own CPU pages are pinned, so a GPU victim may then be dropped although the rule
    says "demoted".

Worked example (2 layers, 2 chunks of 32 tokens, alpha = 0.001, beta = 0.01, non_attention = 0.005):
base = 0.015 for chunk 0 (context 0), 0.047 for chunk 1 (context 32); costs (chunk, layer) =
(0, 0): 0.015 * 1 * 1/2 = 0.0075, (0, 1): 0.015 * 1/2 * 1/2 = 0.00375, (1, 0): 0.047,
(1, 1): 0.0235. With equal idle times the back layer of the leading chunk goes first, then
(0, 0), (1, 1), (1, 0).

A unit without a session (a ``kvsim cachesim`` object) has context 0 and position weight 1 (and no
tokens to recompute), so the formula variants rank such objects by idle time alone (LRU).

Order, exactly: u goes before v iff cost_u * (now - a_v) < cost_v * (now - a_u) in exact arithmetic on
the float inputs (that is value_u < value_v, extended to an idle time of 0 as value = +inf); ties by
lower cost, then older a, then lower uid. Costs are computed when a unit becomes a candidate
(everything they depend on is frozen while it is one: the session is not running). The value is
time-dependent, so the candidates live in a kinetic tournament (``sim.policies.kinetic``, ``SINCE``
mode, grouped by ``a``): O(log n) updates, O(1 + E log n) per decision for the E certificates that
expired since the previous one.

The policy reads, through ``self.view``: the unit's size, first page, pages and layer, its last
access, and its session (``tokens`` and ``pages``; None in ``kvsim cachesim``).
"""

from __future__ import annotations

import functools

import numpy as np

from sim.policies.kinetic import (
    INF,
    SINCE,
    KineticMin,
    KineticPolicy,
    units_by_time,
)
from sim.policies.registry import register
from sim.policies.tied_runs import TiedRuns, extents_of_runs, page_layers
from sim.units import UNIT_BITS, UNIT_MASK, Tier, UnitView


def recovery_s(cost, **args) -> float:
    """``costmodels.recovery_s``, imported on first use: importing the policies (a cache replay
    imports them all) does not load the cost models."""
    return _costmodels_recovery_s()(cost, **args)


@functools.cache
def _costmodels_recovery_s():
    # once: an import statement per call runs the import system's from-list step each time
    from costmodels import recovery_s

    return recovery_s


def recovery_cost_s(ctx, uid: int) -> float:
    """What evicting ``uid`` from ``ctx.tier`` costs to undo (see the module docstring)."""
    return recovery_s(ctx.cost, **_recovery_args(ctx, uid))


def _recovery_args(ctx, uid: int) -> dict:
    view = ctx.view
    size = view.size(uid)
    sess = view.session(uid)
    return {
        "dropped": _dropped_from(ctx, size),
        "first_page": view.first_page(uid),
        "pages": view.pages(uid),
        "layer": view.layer(uid),
        "nbytes": size,
        "context_tokens": sess.tokens if sess is not None else 0,
        "block_tokens": ctx.block_tokens,
    }


def _dropped_from(ctx, size: int) -> bool:
    """The engine drops a victim of the CPU tier, and a GPU victim the CPU tier cannot hold."""
    if ctx.tier != Tier.GPU:
        return True
    cpu = getattr(ctx, "cpu_kv_bytes", None)
    return cpu is None or cpu < size


def _need_cost(ctx, name: str):
    if ctx.cost is None:
        raise ValueError(f"policy {name!r} needs PolicyContext.cost (a costmodels.CostModel)")
    return ctx.cost


_MEMO_LIMIT = 1 << 20  # distinct recovery inputs remembered per instance
_TABLE_LIMIT = 1 << 22  # entries of a tier's table of dropped full pages' prices
_PARTLY_LIMIT = 1 << 16  # partly filled pages' price rows remembered per instance
_MANY_MIN = 4  # fewer units are priced one by one: numpy's call overhead loses
_RUN_NUMPY_MIN = 512  # from this many uids ``is_run`` reads them in numpy


def is_run(uids: list[int] | range) -> bool:
    """``list(uids) == list(range(uids[0], uids[0] + len(uids)))`` for a non-empty list or range
    of ints; a long list is read into numpy, where the list of ints the comparison builds costs
    more."""
    if type(uids) is range:
        return uids.step == 1 or len(uids) == 1
    n, head = len(uids), uids[0]
    if uids[-1] - head != n - 1:
        return False
    if n < _RUN_NUMPY_MIN:
        return uids == list(range(head, head + n))
    try:
        a = np.fromiter(uids, np.int64, n)
    except OverflowError:
        return uids == list(range(head, head + n))
    return bool((a[1:] - a[:-1] == 1).all())


def uid_array(uids: list[int] | range) -> np.ndarray:
    """``np.asarray(uids, dtype=np.int64)``, a list read faster (``fromiter``), a range made."""
    if type(uids) is range:
        return np.arange(uids.start, uids.stop, uids.step, dtype=np.int64)
    return np.fromiter(uids, np.int64, len(uids))


# -- the policies --------------------------------------------------------------------------------
class PricesSpans(KineticPolicy):
    """A ``KineticPolicy`` whose ``unit_costs`` takes a range as it takes a list: a released
    whole-session span is priced as the range (its uids never listed, nor read back to learn
    that they are consecutive), into the tournament as ``KineticPolicy.release`` puts it."""

    def unit_costs(self, uids: list[int] | range) -> list[float] | np.ndarray:
        return super().unit_costs(uids if isinstance(uids, list) else list(uids))

    def release(self, uids, now: float) -> None:
        if type(uids) is range and uids.step == 1 and uids:
            tau = self.shared_time(uids, now)
            if tau is not None:
                self._kin.add_many(uids, self.unit_costs(uids), tau, now)
                return
        super().release(uids, now)


class _Retention(PricesSpans):
    """Lowest cost / time-inactive first; subclasses define ``unit_cost``."""

    mode = SINCE
    session_time = True  # the session's last access

    def unit_time(self, uid: int, now: float) -> float:
        a = self.view.last_access_s(uid)
        return min(now, a)

    def hit_time(self, uid: int, now: float) -> float:
        return now

    def value(self, uid: int, now: float) -> float:
        """The retention value of a candidate at ``now`` (for notebooks and tests)."""
        idle = now - self._kin.tau_of(uid)
        c = self._kin.cost_of(uid)
        return c / idle if idle > 0 else INF


class _PensieveFormula(_Retention):
    weighted = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        k = _need_cost(ctx, self.name).pensieve_constants(max(1, ctx.block_tokens))
        self._alpha, self._beta0 = k.alpha, k.beta + k.non_attention
        L = ctx.num_layers
        self._L = L
        self._mean_layer_weight = (L + 1) / (2 * L)

    def base_cost(self, uid: int) -> float:
        view = self.view
        sess = view.session(uid)
        context = 0
        if sess is not None:
            chunk = view.first_page(uid) + max(view.pages(uid), 1) - 1
            context = min(sess.tokens, chunk * self.ctx.block_tokens)
        return self._alpha * context + self._beta0

    def layer_weight(self, uid: int) -> float:
        layer = self.view.layer(uid)
        return self._mean_layer_weight if layer < 0 else (self._L - layer) / self._L

    def position_weight(self, uid: int) -> float:
        view = self.view
        sess = view.session(uid)
        if sess is None:
            return 1.0
        last = view.first_page(uid) + max(
            view.pages(uid), 1
        )  # pages [first, last): chunk = last - 1
        total = max(sess.pages(self.ctx.block_tokens), last, 1)
        return last / total

    def unit_cost(self, uid: int) -> float:
        base = self.base_cost(uid)
        if not self.weighted:
            return base
        return self.layer_weight(uid) * self.position_weight(uid) * base

    def unit_costs(self, uids: list[int] | range) -> list[float] | np.ndarray:
        """``unit_cost`` of one session's page or page-layer units at once: the same float
        operations, in the same order, on arrays (kept as one: the tournament sorts it)."""
        view = self.view
        if (
            view.per_session
            or not isinstance(view, UnitView)
            or not uids
            or uids[0] >> UNIT_BITS != uids[-1] >> UNIT_BITS
        ):
            return super().unit_costs(uids if isinstance(uids, list) else list(uids))
        bt, per_page = self.ctx.block_tokens, view.layers
        sess = view.sessions[uids[0] >> UNIT_BITS]
        idx = uid_array(uids) & UNIT_MASK
        page = idx // per_page
        base = self._alpha * np.minimum(sess.tokens, page * bt) + self._beta0
        if not self.weighted:
            return base
        last = page + 1
        position = last / np.maximum(last, max(sess.pages(bt), 1))
        if per_page > 1:
            layer = per_page - 1 - idx % per_page
            weight = (self._L - layer) / self._L * position
        else:
            weight = self._mean_layer_weight * position
        return weight * base


@register("pensieve")
class Pensieve(_PensieveFormula):
    weighted = True


@register("pensieve-flat")
class PensieveFlat(_PensieveFormula):
    weighted = False

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        layers = page_layers(self.view)
        # A page's layers share its cost: the tournament holds pages (tied_runs). Not at the CPU
        # tier, which takes its units in one at a time (``take_in``), each a run's new first.
        if layers and ctx.tier != Tier.CPU:
            # (KineticMin's interface as KineticPolicy uses it, the same answers)
            self._kin = TiedRuns(KineticMin(self.mode), layers)  # type: ignore[assignment]

    def evict_extents(self, nbytes: int, now: float) -> list[tuple[int, int]]:
        n = self._units_in(nbytes)
        if type(self._kin) is not TiedRuns or n is None:
            return super().evict_extents(nbytes, now)
        # ``evict_bytes``'s victims (``pop_many``) as extents, a page's run never listed
        return extents_of_runs(self._kin.pop_runs(n, now), self.drops_victims)

    def evict_extents_at(self, schedule: list[tuple[float, int]]) -> list[tuple[int, int]]:
        unit_bytes = self.view.unit_bytes
        if type(self._kin) is not TiedRuns or not unit_bytes:
            return super().evict_extents_at(schedule)
        # ``KineticPolicy.evict_extents_at``: the minima of each time's allocations together
        runs: list[list[int] | range] = []
        for now, units in units_by_time(schedule, unit_bytes):
            runs += self._kin.pop_runs(units, now)
        return extents_of_runs(runs, self.drops_victims)


class RecoveryCosts:
    """``recovery_cost_s`` of units of one tier, asking the cost model once per distinct input:
    many units share their recovery's inputs (a session's pages, layer by layer, turn after turn),
    and the answer is the same number either way."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._memo: dict[tuple, float] = {}
        view = ctx.view
        # Units of one page or page-layer each: a batch of them is priced by table (``many``).
        self._paged = isinstance(view, UnitView) and not view.per_session and ctx.block_tokens > 0
        self._per_page = view.layers if self._paged else 1
        self._drops = self._paged and _dropped_from(ctx, view.page_bytes)
        # A dropped full page's unit's price by unit index (page * units a page + offset in the
        # page): its inputs are the page's tokens and the layer alone, whatever the session's
        # length. NaN: not asked yet. A batch of consecutive units is priced by a slice of it.
        self._full = np.empty(0)
        # A partly filled page's prices (or a page's past the tokens) by offset in the page, by
        # the page's token span: (first token, stop token).
        self._partly: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, uid: int) -> float:
        args = _recovery_args(self.ctx, uid)
        if args["dropped"]:  # recompute: the tokens it holds and those before them
            lo = args["first_page"] * args["block_tokens"]
            key: tuple = (
                True,
                lo,
                min(args["context_tokens"], lo + args["pages"] * args["block_tokens"]),
                args["layer"],
            )
        else:  # swap-in: its bytes and the turn that brings it back
            key = (False, args["nbytes"], args["pages"], args["context_tokens"], args["layer"])
        cost = self._memo.get(key)
        if cost is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            cost = self._memo[key] = recovery_s(self.ctx.cost, **args)
        return cost

    def many(self, uids: list[int] | range) -> list[float] | np.ndarray:
        """``self(uid)`` for each of ``uids``: one session's page or page-layer units at once as a
        float64 array (the tournament takes it as it is), else a list. A demoted unit's price
        depends on its layer alone (one price per unit offset in a page), a dropped full page's
        on its page and layer (a table that outlives the batch); the cost model is asked once
        per distinct input, the answers are its floats."""
        if not self._paged or len(uids) < _MANY_MIN:
            return list(map(self, uids))
        head = uids[0]
        s = head >> UNIT_BITS
        if uids[-1] >> UNIT_BITS == s and is_run(uids):  # a released session or tier of it
            out = self._run(s, head & UNIT_MASK, len(uids))
            if out is not None:
                return out
        if min(uids) >> UNIT_BITS != s or max(uids) >> UNIT_BITS != s:
            return list(map(self, uids))
        idx = uid_array(uids) & UNIT_MASK
        per_page = self._per_page
        if not self._drops:  # swap-in: the session's tokens and the layer
            if per_page == 1:
                return np.full(len(uids), self(head))
            off = idx % per_page
            price = np.empty(per_page)
            offs, first = np.unique(off, return_index=True)
            for o, i in zip(offs.tolist(), first.tolist(), strict=True):
                price[o] = self(uids[i])
            return price[off]
        tokens = self.ctx.view.sessions[s].tokens
        full = idx < tokens // self.ctx.block_tokens * per_page
        out = np.empty(len(uids))
        if full.any():
            at = idx[full]
            table = self._table(int(at.max()) + 1)
            if table is None:
                return list(map(self, uids))
            price = table[at]
            ask = np.flatnonzero(np.isnan(price))
            if len(ask):
                base = s << UNIT_BITS
                for i in at[ask].tolist():
                    table[i] = self._ask(base + i)
                price = table[at]
            out[full] = price
        if not full.all():  # a partly filled page (or one past the tokens): its own inputs
            for i in np.flatnonzero(~full).tolist():
                out[i] = self._partly_filled(uids[i], tokens)
        return out

    def _run(self, s: int, lo: int, n: int) -> np.ndarray | None:
        """``many`` of session ``s``'s units lo, ..., lo + n - 1: a demoted unit's price repeats
        with its offset in the page; dropped full pages' prices are a slice of the table, the
        rest (a partly filled page, pages past the tokens) is priced as ``many`` prices it.
        None: beyond the table's limit."""
        per_page, base = self._per_page, s << UNIT_BITS
        if not self._drops:
            page = [self(base + i) for i in range(lo, lo + min(n, per_page))]
            return np.resize(page, n)  # repeated page after page
        tokens = self.ctx.view.sessions[s].tokens
        stop = lo + n
        cut = min(stop, max(lo, tokens // self.ctx.block_tokens * per_page))  # full: [lo, cut)
        if cut == lo:
            return self._partly_filled_run(base, lo, stop, tokens)
        table = self._table(cut)
        if table is None:
            return None
        prices = table[lo:cut]
        ask = np.isnan(prices)
        if ask.any():
            for i in np.flatnonzero(ask).tolist():
                prices[i] = self._ask(base + lo + i)
        if cut == stop:
            return prices.copy()  # the table's entries may be asked again, not changed
        return np.concatenate((prices, self._partly_filled_run(base, cut, stop, tokens)))

    def _partly_filled_run(self, base: int, start: int, stop: int, tokens: int) -> np.ndarray:
        """``_partly_filled`` of the session's units ``start``..``stop - 1`` (``base``: its first
        uid), pages at or past its last full one: a page's prices by offset, remembered by the
        page's token span (all that a dropped unit's price reads besides its layer)."""
        per_page, bt = self._per_page, self.ctx.block_tokens
        parts = []
        i = start
        while i < stop:
            page, off = divmod(i, per_page)
            end = min(stop, (page + 1) * per_page)
            lo = page * bt
            key = (lo, min(tokens, lo + bt))
            prices = self._partly.get(key)
            if prices is None:
                if len(self._partly) >= _PARTLY_LIMIT:
                    self._partly.clear()
                first = base + page * per_page
                prices = self._partly[key] = np.array(
                    [self._partly_filled(first + o, tokens) for o in range(per_page)]
                )
            parts.append(prices[off : off + end - i])
            i = end
        return parts[0].copy() if len(parts) == 1 else np.concatenate(parts)

    def _table(self, stop: int) -> np.ndarray | None:
        """The table of dropped full pages' prices, holding unit indices below ``stop``; None
        beyond its limit."""
        if stop > _TABLE_LIMIT:
            return None
        table = self._full
        if stop > len(table):
            grown = np.full(max(stop, 2 * len(table)), np.nan)
            grown[: len(table)] = table
            self._full = table = grown
        return table

    def _ask(self, uid: int) -> float:
        """The cost model's price of ``uid``, not remembered by ``__call__``'s memo."""
        return recovery_s(self.ctx.cost, **_recovery_args(self.ctx, uid))

    def _partly_filled(self, uid: int, tokens: int) -> float:
        """``self(uid)`` for a dropped unit of a partly filled page (or one past the session's
        ``tokens``), its memo looked up first under the key ``__call__`` builds."""
        per_page, bt = self._per_page, self.ctx.block_tokens
        page, off = divmod(uid & UNIT_MASK, per_page)
        lo = page * bt
        layer = per_page - 1 - off if per_page > 1 else -1
        cost = self._memo.get((True, lo, min(tokens, lo + bt), layer))
        return self(uid) if cost is None else cost


@register("pensieve-physics")
class PensievePhysics(_Retention):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        _need_cost(ctx, self.name)
        self._recovery = RecoveryCosts(ctx)

    def unit_cost(self, uid: int) -> float:
        return self._recovery(uid)

    def unit_costs(self, uids: list[int] | range) -> list[float] | np.ndarray:
        return self._recovery.many(uids)
