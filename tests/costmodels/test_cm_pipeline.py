"""Layer-wise pipelining: hand cases, closed form == recurrence, bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import pipelined_time, pipelined_time_uniform
from costmodels.pipeline import serial_time_uniform


def design_recurrence(copy_s, compute_s) -> float:
    """docs/semantics.md section 5, written out independently:

    X_l = X_(l-1) + t_copy(l); C_l = max(C_(l-1), X_l) + t_compute(l).
    """
    x = c = 0.0
    for tx, tc in zip(copy_s, compute_s):
        x += tx
        c = max(c, x) + tc
    return c


def test_hand_cases() -> None:
    # Copy-bound, L=3, t_x=2, t_c=1: X = 2,4,6; C = 3, 5, 7.
    assert pipelined_time([2, 2, 2], [1, 1, 1]) == 7 == pipelined_time_uniform(3, 2, 1)
    # Compute-bound, L=3, t_x=1, t_c=2: C = 3, 5, 7 (= t_x + L*t_c).
    assert pipelined_time([1, 1, 1], [2, 2, 2]) == 7 == pipelined_time_uniform(3, 1, 2)
    # Non-uniform: X = 1, 5, 6; C0 = 1+1 = 2, C1 = max(2,5)+1 = 6, C2 = max(6,6)+3 = 9.
    assert pipelined_time([1, 4, 1], [1, 1, 3]) == 9
    assert pipelined_time([], []) == 0.0 == pipelined_time_uniform(0, 1.0, 1.0)


def test_hand_case_with_slowdown() -> None:
    # L=2, t_x=1, t_c=2, eps=0.5: copies end at 2. Layer 0 starts at 1, runs slow until 2 (does
    # 1/1.5 of work), then the remaining 2 - 2/3 at full speed: C0 = 2 + 4/3. Layer 1: C1 = C0 + 2.
    expected = 2 + 4 / 3 + 2
    assert pipelined_time([1, 1], [2, 2], compute_slowdown=0.5) == pytest.approx(
        expected, rel=1e-12
    )
    assert pipelined_time_uniform(2, 1, 2, 0.5) == pytest.approx(expected, rel=1e-12)
    # Copy-bound with eps: slow layers hide under the copies; the last runs after them, unslowed.
    assert pipelined_time([3, 3], [1, 1], compute_slowdown=0.5) == 3 + 3 + 1


times = st.floats(min_value=0.0, max_value=1e-2, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(L=st.integers(1, 128), t_x=times, t_c=times, eps=st.floats(0.0, 0.5))
def test_closed_form_equals_loop(L, t_x, t_c, eps) -> None:
    loop = pipelined_time([t_x] * L, [t_c] * L, compute_slowdown=eps)
    assert pipelined_time_uniform(L, t_x, t_c, eps) == pytest.approx(loop, rel=1e-9, abs=1e-15)
    if eps == 0.0:
        assert loop == pytest.approx(design_recurrence([t_x] * L, [t_c] * L), rel=1e-12, abs=1e-15)


@settings(max_examples=300, deadline=None)
@given(L=st.integers(1, 128), t_x=times, t_c=times, eps=st.floats(0.0, 0.5))
def test_bounds(L, t_x, t_c, eps) -> None:
    t = pipelined_time_uniform(L, t_x, t_c, eps)
    tol = 1e-12 * (1 + L)
    assert t >= max(L * t_x, L * t_c) - tol  # neither stream can be beaten
    assert t <= L * (t_x + t_c) + tol  # never worse than doing them in turn
    assert serial_time_uniform(L, t_x, t_c) >= t - tol  # no pipelining >= pipelining


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(times, times), min_size=1, max_size=64))
def test_nonuniform_loop_is_the_design_recurrence(pairs) -> None:
    copy_s = [p[0] for p in pairs]
    compute_s = [p[1] for p in pairs]
    assert pipelined_time(copy_s, compute_s) == pytest.approx(
        design_recurrence(copy_s, compute_s), rel=1e-12, abs=1e-15
    )


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(times, times), min_size=1, max_size=64), eps=st.floats(0.0, 0.5))
def test_slowdown_costs_at_most_eps_of_compute(pairs, eps) -> None:
    copy_s = [p[0] for p in pairs]
    compute_s = [p[1] for p in pairs]
    base = pipelined_time(copy_s, compute_s)
    slowed = pipelined_time(copy_s, compute_s, compute_slowdown=eps)
    assert base - 1e-15 <= slowed <= base + eps * sum(compute_s) + 1e-12


def test_slowdown_is_continuous_at_the_regime_boundary() -> None:
    L, t_c, eps = 32, 1e-3, 0.2
    edge = t_c * (1 + eps)
    below = pipelined_time_uniform(L, edge * (1 - 1e-9), t_c, eps)
    above = pipelined_time_uniform(L, edge * (1 + 1e-9), t_c, eps)
    assert below == pytest.approx(above, rel=1e-7)


def test_errors() -> None:
    with pytest.raises(ValueError, match="layers"):
        pipelined_time([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="negative"):
        pipelined_time([-1.0], [1.0])
    with pytest.raises(ValueError):
        pipelined_time_uniform(2, 1.0, 1.0, -0.1)
