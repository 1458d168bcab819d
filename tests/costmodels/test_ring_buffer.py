"""The ring-buffer timeline: hand-worked timelines, the closed form == the recurrence, bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import pipelined_time
from costmodels.ring_buffer import ring_buffer_time_uniform, ring_buffer_timeline


def design_timeline(copy_s, attn_s, slots, copy_start=0.0, compute_start=0.0):
    """The design, written out independently: a page's copy waits for the stream and for the slot
    of page j-slots; its attention waits for its copy and for the previous attention."""
    xs, xe, as_, ae = [], [], [], []
    for j, (tx, ta) in enumerate(zip(copy_s, attn_s, strict=True)):
        free_stream = xe[-1] if xe else copy_start
        free_slot = ae[j - slots] if j >= slots else 0.0
        xs.append(max(free_stream, free_slot))
        xe.append(xs[-1] + tx)
        as_.append(max(xe[-1], ae[-1] if ae else compute_start))
        ae.append(as_[-1] + ta)
    return xs, xe, as_, ae


def assert_timeline(tl, copy_start, copy_end, attn_start, attn_end) -> None:
    assert tl.copy_start.tolist() == copy_start
    assert tl.copy_end.tolist() == copy_end
    assert tl.attn_start.tolist() == attn_start
    assert tl.attn_end.tolist() == attn_end


def test_copy_bound_by_hand() -> None:
    # copy 2, attention 1, 4 pages, 2 slots. Copies back to back: 0-2, 2-4, 4-6, 6-8 (page 2's
    # slot is free at 3, page 3's at 5: before the stream reaches them). Each attention runs right
    # after its copy: 2-3, 4-5, 6-7, 8-9. The compute stream waits 2 + 1 + 1 + 1 = 5.
    tl = ring_buffer_timeline([2, 2, 2, 2], [1, 1, 1, 1], slots=2)
    assert_timeline(tl, [0, 2, 4, 6], [2, 4, 6, 8], [2, 4, 6, 8], [3, 5, 7, 9])
    assert tl.end_s == 9 and tl.stall_s == 5 and tl.pages == 4
    assert ring_buffer_time_uniform(4, 2, 1, 2) == 9


def test_attention_bound_by_hand() -> None:
    # copy 1, attention 3, 4 pages, 2 slots. Page 0: copy 0-1, attention 1-4. Page 1: copy 1-2,
    # attention 4-7. Page 2 needs page 0's slot (free at 4): copy 4-5, attention 7-10. Page 3 needs
    # page 1's slot (free at 7): copy 7-8, attention 10-13. Only the first copy is waited on.
    tl = ring_buffer_timeline([1, 1, 1, 1], [3, 3, 3, 3], slots=2)
    assert_timeline(tl, [0, 1, 4, 7], [1, 2, 5, 8], [1, 4, 7, 10], [4, 7, 10, 13])
    assert tl.end_s == 13 and tl.stall_s == 1
    assert ring_buffer_time_uniform(4, 1, 3, 2) == 13


def test_one_slot_serialises() -> None:
    # copy 2, attention 1, 3 pages, 1 slot: each copy waits for the previous page's attention.
    tl = ring_buffer_timeline([2, 2, 2], [1, 1, 1], slots=1)
    assert_timeline(tl, [0, 3, 6], [2, 5, 8], [2, 5, 8], [3, 6, 9])
    assert tl.end_s == 9 and tl.stall_s == 6
    assert ring_buffer_time_uniform(3, 2, 1, 1) == 9
    # Two slots overlap the same pages: 3*2 + 1.
    assert ring_buffer_timeline([2, 2, 2], [1, 1, 1], slots=2).end_s == 7


def test_slot_binds_on_uneven_pages() -> None:
    # copies 1 each, attention 5 then 1s, 2 slots: page 2 waits for page 0's slot (free at 6).
    # Page 0: 0-1 / 1-6; page 1: 1-2 / 6-7; page 2: 6-7 / 7-8; page 3: slot of page 1 free at 7,
    # 7-8 / 8-9.
    tl = ring_buffer_timeline([1, 1, 1, 1], [5, 1, 1, 1], slots=2)
    assert_timeline(tl, [0, 1, 6, 7], [1, 2, 7, 8], [1, 6, 7, 8], [6, 7, 8, 9])
    # With 4 slots the copies run ahead (0-4) and the end is the same: attention-bound.
    wide = ring_buffer_timeline([1, 1, 1, 1], [5, 1, 1, 1], slots=4)
    assert wide.copy_start.tolist() == [0, 1, 2, 3] and wide.end_s == 9


def test_start_times_by_hand() -> None:
    # The copy stream busy until 3, the compute stream until 1: copies 3-5, 5-7; attention 5-6,
    # 7-8; the compute stream waits (5 - 1) + (7 - 6) = 5.
    tl = ring_buffer_timeline([2, 2], [1, 1], slots=2, copy_start_s=3, compute_start_s=1)
    assert_timeline(tl, [3, 5], [5, 7], [5, 7], [6, 8])
    assert tl.end_s == 8 and tl.stall_s == 5
    # Compute busy until 10 (dense attention first): the copies wait for slots, not the reverse.
    # Copies 0-2, 2-4, then page 2 waits for page 0's slot (free at 11): 11-13.
    tl = ring_buffer_timeline([2, 2, 2], [1, 1, 1], slots=2, compute_start_s=10)
    assert_timeline(tl, [0, 2, 11], [2, 4, 13], [10, 11, 13], [11, 12, 14])
    assert tl.end_s == 14 and tl.stall_s == 1


def test_no_pages() -> None:
    tl = ring_buffer_timeline([], [], slots=3, copy_start_s=5, compute_start_s=2)
    assert tl.end_s == 2 and tl.stall_s == 0 and tl.pages == 0
    assert ring_buffer_time_uniform(0, 1.0, 2.0, 3) == 0.0


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"copy_s": [1], "attn_s": [1], "slots": 0}, "slots"),
        ({"copy_s": [1], "attn_s": [1], "slots": 1.5}, "slots"),
        ({"copy_s": [1, -1], "attn_s": [1, 1], "slots": 1}, r"copy_s\[1\]"),
        ({"copy_s": [1], "attn_s": [float("nan")], "slots": 1}, r"attn_s\[0\]"),
        ({"copy_s": [1], "attn_s": [float("inf")], "slots": 1}, r"attn_s\[0\]"),
        ({"copy_s": [1], "attn_s": [1], "slots": 1, "copy_start_s": -1}, "copy_start_s"),
        ({"copy_s": [1], "attn_s": [1], "slots": 1, "compute_start_s": -1}, "compute_start_s"),
        ({"copy_s": [1, 1], "attn_s": [1], "slots": 1}, "copy_s has 2 pages, attn_s 1"),
    ],
)
def test_timeline_rejects_bad_input(kwargs, key) -> None:
    with pytest.raises(ValueError, match=key):
        ring_buffer_timeline(**kwargs)


@pytest.mark.parametrize(
    "args, key",
    [
        ((-1, 1.0, 1.0, 2), "n must"),
        ((2, -1.0, 1.0, 2), "t_copy"),
        ((2, 1.0, -1.0, 2), "t_attn"),
        ((2, 1.0, 1.0, 0), "slots"),
        ((2.0, 1.0, 1.0, 2), "n must"),
    ],
)
def test_uniform_rejects_bad_input(args, key) -> None:
    with pytest.raises(ValueError, match=key):
        ring_buffer_time_uniform(*args)


times = st.floats(min_value=0.0, max_value=1e-2, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(n=st.integers(0, 200), t_x=times, t_a=times, slots=st.integers(1, 12))
def test_closed_form_equals_recurrence(n, t_x, t_a, slots) -> None:
    loop = ring_buffer_timeline([t_x] * n, [t_a] * n, slots).end_s
    assert ring_buffer_time_uniform(n, t_x, t_a, slots) == pytest.approx(loop, rel=1e-9, abs=1e-15)


def test_closed_form_sweep_exact_on_integers() -> None:
    """Integer durations keep every sum exact: closed form and recurrence agree to the bit."""
    for n in range(12):
        for t_x in range(5):
            for t_a in range(5):
                for slots in range(1, 6):
                    loop = ring_buffer_timeline([t_x] * n, [t_a] * n, slots).end_s
                    assert ring_buffer_time_uniform(n, t_x, t_a, slots) == loop, (
                        n,
                        t_x,
                        t_a,
                        slots,
                    )


pages = st.lists(st.tuples(times, times), min_size=0, max_size=40)


@settings(max_examples=300, deadline=None)
@given(p=pages, slots=st.integers(1, 8), x0=times, c0=times)
def test_timeline_is_the_design_and_respects_its_constraints(p, slots, x0, c0) -> None:
    copy_s, attn_s = [a for a, _ in p], [b for _, b in p]
    tl = ring_buffer_timeline(copy_s, attn_s, slots, x0, c0)
    xs, xe, as_, ae = design_timeline(copy_s, attn_s, slots, x0, c0)
    np.testing.assert_allclose(tl.copy_start, xs, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tl.attn_end, ae, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tl.attn_start, as_, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tl.copy_end, xe, rtol=1e-12, atol=1e-15)
    tol = 1e-12
    for j in range(len(p)):
        assert tl.attn_start[j] >= tl.copy_end[j] - tol  # attends to a copied page
        if j:
            assert tl.copy_start[j] >= tl.copy_end[j - 1] - tol  # one copy stream
            assert tl.attn_start[j] >= tl.attn_end[j - 1] - tol  # one compute stream
        if j >= slots:
            assert tl.copy_start[j] >= tl.attn_end[j - slots] - tol  # never overwrites a slot
    assert tl.stall_s >= 0.0
    assert tl.stall_s == pytest.approx(tl.end_s - c0 - sum(attn_s), rel=1e-9, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(p=pages, slots=st.integers(1, 8))
def test_bounds_and_monotone_in_slots(p, slots) -> None:
    copy_s, attn_s = [a for a, _ in p], [b for _, b in p]
    end = ring_buffer_timeline(copy_s, attn_s, slots).end_s
    tol = 1e-12
    assert end <= sum(copy_s) + sum(attn_s) + tol  # never worse than in turn
    if p:
        assert end >= sum(copy_s) + attn_s[-1] - tol  # the copy stream's work
        assert end >= copy_s[0] + sum(attn_s) - tol  # the compute stream's work
    assert ring_buffer_timeline(copy_s, attn_s, slots + 1).end_s <= end + tol
    # One slot is doing them in turn.
    assert ring_buffer_timeline(copy_s, attn_s, 1).end_s == pytest.approx(
        sum(copy_s) + sum(attn_s), rel=1e-9, abs=1e-15
    )


@settings(max_examples=200, deadline=None)
@given(p=pages, x0=times, c0=times)
def test_enough_slots_is_the_layer_pipeline(p, x0, c0) -> None:
    """With a slot per page nothing waits on a slot: the layer-wise recurrence of
    ``costmodels.pipeline`` with pages for layers. (That one ignores a busy copy stream when there
    is nothing to copy; the ring keeps the plain recurrence: a page waits for the stream.)"""
    copy_s, attn_s = [a for a, _ in p], [b for _, b in p]
    end = ring_buffer_timeline(copy_s, attn_s, max(1, len(p)), x0, c0).end_s
    if any(copy_s):
        want = pipelined_time(copy_s, attn_s, 0.0, x0, c0)
    else:
        want = (max(x0, c0) if p else c0) + sum(attn_s)
    assert end == pytest.approx(want, rel=1e-12, abs=1e-15)
