"""Layer-wise pipelining of host-to-device copies with layer compute (docs/semantics.md section 5).

Copies run back to back on one H2D stream in layer order; layer l computes once its bytes are in:
    X_l = X_(l-1) + t_copy(l),   C_l = max(C_(l-1), X_l) + t_compute(l),   result C_(L-1).
Both streams start at 0 unless told otherwise: ``copy_start`` is when the H2D stream is free (copies
issued earlier, such as an ahead-of-time swap-in, still in flight), ``compute_start`` the earliest
time layer 0 may compute: X_(-1) = copy_start, C_(-1) = compute_start. ``ready`` (optional, per
layer) is when data layer l needs, copied earlier on the same stream, is in (an ahead-of-time
swap-in still in flight): C_l = max(C_(l-1), X_l, ready_l) + t_compute(l).

Copy/compute interference (epsilon): compute runs (1 + epsilon) slower *while the copy stream is
busy*, i.e. before X_(L-1), and at full speed after. Why by time and not "every layer": a single
tiny copy must not slow a whole iteration by epsilon (that would make the cost jump, not grow, with
the first swapped byte). With epsilon = 0 this is exactly the recurrence above.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import NamedTuple


def pipelined_time(
    copy_s: Sequence[float],
    compute_s: Sequence[float],
    compute_slowdown: float = 0.0,
    copy_start: float = 0.0,
    compute_start: float = 0.0,
    ready: Sequence[float] | None = None,
) -> float:
    """End of the last layer's compute, C_(L-1), for per-layer copy and compute times."""
    ready = _checked(copy_s, compute_s, copy_start, compute_start, ready)
    if compute_slowdown < 0:
        raise ValueError(f"compute_slowdown must be >= 0, got {compute_slowdown}")
    slow = 1.0 + compute_slowdown
    if not any(copy_s):  # nothing to wait for: a busy copy stream does not hold compute back
        copy_start = 0.0
    copies_end = copy_start + float(sum(copy_s))
    arrived = copy_start  # X_l
    done = compute_start  # C_l
    for t_x, t_c, r in zip(copy_s, compute_s, ready):
        if t_x < 0 or t_c < 0:
            raise ValueError(f"negative layer time: copy {t_x}, compute {t_c}")
        arrived += t_x
        start = max(done, arrived, r)
        if start >= copies_end or compute_slowdown == 0.0:
            done = start + t_c
        elif start + t_c * slow <= copies_end:  # wholly under the copy stream
            done = start + t_c * slow
        else:  # straddles the end of the copies
            done = copies_end + (t_c - (copies_end - start) / slow)
    return done


def pipelined_time_uniform(
    num_layers: int, t_copy: float, t_compute: float, compute_slowdown: float = 0.0
) -> float:
    """Closed form of ``pipelined_time`` for L identical layers.

    Copy-bound (t_x >= t_c(1+eps)): L*t_x + t_c (the last layer runs after all copies, unslowed).
    Compute-bound: t_x + L*t_c + (L-1)*t_x*eps/(1+eps) (compute runs from t_x without waiting; the
    (L-1)*t_x it shares with the copy stream run slow). With eps = 0: t_x + L*t_c, the recurrence's
    value.
    """
    if num_layers < 0 or t_copy < 0 or t_compute < 0 or compute_slowdown < 0:
        raise ValueError(
            f"need non-negative inputs, got L={num_layers}, t_x={t_copy}, "
            f"t_c={t_compute}, eps={compute_slowdown}"
        )
    if num_layers == 0:
        return 0.0
    slow = 1.0 + compute_slowdown
    if t_copy >= t_compute * slow:
        return num_layers * t_copy + t_compute
    return t_copy + num_layers * t_compute + (num_layers - 1) * t_copy * compute_slowdown / slow


def _checked(
    copy_s: Sequence[float],
    compute_s: Sequence[float],
    copy_start: float,
    compute_start: float,
    ready: Sequence[float] | None,
) -> Sequence[float]:
    """The checks every recurrence here makes of its arguments; returns ``ready`` per layer."""
    ready = _check_ready(ready, len(compute_s))
    if len(copy_s) != len(compute_s):
        raise ValueError(f"copy_s has {len(copy_s)} layers, compute_s {len(compute_s)}")
    if copy_start < 0 or compute_start < 0:
        raise ValueError(f"negative start: copy {copy_start}, compute {compute_start}")
    return ready


