"""SLRU's decode span in one batch (``plans_pinned``): ``planned_segments`` against a plain model
(the fill of each segment stepped one victim and one page at a time), and both forms of SLRU,
with the capacity the engine sets, driven one step at a time and as the engine's batch: the same
victims, the same segment for every pinned page, and the same order of every later victim."""

from __future__ import annotations

from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st
from test_grows_in_bulk import Twin, drive, scenarios

from sim.policies.slru import SLRU, UniformSLRU
from sim.policies.slru_plan import PinnedPlan, planned_segments, planned_split, victim_runs

N_SEG = 4


def _model(fill, victims, pages, before, resident, hwm, capacity):
    """One step at a time: a page's victims leave (one unit each), then it enters the lowest
    segment whose candidates and it fit in a share (S0 if none)."""
    fill = list(fill)
    queue = [(seg, each) for seg, units, each in victims for _ in range(units)]
    out, gone = [], 0
    for size, b in zip(pages, before, strict=True):
        while gone < b and queue:
            seg, each = queue.pop(0)
            fill[seg] -= each
            resident -= each
            gone += 1
        resident += size
        hwm = max(hwm, resident)
        share = (hwm if capacity is None else capacity) // N_SEG
        out.append(next((i for i in range(N_SEG) if fill[i] + size <= share), 0))
    return out, hwm


@st.composite
def plans(draw):
    units = draw(st.lists(st.integers(0, 6), min_size=N_SEG, max_size=N_SEG))  # candidates
    each = draw(st.sampled_from([1, 3]))  # one size, or sizes that vary (below)
    sizes = draw(st.lists(st.integers(1, 4), min_size=sum(units), max_size=sum(units)))
    sizes = [s * each for s in sizes] if each == 1 else [each] * sum(units)
    fill, victims, k = [], [], 0
    for seg, n in enumerate(units):  # the victims: the lowest segments' units, oldest first
        fill.append(sum(sizes[k : k + n]))
        victims += [(seg, 1, s) for s in sizes[k : k + n]]
        k += n
    taken = draw(st.integers(0, len(victims)))
    steps = draw(st.lists(st.integers(0, 3), max_size=10))  # victims before each page
    before = list(accumulate(steps))
    pages = draw(st.lists(st.integers(1, 4), min_size=len(before), max_size=len(before)))
    resident = sum(fill) + draw(st.integers(0, 12))  # pinned bytes beside the candidates
    hwm = resident + draw(st.integers(0, 12))
    capacity = draw(st.one_of(st.none(), st.integers(4, 60)))
    plan = PinnedPlan(list(range(len(before))), before, fill, victims[:taken], resident, hwm)
    return plan, pages, capacity


@settings(max_examples=500, deadline=None)
@given(plans())
def test_planned_segments_against_one_step_at_a_time(case):
    plan, pages, capacity = case
    want = _model(plan.fill, plan.victims, pages, plan.before, plan.resident, plan.hwm, capacity)
    assert planned_segments(plan, pages, capacity, N_SEG) == want


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=N_SEG, max_size=N_SEG),  # candidates per segment
    st.lists(st.integers(0, 3), max_size=12),  # victims before each page
    st.integers(0, 40),  # capacity in units
    st.integers(0, 10),  # pinned units beside the candidates
)
def test_planned_split_against_one_step_at_a_time(units, steps, capacity, pinned):
    """Units of one size, a fixed capacity: the first k units enter one segment, the rest S0."""
    unit = 3
    before = list(accumulate(steps))
    victims = victim_runs(units, before[-1] if before else 0, unit)
    resident = (sum(units) + pinned) * unit
    plan = PinnedPlan(
        list(range(len(before))), before, [n * unit for n in units], victims, resident, resident
    )
    want, _ = _model(
        plan.fill, victims, [unit] * len(before), before, resident, resident, capacity * unit
    )
    seg, k = planned_split(plan, unit, capacity * unit, N_SEG)
    assert [seg] * k + [0] * (len(before) - k) == want


class PerUnitSLRU(SLRU):
    """SLRU with one entry per unit where units have one size (``SLRU`` builds ``UniformSLRU``
    there, but not for a subclass)."""


@settings(max_examples=300, deadline=None)
@given(
    scenarios,
    st.one_of(st.none(), st.integers(4, 40)),  # capacity in pages (the engine sets one)
    st.integers(0, 10),  # victims before the span
    st.sampled_from([SLRU, PerUnitSLRU]),
)
def test_an_slru_span_in_one_batch_equals_its_steps(scenario, capacity, early, form):
    """The span's victims, its pages' segments, and every victim after its turns end."""
    got = []
    for bulk in (True, False):
        t = Twin("slru", scenario[-1], capacity, form)
        assert isinstance(t.pol, UniformSLRU) == (form is SLRU)
        seen: list[list[int | None]] = []
        release = t.pol.release

        def release_and_look(uids, now, release=release, t=t, seen=seen):
            seen.append([t.pol.segment(u) for u in uids])  # (pinned: the segment it remembers)
            release(uids, now)

        t.pol.release = release_and_look
        got.append((drive("slru", scenario, bulk, t, early), seen))
    assert got[0] == got[1]
