"""TieredMemory on its own: hand-sized states with known answers, no engine, no event loop."""

from __future__ import annotations

import itertools
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.memory import TieredMemory
from sim.policies import PolicyContext, make_policy
from sim.units import SessionKV, Tier, UnitView, uid_of

PAGE = 100
GPU, CPU, DROPPED = Tier.GPU, Tier.CPU, Tier.DROPPED


def memory(gpu_pages: int, cpu_pages: int, policy: str = "lru", sessions: int = 4, clock=None):
    kv = [SessionKV(i, f"s{i}", 0) for i in range(sessions)]
    view = UnitView(kv, PAGE)
    pols = [
        make_policy(policy, PolicyContext(tier=t, block_tokens=16, num_layers=32, view=view))
        for t in (GPU, CPU)
    ]
    mem = TieredMemory(
        gpu_pages * PAGE, cpu_pages * PAGE, pols[0], pols[1], view, clock=clock or (lambda: 0)
    )
    return mem, kv


def run_turn(
    mem: TieredMemory, sess: SessionKV, new_pages: int, now: float
) -> tuple[int, int, list[int]]:
    """What the scheduler does for one turn: pin, make room, bring back, grow, release."""
    mem.acquire(sess, now)
    missing = sess.tier_pages[CPU] + sess.tier_pages[DROPPED] + new_pages
    assert mem.make_room(missing * PAGE, now)
    out = mem.bring_to_gpu(sess, now)
    mem.add_units(sess, new_pages, now)
    mem.release(sess, now)
    return out


def tiers(sess: SessionKV) -> str:
    return "".join("GCD"[t] for t in sess.tier)


def test_make_room_drops_the_oldest_pages_first_without_a_cpu_tier():
    mem, (a, b, *_) = memory(gpu_pages=5, cpu_pages=0)
    run_turn(mem, a, 3, now=1.0)
    run_turn(mem, b, 2, now=2.0)
    assert mem.used[GPU] == 5 * PAGE and mem.free(GPU) == 0
    assert mem.make_room(2 * PAGE, now=3.0)
    assert tiers(a) == "DDG" and tiers(b) == "GG"  # a's released first: its head pages go
    assert mem.used[GPU] == 3 * PAGE and mem.dropped_bytes == 2 * PAGE
    assert a.tier_pages == [1, 0, 2, 0]


def test_make_room_that_cannot_succeed_changes_nothing():
    mem, (a, b, *_) = memory(gpu_pages=4, cpu_pages=0)
    run_turn(mem, a, 2, now=1.0)
    mem.acquire(b, 2.0)
    mem.add_units(b, 2, 2.0)  # b is running: its two pages are pinned
    assert not mem.make_room(3 * PAGE, now=3.0)
    assert tiers(a) == "GG" and mem.used[GPU] == 4 * PAGE and mem.dropped_bytes == 0
    assert mem.make_room(2 * PAGE, now=3.0)  # a's two pages, never b's pinned ones
    assert tiers(a) == "DD" and tiers(b) == "GG"


def test_demotion_fills_the_cpu_then_drops_the_cpus_oldest():
    mem, (a, b, c, _) = memory(gpu_pages=4, cpu_pages=3)
    run_turn(mem, a, 2, now=1.0)
    run_turn(mem, b, 2, now=2.0)
    assert mem.make_room(2 * PAGE, now=3.0)
    assert tiers(a) == "CC" and mem.swap_out_bytes == 2 * PAGE
    run_turn(mem, c, 2, now=4.0)  # GPU: b b c c
    assert mem.make_room(2 * PAGE, now=5.0)  # b's pages demoted; the CPU (3) drops a's first
    assert tiers(b) == "CC" and tiers(a) == "DC"
    assert mem.used[CPU] == 3 * PAGE and mem.swap_out_bytes == 4 * PAGE
    assert mem.dropped_bytes == PAGE


