"""pensieve-depth: hand-worked values and orders of (page, layer) units at the drop tier and the
copy tier, and exactness of its victims (with depth shared inside a page) against a brute-force
minimum, through the real engine.

The hand cases use a 2-layer model with Llama-3-8B's layer shapes and a hand-written profile, so
every number below can be checked with a pencil:

    h = 4096, H_q = 32, K = 8, d = 128, I = 14336 (gated), bf16; block_tokens = 16
    P (linear parameters per layer) = h*H_q*d + 2*h*K*d + H_q*d*h + 3*h*I = 218,103,808
    a page of one layer = 16 tokens * 2 (K, V) * K * d * 2 bytes = 65,536 bytes

Recompute of one page through one layer (``costmodels.recompute_s``, layer 0) at n = 16 tokens
after b tokens: n * 2P / F_lin + n * e / B_ew + n (b + n/2) * 4 H_q d / F_attn, with F_lin = 5e14,
F_attn = 2e14, B_ew = 1e12 and e = 196,608 elementwise bytes per token and layer:

    r_0 (page 0, b = 0)  = 1.3958643712e-5 + 3.145728e-6 + 128 * 8.192e-11 = 1.711485747200e-5
    r_1 (page 1, b = 16) = 1.3958643712e-5 + 3.145728e-6 + 384 * 8.192e-11 = 1.713582899200e-5

Swap-in of one layer's page: t_copy = 10e-6 + 65,536 / 0.25e9 = 2.72144e-4 (the h2d term below),
behind the per-layer compute t_c of a one-page append after the session's 32 tokens:
t_c = linear (10e-6 + max(P*2/2e12, 16*2P/5e14) = 2.28103808e-4) + elementwise (3.145728e-6)
+ attention (its key-read floor 20e-6 + 48 * 4096 / 1e12 = 2.0196608e-5, above the FLOPs form
20e-6 + 640 * 8.192e-11) = 2.51446144e-4. Pipelined (X_l = X_(l-1) + copy, C_l = max(C_(l-1), X_l)
+ t_c), the stall over 2 t_c is t_copy for layer 0 (nothing to hide behind) and
t_copy - t_c = 2.0697856e-5 for layer 1.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import pytest
from cost_hand import MODEL as HAND_MODEL
from cost_hand import PROFILE as HAND_PROFILE

from costmodels import BatchShape, cost_model, recompute_s, swap_in_s
from sim import MemoryConfig, simulate
from sim.memory import TieredMemory
from sim.policies import PolicyContext, make_policy
from sim.policies.pensieve import PensievePhysics
from sim.policies.pensieve_depth import PensieveDepth
from sim.units import SessionKV, Tier, UnitView, layer_codes
from traces import load_trace


def _swap(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) == count, (old, text)
    return text.replace(old, new)


# The cost tests' hand-written model with two layers, and their profile with a link 100 times
# slower (0.25 GB/s), so that one layer's page copy outlasts a layer's compute.
MODEL = _swap(_swap(HAND_MODEL, "name: tiny-3", "name: tiny-2"), "num_layers: 3", "num_layers: 2")
PROFILE = _swap(HAND_PROFILE, "bw_Bps: 25.0e9}", "bw_Bps: 0.25e9}", count=2)

BT, L = 16, 2
UNIT = 65_536
R0, R1 = 1.711485747200e-5, 1.713582899200e-5
T_COPY, T_C = 2.72144e-4, 2.51446144e-4


@pytest.fixture(scope="module")
def cost(tmp_path_factory):
    d = tmp_path_factory.mktemp("hand")
    (d / "tiny.yaml").write_text(MODEL)
    (d / "hand.yaml").write_text(PROFILE)
    return cost_model(d / "tiny.yaml", d / "hand.yaml")


def test_hand_numbers_are_the_cost_models(cost):
    m = cost.model
    assert m.linear_params_per_layer == 218_103_808
    assert m.elementwise_bytes_per_token_layer == 196_608
    assert BT * cost.kv_bytes_per_token // L == UNIT
    assert recompute_s(cost, BT, 0, 0) == pytest.approx(R0, rel=1e-12)
    assert recompute_s(cost, BT, BT, 0) == pytest.approx(R1, rel=1e-12)
    assert cost.copy_s("h2d", UNIT, 1) == pytest.approx(T_COPY, rel=1e-12)
    assert cost.layer_s(BatchShape.prefill(BT, 2 * BT)) == pytest.approx(T_C, rel=1e-12)
    assert swap_in_s(cost, UNIT, 1, 2 * BT, BT, 0) == pytest.approx(T_COPY, rel=1e-12)
    assert swap_in_s(cost, UNIT, 1, 2 * BT, BT, 1) == pytest.approx(T_COPY - T_C, rel=1e-9)


# -- the engine's memory over hand-placed sessions -------------------------------------------------
def memory(cost, name: str, gpu_units: int, cpu_units: int, sessions: int):
    kv = [SessionKV(i, f"s{i}", 0) for i in range(sessions)]
    view = UnitView(kv, UNIT, layers=L)
    pols = [
        make_policy(
            name,
            PolicyContext(
                tier=t,
                block_tokens=BT,
                num_layers=L,
                view=view,
                cost=cost,
                cpu_kv_bytes=cpu_units * UNIT if cpu_units else None,
            ),
        )
        for t in (Tier.GPU, Tier.CPU)
    ]
    return TieredMemory(gpu_units * UNIT, cpu_units * UNIT, pols[0], pols[1], view), kv


def run_turn(mem: TieredMemory, sess: SessionKV, pages: int, t: float) -> None:
    """A turn of ``sess`` that leaves ``pages`` pages on the GPU, released at ``t``."""
    mem.acquire(sess, t)
    mem.add_units(sess, pages, t)
    sess.tokens = pages * BT
    sess.last_access_s = t
    mem.release(sess, t)


def grid(sess: SessionKV) -> list[str]:
    """Each page's tiers by layer (layer 0 first): G(PU), C(PU), D(ropped)."""
    return ["".join("GCD"[t] for t in row) for row in layer_codes(sess, L).tolist()]


