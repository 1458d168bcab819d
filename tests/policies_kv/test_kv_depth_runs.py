"""pensieve-depth's runs of one page's victims in ``evict_bytes`` (hypothesis): each victim against
a brute-force minimum of the value (every candidate priced from the session's tier array and the
call's victims so far, compared exactly), and the run form against the same policy taking its
victims one at a time (same victims, and after every call the same candidates, costs, times and
stale pages), under random calls at the drop tier: batches and single inserts, removals, hits,
turns and evictions of one unit to a few pages."""

from __future__ import annotations

import functools
from fractions import Fraction

from hypothesis import example, given, settings
from hypothesis import strategies as st

from costmodels import cost_model, recompute_s
from sim.policies import PolicyContext
from sim.policies.pensieve_depth import PensieveDepth, _consecutive_tail
from sim.units import SessionKV, Tier, UnitView, extents_of, uid_of

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16
UNIT = 4096  # one page of one layer, in the view's bytes


class OneByOne(PensieveDepth):
    """The same policy with no runs: every victim through the tournament's minimum."""

    takes_runs = False


def reference_cost(pol: PensieveDepth, u: int, mine: list[int]) -> float:
    """The cost of dropping ``u`` now: the page's depth from the tier array and ``mine``."""
    layers = pol.view.layers
    idx = u & 0xFFFFFF
    page, layer = idx // layers, layers - 1 - idx % layers
    sess = pol.view.session(u)
    row = sess.tier[page * layers : (page + 1) * layers]
    first = u - idx % layers
    depth = max(
        [layers - 1 - j for j in range(layers) if row[j] == Tier.DROPPED]
        + [layers - 1 - (v - first) for v in mine if first <= v < first + layers]
        + [-1]
    )
    lo = page * BT
    r = recompute_s(COST, max(0, min(sess.tokens, lo + BT) - lo), lo, 0)
    return (layer - depth) * r if layer > depth else 0.0


def brute_victims(pol: PensieveDepth, n: int, now: float) -> list[int]:
    """The ``n`` successive minima of the value at ``now``, each priced anew after each victim."""
    cands = pol.candidates()
    tau = {u: Fraction(pol.tau_of(u)) for u in cands}
    t = Fraction(now)
    mine: list[int] = []
    while cands and len(mine) < n:
        cost = {u: Fraction(reference_cost(pol, u, mine)) for u in cands}

        def cmp(u: int, v: int) -> int:
            x, y = cost[u] * (t - tau[v]), cost[v] * (t - tau[u])
            if x != y:
                return -1 if x < y else 1
            return -1 if (cost[u], tau[u], u) < (cost[v], tau[v], v) else 1

        best = min(cands, key=functools.cmp_to_key(cmp))
        mine.append(best)
        cands.remove(best)
    return mine


def state(pol: PensieveDepth) -> tuple:
    """The tournament's entries, and each page's cohorts."""
    kin = pol._kin
    return (
        {u: (kin.cost_of(u), kin.tau_of(u)) for u in kin.uids()},
        {
            page: sorted((list(c.members), c.tau, c.front, c.cost) for c in cohorts)
            for page, cohorts in pol._pages.items()
        },
    )


