"""LFU by hand: least frequent first, ties to the least recent, counts reset on eviction."""

from __future__ import annotations

from pol_helpers import hand_policy, obj

from sim.cachesim import CacheSim


def test_least_frequent_then_least_recent():
    pol, view = hand_policy("lfu")
    a, b, c = (obj(view, k) for k in (10, 11, 12))
    for t, u in enumerate((a, b, c)):
        pol.insert(u, t)
    pol.access(b, 3)  # b: 2, a and c: 1
    assert pol.peek(4) == a  # tie a/c at 1: a is the least recent
    pol.access(a, 5)  # a: 2, now more recent than b at 2
    assert pol.evict(6) == c
    assert pol.peek(7) == b  # a and b at 2: b reached 2 first


def test_hot_object_survives_a_scan_where_lru_loses_it():
    reqs = ["hot"] * 5 + [f"scan{i}" for i in range(100)] + ["hot"]
    lfu, lru = CacheSim("lfu", 10), CacheSim("lru", 10)
    keys = {r: i for i, r in enumerate(dict.fromkeys(reqs))}
    flags = [(lfu.get(keys[r]), lru.get(keys[r])) for r in reqs]
    assert flags[-1] == (True, False)


def test_count_resets_on_eviction_and_survives_a_pin():
    pol, view = hand_policy("lfu")
    a, b = obj(view, 1), obj(view, 2)
    pol.insert(a, 0)
    pol.insert(b, 0)
    for t in range(3):
        pol.access(a, t)
    assert pol.count(a) == 4
    pol.pin(a)
    pol.access(a, 4)  # a use while pinned still counts
    assert a not in pol and pol.peek(5) == b
    pol.unpin(a, 6)
    assert pol.count(a) == 5 and pol.peek(7) == b
    pol.remove(a)  # gone from the tier: forgotten
    pol.insert(a, 8)
    assert pol.count(a) == 1 and pol.peek(9) == b  # b (1) is older than a (1)
    assert pol.evict(9) == b and pol.count(b) == 0  # evicted: forgotten too
