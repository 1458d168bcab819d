"""Pensieve: evict the unit with the lowest retention value = cost / time inactive.

Pensieve (Yu et al., EuroSys'25, arXiv 2312.05516) keeps the KV whose loss would hurt most per second
of holding it. Three variants, all evicting the minimum of ``cost(u) / (now - a_u)``, where ``a_u`` is
the unit's last use (``unit.last_access_s`` when it became a candidate; ``now`` on a hit):

``pensieve``
    cost = layer_weight * position_weight * base_cost, as the issue defines it:
    base_cost = alpha * context_length + beta + non_attention, with (alpha, beta, non_attention) =
    ``ctx.cost.pensieve_constants(n_new=block_tokens)`` (recomputing a chunk is an append of one
    page of new tokens; with the default n_new = 1 the constants would price a decode step) and
    context_length = the session's tokens (``SessionKV.tokens``);
    layer_weight = (L - l) / L for a unit of layer l; a unit of all layers (layer = -1) takes the mean
    over l = 0..L-1, i.e. (L + 1) / (2L);
    position_weight = (chunk + 1) / total_chunks, chunk = the unit's page index in its session (for a
    unit of several pages, its last page: a whole-session unit has weight 1), total_chunks = the
    session's pages (at least the pages the unit reaches).
``pensieve-flat``
    cost = base_cost (no layer or position weight).
``pensieve-physics``
    cost = the unit's real recovery cost from the cost model (``recovery_cost_s``): what it costs to
    have it back if it is evicted from *this* tier. A CPU-tier victim is dropped, so it is the
    recompute time. A GPU-tier victim is demoted to the CPU tier when that tier can hold it (the engine
    demotes iff ``cpu capacity >= unit.size``: every CPU unit is unpinned, so the CPU tier's reclaimable
    bytes are its capacity) and costs the pipelined swap-in time; otherwise it is dropped and costs the
    recompute time. The CPU capacity comes from ``ctx.cpu_kv_bytes`` (None or absent: no CPU tier, GPU
    victims are priced as drops). Transient exception the policy cannot see: during an admission the
    admitted session's own CPU pages are pinned, so a GPU victim may then be dropped although the rule
    says "demoted".

A unit without a session (a ``kvsim cachesim`` object) has context 0 and position weight 1 (and no
tokens to recompute), so the formula variants rank such objects by idle time alone (LRU).

Order, exactly: u goes before v iff cost_u * (now - a_v) < cost_v * (now - a_u) in exact arithmetic on
the float inputs (that is value_u < value_v, extended to an idle time of 0 as value = +inf); ties by
lower cost, then older a, then lower unit key. Costs are computed when a unit becomes a candidate
(everything they depend on is frozen while it is one: the session is not running).

Complexity. The value is time-dependent, so no static heap works. Units sharing ``a`` (all units of a
session are released together; sessions completing in the same iteration too) form a group whose
internal order is static (by cost); the groups' minima are the leaves of a *kinetic tournament*
(Basch-Guibas-Hershberger): each internal node holds the winner of its two children and the time at
which that comparison can next flip (two values m_1/(t - a_1), m_2/(t - a_2) cross at most once, at
t* = (m_1 a_2 - m_2 a_1)/(m_1 - m_2)), and the minimum of those times over its subtree. ``victim(now)``
re-evaluates exactly the nodes whose certificate expired by ``now`` (bottom-up), so it is exact at every
call. Updates are O(log n) (a group heap plus one leaf-to-root path); a query costs O(1 + E log n) for
the E certificates that expired since the previous query, and never more than one evaluation per
node (O(G) for G groups: the catch-up after a long stretch without evictions). Kinetic tournaments
over lines process O(log n) amortised events per update (Basch-Guibas-Hershberger; Agarwal et al.
with insertions and deletions); measured with 100,000 units: a mean of ~3 node evaluations per
decision (``sim/policies/_bench_kv.py``). Comparisons use a float filter with a
proven error bound and fall back to exact rational arithmetic (``fractions``) when it cannot decide;
crossing times are rounded down (conservative), so an early wake-up only costs a re-check. The
clock of one instance must not run backwards (``victim`` raises if it does).

``KineticMin`` also serves ``cost-belady`` (value = cost / (next_access - now)).
"""
from __future__ import annotations

import heapq
import math
from fractions import Fraction
from typing import Callable