def uid(sess: SessionKV, page: int, layer: int) -> int:
    return (sess.index << 24) | (page * L + L - 1 - layer)


def test_drop_tier_one_session_two_pages(cost):
    # No CPU tier: victims are dropped. One session, 2 pages x 2 layers, idle 10 s at t = 10.
    # Costs before any drop (D = -1): (page, layer 0) = r_p, (page, layer 1) = 2 r_p.
    #   (0,0) r_0 = 1.7115e-5   (0,1) 2 r_0   (1,0) r_1 = 1.7136e-5   (1,1) 2 r_1
    # Dropping (0,0) makes page 0's depth 0: (0,1) now adds one layer, r_0 < r_1, so it goes
    # next, then page 1 front to back. pensieve-physics, which prices each layer alone, takes
    # (1,0) second (r_1 < 2 r_0) and so touches both pages after two drops.
    mem, (a,) = memory(cost, "pensieve-depth", gpu_units=4, cpu_units=0, sessions=1)
    run_turn(mem, a, 2, 0.0)
    pol = mem.policy[Tier.GPU]
    assert isinstance(pol, PensieveDepth)
    want = {(0, 0): R0, (0, 1): 2 * R0, (1, 0): R1, (1, 1): 2 * R1}
    for (page, layer), c in want.items():
        assert pol.unit_cost(uid(a, page, layer)) == pytest.approx(c, rel=1e-12)
        assert pol.value(uid(a, page, layer), 10.0) == pytest.approx(c / 10, rel=1e-12)
    assert pol.peek(10.0) == uid(a, 0, 0)
    assert mem.make_room(UNIT, 10.0) and grid(a) == ["DG", "GG"]
    # page 0 is recomputed through layer 0 now: its layer 1 adds r_0 (not 2 r_0)
    assert pol.value(uid(a, 0, 1), 10.0) == pytest.approx(R0 / 10, rel=1e-12)
    assert pol.value(uid(a, 1, 0), 10.0) == pytest.approx(R1 / 10, rel=1e-12)
    assert mem.make_room(3 * UNIT, 10.0) and grid(a) == ["DD", "DG"]  # 3 units free
    assert pol.value(uid(a, 1, 1), 10.0) == pytest.approx(R1 / 10, rel=1e-12)

    phys, (b,) = memory(cost, "pensieve-physics", gpu_units=4, cpu_units=0, sessions=1)
    run_turn(phys, b, 2, 0.0)
    assert phys.make_room(2 * UNIT, 10.0) and grid(b) == ["DG", "DG"]


