"""SLRU on runs against plain models (hypothesis): ``SegmentQueue`` against a list of uids in LRU
order, ``HeldRuns`` against a dict of uid -> segment, and ``UniformSLRU`` (runs, units of one
size) against ``SLRU`` driven one unit at a time (its per-uid form, on a view that does not say the
sizes are equal): the same segments, candidates and victims after every call."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies.base import PolicyContext
from sim.policies.segment_runs import HeldRuns, SegmentQueue
from sim.policies.slru import SLRU, UniformSLRU
from sim.units import UNIT_BITS, Tier

# (operation, session, a, b): sessions 0-3 with unit indices 0-30
OPS = st.lists(
    st.tuples(st.integers(0, 9), st.integers(0, 3), st.integers(0, 30), st.integers(0, 8)),
    max_size=120,
)


def _stretch(s: int, a: int, b: int) -> tuple[int, int]:
    base = s << UNIT_BITS
    return base + a, base + min(31, a + 1 + b)


@settings(max_examples=300, deadline=None)
@given(OPS)
@example([(0, 0, 0, 8), (4, 0, 4, 0), (5, 0, 0, 0)])  # the head run loses the stretch before a hole
def test_segment_queue_against_a_list(ops):
    q, ref = SegmentQueue(), []  # ref: uids, oldest first
    for op, s, a, b in ops:
        lo, hi = _stretch(s, a, b)
        if op <= 2:  # a stretch of non-members enters at the newest end
            new = [u for u in range(lo, hi) if u not in ref]
            for first, stop in _consecutive(new):
                q.push_run(first, stop)
            ref += new
        elif op == 3:
            got = q.pop(b)
            assert got == ref[:b]
            del ref[:b]
        elif op == 4:
            assert q.discard(lo) == (lo in ref)
            if lo in ref:
                ref.remove(lo)
        elif op in (5, 6):  # one stretch the queue lists for the session leaves
            extents = q.extents_in(s)
            if extents:
                first, stop = extents[a % len(extents)]
                cut = range(first + (b if op == 6 else 0) % (stop - first), stop)
                q.discard_extent(cut.start, cut.stop)
                ref = [u for u in ref if u not in cut]
        else:
            assert q.holds_any(lo, hi) == any(lo <= u < hi for u in ref)
        _check_queue(q, ref)


def _consecutive(uids: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for u in uids:
        if out and out[-1][1] == u:
            out[-1] = (out[-1][0], u + 1)
        else:
            out.append((u, u + 1))
    return out


def _check_queue(q: SegmentQueue, ref: list[int]) -> None:
    assert list(q) == ref and len(q) == len(ref)
    assert q.first() == (ref[0] if ref else None)
    place = {u: i for i, u in enumerate(ref)}
    for s in range(4):
        extents = q.extents_in(s)
        listed = [u for first, stop in extents for u in range(first, stop)]
        assert sorted(listed) == sorted(u for u in ref if u >> UNIT_BITS == s)
        for first, stop in extents:  # a stretch is consecutive in the queue's order too
            assert [place[u] for u in range(first, stop)] == list(
                range(place[first], place[first] + stop - first)
            )


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_held_runs_against_a_dict(ops):
    held, ref = HeldRuns(), {}  # ref: uid -> segment
    for op, s, a, b in ops:
        lo, hi = _stretch(s, a, b)
        seg = b % 4
        if op <= 2:  # the stretch's units not held yet are held
            for first, stop in _consecutive([u for u in range(lo, hi) if u not in ref]):
                held.add(first, stop, seg)
                ref.update(dict.fromkeys(range(first, stop), seg))
        elif op == 3:
            assert held.count_in(lo, hi) == sum(lo <= u < hi for u in ref)
            assert held.cut(lo, hi) == sum(lo <= u < hi for u in ref)
            ref = {u: g for u, g in ref.items() if not lo <= u < hi}
        elif op == 4:
            assert held.take(lo) == ref.pop(lo, None)
        elif op == 5:
            held.set_segment(lo, seg)
            if lo in ref:
                ref[lo] = seg
        elif op == 6:
            mine = sorted((u, g) for u, g in ref.items() if u >> UNIT_BITS == s)
            assert [(u, g) for x, y, g in held.pop_bucket(s) for u in range(x, y)] == mine
            ref = {u: g for u, g in ref.items() if u >> UNIT_BITS != s}
        for u in range(lo - 1, hi + 1):
            assert held.segment(u) == ref.get(u) and (u in held) == (u in ref)
        for t in range(4):
            listed = [(u, g) for x, y, g in held.bucket(t) for u in range(x, y)]
            assert listed == sorted((u, g) for u, g in ref.items() if u >> UNIT_BITS == t)
            assert held.holds_bucket(t) == bool(listed)
        assert len(held) == len(ref)


PAGE = 4


class _View:
    def __init__(self, uniform: bool) -> None:
        self.unit_bytes = PAGE if uniform else None

    def size(self, uid: int) -> int:
        return PAGE


def _twins(capacity: int | None) -> tuple[SLRU, SLRU]:
    runs, units = (
        SLRU(PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=1, view=_View(uniform)))
        for uniform in (True, False)
    )
    assert type(runs) is UniformSLRU and type(units) is SLRU
    if capacity is not None:
        runs.set_capacity(capacity)
        units.set_capacity(capacity)
    return runs, units


# (operation, session, a, b) as the engine calls: sessions 0-3
ENGINE_OPS = st.lists(
    st.tuples(st.integers(0, 9), st.integers(0, 3), st.integers(0, 7), st.integers(0, 5)),
    max_size=160,
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([None, 2, 3, 8, 13, 40]), ENGINE_OPS)
def test_uniform_slru_against_one_unit_at_a_time(capacity_pages, ops):
    """New pages (pinned, or not for an idle session), whole sessions acquired and released,
    victims in batches, pinned pages removed, single hits, demotion batches: ``UniformSLRU`` takes
    its run paths, ``SLRU`` one unit at a time."""
    runs, units = _twins(None if capacity_pages is None else capacity_pages * PAGE)
    members: dict[int, list[int]] = {s: [] for s in range(4)}
    pinned = dict.fromkeys(range(4), False)
    pages = dict.fromkeys(range(4), 0)
    for op, s, a, b in ops:
        base, mine = s << UNIT_BITS, members[s]
        if op == 1 and a >= 4:  # a span: sessions s and s + 1 run and get pages, in step order
            running = sorted({s, (s + 1 + a % 3) % 4})
            for r in running:
                if not pinned[r] and members[r]:  # (admitted: its units are used and pinned)
                    for pol in (runs, units):
                        pol.acquire(_as_engine_gives(members[r]), 0.0)
                pinned[r] = True
            steps = [[(r << UNIT_BITS) + pages[r] + k for r in running] for k in range(1 + b % 3)]
            span = [u for step in steps for u in step]
            for r in running:
                pages[r] += 1 + b % 3
                members[r] += [u for u in span if u >> UNIT_BITS == r]
            for pol in (runs, units):
                pol.insert_many(span, 0.0, True)
        elif op <= 1:  # new pages: pinned while the session runs, else as a miss
            uids = range(base + pages[s], base + pages[s] + 1 + b % 3)
            pages[s] += len(uids)
            for pol in (runs, units):
                pol.insert_many(uids if a % 2 else list(uids), 0.0, pinned[s])
            mine += uids
        elif op == 2 and mine and not pinned[s]:
            for pol in (runs, units):
                pol.acquire(_as_engine_gives(mine), 0.0)
            pinned[s] = True
        elif op == 3 and pinned[s]:
            if mine:
                for pol in (runs, units):
                    pol.release(_as_engine_gives(mine), 0.0)
            pinned[s] = False
        elif op in (4, 5):
            nbytes = (1 + b) * PAGE - a % 2
            if op == 4:
                got = runs.evict_bytes(nbytes, 0.0)
                assert got == units.evict_bytes(nbytes, 0.0)
            else:
                extents = runs.evict_extents(nbytes, 0.0)
                assert extents == units.evict_extents(nbytes, 0.0)
                got = [u for x, y in extents for u in range(x, y)]
            for u in got:
                members[u >> UNIT_BITS].remove(u)
        elif op == 6 and pinned[s] and mine:  # a stretch of pinned pages dropped
            cut = sorted(mine)[a % len(mine) :][: 1 + b]
            for pol in (runs, units):
                pol.remove_many(cut, pinned=True)
            members[s] = [u for u in mine if u not in cut]
        elif op == 7 and mine and not pinned[s]:  # a hit on one unit, pinned and released
            u = mine[(a * 7 + b) % len(mine)]
            for pol in (runs, units):
                pol.access(u, 0.0)
                if b % 2:
                    pol.pin(u)
                    pol.unpin(u, 0.0)
        elif op == 8:
            assert runs.peek(0.0) == units.peek(0.0)
        elif op == 9 and not pinned[s] and len(runs):  # a demotion batch of new pages
            first = base + pages[s]
            pages[s] += 2 + 3 * b
            extents = [(first, first + 1 + b), (first + 2 + b, base + pages[s])]
            free = (a % 4) * PAGE + b % 2
            if a % 2:
                out = runs.take_in_extents(extents, free, 0.0)
                assert out == units.take_in_extents(extents, free, 0.0)
                got = [u for x, y in out for u in range(x, y)]
            else:
                uids = [u for x, y in extents for u in range(x, y)]
                got = runs.take_in(uids, free, 0.0)
                assert got == units.take_in(uids, free, 0.0)
            mine += [u for x, y in extents for u in range(x, y)]
            for u in got:
                members[u >> UNIT_BITS].remove(u)
        everyone = [u for m in members.values() for u in m]
        assert [runs.segment(u) for u in everyone] == [units.segment(u) for u in everyone]
        assert len(runs) == len(units) and runs.peek(0.0) == units.peek(0.0)
    assert runs.evict_bytes(10**6, 0.0) == units.evict_bytes(10**6, 0.0)


def _as_engine_gives(uids: list[int]):
    """A session's units in page order: a range when consecutive, as ``SessionKV.uids`` gives."""
    ordered = sorted(uids)
    if ordered[-1] - ordered[0] + 1 == len(ordered):
        return range(ordered[0], ordered[-1] + 1)
    return ordered


def test_a_demotion_batch_into_a_cache_whose_probation_segment_is_empty():
    """Every candidate promoted out of S0: the first victim leaves S1 and its unit enters S0, which
    then turns over (the batch's one-unit step, then its queue step)."""
    for capacity_pages in (3, 8, 12, 16):
        runs, units = _twins(capacity_pages * PAGE)
        held = range(1 << UNIT_BITS, (1 << UNIT_BITS) + 4)
        for pol in (runs, units):
            for u in held:
                pol.insert(u, 0.0)
            for u in held:
                pol.access(u, 0.0)
        new = [(2 << UNIT_BITS, (2 << UNIT_BITS) + 7)]
        assert runs.take_in_extents(new, 0, 0.0) == units.take_in_extents(new, 0, 0.0)
        everyone = [*held, *range(*new[0])]
        assert [runs.segment(u) for u in everyone] == [units.segment(u) for u in everyone]
