"""A ring buffer of page slots on the GPU, fed by host-to-device copies: one layer's timeline.

Sparse attention with CPU offload (docs/semantics.md, section 9) streams the selected pages of one layer
through ``slots`` GPU slots. Page j is copied into a slot, attended to, and its slot is free again
once that attention ends. With X_j / A_j the end of page j's copy / attention:
    copy_start(j) = max(X_(j-1), A_(j-slots))      (one H2D stream; page j-slots' slot must be free)
    attn_start(j) = max(X_j, A_(j-1))              (one compute stream, pages in order)
X_(-1) = ``copy_start_s`` (the copy stream is busy until then), A_(-1) = ``compute_start_s`` (the
compute stream is busy until then: the attention over GPU-resident tokens runs first), and the
slot term is absent for j < slots. The timeline ends at A_(n-1).

It is ``costmodels.pipeline``'s layer recurrence with pages for layers plus the slot bound: with
slots >= n the two are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RingTimeline:
    """Start and end of every page's copy and attention, in seconds, from the same origin."""

    copy_start: np.ndarray
    copy_end: np.ndarray
    attn_start: np.ndarray
    attn_end: np.ndarray
    end_s: float  # A_(n-1): the last attention's end (compute_start_s when there are no pages)
    stall_s: float  # time the compute stream waited on copies: end_s - compute_start_s - sum(attn)

    @property
    def pages(self) -> int:
        return len(self.attn_end)


def _check_time(name: str, value: float) -> float:
    v = float(value)
    if not 0.0 <= v < float("inf"):  # also rejects NaN
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def _check_times(name: str, values: Sequence[float]) -> list[float]:
    return [_check_time(f"{name}[{j}]", v) for j, v in enumerate(values)]


def _check_slots(slots: int) -> int:
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 1:
        raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
    return int(slots)


def ring_buffer_timeline(
    copy_s: Sequence[float],
    attn_s: Sequence[float],
    slots: int,
    copy_start_s: float = 0.0,
    compute_start_s: float = 0.0,
) -> RingTimeline:
    """The recurrence of the module docstring for pages 0..n-1 with per-page copy and attention
    durations (``copy_s[j]``, ``attn_s[j]``)."""
    slots = _check_slots(slots)
    copies = _check_times("copy_s", copy_s)
    attns = _check_times("attn_s", attn_s)
    if len(copies) != len(attns):
        raise ValueError(f"copy_s has {len(copies)} pages, attn_s {len(attns)}")
    copy_start_s = _check_time("copy_start_s", copy_start_s)
    compute_start_s = _check_time("compute_start_s", compute_start_s)
    n = len(copies)
    xs, xe, as_, ae = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    copied, done, stall = copy_start_s, compute_start_s, 0.0
    for j in range(n):
        start = copied if j < slots else max(copied, ae[j - slots])
        copied = start + copies[j]
        xs[j], xe[j] = start, copied
        if copied > done:
            stall += copied - done
            begin = copied
        else:
            begin = done
        done = begin + attns[j]
        as_[j], ae[j] = begin, done
    return RingTimeline(np.array(xs), np.array(xe), np.array(as_), np.array(ae), done, stall)


def ring_buffer_time_uniform(n: int, t_copy: float, t_attn: float, slots: int) -> float:
    """End of ``ring_buffer_timeline`` for n pages of equal durations, both streams free at 0.

    slots = 1: nothing overlaps (page j+1's copy waits for page j's attention): n*(t_x + t_a).
    slots >= 2 (double buffering suffices for equal pages): copy-bound (t_x >= t_a) the copies run
    back to back and the last attention follows, n*t_x + t_a; attention-bound the attentions run
    back to back from the first copy's end, t_x + n*t_a. Both are min(t_x, t_a) + n*max(t_x, t_a).
    Why a slot never holds things up with slots >= 2 (induction on j): copy-bound, the stream
    reaches page j+slots at (j+slots)*t_x >= (j+2)*t_x >= (j+1)*t_x + t_a, the end of page j's
    attention. Attention-bound, page j+slots' copy starts by max(its predecessor's end, page j's
    attention end) <= max(t_x + (j+slots-1)*t_a, t_x + (j+1)*t_a) and so ends by
    t_x + (j+slots)*t_a (t_x <= t_a and t_x <= (slots-1)*t_a): before its attention may start.
    """
    slots = _check_slots(slots)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    t_copy, t_attn = _check_time("t_copy", t_copy), _check_time("t_attn", t_attn)
    if n == 0:
        return 0.0
    if slots == 1:
        return n * (t_copy + t_attn)
    return min(t_copy, t_attn) + n * max(t_copy, t_attn)