def test_drop_tier_in_one_batch_is_the_same_order(cost):
    # The three victims above, chosen in one make-room call (the engine moves them afterwards):
    # the policy must remember its own drop of (0,0) within the call.
    mem, (a,) = memory(cost, "pensieve-depth", gpu_units=4, cpu_units=0, sessions=1)
    run_turn(mem, a, 2, 0.0)
    got = mem.policy[Tier.GPU].evict_bytes(3 * UNIT, 10.0)
    assert got == [uid(a, 0, 0), uid(a, 0, 1), uid(a, 1, 0)]


def test_drop_tier_two_sessions_one_page_idle_times_divide(cost):
    # A (idle 10 s) and B (idle 5 s), one page each (page 0: r_0 both), at t = 10:
    #   values A0 = r_0/10, A1 = 2 r_0/10, B0 = r_0/5, B1 = 2 r_0/5.
    # After A0 goes, A1 adds one layer: r_0/10 < B0's r_0/5, so A1 goes next: A0, A1, B0, B1.
    # pensieve-physics: A1 (2 r_0/10) ties B0 (r_0/5) and loses on cost: A0, B0, A1, B1.
    mem, (a, b) = memory(cost, "pensieve-depth", gpu_units=4, cpu_units=0, sessions=2)
    run_turn(mem, a, 1, 0.0)
    run_turn(mem, b, 1, 5.0)
    pol = mem.policy[Tier.GPU]
    assert pol.value(uid(b, 0, 0), 10.0) == pytest.approx(R0 / 5, rel=1e-12)
    assert pol.value(uid(a, 0, 1), 10.0) == pytest.approx(2 * R0 / 10, rel=1e-12)
    order = pol.evict_bytes(4 * UNIT, 10.0)
    assert order == [uid(a, 0, 0), uid(a, 0, 1), uid(b, 0, 0), uid(b, 0, 1)]

    phys, (c, d) = memory(cost, "pensieve-physics", gpu_units=4, cpu_units=0, sessions=2)
    run_turn(phys, c, 1, 0.0)
    run_turn(phys, d, 1, 5.0)
    order = phys.policy[Tier.GPU].evict_bytes(4 * UNIT, 10.0)
    assert order == [uid(c, 0, 0), uid(d, 0, 0), uid(c, 0, 1), uid(d, 0, 1)]


def test_copy_tier_one_session_two_pages(cost):
    # A CPU tier with room: GPU victims are demoted, each priced by its pipelined swap-in stall,
    # layer 1 = t_copy - t_c = 2.0697856e-5, layer 0 = t_copy = 2.72144e-4, the same for both
    # pages (the same append brings them back). Back layers first, ties by uid (page order):
    # (0,1), (1,1), (0,0), (1,0). Demotion drops nothing, so depth plays no part.
    mem, (a,) = memory(cost, "pensieve-depth", gpu_units=4, cpu_units=8, sessions=1)
    run_turn(mem, a, 2, 0.0)
    pol = mem.policy[Tier.GPU]
    for page in (0, 1):
        assert pol.unit_cost(uid(a, page, 1)) == pytest.approx(T_COPY - T_C, rel=1e-9)
        assert pol.unit_cost(uid(a, page, 0)) == pytest.approx(T_COPY, rel=1e-12)
        assert pol.value(uid(a, page, 0), 10.0) == pytest.approx(T_COPY / 10, rel=1e-12)
    assert mem.make_room(2 * UNIT, 10.0) and grid(a) == ["GC", "GC"]
    assert mem.make_room(3 * UNIT, 10.0) and grid(a) == ["CC", "GC"]
    # the CPU tier's policy prices the same units as drops: (0,0) r_0, (0,1) 2 r_0, (1,1) 2 r_1
    cpu = mem.policy[Tier.CPU]
    assert cpu.unit_cost(uid(a, 0, 0)) == pytest.approx(R0, rel=1e-12)
    assert cpu.unit_cost(uid(a, 0, 1)) == pytest.approx(2 * R0, rel=1e-12)
    assert cpu.unit_cost(uid(a, 1, 1)) == pytest.approx(2 * R1, rel=1e-12)