def test_interleaved_demotion_may_drop_a_page_demoted_in_the_same_call():
    mem, (a, b, *_) = memory(gpu_pages=4, cpu_pages=1)
    run_turn(mem, a, 3, now=1.0)
    run_turn(mem, b, 1, now=2.0)
    assert mem.make_room(3 * PAGE, now=3.0)  # a0 -> CPU, then a1 pushes it out, then a2
    assert tiers(a) == "DDC" and mem.used[CPU] == PAGE
    assert mem.swap_out_bytes == 3 * PAGE and mem.dropped_bytes == 2 * PAGE


def test_bring_to_gpu_swaps_in_cpu_pages_and_recomputes_dropped_ones():
    mem, (a, b, *_) = memory(gpu_pages=4, cpu_pages=1)
    run_turn(mem, a, 3, now=1.0)
    run_turn(mem, b, 1, now=2.0)
    assert mem.make_room(3 * PAGE, now=3.0)  # a: D D C
    mem.acquire(a, 4.0)
    assert mem.evictable == [PAGE, 0]  # a's CPU page is pinned with it; b's is a candidate
    assert mem.make_room(3 * PAGE, now=4.0)  # three pages are free already: nothing moves
    assert tiers(b) == "G"
    swapped, swapped_pages, recomputed = mem.bring_to_gpu(a, 4.0)
    assert (swapped, swapped_pages, list(recomputed)) == (PAGE, 1, [0, 1])
    assert tiers(a) == "GGG" and a.tier_pages == [3, 0, 0, 0] and mem.used == [4 * PAGE, 0]


def test_pinned_sessions_are_never_victims_and_release_restores_them():
    mem, (a, *_) = memory(gpu_pages=2, cpu_pages=0)
    mem.acquire(a, 1.0)
    mem.add_units(a, 2, 1.0)
    assert mem.evictable == [0, 0] and len(mem.policy[GPU]) == 0
    assert not mem.make_room(PAGE, 2.0)
    mem.release(a, 3.0)
    assert mem.evictable == [2 * PAGE, 0] and len(mem.policy[GPU]) == 2
    with pytest.raises(AssertionError, match="released but not pinned"):
        mem.release(a, 4.0)


def test_shared_pages_are_never_evicted_while_any_turn_holds_them():
    mem, (a, pool, *_) = memory(gpu_pages=4, cpu_pages=0)
    units = mem.add_shared_units(pool, 2, now=1.0)  # held once by the turn that computed them
    mem.hold(pool, units, now=1.0)  # a second turn shares them
    run_turn(mem, a, 2, now=2.0)
    assert list(pool.refs) == [2, 2] and mem.evictable[GPU] == 2 * PAGE
    mem.unhold(pool, units, now=3.0)  # one holder left
    assert not mem.make_room(3 * PAGE, now=3.0)  # only a's two pages can go
    mem.unhold(pool, units, now=4.0)  # the last holder: candidates again
    assert mem.make_room(3 * PAGE, now=5.0)
    assert tiers(a) == "DD" and tiers(pool) == "DG"  # a released at 2 is older than the pool at 4
    with pytest.raises(AssertionError, match="released but not held"):
        mem.unhold(pool, [0], now=6.0)


def test_one_clock_sample_per_make_room_call_that_evicts():
    ticks = itertools.count(0, 7)
    mem, (a, b, *_) = memory(gpu_pages=4, cpu_pages=0, clock=lambda: next(ticks))
    run_turn(mem, a, 2, now=1.0)
    run_turn(mem, b, 2, now=2.0)
    assert list(mem.evict_ns) == []  # room was free: no victim selection
    assert mem.make_room(3 * PAGE, now=3.0)
    assert list(mem.evict_ns) == [7]  # one call, three victims, one sample


def test_a_finished_session_with_nothing_left_frees_its_array():
    mem, (a, *_) = memory(gpu_pages=3, cpu_pages=0)
    run_turn(mem, a, 3, now=1.0)
    a.done = True
    assert mem.make_room(2 * PAGE, now=2.0)
    assert len(a.tier) == 3  # one page still cached
    assert mem.make_room(3 * PAGE, now=3.0)
    assert len(a.tier) == 0 and a.tier_pages == [0, 0, 0, 0]