def _check_ready(ready: Sequence[float] | None, layers: int) -> Sequence[float]:
    if ready is None:
        return [0.0] * layers
    if len(ready) != layers or any(r < 0 for r in ready):
        raise ValueError(f"ready needs {layers} non-negative times, got {list(ready)}")
    return ready


def serial_time(
    copy_s: Sequence[float],
    compute_s: Sequence[float],
    copy_start: float = 0.0,
    compute_start: float = 0.0,
    ready: Sequence[float] | None = None,
) -> float:
    """Without pipelining: every copy is in (the stream free at ``copy_start``, earlier copies
    ``ready``) before layer 0."""
    ready = _checked(copy_s, compute_s, copy_start, compute_start, ready)
    if any(t < 0 for t in copy_s) or any(t < 0 for t in compute_s):
        raise ValueError("negative layer time")
    compute_start = max(compute_start, max(ready, default=0.0))
    copies = float(sum(copy_s))
    start = max(compute_start, copy_start + copies) if copies else compute_start
    return start + float(sum(compute_s))


def serial_time_uniform(num_layers: int, t_copy: float, t_compute: float) -> float:
    """Without pipelining every copy finishes before layer 0 starts: L*t_x + L*t_c."""
    return num_layers * (t_copy + t_compute)


class LayerTimes(NamedTuple):
    """When one layer's H2D copy and its compute ran, in seconds on the recurrence's clock."""

    copy_start: float
    copy_end: float  # X_l
    compute_start: float
    compute_end: float  # C_l


def pipelined_schedule(
    copy_s: Sequence[float],
    compute_s: Sequence[float],
    compute_slowdown: float = 0.0,
    copy_start: float = 0.0,
    compute_start: float = 0.0,
    ready: Sequence[float] | None = None,
) -> list[LayerTimes]:
    """Every layer's times in ``pipelined_time``: the same operations in the same order (its last
    ``compute_end`` is ``pipelined_time(...)`` to the last bit), kept per layer. A second loop and
    not a shared one, because ``pipelined_time`` prices simulated iterations and must stay lean."""
    ready = _checked(copy_s, compute_s, copy_start, compute_start, ready)
    if compute_slowdown < 0:
        raise ValueError(f"compute_slowdown must be >= 0, got {compute_slowdown}")
    slow = 1.0 + compute_slowdown
    if not any(copy_s):
        copy_start = 0.0
    copies_end = copy_start + float(sum(copy_s))
    arrived = copy_start
    done = compute_start
    out = []
    for t_x, t_c, r in zip(copy_s, compute_s, ready):
        if t_x < 0 or t_c < 0:
            raise ValueError(f"negative layer time: copy {t_x}, compute {t_c}")
        copy_began = arrived
        arrived += t_x
        start = max(done, arrived, r)
        if start >= copies_end or compute_slowdown == 0.0:
            done = start + t_c
        elif start + t_c * slow <= copies_end:
            done = start + t_c * slow
        else:
            done = copies_end + (t_c - (copies_end - start) / slow)
        out.append(LayerTimes(copy_began, arrived, start, done))
    return out


def serial_schedule(
    copy_s: Sequence[float],
    compute_s: Sequence[float],
    copy_start: float = 0.0,
    compute_start: float = 0.0,
    ready: Sequence[float] | None = None,
) -> list[LayerTimes]:
    """Every layer's times in ``serial_time``: copies back to back from ``copy_start``, layers back
    to back once all are in. Each end is the start plus a ``sum`` of the times before it, as
    ``serial_time`` adds them, so the last ``compute_end`` is ``serial_time(...)`` to the last bit."""
    ready = _checked(copy_s, compute_s, copy_start, compute_start, ready)
    if any(t < 0 for t in copy_s) or any(t < 0 for t in compute_s):
        raise ValueError("negative layer time")
    compute_start = max(compute_start, max(ready, default=0.0))
    copies = float(sum(copy_s))
    start = max(compute_start, copy_start + copies) if copies else compute_start
    # Running sums add left to right, as ``sum`` does: the last ones are serial_time's sums.
    copy_ends = [copy_start + float(c) for c in accumulate(copy_s)]
    compute_ends = [start + float(c) for c in accumulate(compute_s)]
    copy_starts = [copy_start, *copy_ends[:-1]]
    compute_starts = [start, *compute_ends[:-1]]
    return [LayerTimes(*t) for t in zip(copy_starts, copy_ends, compute_starts, compute_ends)]
