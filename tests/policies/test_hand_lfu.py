"""LFU by hand: least frequent first, ties to the least recent, counts reset on eviction."""
from __future__ import annotations

from sim.cachesim import CacheObject, CacheSim
from sim.policies import PolicyContext, make_policy
from sim.units import Tier


def _lfu():
    return make_policy("lfu", PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32))


def test_least_frequent_then_least_recent():
    pol = _lfu()
    a, b, c = (CacheObject(k, 1) for k in "abc")
    for t, u in enumerate((a, b, c)):
        pol.insert(u, t)
    pol.access(b, 3)                      # b: 2, a and c: 1
    assert pol.victim(4) is a             # tie a/c at 1: a is the least recent
    pol.access(a, 5)                      # a: 2, now more recent than b at 2
    assert pol.victim(6) is c
    pol.remove(c)
    assert pol.victim(7) is b             # a and b at 2: b reached 2 first


def test_hot_object_survives_a_scan_where_lru_loses_it():
    reqs = ["hot"] * 5 + [f"scan{i}" for i in range(100)] + ["hot"]
    lfu, lru = CacheSim("lfu", 10), CacheSim("lru", 10)
    keys = {r: i for i, r in enumerate(dict.fromkeys(reqs))}
    flags = [(lfu.get(keys[r]), lru.get(keys[r])) for r in reqs]
    assert flags[-1] == (True, False)


def test_count_resets_on_eviction_and_survives_a_pin():
    pol = _lfu()
    a, b = CacheObject(1, 1), CacheObject(2, 1)
    pol.insert(a, 0)
    pol.insert(b, 0)
    for t in range(3):
        pol.access(a, t)
    assert pol.count(a) == 4
    pol.pin(a)
    pol.access(a, 4)                      # a use while pinned still counts
    assert a not in pol and pol.victim(5) is b
    pol.unpin(a, 6)
    assert pol.count(a) == 5 and pol.victim(7) is b
    pol.remove(a)                         # evicted: forgotten
    pol.insert(a, 8)
    assert pol.count(a) == 1 and pol.victim(9) is b   # b (1) is older than a (1)