@settings(max_examples=200, deadline=None)
@given(
    policy=st.sampled_from(["lru", "fifo"]),
    old=st.integers(0, 12),
    new=st.integers(1, 12),
    free=st.integers(0, 12),
    pinned=st.integers(0, 4),
)
def test_batch_take_in_equals_interleaved_evict_and_insert(policy, old, new, free, pinned):
    """LRU's and FIFO's batch demotion gives the victims of the one-at-a-time loop."""
    from sim.policies.base import EvictionPolicy

    results = []
    for batch in (True, False):
        kv = [SessionKV(0, "s0", 0)]
        view = UnitView(kv, PAGE)
        pol = make_policy(
            policy, PolicyContext(tier=CPU, block_tokens=16, num_layers=32, view=view)
        )
        for i in range(old + pinned):
            pol.insert(uid_of(0, i), float(i), pinned=i < pinned)
        uids = [uid_of(0, old + pinned + j) for j in range(new)]
        if old + free < new:
            continue  # the engine demotes only what the tier can take
        take = (
            pol.take_in
            if batch
            else (lambda u, f, now, p=pol: EvictionPolicy.take_in(p, u, f, now))
        )
        results.append(
            (take(uids, free * PAGE, 50.0), sorted(pol._q) if policy == "lru" else len(pol))
        )
    assert len(results) in (0, 2) and (not results or results[0] == results[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=30), st.integers(0, 3000))
def test_extents_of_gives_the_runs_of_consecutive_uids(uids, shift):
    """Both forms (a short list, read in Python; a long one, through numpy) against the definition:
    a run breaks wherever the next uid is not the one after."""
    from sim.units import extents_of

    def runs(xs):
        out = []
        for u in xs:
            if out and out[-1][1] == u:
                out[-1][1] += 1
            else:
                out.append([u, u + 1])
        return [tuple(r) for r in out]

    assert extents_of(uids) == runs(uids)
    long = uids + list(range(100, 100 + shift))
    assert extents_of(long) == runs(long)
    assert extents_of(np.asarray(long, dtype=np.int64)) == runs(long)


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 5)), max_size=8),  # (session, pages)
    st.integers(1, 3),  # units a page (layers)
)
def test_add_pages_is_add_units_without_telling_the_policy(grown, layers):
    def fresh():
        kv = [SessionKV(i, f"s{i}", 0) for i in range(4)]
        view = UnitView(kv, PAGE, layers=layers)
        pols = [
            make_policy("lru", PolicyContext(tier=t, block_tokens=16, num_layers=32, view=view))
            for t in (GPU, CPU)
        ]
        # room for the most the draws add (8 x 5 pages x 3 layers): the batch makes no room
        mem = TieredMemory(120 * PAGE, 0, pols[0], pols[1], view)
        for s in kv:
            mem.acquire(s, 0.0)  # running turns: their new pages enter pinned
        return mem, kv

    batch, kv_batch = fresh()
    batch.add_pages((kv_batch[i], pages) for i, pages in grown)
    one_by_one, kv_model = fresh()
    for i, pages in grown:
        one_by_one.add_units(kv_model[i], pages, 0.0, insert=False)
    for a, b in zip(kv_batch, kv_model, strict=True):
        assert a.tier == b.tier and a.tier_pages == b.tier_pages
    assert batch.used == one_by_one.used and batch.peak_gpu_bytes == one_by_one.peak_gpu_bytes
    assert batch.evictable == one_by_one.evictable


class ScanningMemory(TieredMemory):
    """Brings a session back by scanning its units, never by its one run of dropped units."""

    def _dropped_run(self, sess: SessionKV) -> tuple[int, int] | None:
        return None


