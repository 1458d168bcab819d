"""CostModel.layered_iteration: the per-layer recurrence by hand, bounds, equality with iteration."""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import (
    BatchShape,
    CopyTerm,
    CostModel,
    cost_model,
    get_model,
    load_profile,
)

# Times in units of MS = 2**-10 s (about a millisecond): every sum below is exact in binary.
MS = 2.0**-10
HEAD = 256 * MS  # LM head of one row in the hand-made profile (its weight-read floor)
OVERHEAD = 128 * MS  # step overhead of the hand-made profile


def hand_profile(layerwise: bool = True, slowdown: float = 0.0):
    """The analytic H100 profile with numbers we control: no copy/compute slowdown, an LM head of
    exactly HEAD (weight bandwidth = 4 x the head's bytes), OVERHEAD per step, and D2H priced
    at MS per copy (latency MS, bandwidth so high that bytes are free when we pass none)."""
    base = load_profile("h100-sxm")
    head_bytes = get_model("llama-3-8b").lm_head_params * 2  # bf16
    return dataclasses.replace(
        base,
        name="hand",
        linear=dataclasses.replace(base.linear, weight_bw_Bps=head_bytes / HEAD),
        d2h=CopyTerm(latency_s=MS, bw_Bps=1e30),
        overlap=dataclasses.replace(
            base.overlap, compute_slowdown=slowdown, layerwise_h2d=layerwise
        ),
        step_overhead_s=OVERHEAD,
    )


@cache
def hand_cm(layers: int = 3, layerwise: bool = True, slowdown: float = 0.0) -> CostModel:
    model = dataclasses.replace(get_model("llama-3-8b"), name=f"tiny-{layers}", num_layers=layers)
    return CostModel(model, hand_profile(layerwise, slowdown))


def ms(xs):
    return [x * MS for x in xs]


def test_hand_profile_is_what_we_think() -> None:
    cm = hand_cm()
    assert cm.profile.overlap.compute_slowdown == 0.0 and cm.profile.overlap.layerwise_h2d
    assert cm.lm_head_s(1) == HEAD
    assert cm.profile.step_overhead_s == OVERHEAD
    assert cm.copy_s("d2h", 0, 7) == 7 * MS


# (copies, compute, pipelined body, serial body), all in MS, zero starts.
HAND_CASES = [
    # Copy-bound: X = 3,6,9; C = 3+1=4, max(4,6)+1=7, max(7,9)+1=10. Serial: 9 + 3 = 12.
    ([3, 3, 3], [1, 1, 1], 10, 12),
    # Compute-bound: X = 1,2,3; C = 1+3=4, max(4,2)+3=7, max(7,3)+3=10. Serial: 3 + 9 = 12.
    ([1, 1, 1], [3, 3, 3], 10, 12),
    # Mixed, a late layer's copy is large: X = 0,0,5; C = 2, 4, max(4,5)+2 = 7. Serial: 5 + 6 = 11.
    ([0, 0, 5], [2, 2, 2], 7, 11),
    # Early copy large: X = 6,7,8; C = 6+1=7, max(7,7)+1=8, max(8,8)+1=9. Serial: 8 + 3 = 11.
    ([6, 1, 1], [1, 1, 1], 9, 11),
]


@pytest.mark.parametrize("copies, compute, pipe_body, serial_body", HAND_CASES)
@pytest.mark.parametrize("rows", [0, 1])
def test_hand_timelines(copies, compute, pipe_body, serial_body, rows) -> None:
    cm = hand_cm()
    tail = (HEAD + OVERHEAD) if rows else 0.0  # rows = 0: no LM head, no step overhead
    compute_s = sum(compute) * MS + tail
    h2d_s = sum(copies) * MS
    for pipelining, body in ((True, pipe_body), (False, serial_body)):
        it = cm.layered_iteration(ms(compute), rows, ms(copies), pipelining=pipelining)
        assert it.total_s == body * MS + tail, pipelining
        assert it.compute_s == compute_s
        assert it.h2d_s == h2d_s
        assert it.d2h_s == 0.0
        # stall = copy time the compute could not hide: body - sum(compute)
        assert it.stall_s == (body - sum(compute)) * MS