def test_cpu_tier_drops_share_depth_with_a_demotion_that_arrives_later(cost):
    # CPU room for 2 units. Demote (0,1) and (1,1) (back layers first), then (0,0): the CPU tier
    # is full and must drop one of (0,1) 2 r_0, (1,1) 2 r_1 before (0,0) enters: (0,1). Then
    # (0,0) enters a page whose depth is 1: it costs nothing to drop, and goes before (1,1).
    mem, (a,) = memory(cost, "pensieve-depth", gpu_units=4, cpu_units=2, sessions=1)
    run_turn(mem, a, 2, 0.0)
    assert mem.make_room(2 * UNIT, 10.0) and grid(a) == ["GC", "GC"]
    assert mem.make_room(3 * UNIT, 11.0) and grid(a) == ["CD", "GC"]
    cpu = mem.policy[Tier.CPU]
    assert cpu.unit_cost(uid(a, 0, 0)) == 0.0
    assert cpu.peek(12.0) == uid(a, 0, 0)


# -- exactness through the engine ------------------------------------------------------------------
class Checked(PensieveDepth):
    """pensieve-depth that checks each victim against the brute-force minimum of the value at the
    moment of choosing, compared exactly as cross products (ties by cost, then older time, then
    uid). The reference prices each candidate itself: at the drop tier, the page's depth from the
    session's tier array and the victims chosen so far in this call; at the copy tier,
    pensieve-physics's swap-in price."""

    checked = 0

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.mine: list[int] = []  # this call's victims

    def reference_cost(self, u: int) -> float:
        if not self._drops:
            return PensievePhysics.unit_cost(self, u)
        layers = self.view.layers
        idx = u & 0xFFFFFF
        page, layer = idx // layers, layers - 1 - idx % layers
        sess = self.view.session(u)
        row = sess.tier[page * layers : (page + 1) * layers]
        first = u - idx % layers  # the page's first uid
        depth = max(
            [layers - 1 - j for j in range(layers) if row[j] == Tier.DROPPED]
            + [layers - 1 - (v - first) for v in self.mine if first <= v < first + layers]
            + [-1]
        )
        bt = self.ctx.block_tokens
        lo = page * bt
        r = recompute_s(self.ctx.cost, min(sess.tokens, lo + bt) - lo, lo, 0)
        return (layer - depth) * r if layer > depth else 0.0

    def minimum(self, cands: list[int], now: float, taus: dict | None = None) -> int | None:
        """The brute-force minimum of ``cands`` at ``now``, priced after this call's victims
        (``taus``: their times, where they are no longer candidates)."""
        if not cands:
            return None
        cost = {u: Fraction(self.reference_cost(u)) for u in cands}
        tau = {u: Fraction(self.tau_of(u) if taus is None else taus[u]) for u in cands}
        t = Fraction(now)

        def cmp(u: int, v: int) -> int:
            x, y = cost[u] * (t - tau[v]), cost[v] * (t - tau[u])
            if x != y:
                return -1 if x < y else 1
            return -1 if (cost[u], tau[u], u) < (cost[v], tau[v], v) else 1

        return min(cands, key=functools.cmp_to_key(cmp))

    def _choose(self, now: float) -> int | None:
        if self._drops:  # checked in ``_take``
            return super()._choose(now)
        want = self.minimum(self.candidates(), now)
        assert self.peek(now) == want
        got = super()._choose(now)
        assert got == want, f"t={now}: chose {got}, the minimum is {want}"
        Checked.checked += 1
        return got

    def _take(self, now: float):
        want = self.minimum(self.candidates(), now)
        assert self.peek(now) == want
        taken = super()._take(now)
        got = None if taken is None else taken[0]
        assert got == want, f"t={now}: chose {got}, the minimum is {want}"
        if got is not None:
            self.mine.append(got)
        Checked.checked += 1
        return taken

    def _run(self, page, c, uid, cost, deeper, depth, r, n):
        # each victim of a run is the minimum of the candidates left, itself among them
        cands = self.candidates()  # the run's victims among them
        taus = {u: self.tau_of(u) for u in cands}
        run, depth = super()._run(page, c, uid, cost, deeper, depth, r, n)
        for v in run:
            gone = set(self.mine)
            want = self.minimum([u for u in cands if u not in gone], self.t, taus)
            assert v == want, f"t={self.t}: a run took {v}, the minimum is {want}"
            self.mine.append(v)
            Checked.checked += 1
        return run, depth

    def _evict_runs(self, nbytes: int, now: float):
        self.t = now
        return super()._evict_runs(nbytes, now)

    def _done(self) -> None:
        super()._done()
        self.mine.clear()


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
@pytest.mark.parametrize("cpu_gb", [0.0, 0.01])
def test_every_victim_is_the_minimum_in_a_run(cost, cpu_gb):
    # 2-layer model: a page of both layers is 128 KiB; 0.03 GiB holds 240 pages.
    Checked.checked = 0
    trace = load_trace({"kind": "synthetic", "sessions": 12, "seed": 4}).sessions
    res = simulate(
        trace,
        cost,
        MemoryConfig(gpu_kv_gb=0.03, cpu_kv_gb=cpu_gb, block_tokens=BT, evict_unit="layer_block"),
        policy=f"{__name__}:Checked",
        seed=1,
    )
    assert Checked.checked > 200
    assert res.turns.dropped_layer_units.sum() > 0


