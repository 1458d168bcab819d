"""SLRU by hand: 4 segments of c/4, promotion by one segment per hit, cooling down, S0 first."""

from __future__ import annotations

from pol_helpers import hand_policy, obj

from sim.cachesim import CacheSim


def _slru(cap):
    pol, view = hand_policy("slru")
    pol.set_capacity(cap)
    return pol, view


def test_fill_promote_and_cool():
    pol, view = _slru(8)  # 4 segments of 2
    u = [obj(view, i) for i in range(8)]
    for x in u:
        pol.insert(x, 0)
    assert [pol.segment(x) for x in u] == [0, 0, 1, 1, 2, 2, 3, 3]  # lowest segment with room
    pol.access(u[0], 1)  # S0 -> S1, S1 over: its LRU (u2) cools to S0
    assert pol.segment(u[0]) == 1 and pol.segment(u[2]) == 0
    assert pol.peek(2) == u[1]  # S0's LRU
    pol.access(u[6], 3)  # S3 hit: MRU of S3, no cooling
    assert pol.segment(u[6]) == 3


def test_protected_set_survives_a_scan():
    slru, lru = CacheSim("slru", 40), CacheSim("lru", 40)
    hot = list(range(10))
    for _ in range(3):
        for k in hot:
            slru.get(k)
            lru.get(k)
    for k in range(100, 200):
        slru.get(k)
        lru.get(k)
    assert sum(slru.get(k) for k in hot) == 10 and sum(lru.get(k) for k in hot) == 0


def test_hit_while_pinned_promotes_on_unpin():
    pol, view = _slru(8)
    a = obj(view, 1)
    pol.insert(a, 0)
    pol.pin(a)
    pol.access(a, 1)
    assert a not in pol and pol.peek(2) is None
    pol.unpin(a, 3)
    assert pol.segment(a) == 1 and pol.peek(4) == a
