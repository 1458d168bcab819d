"""SIEVE by hand (NSDI'24): the visited bit, a hand that stays, objects that never move."""
from __future__ import annotations

from sim.cachesim import CacheObject, CacheSim
from sim.policies import PolicyContext, make_policy
from sim.units import Tier


def test_visited_object_stays_put_and_survives():
    sieve, lru = CacheSim("sieve", 3), CacheSim("lru", 3)
    seq = "ABCADEF"
    ids = {k: i for i, k in enumerate("ABCDEFG")}
    for k in seq:
        sieve.get(ids[k])
        lru.get(ids[k])
    # D: the hand passes A (visited: bit cleared) and evicts B; E: the hand resumes at C.
    # F: the hand resumes at D (newer than C), not at A: A survives though it is the least recent.
    assert set(sieve.cached) == {ids["A"], ids["E"], ids["F"]}
    assert set(lru.cached) == {ids["D"], ids["E"], ids["F"]}


def test_hand_wraps_to_the_oldest_and_bits_are_cleared_once():
    pol = make_policy("sieve", PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32))
    units = [CacheObject(i, 1) for i in range(4)]
    for u in units:
        pol.insert(u, 0)
    for u in units:
        pol.access(u, 1)                  # all visited: one full sweep clears every bit
    assert pol.victim(2) is units[0]      # wrapped back to the oldest, now unvisited
    assert pol.victim(2) is units[0]      # peeking twice changes nothing
    pol.remove(units[0])
    late = CacheObject(9, 1)
    pol.insert(late, 3)                   # enters at the newest end, behind the hand
    assert pol.victim(4) is units[1]


def test_pinned_unit_returns_to_its_place():
    pol = make_policy("sieve", PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32))
    a, b, c = (CacheObject(i, 1) for i in range(3))
    for u in (a, b, c):
        pol.insert(u, 0)
    pol.pin(a)
    assert pol.victim(1) is b
    pol.unpin(a, 2)                       # a is still the oldest and the hand has not passed it
    assert pol.victim(3) is a
