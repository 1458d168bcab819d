"""2Q by hand: A1in is a FIFO that a hit does not protect; an A1out (ghost) hit enters Am (LRU)."""

from __future__ import annotations

from sim.cachesim import CacheSim


def test_a1in_hit_does_not_protect_but_a1out_hit_promotes():
    sim = CacheSim("twoq", 8)  # Kin 2, A1out 4, Am 6
    for k in range(8):
        sim.get(k)  # all in A1in (room)
    sim.get(0)  # hit in A1in: nothing moves
    pol = sim.policy
    sim.get(100)  # A1in holds 8 > 2: its oldest (0) -> A1out
    assert 0 not in sim.cached and 0 in pol._aout
    assert not sim.get(0)  # miss, found in A1out ...
    assert 0 in pol._am  # ... so it enters Am
    for k in range(200, 220):  # a scan runs through A1in only
        sim.get(k)
    assert sim.get(0)  # Am kept it


def test_am_is_lru():
    sim = CacheSim("twoq", 8)
    for k in range(12):
        sim.get(k)  # 0..3 pass to A1out
    for k in (0, 1, 2, 3):
        sim.get(k)  # back from A1out into Am
    sim.get(0)  # 0 becomes Am's MRU
    pol = sim.policy
    assert [k for k in pol._am] == [1, 2, 3, 0]