from costmodels import BatchShape, attention_pairs, pipelined_time, pipelined_time_uniform
from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.units import Tier

INF = math.inf
_REL = 4e-16        # > 2u(1 + u): relative error of fl(m * fl(t - tau)) (u = 2^-53), with slack
_TINY = 1e-280      # below this the float filter is not trusted (subnormal products)
_CROSS_REL = 1e-15  # margin on a float crossing time (true error < 4u of the same terms)


# -- the kinetic tournament ----------------------------------------------------------------------
class _Group:
    """Units sharing one time ``tau``; their order is static (cost, then key)."""

    __slots__ = ("tau", "heap", "live", "slot", "m", "mkey")

    def __init__(self, tau: float, slot: int) -> None:
        self.tau = tau
        self.heap: list[tuple[float, int, int, object]] = []  # (cost, key, seq, unit), lazy deletion
        self.live: dict[int, float] = {}                       # key -> cost of its current entry
        self.slot = slot
        self.m = INF                                           # (m, mkey): the group's minimum
        self.mkey = -1

    def settle(self) -> None:
        """Drop stale heap tops; set (m, mkey) to the minimum live entry."""
        heap, live = self.heap, self.live
        while heap:
            cost, key, _, _ = heap[0]
            if live.get(key) == cost:
                self.m, self.mkey = cost, key
                return
            heapq.heappop(heap)
        self.m, self.mkey = INF, -1

    def compact(self) -> None:
        if len(self.heap) > 2 * len(self.live) + 16:
            self.heap = [e for e in self.heap if self.live.get(e[1]) == e[0]]
            # an entry may appear twice (re-added with the same cost): keep one
            seen: set[int] = set()
            self.heap = [e for e in self.heap if not (e[1] in seen or seen.add(e[1]))]
            heapq.heapify(self.heap)


def _exact_cross(num: Fraction, den: Fraction, t: float) -> float:
    """The largest float <= num/den, but at least the float after ``t`` (num/den > t is known)."""
    s = num / den
    try:
        f = float(s)
    except OverflowError:
        return INF
    if Fraction(f) > s:
        f = math.nextafter(f, -INF)
    return max(f, math.nextafter(t, INF))


def _cross_time(p1: float, p2: float, den: float, t: float,
                exact: Callable[[], tuple[Fraction, Fraction]]) -> float:
    """A time in (t, s*] with s* = (p1 - p2) / den the crossing (den > 0): conservative."""
    s = (p1 - p2) / den
    lb = s - _CROSS_REL * (abs(s) + (abs(p1) + abs(p2)) / den)
    if lb > t:  # NaN (overflow) compares False and takes the exact path
        return lb
    num, d = exact()
    return _exact_cross(num, d, t)


def _certified_less(x: float, y: float, exact) -> bool | None:
    """x < y for two non-negative products m * (time difference): decided in floats when their gap
    exceeds the rounding bound, else from ``exact()`` (the same two values as Fractions).
    None when they are exactly equal (the caller breaks the tie)."""
    s = x + y
    if s > _TINY:
        d = x - y
        tol = _REL * s
        if d < -tol:
            return True
        if d > tol:
            return False
    xe, ye = exact()
    return None if xe == ye else xe < ye


# "since" mode (Pensieve): value = m / (t - tau), tau <= t; smaller value is evicted first.
def _since_before(g: _Group, h: _Group, t: float) -> bool:
    gm, hm = g.m, h.m
    less = _certified_less(gm * (t - h.tau), hm * (t - g.tau), lambda: (
        Fraction(gm) * (Fraction(t) - Fraction(h.tau)), Fraction(hm) * (Fraction(t) - Fraction(g.tau))))
    if less is not None:
        return less
    return gm < hm or (gm == hm and g.tau < h.tau)


def _since_expiry(w: _Group, x: _Group, t: float) -> float:
    """W wins at t. W's value falls slower than X's only if m_W > m_X; then X wins from
    t* = (m_W a_X - m_X a_W) / (m_W - m_X) on (at equality the tie goes to X, the cheaper)."""
    wm, xm = w.m, x.m
    if wm <= xm:
        return INF
    return _cross_time(wm * x.tau, xm * w.tau, wm - xm, t, lambda: (
        Fraction(wm) * Fraction(x.tau) - Fraction(xm) * Fraction(w.tau), Fraction(wm) - Fraction(xm)))


