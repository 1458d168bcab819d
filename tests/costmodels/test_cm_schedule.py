"""Per-layer schedules: hand-worked cases, and the last compute end is exactly what
``pipelined_time`` / ``serial_time`` price (the same recurrence, to the last bit)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels.pipeline import (
    LayerTimes,
    pipelined_schedule,
    pipelined_time,
    serial_schedule,
    serial_time,
)


def test_hand_case_no_slowdown() -> None:
    # Copies 1, 4, 1 back to back: X = 1, 5, 6. C0 = 1 + 1 = 2; layer 1 waits for its copy:
    # C1 = max(2, 5) + 1 = 6; C2 = max(6, 6) + 3 = 9.
    assert pipelined_schedule([1, 4, 1], [1, 1, 3]) == [
        LayerTimes(0, 1, 1, 2),
        LayerTimes(1, 5, 5, 6),
        LayerTimes(5, 6, 6, 9),
    ]


def test_hand_case_with_slowdown() -> None:
    # eps = 1 (compute twice as slow while copying); copies 1, 2, 2 end at 5.
    # Layer 0 starts at 1 and runs wholly under the copies: 1 + 2*1 = 3.
    # Layer 1 starts at max(3, 3) = 3; 3 + 2*2 = 7 > 5, so it straddles: by 5 it has done 2/2 = 1
    # of its 2, the other 1 at full speed: 6. Layer 2 starts at max(6, 5) = 6, unslowed: 8.
    schedule = pipelined_schedule([1, 2, 2], [1, 2, 2], compute_slowdown=1.0)
    assert schedule == [LayerTimes(0, 1, 1, 3), LayerTimes(1, 3, 3, 6), LayerTimes(3, 5, 6, 8)]
    assert schedule[-1].compute_end == pipelined_time([1, 2, 2], [1, 2, 2], 1.0)


def test_hand_case_late_streams_and_ready() -> None:
    # The copy stream is busy until 2, layer 0 may not start before 1, layer 2's data is in at 10:
    # X = 3, 7, 8; C0 = max(1, 3) + 1 = 4, C1 = max(4, 7) + 1 = 8, C2 = max(8, 8, 10) + 3 = 13.
    schedule = pipelined_schedule([1, 4, 1], [1, 1, 3], 0.0, 2.0, 1.0, [0.0, 0.0, 10.0])
    assert schedule == [LayerTimes(2, 3, 3, 4), LayerTimes(3, 7, 7, 8), LayerTimes(7, 8, 10, 13)]


def test_hand_case_serial() -> None:
    # Copies from 2: 2-3, 3-7, 7-8; every layer after the last copy: 8-9, 9-10, 10-13.
    schedule = serial_schedule([1, 4, 1], [1, 1, 3], copy_start=2.0, compute_start=1.0)
    assert schedule == [LayerTimes(2, 3, 8, 9), LayerTimes(3, 7, 9, 10), LayerTimes(7, 8, 10, 13)]
    assert schedule[-1].compute_end == serial_time([1, 4, 1], [1, 1, 3], 2.0, 1.0) == 13


def test_no_copies_do_not_hold_compute_back() -> None:
    # A busy copy stream with nothing to copy for this iteration: compute starts at once.
    assert pipelined_schedule([0, 0], [1, 2], copy_start=5.0)[-1].compute_end == 3
    assert serial_schedule([0, 0], [1, 2], copy_start=5.0)[-1].compute_end == 3


def test_errors_as_the_pricing_functions() -> None:
    with pytest.raises(ValueError, match="layers"):
        pipelined_schedule([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="negative"):
        pipelined_schedule([-1.0], [1.0])
    with pytest.raises(ValueError, match="negative"):
        serial_schedule([1.0], [-1.0])
    assert pipelined_schedule([], []) == [] == serial_schedule([], [])


# Times of many magnitudes, so that rounding differs from layer to layer.
times = st.one_of(
    st.just(0.0), st.floats(min_value=1e-9, max_value=1e-1, allow_nan=False, allow_infinity=False)
)
starts = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1e-1))
eps = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=0.5))


@st.composite
def layer_times(draw):
    n = draw(st.integers(1, 96))
    copy_s = draw(st.lists(times, min_size=n, max_size=n))
    compute_s = draw(st.lists(times, min_size=n, max_size=n))
    ready = draw(st.one_of(st.none(), st.lists(starts, min_size=n, max_size=n)))
    return copy_s, compute_s, ready


# Each property draws 50 cases in the default run and its slow twin the full count (150, 100).
PIPELINED_CASES = given(layers=layer_times(), slowdown=eps, copy_start=starts, compute_start=starts)
SERIAL_CASES = given(layers=layer_times(), copy_start=starts, compute_start=starts)


@settings(max_examples=50, deadline=None)
@PIPELINED_CASES
def test_pipelined_schedule_ends_where_pipelined_time_does(**case) -> None:
    _check_pipelined_schedule(**case)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@PIPELINED_CASES
def test_pipelined_schedule_ends_where_pipelined_time_does_at_length(**case) -> None:
    _check_pipelined_schedule(**case)


def _check_pipelined_schedule(layers, slowdown, copy_start, compute_start) -> None:
    copy_s, compute_s, ready = layers
    schedule = pipelined_schedule(copy_s, compute_s, slowdown, copy_start, compute_start, ready)
    expected = pipelined_time(copy_s, compute_s, slowdown, copy_start, compute_start, ready)
    assert schedule[-1].compute_end == expected  # bit for bit
    # And it is a schedule: one copy stream in layer order, each layer after its copy and after
    # the layer before, never faster than its compute time nor slower than (1 + eps) of it.
    prev_end = compute_start
    for i, t in enumerate(schedule):
        if i:
            assert t.copy_start == schedule[i - 1].copy_end
        assert t.copy_end >= t.copy_start
        assert t.compute_start >= max(t.copy_end, prev_end, ready[i] if ready else 0.0)
        took = t.compute_end - t.compute_start
        tol = 1e-12 * t.compute_end  # end - start keeps the rounding of the clock's magnitude
        assert compute_s[i] - tol <= took <= compute_s[i] * (1 + slowdown) + tol
        prev_end = t.compute_end


@settings(max_examples=50, deadline=None)
@SERIAL_CASES
def test_serial_schedule_ends_where_serial_time_does(**case) -> None:
    _check_serial_schedule(**case)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@SERIAL_CASES
def test_serial_schedule_ends_where_serial_time_does_at_length(**case) -> None:
    _check_serial_schedule(**case)


def _check_serial_schedule(layers, copy_start, compute_start) -> None:
    copy_s, compute_s, ready = layers
    schedule = serial_schedule(copy_s, compute_s, copy_start, compute_start, ready)
    expected = serial_time(copy_s, compute_s, copy_start, compute_start, ready)
    assert schedule[-1].compute_end == expected  # bit for bit
    if any(copy_s):
        assert schedule[0].compute_start >= schedule[-1].copy_end  # every copy before layer 0
    for before, after in zip(schedule, schedule[1:]):
        assert after.compute_start == before.compute_end
        assert after.copy_start == before.copy_end
