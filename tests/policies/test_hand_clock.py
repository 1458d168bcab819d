"""CLOCK by hand: a referenced unit gets a second chance at the newest end, FIFO does not."""

from __future__ import annotations

from pol_helpers import hand_policy, obj

from sim.cachesim import CacheSim


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
    pol, view = hand_policy("clock")
    a, b, c = (obj(view, i) for i in range(3))
    for u in (a, b, c):
        pol.insert(u, 0)
    pol.access(a, 1)
    pol.pin(a)
    assert pol.peek(2) == b
    assert pol.evict(2) == b
    pol.unpin(a, 3)  # back at the oldest place, bit still set
    assert pol.peek(4) == c  # a will get its second chance, c is next ...
    assert a in pol and pol.referenced(a)  # ... and a peek gave it none yet
    assert pol.evict(4) == c and not pol.referenced(a)