@pytest.mark.parametrize("seed", range(6))
def test_every_victim_is_the_minimum_under_random_calls(cost, seed):
    # The calls the engine does not make on layer units, but a driver may: a candidate taken
    # away alone (its page's next one must get its true cost), a hit that gives one unit of a
    # stale page a time of its own, units joining a stale page with another time. Victims are
    # dropped in the session's tier array after each call, as the engine does.
    import random

    rng = random.Random(seed)
    layers = 4
    kv = [SessionKV(i, f"s{i}", 0) for i in range(5)]
    view = UnitView(kv, UNIT, layers=layers)
    for s in kv:
        s.tokens = rng.randint(1, 4) * BT - rng.randint(0, BT - 1)
        s.tier = bytearray(b"\x01" * (s.pages(BT) * layers))  # all on the CPU, none a candidate
    pol = Checked(
        PolicyContext(tier=Tier.CPU, block_tokens=BT, num_layers=layers, view=view, cost=cost)
    )
    Checked.checked = 0
    now = 0.0
    for _ in range(1500):
        now += rng.choice([0.0, 0.5, 3.0])
        s = rng.choice(kv)
        base = s.index << 24
        units = [base + i for i in range(len(s.tier)) if s.tier[i] == 1]
        op = rng.random()
        if op < 0.3 and units:  # some of its CPU units become candidates
            s.last_access_s = now if rng.random() < 0.5 else s.last_access_s
            pick = [u for u in units if u not in pol and rng.random() < 0.6]
            if rng.random() < 0.5:
                pol.release(pick, now)
            else:
                for u in pick:
                    pol.insert(u, now)
        elif op < 0.4 and units:  # one leaves, not as a victim (moved to the GPU)
            u = rng.choice(units) if rng.random() < 0.5 else pol.peek(now)  # often a page's first
            if u is not None and u in pol:
                s = kv[u >> 24]
                pol.remove(u)
                s.tier[u & 0xFFFFFF] = 0
        elif op < 0.5:  # a hit
            cands = [u for u in units if u in pol]
            if cands:
                pol.access(rng.choice(cands), now)
        elif op < 0.55:  # a turn: the session's units come back (recomputed, swapped in)
            pol.acquire([u for u in units if u in pol], now)
            s.tier[:] = b"\x01" * len(s.tier)
        else:
            victims = pol.evict_bytes(rng.randint(1, 3) * UNIT, now)
            for v in victims:
                kv[v >> 24].tier[v & 0xFFFFFF] = 2
    assert Checked.checked > 200
