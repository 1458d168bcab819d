"""Pensieve at layer granularity: hand-computed costs and eviction orders of (chunk, layer) units,
first over hand-placed units, then through the real unit view and tiered memory (``layer_block``).

Constants throughout: 2 layers, chunks of 32 tokens, alpha = 0.001 s/token, beta = 0.01 s,
non_attention = 0.005 s, so base(chunk c) = 0.001 * 32c + 0.015 (context = the 32c tokens before
it), layer weight (2 - l)/2, position weight (c + 1)/C for a session of C chunks.
"""

from __future__ import annotations

import pytest
from kv_helpers import FakeCost, HandView, drain
from kv_helpers import session as kv_session

from sim.memory import TieredMemory
from sim.policies import PolicyContext, make_policy
from sim.policies.pensieve import Pensieve
from sim.units import SessionKV, Tier, UnitView, layer_codes

BT, L = 32, 2
K = {"alpha": 0.001, "beta": 0.01, "non_attention": 0.005}


def policy(view, layers: int = L, cost=None) -> Pensieve:
    return Pensieve(
        PolicyContext(
            tier=Tier.GPU, block_tokens=BT, num_layers=layers, view=view, cost=cost or FakeCost(**K)
        )
    )


def place(
    view: HandView,
    sess: SessionKV,
    chunks: int,
    last_access: float,
    first_uid: int,
    layers: int = L,
) -> dict[tuple[int, int], int]:
    """Every (chunk, layer) unit of ``sess``: {(chunk, layer): uid}."""
    out, uid = {}, first_uid
    for c in range(chunks):
        for layer in range(layers):
            out[c, layer] = view.unit(uid, sess, c, last_access=last_access, layer=layer)
            uid += 1
    return out


def test_worked_example_two_layers_two_chunks():
    view = HandView()
    pol = policy(view)
    u = place(view, kv_session(0, 64), 2, last_access=0.0, first_uid=1)
    for uid in u.values():
        pol.insert(uid, 1.0)
    # chunk 0: 0.015 * layer w * 1/2; chunk 1: 0.047 * layer w * 2/2
    expected = {(0, 0): 0.0075, (0, 1): 0.00375, (1, 0): 0.047, (1, 1): 0.0235}
    for key, cost in expected.items():
        assert pol.unit_cost(u[key]) == pytest.approx(cost, rel=1e-12), key
    assert drain(pol, 1.0) == [u[0, 1], u[0, 0], u[1, 1], u[1, 0]]


def test_three_sessions_room_for_two_chunks_oldest_back_layers_of_leading_chunks_go_first():
    # Sessions A, B, C of 2 chunks each, idle 10, 4 and 1 s at now = 10: values = cost / idle.
    #   A: (0,1) .000375  (0,0) .00075  (1,1) .00235  (1,0) .0047
    #   B: (0,1) .0009375 (0,0) .001875 (1,1) .005875 (1,0) .01175
    #   C: (0,1) .00375   (0,0) .0075   (1,1) .0235   (1,0) .047
    # 12 units = 6 chunks; room for 2 chunks keeps 4 units: evict the 8 lowest values.
    view = HandView()
    pol = policy(view)
    a = place(view, kv_session(0, 64), 2, last_access=0.0, first_uid=1)
    b = place(view, kv_session(1, 64), 2, last_access=6.0, first_uid=11)
    c = place(view, kv_session(2, 64), 2, last_access=9.0, first_uid=21)
    for u in (c, b, a):  # insertion order must not matter
        for uid in u.values():
            pol.insert(uid, 10.0)
    victims = [pol.evict(10.0) for _ in range(8)]
    assert victims == [a[0, 1], a[0, 0], b[0, 1], b[0, 0], a[1, 1], c[0, 1], a[1, 0], b[1, 1]]
    kept = sorted(pol.evict(10.0) for _ in range(4))
    assert kept == sorted([c[0, 0], b[1, 0], c[1, 1], c[1, 0]])


def test_one_session_five_turns_room_for_three_chunks_leading_chunks_of_old_turns_go():
    # One session whose five turns left five chunks, all last used together (each turn reads the
    # whole context). Costs (layer 0, layer 1), base 0.015 + 0.032c times (c+1)/5:
    #   c0 .003 .0015 | c1 .0188 .0094 | c2 .0474 .0237 | c3 .0888 .0444 | c4 .143 .0715
    # Room for 3 chunks keeps 6 of 10 units: the two leading chunks (turns 1 and 2) go.
    view = HandView()
    pol = policy(view)
    u = place(view, kv_session(0, 5 * BT), 5, last_access=0.0, first_uid=1)
    for uid in u.values():
        pol.insert(uid, 5.0)
    assert pol.unit_cost(u[2, 1]) == pytest.approx(0.0237, rel=1e-12)
    assert [pol.evict(5.0) for _ in range(4)] == [u[0, 1], u[0, 0], u[1, 1], u[1, 0]]
    assert drain(pol, 5.0) == [u[2, 1], u[3, 1], u[2, 0], u[4, 1], u[3, 0], u[4, 0]]


