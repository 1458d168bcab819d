"""CLOCK by hand: a referenced unit gets a second chance at the newest end, FIFO does not."""
from __future__ import annotations

from sim.cachesim import CacheObject, CacheSim
from sim.policies import PolicyContext, make_policy
from sim.units import Tier


def test_second_chance_order():
    clock, fifo = CacheSim("clock", 3), CacheSim("fifo", 3)
    seq = ["A", "B", "C", "A", "D", "E", "A", "F", "A"]
    ids = {k: i for i, k in enumerate("ABCDEF")}
    got = [(clock.get(ids[k]), fifo.get(ids[k])) for k in seq]
    # D: CLOCK clears A's bit and moves it to the newest end, evicting B; FIFO evicts A.
    assert got[6] == (True, False)
    # E: C (bit clear) goes. F: A (hit at 6, bit set again) gets another chance; D goes.
    assert set(clock.cached) == {ids["A"], ids["E"], ids["F"]}
    assert [h for h, _ in got].count(True) == 3 and [h for _, h in got].count(True) == 2


def test_pinned_unit_keeps_its_place_and_bit():
    pol = make_policy("clock", PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32))
    a, b, c = (CacheObject(i, 1) for i in range(3))
    for u in (a, b, c):
        pol.insert(u, 0)
    pol.access(a, 1)
    pol.pin(a)
    assert pol.victim(2) is b
    pol.remove(b)
    pol.unpin(a, 3)                       # back at the oldest place, bit still set
    assert pol.victim(4) is c             # a got its second chance, c is next
