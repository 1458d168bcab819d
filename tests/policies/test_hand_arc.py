"""ARC by hand (FAST'03): scan resistance, ghost hits and the target p, case IV, pins."""

from __future__ import annotations

from pol_helpers import hand_policy, obj

from sim.cachesim import CacheSim


def test_scan_resistant_where_lru_is_not():
    arc, lru = CacheSim("arc", 50), CacheSim("lru", 50)
    hot = list(range(20))
    for _ in range(2):
        for k in hot:
            arc.get(k)
            lru.get(k)  # twice: T2
    for k in range(1000, 1200):  # a scan of objects seen once goes through T1
        arc.get(k)
        lru.get(k)
    assert sum(arc.get(k) for k in hot) == 20
    assert sum(lru.get(k) for k in hot) == 0


def test_ghost_hit_adapts_p_and_enters_t2():
    sim = CacheSim("arc", 4)
    for k in (1, 2, 3, 4):
        sim.get(k)  # T1 = 1 2 3 4
    sim.get(2)  # T2 = 2
    sim.get(5)  # case IV, T1 + B1 < c ... REPLACE: T1's LRU (1) -> B1
    pol = sim.policy
    assert 1 in pol._b1 and pol.p == 0
    assert not sim.get(1)  # a miss found in B1 ...
    assert pol.p == 1 and 1 in pol._t2  # ... raises p and enters T2
    assert 1 not in pol._b1


def test_case_iv_with_empty_b1_evicts_t1_without_ghost():
    sim = CacheSim("arc", 3)
    for k in (1, 2, 3, 4):  # T1 + B1 + 1 > c with B1 empty: T1's LRU goes, no ghost
        sim.get(k)
    pol = sim.policy
    assert 1 not in sim.cached and 1 not in pol._b1 and not pol._b2


def test_pinned_unit_returns_to_t2_only_if_it_was_accessed():
    pol, view = hand_policy("arc")
    a, b = obj(view, 1), obj(view, 2)
    pol.insert(a, 0)
    pol.insert(b, 0)
    pol.pin(a)  # pinned without a use: back to T1
    pol.access(b, 1)
    pol.pin(b)  # used (the engine calls access then pin): T2
    assert len(pol) == 0 and pol.peek(2) is None
    pol.unpin(a, 3)
    pol.unpin(b, 3)
    assert 1 in pol._t1 and 2 in pol._t2
    pol.pin(a)
    pol.access(a, 4)  # a hit while pinned also earns T2
    pol.unpin(a, 5)
    assert 1 in pol._t2


def test_an_engine_removal_leaves_no_ghost_even_of_the_next_victim():
    pol, view = hand_policy("arc")
    a, b, c = obj(view, 1), obj(view, 2), obj(view, 3)
    for u in (a, b, c):
        pol.insert(u, 0)
    pol.remove(b)  # the engine dropping a unit for its own reasons
    assert pol.peek(1) == a
    pol.remove(a)  # ... even the one ARC would evict next
    assert 1 not in pol._b1 and 2 not in pol._b1 and not pol._b2
    assert pol.evict(1) == c  # an eviction: T1's LRU goes to B1
    assert 3 in pol._b1
