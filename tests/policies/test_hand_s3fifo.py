"""S3-FIFO by hand (SOSP'23): one-hit wonders leave from the small queue, ghosts come back to main."""

from __future__ import annotations

from pol_helpers import hand_policy

from sim.cachesim import CacheSim
from sim.policies.s3fifo import MAIN, SMALL


def test_one_hit_wonders_leave_from_small_and_hot_objects_stay():
    sim = CacheSim("s3fifo", 100)  # small queue 10, main 90, ghost 90
    hot = list(range(50))
    for _ in range(3):
        for k in hot:
            sim.get(k)
    pol = sim.policy
    for k in range(1000, 1300):  # 300 objects seen once
        sim.get(k)
    assert all(sim.get(k) for k in hot)  # the hot set never left
    assert all(k in pol._q[MAIN] for k in hot)
    ghosts = set(pol._ghost)
    assert ghosts and ghosts <= set(range(1000, 1300))  # the one-hit wonders went to the ghost
    # once the cache has evicted, a new object enters S and, seen once, never reaches M
    # (before the first eviction, libCacheSim's version fills M directly once S is full)
    assert all(k not in pol._q[MAIN] for k in range(1100, 1300))


def test_ghost_hit_enters_main():
    sim = CacheSim("s3fifo", 100)
    for k in range(200):
        sim.get(k)  # k < ~100 left S for the ghost
    pol = sim.policy
    g = next(iter(pol._ghost))
    assert not sim.get(g)  # a miss ...
    assert g in pol._q[MAIN] and g not in pol._ghost  # ... that goes straight to main


def test_main_reinsertion_caps_the_counter_at_3():
    pol, _ = hand_policy("s3fifo", sizes={1: 5, 2: 5})
    pol.set_capacity(10)  # small 1, main 9
    a, b = 1, 2
    for u in (a, b):
        pol.insert(u, 0)
        pol._q[SMALL].leave(u)
        pol._q[MAIN].enter(u, 5)  # both in M, a the oldest: 10 > 9 bytes
        pol._queue_of[u] = MAIN
    for t in range(10):
        pol.access(a, t)
    assert pol.peek(2) == b and pol._freq[a] == 10  # a peek moves nothing ...
    v = pol.evict(2)  # ... the eviction reinserts a; b goes
    assert v == b and pol._freq[a] == 2  # a's counter: min(10, 3) - 1