def check_cohorts(pol: PensieveDepth, cands: set[int]) -> None:
    """The cohorts against a plain model: their members are the candidates, each once, by page
    and time, ascending; each cohort's first is its minimum by (true cost, uid), and the
    tournament holds the firsts alone, at those costs."""
    assert len(pol) == len(cands)
    assert sorted(pol.candidates()) == sorted(cands)
    fronts = {}
    for page, cohorts in pol._pages.items():
        assert cohorts, page
        assert len({c.tau for c in cohorts}) == len(cohorts)
        for c in cohorts:
            members = list(c.members)
            assert members and members == sorted(set(members))
            assert all(pol._page(u) == page for u in members)
            best = min(members, key=lambda u: (pol.unit_cost(u), u))
            assert (c.front, c.cost) == (best, pol.unit_cost(best))
            fronts[best] = (c.cost, c.tau)
    kin = pol._kin
    assert {u: (kin.cost_of(u), kin.tau_of(u)) for u in kin.uids()} == fronts


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["release", "insert", "remove", "leave", "hit", "turn", "evict", "evict", "one", "ext"]
        ),
        st.integers(0, 2),  # session
        st.sampled_from([0.0, 0.0, 0.5, 3.0]),  # time passing before it
        st.integers(0, 1 << 30),  # which units / how many
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.lists(st.integers(1, 4 * BT), min_size=3, max_size=3), OPS)
@example(  # a page's last layer released alone, earlier: its victim is not of its page's time
    8,
    [1, 1, 17],
    [("release", 2, 0.5, 6 | 1 << 10), ("release", 2, 0.0, 1), ("evict", 0, 0.0, 1)],
)
def test_page_runs_are_the_minima_one_at_a_time(layers, tokens, ops):
    worlds = []
    for cls in (PensieveDepth, OneByOne):
        kv = [SessionKV(i, f"s{i}", 0) for i in range(3)]
        for s, n in zip(kv, tokens, strict=True):
            s.tokens = n
            s.tier = bytearray([Tier.CPU]) * (s.pages(BT) * layers)  # none a candidate yet
        view = UnitView(kv, UNIT, layers=layers)
        ctx = PolicyContext(Tier.CPU, BT, COST.model.num_layers, view, COST)
        worlds.append((kv, cls(ctx), set()))
    now = 0.0
    for kind, si, dt, pick in ops:
        now += dt
        outs, states = [], []
        for kv, pol, model in worlds:
            s = kv[si]
            units = [uid_of(si, i) for i in range(len(s.tier)) if s.tier[i] == Tier.CPU]
            free = [u for u in units if u not in pol]
            cands = [u for u in units if u in pol]
            out: object = None
            if kind in ("release", "insert") and free:
                if pick & 1:
                    s.last_access_s = now
                chosen = free  # often whole pages (the engine's release), else some units
                if pick & 6 == 6:
                    chosen = [u for k, u in enumerate(free) if pick >> (3 + k % 27) & 1] or free
                if kind == "release":  # all of them as a range, as the engine gives them
                    whole = len(chosen) == len(s.tier)
                    pol.release(range(chosen[0], chosen[-1] + 1) if whole else chosen, now)
                else:
                    for u in chosen:
                        pol.insert(u, now)
                model.update(chosen)
            elif kind == "remove" and cands:  # moved to the GPU, not as a victim
                u = pol.peek(now) if pick & 1 else cands[pick % len(cands)]
                if u is not None:
                    pol.remove(u)
                    kv[u >> 24].tier[u & 0xFFFFFF] = Tier.GPU
                    model.discard(u)
            elif kind == "leave" and cands:  # a span of units moved, across pages
                a = pick % len(s.tier)
                b = a + 1 + (pick >> 8) % (len(s.tier) - a)
                span = range(uid_of(si, a), uid_of(si, b))
                pol.remove_many(span)
                for u in span:
                    if s.tier[u & 0xFFFFFF] == Tier.CPU:
                        s.tier[u & 0xFFFFFF] = Tier.GPU
                model.difference_update(span)
            elif kind == "hit" and cands:
                pol.access(cands[pick % len(cands)], now)
            elif kind == "turn":  # the session's units come back, its tokens grow
                pol.acquire(
                    range(uid_of(si, 0), uid_of(si, len(s.tier))) if pick & 1 else cands, now
                )
                model.difference_update(cands)
                s.tokens += pick % (2 * BT)
                s.tier = bytearray([Tier.CPU]) * (s.pages(BT) * layers)
            elif kind in ("evict", "one"):
                n = 1 if kind == "one" else 1 + pick % (2 * layers + 3)
                want = brute_victims(pol, n, now)
                out = pol.evict_bytes(n * UNIT, now) if kind == "evict" else [pol.evict(now)]
                if out == [None]:
                    out = []
                assert out == want, (type(pol).__name__, now, n, out, want)
                for v in out:
                    kv[v >> 24].tier[v & 0xFFFFFF] = Tier.DROPPED
                model.difference_update(out)
            elif kind == "ext":  # the same victims as increasing extents (they are dropped)
                n = 1 + pick % (2 * layers + 3)
                want = brute_victims(pol, n, now)
                out = pol.evict_extents(n * UNIT, now)
                assert out == extents_of(sorted(want)), (type(pol).__name__, now, n, out, want)
                for a, b in out:
                    for v in range(a, b):
                        kv[v >> 24].tier[v & 0xFFFFFF] = Tier.DROPPED
                model.difference_update(want)
            check_cohorts(pol, model)
            outs.append(out)
            states.append(state(pol))
        assert outs[0] == outs[1]
        assert states[0] == states[1]


@given(st.lists(st.integers(0, 40), min_size=1, unique=True), st.integers(1, 50))
def test_consecutive_tail_is_the_plain_count(uids, n):
    uids.sort()
    k = 1
    while k < min(n, len(uids)) and uids[-k - 1] == uids[-k] - 1:
        k += 1
    assert _consecutive_tail(uids, n) == k


NO_DROPS_OPS = st.lists(
    st.tuples(
        st.sampled_from(["release", "turn", "evict", "extents", "one"]),
        st.integers(0, 2),  # session
        st.sampled_from([0.0, 0.5, 3.0]),  # time passing before it
        st.integers(0, 1 << 20),  # how many
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([(1, False), (1, True), (4, True)]), NO_DROPS_OPS)
def test_no_drop_tiers_are_pensieve_physics(tier, ops):
    # Where no depth is shared (units of all layers; the copy tier, with a CPU tier that holds a
    # unit) pensieve-depth is made as pensieve-physics with its batches: the same victims.
    from sim.policies import make_policy
    from sim.policies.pensieve import PensievePhysics

    layers, copy_tier = tier
    worlds = []
    for name in ("pensieve-depth", "pensieve-physics"):
        kv = [SessionKV(i, f"s{i}", 0) for i in range(3)]
        for s in kv:
            s.tokens = 3 * BT
            s.tier = bytearray([Tier.GPU]) * (s.pages(BT) * layers)
        view = UnitView(kv, UNIT, layers=layers)
        cpu = 1 << 30 if copy_tier else None
        ctx = PolicyContext(Tier.GPU, BT, COST.model.num_layers, view, COST, cpu)
        worlds.append((kv, make_policy(name, ctx)))
    pol = worlds[0][1]
    assert isinstance(pol, PensieveDepth) and not pol._drops
    assert type(pol).grows_by_time and type(pol).evict_bytes is PensievePhysics.evict_bytes
    now = 0.0
    for kind, si, dt, pick in ops:
        now += dt
        outs = []
        for kv, pol in worlds:
            units = range(uid_of(si, 0), uid_of(si, len(kv[si].tier)))
            kv[si].last_access_s = now
            out: object = None
            if kind == "release":
                pol.release(units, now)
            elif kind == "turn":
                pol.acquire(units, now)
            elif kind == "evict":
                out = pol.evict_bytes((1 + pick % 9) * UNIT, now)
            elif kind == "extents":
                out = pol.evict_extents((1 + pick % 9) * UNIT, now)
            else:
                out = pol.evict(now)
            outs.append((out, len(pol)))
        assert outs[0] == outs[1]