# "until" mode (cost-belady): value = m / (tau - t); tau = inf: value 0 (never used again);
# tau <= t: value +inf (its turn has arrived: keep). Ties: lower cost, then farther tau.
def _until_tie(g: _Group, h: _Group) -> bool:
    return g.m < h.m or (g.m == h.m and g.tau > h.tau)


def _until_before(g: _Group, h: _Group, t: float) -> bool:
    gt, ht = g.tau, h.tau
    g_due, h_due = gt <= t, ht <= t
    if g_due or h_due:
        return _until_tie(g, h) if (g_due and h_due) else h_due
    if gt == INF or ht == INF:
        g0 = gt == INF or g.m == 0.0
        h0 = ht == INF or h.m == 0.0
        if g0 and h0:
            return _until_tie(g, h)
        return g0
    gm, hm = g.m, h.m
    less = _certified_less(gm * (ht - t), hm * (gt - t), lambda: (
        Fraction(gm) * (Fraction(ht) - Fraction(t)), Fraction(hm) * (Fraction(gt) - Fraction(t))))
    if less is not None:
        return less
    return _until_tie(g, h)


def _until_expiry(w: _Group, x: _Group, t: float) -> float:
    """W wins at t. A due W has a due X behind it (static); a never-used W stays first. A future W
    loses when it falls due (tau_W), or, against a future X with m_X > m_W, from the crossing
    t* = (m_X tau_W - m_W tau_X) / (m_X - m_W) on (at equality the tie still goes to W)."""
    wt, xt = w.tau, x.tau
    if wt <= t or wt == INF:
        return INF
    if t < xt < INF and x.m > w.m:
        wm, xm = w.m, x.m
        cross = _cross_time(xm * wt, wm * xt, xm - wm, t, lambda: (
            Fraction(xm) * Fraction(wt) - Fraction(wm) * Fraction(xt), Fraction(xm) - Fraction(wm)))
        return min(wt, cross)
    return wt


SINCE = (_since_before, _since_expiry)
UNTIL = (_until_before, _until_expiry)


class KineticMin:
    """Units with a cost, grouped by a time ``tau``; ``peek(now)`` gives the minimum under a
    time-dependent order (``SINCE``: cost / (now - tau); ``UNTIL``: cost / (tau - now)).

    Nodes live in flat lists (a segment tree over group slots): ``_win`` the winning group,
    ``_exp`` when that comparison may flip, ``_smin`` the minimum ``_exp`` in the subtree.
    """

    def __init__(self, mode=SINCE, capacity: int = 64) -> None:
        self._before, self._expiry = mode
        self._cap = 1 << max(1, (capacity - 1).bit_length())
        self._win: list[_Group | None] = [None] * (2 * self._cap)
        self._exp: list[float] = [INF] * (2 * self._cap)
        self._smin: list[float] = [INF] * (2 * self._cap)
        self._groups: dict[float, _Group] = {}
        self._free: list[int] = list(range(self._cap - 1, -1, -1))
        self._where: dict[int, _Group] = {}  # unit key -> its group
        self._t = -INF                       # the latest time seen: nodes are valid from here on
        self._seq = 0

    # -- membership ------------------------------------------------------------------------------
    def add(self, unit, cost: float, tau: float, now: float) -> None:
        if not (0.0 <= cost < INF):
            raise ValueError(f"unit {unit.key}: cost must be finite and >= 0, got {cost!r}")
        if tau != tau:
            raise ValueError(f"unit {unit.key}: its time (last or next access) is NaN")
        if now > self._t:
            self._t = now
        key = unit.key
        if key in self._where:
            self.discard(unit)
        g = self._groups.get(tau)
        if g is None:
            if not self._free:
                self._grow()
            g = self._groups[tau] = _Group(tau, self._free.pop())
        self._seq += 1
        heapq.heappush(g.heap, (cost, key, self._seq, unit))
        g.live[key] = cost
        self._where[key] = g
        if cost < g.m or (cost == g.m and key < g.mkey):
            g.m, g.mkey = cost, key
            self._set_leaf(g.slot, g)

    def discard(self, unit) -> bool:
        g = self._where.pop(unit.key, None)
        if g is None:
            return False
        del g.live[unit.key]
        if not g.live:
            del self._groups[g.tau]
            self._free.append(g.slot)
            self._set_leaf(g.slot, None)
        elif unit.key == g.mkey:
            g.settle()
            self._set_leaf(g.slot, g)
        else:
            g.compact()
        return True

    def peek(self, now: float):
        if now < self._t:
            raise ValueError(f"time went backwards: victim(now={now!r}) after {self._t!r}; "
                             "one policy instance follows one simulated clock")
        self._t = now
        if self._smin[1] <= now:
            self._fix(1, now)
        g = self._win[1]
        if g is None:
            return None
        return g.heap[0][3]  # settled: the top is the live minimum

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, unit) -> bool:
        return unit.key in self._where

    def cost_of(self, unit) -> float:
        return self._where[unit.key].live[unit.key]

    def tau_of(self, unit) -> float:
        return self._where[unit.key].tau

    # -- the tournament --------------------------------------------------------------------------
    def _node(self, i: int, t: float) -> None:
        win, exp, smin = self._win, self._exp, self._smin
        left, right = 2 * i, 2 * i + 1
        gl, gr = win[left], win[right]
        if gl is None or gr is None:
            win[i] = gl if gr is None else gr
            e = INF
        elif self._before(gl, gr, t):
            win[i] = gl
            e = self._expiry(gl, gr, t)
        else:
            win[i] = gr
            e = self._expiry(gr, gl, t)
        exp[i] = e
        sl, sr = smin[left], smin[right]
        smin[i] = min(e, sl if sl < sr else sr)

    def _set_leaf(self, slot: int, g: _Group | None) -> None:
        i = self._cap + slot
        self._win[i] = g
        t = self._t
        i >>= 1
        while i:
            self._node(i, t)
            i >>= 1

    def _fix(self, i: int, now: float) -> None:
        """Re-evaluate, bottom-up, every node of the subtree whose certificate expired by ``now``."""
        if i < self._cap:
            smin = self._smin
            if smin[2 * i] <= now:
                self._fix(2 * i, now)
            if smin[2 * i + 1] <= now:
                self._fix(2 * i + 1, now)
            self._node(i, now)

    def _grow(self) -> None:
        old = self._cap
        cap = 2 * old
        leaves = self._win[old:2 * old]
        self._cap = cap
        self._win = [None] * cap + leaves + [None] * old
        self._exp = [INF] * (2 * cap)
        self._smin = [INF] * (2 * cap)
        self._free.extend(range(cap - 1, old - 1, -1))
        t = self._t
        for i in range(cap - 1, 0, -1):
            self._node(i, t)