def test_hand_timelines_with_starts() -> None:
    cm = hand_cm()
    tail = HEAD + OVERHEAD
    # Mixed case, stream busy until 4, layer 0 not before 1: X = 4,4,9;
    # C = max(1,4)+2 = 6, max(6,4)+2 = 8, max(8,9)+2 = 11.  Serial: max(1, 4+5) + 6 = 15.
    it = cm.layered_iteration(
        ms([2, 2, 2]), 1, ms([0, 0, 5]), copy_start_s=4 * MS, compute_start_s=1 * MS
    )
    assert it.total_s == 11 * MS + tail and it.stall_s == 5 * MS and it.h2d_s == 5 * MS
    it = cm.layered_iteration(
        ms([2, 2, 2]),
        1,
        ms([0, 0, 5]),
        pipelining=False,
        copy_start_s=4 * MS,
        compute_start_s=1 * MS,
    )
    assert it.total_s == 15 * MS + tail and it.stall_s == 9 * MS
    # Compute-bound case with layer 0 held back until 10: X = 1,2,3 long in;
    # C = 10+3 = 13, 16, 19.  Serial: max(10, 0+3) + 9 = 19 as well.
    for pipelining in (True, False):
        it = cm.layered_iteration(
            ms([3, 3, 3]), 1, ms([1, 1, 1]), pipelining=pipelining, compute_start_s=10 * MS
        )
        assert it.total_s == 19 * MS + tail
    # Copy-bound case behind a stream busy until 2: X = 5,8,11; C = 6, 9, 12.  Serial: 2+9+3 = 14.
    it = cm.layered_iteration(ms([1, 1, 1]), 1, ms([3, 3, 3]), copy_start_s=2 * MS)
    assert it.total_s == 12 * MS + tail
    it = cm.layered_iteration(
        ms([1, 1, 1]), 1, ms([3, 3, 3]), pipelining=False, copy_start_s=2 * MS
    )
    assert it.total_s == 14 * MS + tail


def test_backend_without_layerwise_h2d_runs_copies_first() -> None:
    # Mixed case on a backend that cannot pipeline per layer: pipelining=True is ignored, 5 + 6 = 11.
    cm = hand_cm(layerwise=False)
    it = cm.layered_iteration(ms([2, 2, 2]), 1, ms([0, 0, 5]), pipelining=True)
    assert it.total_s == 11 * MS + HEAD + OVERHEAD


def test_async_save() -> None:
    cm = hand_cm()
    # body: no H2D, compute 1+1+1 = 3 -> compute path 3 + 256 + 128 = 387 MS; D2H 500 copies = 500 MS.
    kw = {"d2h_bytes": 0, "d2h_copies": 500}
    it = cm.layered_iteration(ms([1, 1, 1]), 1, ms([0, 0, 0]), async_save=True, **kw)
    assert it.d2h_s == 500 * MS
    assert it.total_s == 500 * MS  # max(387, 500)
    assert it.compute_s == 387 * MS and it.stall_s == 113 * MS
    it = cm.layered_iteration(ms([1, 1, 1]), 1, ms([0, 0, 0]), async_save=False, **kw)
    assert it.total_s == 887 * MS  # 500 + 387
    assert it.stall_s == 500 * MS
    # With the mixed H2D case too: body 7, compute path 7 + 384 = 391; async: max(391, 500) = 500,
    # sync: 500 + 391 = 891.  A short D2H (20 MS) hides entirely when async: 391.
    assert cm.layered_iteration(ms([2, 2, 2]), 1, ms([0, 0, 5]), **kw).total_s == 500 * MS
    assert (
        cm.layered_iteration(ms([2, 2, 2]), 1, ms([0, 0, 5]), async_save=False, **kw).total_s
        == 891 * MS
    )
    assert cm.layered_iteration(ms([2, 2, 2]), 1, ms([0, 0, 5]), d2h_copies=20).total_s == 391 * MS
    assert (
        cm.layered_iteration(
            ms([2, 2, 2]), 1, ms([0, 0, 5]), d2h_copies=20, async_save=False
        ).total_s
        == 411 * MS
    )