def test_layer_zero_against_the_last_layer_the_last_layer_goes_first():
    # 32 layers, two chunks, only layers 0 and 31 resident: weights 32/32 and 1/32, so both
    # chunks' last-layer units go before either layer-0 unit (chunk 1's last layer, 0.047/32, is
    # still below chunk 0's layer 0, 0.015 * 1/2).
    view = HandView()
    pol = policy(view, layers=32)
    s = kv_session(0, 64)
    first = {c: view.unit(10 + c, s, c, layer=0) for c in range(2)}
    last = {c: view.unit(20 + c, s, c, layer=31) for c in range(2)}
    for uid in (*first.values(), *last.values()):
        pol.insert(uid, 1.0)
    assert pol.unit_cost(last[1]) == pytest.approx(0.047 / 32, rel=1e-12)
    assert pol.unit_cost(first[0]) == pytest.approx(0.0075, rel=1e-12)
    assert drain(pol, 1.0) == [last[0], last[1], first[0], first[1]]


# -- the same physics through the real unit view and tiered memory ---------------------------------
def layered_memory(policy_name: str, gpu_units: int, sessions: int, cost=None):
    kv = [SessionKV(i, f"s{i}", 0) for i in range(sessions)]
    unit = 100
    view = UnitView(kv, unit, layers=L)
    pols = [
        make_policy(
            policy_name,
            PolicyContext(
                tier=t, block_tokens=BT, num_layers=L, view=view, cost=cost or FakeCost(**K)
            ),
        )
        for t in (Tier.GPU, Tier.CPU)
    ]
    return TieredMemory(gpu_units * unit, 0, pols[0], pols[1], view), kv, unit


def grid(sess: SessionKV) -> list[str]:
    """Each page's tiers by layer (layer 0 first): 'G' on the GPU, 'D' dropped."""
    return ["".join("GCD"[t] for t in row) for row in layer_codes(sess, L).tolist()]


@pytest.mark.parametrize("name", ["pensieve", "lru"])
def test_memory_layer_units_follow_the_policy(name):
    # Session A (2 chunks) released at t=0, B (2 chunks) at t=6; room for 8 units; make room for
    # 3 units at t=10. Pensieve: A's (0,1), A's (0,0), B's (0,1). LRU knows no layers: A's units in
    # uid order, which puts a page's last layer first: (0,1), (0,0), (1,1).
    mem, (a, b), unit = layered_memory(name, gpu_units=8, sessions=2)
    for sess, t in ((a, 0.0), (b, 6.0)):
        mem.acquire(sess, t)
        mem.add_units(sess, 2, t)
        sess.tokens = 64
        sess.last_access_s = t
        mem.release(sess, t)
    assert len(a.tier) == 2 * L and mem.used[Tier.GPU] == 8 * unit
    assert mem.make_room(3 * unit, 10.0)
    if name == "pensieve":
        assert grid(a) == ["DD", "GG"] and grid(b) == ["GD", "GG"]
    else:
        assert grid(a) == ["DD", "GD"] and grid(b) == ["GG", "GG"]
    assert a.tier_pages[Tier.DROPPED] + b.tier_pages[Tier.DROPPED] == 3


def test_bring_layers_back_recomputes_each_page_through_its_deepest_dropped_layer():
    # Page 0: layer 1 dropped (recompute through layer 1: layers 0 and 1); page 1: all on the GPU.
    mem, (a,), unit = layered_memory("lru", gpu_units=4, sessions=1)
    mem.acquire(a, 0.0)
    mem.add_units(a, 2, 0.0)
    a.tokens = 64
    mem.release(a, 0.0)
    assert mem.make_room(unit, 1.0)  # one unit: page 0's last layer (uid order)
    assert grid(a) == ["GD", "GG"]
    mem.acquire(a, 2.0)
    fetch = mem.bring_layers_to_gpu(a, 2.0)
    assert fetch.recomputed_pages.tolist() == [0] and fetch.depth.tolist() == [1]
    assert fetch.swapped_units == 0 and fetch.regenerated == 0
    assert grid(a) == ["GG", "GG"] and a.tier_pages == [4, 0, 0, 0]