# -- recovery costs from the cost model ------------------------------------------------------------
def recompute_s(cost, unit, block_tokens: int) -> float:
    """Seconds to recompute ``unit`` in the prefill of its session's next turn (calibration-notes
    s2.7, the marginal form: the dropped span joins that prefill's new tokens): per layer,
    n * 2P/F (GEMM slope) + elementwise(n) + attention_pairs(n, tokens before it) * 4*H_q*d/F_attn,
    over L layers for a unit of all layers and over layers 0..l for a unit of layer l (its hidden
    state at layer l needs the forward pass through the layers before it). n = its real tokens."""
    model, prof = cost.model, cost.profile
    n = unit.tokens(unit.session.tokens, block_tokens) if unit.session is not None else 0
    if n <= 0:
        return 0.0
    per_layer = (n * 2.0 * model.linear_params_per_layer / prof.linear.flops + cost.elementwise_s(n)
                 + attention_pairs(n, unit.first_page * block_tokens)
                 * 4.0 * model.num_heads * model.head_dim / prof.prefill_attn.flops)
    layers = model.num_layers if unit.layer < 0 else unit.layer + 1
    return layers * per_layer


def swap_in_s(cost, unit, block_tokens: int) -> float:
    """Seconds a swap-in of ``unit`` adds to the iteration that brings it back, layer-wise
    pipelined (DESIGN.md 3; calibration-notes s2.6): the stall T - L*t_c, with the copy priced by
    ``copy_s('h2d', size, copies)`` (one copy per page per layer) and t_c the per-layer compute of
    the smallest turn that uses it, a one-page append after the session's context. A unit of all
    layers spreads its copy evenly over the layers; a unit of layer l copies only for layer l, which
    hides behind layers 0..l-1. Without layer-wise H2D in the profile: the whole copy time."""
    model = cost.model
    L = model.num_layers
    copies = unit.pages * (L if unit.layer < 0 else 1)
    t_copy = cost.copy_s("h2d", unit.size, copies)
    overlap = cost.profile.overlap
    if not overlap.layerwise_h2d:
        return t_copy
    t_c = cost.layer_s(BatchShape.prefill(block_tokens, _tokens(unit)))
    if unit.layer < 0:
        total = pipelined_time_uniform(L, t_copy / L, t_c, overlap.compute_slowdown)
    else:
        xs = [0.0] * L
        xs[unit.layer] = t_copy
        total = pipelined_time(xs, [t_c] * L, overlap.compute_slowdown)
    return max(0.0, total - L * t_c)


