"""SIEVE by hand (NSDI'24): the visited bit, a hand that stays, objects that never move."""

from __future__ import annotations

from pol_helpers import hand_policy, obj

from sim.cachesim import CacheSim


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
    pol, view = hand_policy("sieve")
    units = [obj(view, i) for i in range(4)]
    for u in units:
        pol.insert(u, 0)
    for u in units:
        pol.access(u, 1)  # all visited: one full sweep clears every bit
    assert pol.peek(2) == units[0]  # wrapped back to the oldest, now unvisited
    assert pol.peek(2) == units[0]  # peeking twice changes nothing ...
    assert all(pol.visited(u) for u in units)  # ... and clears no bit
    assert pol.evict(2) == units[0]  # the sweep itself clears them
    late = obj(view, 9)
    pol.insert(late, 3)  # enters at the newest end, behind the hand
    assert pol.evict(4) == units[1]


def test_pinned_unit_returns_to_its_place():
    pol, view = hand_policy("sieve")
    a, b, c = (obj(view, i) for i in range(3))
    for u in (a, b, c):
        pol.insert(u, 0)
    pol.pin(a)
    assert pol.peek(1) == b
    pol.unpin(a, 2)  # a is still the oldest and the hand has not passed it
    assert pol.peek(3) == a