def twin_memory(cls: type[TieredMemory], policy: str, gpu_pages: int, cpu_pages: int):
    kv = [SessionKV(i, f"s{i}", 0) for i in range(4)]
    view = UnitView(kv, PAGE)
    pols = [
        make_policy(policy, PolicyContext(tier=t, block_tokens=16, num_layers=32, view=view))
        for t in (GPU, CPU)
    ]
    return cls(gpu_pages * PAGE, cpu_pages * PAGE, pols[0], pols[1], view), kv


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["lru", "fifo", "lfu", "clock", "sieve"]),
    st.sampled_from([0, 3]),  # CPU pages: victims dropped, or demoted first
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=12),
)
def test_bringing_back_one_dropped_run_equals_the_scan(policy, cpu_pages, turns):
    # turns of (session, new pages) on a small GPU: sessions come back with dropped runs, runs
    # with holes, and CPU pages; both ways of bringing them back leave the same state
    fast, kv_fast = twin_memory(TieredMemory, policy, 10, cpu_pages)
    scan, kv_scan = twin_memory(ScanningMemory, policy, 10, cpu_pages)
    for t, (s, new) in enumerate(turns):
        if len(kv_fast[s].tier) + new > 10:
            continue
        got = [run_turn(m, kv[s], new, float(t)) for m, kv in ((fast, kv_fast), (scan, kv_scan))]
        (b1, p1, r1), (b2, p2, r2) = got
        assert (b1, p1, list(r1)) == (b2, p2, list(r2))
        for a, b in zip(kv_fast, kv_scan, strict=True):
            assert a.tier == b.tier and a.tier_pages == b.tier_pages
        assert fast.used == scan.used and fast.evictable == scan.evictable
    # the policies' order: everything evicted, in the same order
    assert fast.make_room(10 * PAGE, 99.0) and scan.make_room(10 * PAGE, 99.0)
    assert [a.tier for a in kv_fast] == [b.tier for b in kv_scan]


@settings(max_examples=300, deadline=None)
@given(
    codes=st.lists(st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=8), min_size=3, max_size=3),
    pinned=st.sampled_from([-1, -1, -1, 0, 1, 2]),  # a pinned session (-1: none)
    held=st.booleans(),  # session 2 is a pool with its even units held by running turns
    frm=st.sampled_from([GPU, GPU, CPU]),
    data=st.data(),
)
def test_move_extents_moves_each_unit_or_names_a_bad_victim(codes, pinned, held, frm, data):
    picks = []  # extents: (session, first unit, units), mostly inside the session's array
    for _ in range(data.draw(st.integers(0, 3))):
        s = data.draw(st.integers(0, 2))
        i = data.draw(st.integers(0, len(codes[s])))
        picks.append((s, i, data.draw(st.sampled_from([1, 1, 1, 2, 3]))))
    # the plain model: unit by unit, every unit of every extent must be in ``frm``, of a session
    # not pinned and not held; then each moves to DROPPED and the page counts follow
    mem, kv = memory(gpu_pages=100, cpu_pages=100, sessions=3)
    for sess, c in zip(kv, codes, strict=True):
        sess.tier.extend(bytes(c))
        for t in c:
            sess.tier_pages[t] += 1
    if pinned >= 0:
        kv[pinned].pinned = True
    if held:
        kv[2].refs = array("I", [1 - u % 2 for u in range(len(codes[2]) + 9)])
    extents = [(uid_of(s, i), uid_of(s, i) + n) for s, i, n in picks]
    good = all(
        i + n <= len(kv[s].tier)
        and not kv[s].pinned
        and all(kv[s].tier[u] == frm for u in range(i, i + n))
        and not (held and s == 2 and any(u % 2 == 0 for u in range(i, i + n)))
        for s, i, n in picks
    ) and len({u for s, i, n in picks for u in range(uid_of(s, i), uid_of(s, i) + n)}) == sum(
        n for _, _, n in picks
    )
    model = [bytearray(sess.tier) for sess in kv]
    for s, i, n in picks:
        model[s][i : i + n] = bytes([DROPPED]) * n
    if not good:
        with pytest.raises(AssertionError):
            mem._move_extents(extents, frm, DROPPED)
        return
    mem._move_extents(extents, frm, DROPPED)
    for sess, m in zip(kv, model, strict=True):
        assert sess.tier == m
        assert sess.tier_pages[:3] == [m.count(t) for t in (GPU, CPU, DROPPED)]