def _tokens(unit) -> int:
    return unit.session.tokens if unit.session is not None else 0


def recovery_cost_s(ctx, unit) -> float:
    """What evicting ``unit`` from ``ctx.tier`` costs to undo (see the module docstring)."""
    if _dropped_from(ctx, unit):
        return recompute_s(ctx.cost, unit, ctx.block_tokens)
    return swap_in_s(ctx.cost, unit, ctx.block_tokens)


def _dropped_from(ctx, unit) -> bool:
    if ctx.tier != Tier.GPU:
        return True
    cpu = getattr(ctx, "cpu_kv_bytes", None)
    return cpu is None or cpu < unit.size


def _need_cost(ctx, name: str):
    if ctx.cost is None:
        raise ValueError(f"policy {name!r} needs PolicyContext.cost (a costmodels.CostModel)")
    return ctx.cost


# -- the policies --------------------------------------------------------------------------------
class KineticPolicy(EvictionPolicy):
    """A policy whose order is a ``KineticMin``: subclasses give each candidate a cost and a time."""

    mode = SINCE

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._kin = KineticMin(self.mode)

    def unit_cost(self, unit) -> float:
        raise NotImplementedError

    def unit_time(self, unit, now: float) -> float:
        """The time ``tau`` of a unit that becomes a candidate at ``now``."""
        raise NotImplementedError

    def hit_time(self, unit, now: float) -> float:
        """Its time after a hit at ``now`` (cachesim hits a candidate; the engine pins right after)."""
        raise NotImplementedError

    def _add(self, unit, now: float) -> None:
        self._kin.add(unit, self.unit_cost(unit), self.unit_time(unit, now), now)

    def access(self, unit, now: float) -> None:
        if unit in self._kin:
            self._kin.add(unit, self._kin.cost_of(unit), self.hit_time(unit, now), now)

    def _discard(self, unit) -> None:
        self._kin.discard(unit)

    def acquire(self, units, now: float) -> None:
        # a hit then a pin leaves nothing behind: the units simply stop being candidates
        for unit in units:
            self._kin.discard(unit)

    def victim(self, now: float):
        return self._kin.peek(now)

    def __len__(self) -> int:
        return len(self._kin)

    def __contains__(self, unit) -> bool:
        return unit in self._kin


class _Retention(KineticPolicy):
    """Lowest cost / time-inactive first; subclasses define ``unit_cost``."""

    mode = SINCE

    def unit_time(self, unit, now: float) -> float:
        a = unit.last_access_s
        return a if a < now else now

    def hit_time(self, unit, now: float) -> float:
        return now

    def value(self, unit, now: float) -> float:
        """The retention value of a candidate at ``now`` (for notebooks and tests)."""
        idle = now - self._kin.tau_of(unit)
        c = self._kin.cost_of(unit)
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

    def base_cost(self, unit) -> float:
        return self._alpha * _tokens(unit) + self._beta0

    def layer_weight(self, unit) -> float:
        return self._mean_layer_weight if unit.layer < 0 else (self._L - unit.layer) / self._L

    def position_weight(self, unit) -> float:
        sess = unit.session
        if sess is None:
            return 1.0
        last = unit.first_page + max(unit.pages, 1)        # pages [first, last): chunk = last - 1
        total = max(sess.pages(self.ctx.block_tokens), last, 1)
        return last / total

    def unit_cost(self, unit) -> float:
        base = self.base_cost(unit)
        if not self.weighted:
            return base
        return self.layer_weight(unit) * self.position_weight(unit) * base


@register("pensieve")
class Pensieve(_PensieveFormula):
    weighted = True


@register("pensieve-flat")
class PensieveFlat(_PensieveFormula):
    weighted = False


@register("pensieve-physics")
class PensievePhysics(_Retention):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        _need_cost(ctx, self.name)

    def unit_cost(self, unit) -> float:
        return recovery_cost_s(self.ctx, unit)