# --- property: pipelining helps, and no stream is beaten ------------------------------------------
layer_times = st.floats(min_value=0.0, max_value=1e-2, allow_nan=False, allow_infinity=False)
starts = st.floats(min_value=0.0, max_value=5e-2, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    layers=st.integers(1, 12),
    rows=st.integers(0, 4),
    slowdown=st.sampled_from([0.0, 0.25]),
    with_starts=st.booleans(),
)
def test_pipelined_between_bound_and_serial(data, layers, rows, slowdown, with_starts) -> None:
    cm = hand_cm(layers, slowdown=slowdown)
    copies = data.draw(st.lists(layer_times, min_size=layers, max_size=layers), label="copies")
    compute = data.draw(st.lists(layer_times, min_size=layers, max_size=layers), label="compute")
    x0 = data.draw(starts, label="copy_start") if with_starts else 0.0
    c0 = data.draw(starts, label="compute_start") if with_starts else 0.0
    pipe = cm.layered_iteration(compute, rows, copies, copy_start_s=x0, compute_start_s=c0)
    serial = cm.layered_iteration(
        compute, rows, copies, pipelining=False, copy_start_s=x0, compute_start_s=c0
    )
    tail = (cm.lm_head_s(rows) + OVERHEAD) if rows else 0.0
    tol = 1e-12
    # Never slower than copies-first.
    assert pipe.total_s <= serial.total_s + tol
    # Never faster than either stream: the last layer computes after the last copy is in
    # (C_(L-1) >= X_(L-1) = x0 + sum copy) and after every layer's compute from c0.
    # With no copies at all the busy copy stream holds nothing back.
    copy_end = x0 + sum(copies) if any(copies) else 0.0
    bound = tail + max(copy_end, c0 + sum(compute))
    assert pipe.total_s >= bound - tol
    assert pipe.total_s >= tail + max(sum(copies), sum(compute)) - tol
    assert pipe.stall_s >= -tol and serial.stall_s >= -tol
    if not with_starts:
        # Serial with zero starts is exactly copies + compute.
        assert serial.total_s == pytest.approx(
            sum(copies) + sum(compute) + tail, rel=1e-12, abs=1e-15
        )


def test_no_copies_do_not_wait_for_the_busy_stream() -> None:
    # Nothing to copy this iteration, stream busy with earlier copies until 10, compute free at 0.
    # Serial: no copies -> layer 0 starts at compute_start = 0, body = 3.
    # Pipelined must not be slower than serial (it only differs in when copies land): also 3.
    cm = hand_cm()
    serial = cm.layered_iteration(
        ms([1, 1, 1]), 0, ms([0, 0, 0]), pipelining=False, copy_start_s=10 * MS
    )
    pipe = cm.layered_iteration(ms([1, 1, 1]), 0, ms([0, 0, 0]), copy_start_s=10 * MS)
    assert serial.total_s == 3 * MS
    assert pipe.total_s == serial.total_s


# --- uniform layers: layered_iteration == iteration -------------------------------------------------
SHAPES = [
    BatchShape(),
    BatchShape.decode(64, 64 * 2000),
    BatchShape.prefill(2000, 0),
    BatchShape.prefill(500, 3000) + BatchShape.decode(32, 32 * 1500),
]
H2D = [(0, 0), (10 * 2**20, 320), (2 * 2**30, 32 * 1024)]  # none, compute-bound, copy-bound
D2H = [(0, 0), (2**20, 16), (4 * 2**30, 1024)]  # none, hidden, longer than compute


@pytest.mark.parametrize("profile", ["analytic", "no-slowdown", "no-layerwise"])
@pytest.mark.parametrize("shape", SHAPES)
def test_uniform_layers_equal_iteration(profile, shape) -> None:
    cm = cost_model("llama-3-8b", "h100-sxm")
    if profile != "analytic":
        overlap = (
            dataclasses.replace(cm.profile.overlap, compute_slowdown=0.0)
            if profile == "no-slowdown"
            else dataclasses.replace(cm.profile.overlap, layerwise_h2d=False)
        )
        cm = CostModel(cm.model, dataclasses.replace(cm.profile, name=profile, overlap=overlap))
    L = cm.model.num_layers
    t_c = cm.layer_s(shape)
    checked = 0
    for h2d_bytes, h2d_copies in H2D:
        h2d = cm.copy_s("h2d", h2d_bytes, h2d_copies)
        for d2h_bytes, d2h_copies in D2H:
            for pipelining in (True, False):
                for async_save in (True, False):
                    kw = {
                        "d2h_bytes": d2h_bytes,
                        "d2h_copies": d2h_copies,
                        "pipelining": pipelining,
                        "async_save": async_save,
                    }
                    ref = cm.iteration(shape, h2d_bytes=h2d_bytes, h2d_copies=h2d_copies, **kw)
                    got = cm.layered_iteration([t_c] * L, shape.rows, [h2d / L] * L, **kw)
                    for f in ("total_s", "compute_s", "h2d_s", "d2h_s"):
                        assert getattr(got, f) == pytest.approx(
                            getattr(ref, f), rel=1e-12, abs=1e-18
                        ), (f, h2d_bytes, d2h_bytes, pipelining, async_save)
                    assert got.stall_s == pytest.approx(ref.stall_s, rel=1e-9, abs=1e-15)
                    checked += 1
    assert checked == 36


# --- errors ---------------------------------------------------------------------------------------
def test_wrong_number_of_layers() -> None:
    cm = hand_cm()
    for compute, copies in (([1.0] * 2, [0.0] * 3), ([1.0] * 3, [0.0] * 4), ([], [])):
        for pipelining in (True, False):
            with pytest.raises(ValueError, match="layers"):
                cm.layered_iteration(compute, 1, copies, pipelining=pipelining)


@pytest.mark.parametrize("pipelining", [True, False])
@pytest.mark.parametrize("layerwise", [True, False])
def test_negative_starts_raise(pipelining, layerwise) -> None:
    cm = hand_cm(layerwise=layerwise)
    for kw in ({"copy_start_s": -MS}, {"compute_start_s": -MS}):
        with pytest.raises(ValueError, match="negative"):
            cm.layered_iteration(ms([1, 1, 1]), 1, ms([1, 1, 1]), pipelining=pipelining, **kw)


def test_ready_times_hold_back_each_layer() -> None:
    # Two layers, no copies of its own, compute 1 s each; layer 1's data (an earlier copy) is in
    # at 3 s: C_0 = 1, C_1 = max(1, 3) + 1 = 4. Copies first (no pipelining): all data in at 3,
    # then both layers: 5.
    from costmodels.pipeline import pipelined_time, serial_time

    assert pipelined_time([0.0, 0.0], [1.0, 1.0], ready=[0.0, 3.0]) == 4.0
    assert serial_time([0.0, 0.0], [1.0, 1.0], ready=[0.0, 3.0]) == 5.0
    assert pipelined_time([0.0, 0.0], [1.0, 1.0], ready=[0.5, 1.0]) == 2.5  # only layer 0 waits
    with pytest.raises(ValueError, match="ready"):
        pipelined_time([0.0], [1.0], ready=[-1.0])
