"""Layer by layer through one iteration priced by `kvsim cost`: where the pipeline puts each
layer's H2D copy and compute, how long the compute waited for its copy, and a compact table of it.

The schedule is the recurrence of ``costmodels.pipeline`` (the one the simulator prices layered
iterations with) over the layers ``CostModel.iteration`` charges: L identical layers of
``layer_s``, each carrying 1/L of the H2D copy time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from costmodels.pipeline import LayerTimes, pipelined_schedule, serial_schedule


def iteration_schedule(cm, layer_s: float, h2d_s: float, pipelining: bool) -> dict:
    """The per-layer schedule of ``cm.iteration`` for a batch whose layers take ``layer_s`` each
    and whose H2D copies take ``h2d_s`` in all, as ``schedule_summary`` describes it."""
    layers = cm.model.num_layers
    copy_s, compute_s = [h2d_s / layers] * layers, [layer_s] * layers
    overlap = cm.profile.overlap
    if pipelining and overlap.layerwise_h2d:
        times = pipelined_schedule(copy_s, compute_s, overlap.compute_slowdown)
        return schedule_summary(times, compute_s, True, overlap.compute_slowdown)
    return schedule_summary(serial_schedule(copy_s, compute_s), compute_s, False, 0.0)


def schedule_summary(
    times: Sequence[LayerTimes], compute_s: Sequence[float], pipelined: bool, slowdown: float
) -> dict:
    """A schedule as a JSON-ready dict: each layer's copy and compute start and end (seconds from
    the iteration's start), the time its compute waited for its copy (``wait_s``, the compute
    stream idle before it), the time the copy stream's interference added (``slowdown_s``) and
    which stream held the layer back (``critical``); and their sums. ``compute_s``: each layer's
    compute time undisturbed."""
    rows, prev_end = [], 0.0
    for layer, (t, t_c) in enumerate(zip(times, compute_s)):
        wait = t.compute_start - prev_end
        slowed = (t.compute_end - t.compute_start) - t_c
        # end - start carries the rounding of the clock (ulps of end): less than that is none.
        slowed = slowed if slowed > 1e-12 * t.compute_end else 0.0
        rows.append(
            {
                "layer": layer,
                "copy_start_s": t.copy_start,
                "copy_end_s": t.copy_end,
                "compute_start_s": t.compute_start,
                "compute_end_s": t.compute_end,
                "wait_s": wait,
                "slowdown_s": slowed,
                # The compute stream idles before a layer only while its bytes are still coming.
                "critical": "copy" if wait > 0 else "compute",
            }
        )
        prev_end = t.compute_end
    return {
        "pipelined": pipelined,
        "compute_slowdown": slowdown,
        "layers_end_s": times[-1].compute_end if times else 0.0,
        "copies_end_s": times[-1].copy_end if times else 0.0,
        "wait_s": sum(r["wait_s"] for r in rows),
        "slowdown_s": sum(r["slowdown_s"] for r in rows),
        "layers": rows,
    }


_TERMS = (  # (column, key of the result's per_layer)
    ("GEMM", "linear_s"),
    ("pf attn", "prefill_attn_s"),
    ("dec attn", "decode_attn_s"),
    ("elemwise", "elementwise_s"),
)
_TIMES = ("H2D copy", "copy start", "copy end", "comp start", "comp end", "wait", "slowed")


def layer_table(r: dict, all_layers: bool = False) -> list[str]:
    """The per-layer table of a ``kvsim cost`` result, in ms. Consecutive layers alike (same copy
    and compute durations, wait and critical stream) are folded into their first and last rows
    and a line saying how many lie between, unless ``all_layers``. A layer's time outside the terms
    listed (the all-reduces of tensor parallelism, say) shows as ``other``."""
    sched, pl = r["schedule"], r["per_layer"]
    names = [name for name, _ in _TERMS]
    terms = [pl[key] for _, key in _TERMS]
    other = pl["layer_s"] - sum(terms)
    if abs(other) > 1e-9 * pl["layer_s"]:  # more than the rounding of the sum
        names.append("other")
        terms.append(other)
    header = ["layer", *names, *_TIMES, "critical"]
    widths = [max(len(name), 5 if i == 0 else 8) for i, name in enumerate(header)]
    lines = [
        f"per layer ({'pipelined' if sched['pipelined'] else 'copies first'}, "
        f"compute slowdown while copying {sched['compute_slowdown']:g}; ms from the iteration's "
        "start):",
        "  " + " ".join(f"{name:>{w}}" for name, w in zip(header, widths)),
    ]
    rows = sched["layers"]
    for first, last in _runs(rows) if not all_layers else ((i, i) for i in range(len(rows))):
        if last - first < 3:  # folding would hide one row behind a line as long
            lines += [_row_line(rows[i], terms, widths) for i in range(first, last + 1)]
            continue
        lines.append(_row_line(rows[first], terms, widths))
        lines.append(
            f"  {'':>5} ... layers {first + 1}-{last - 1}: {last - first - 1} layers like "
            f"layers {first} and {last}"
        )
        lines.append(_row_line(rows[last], terms, widths))
    lines.append(
        f"  layers end at {_ms(sched['layers_end_s'])} ms: {_ms(sched['wait_s'])} ms waiting for "
        f"copies ({sum(r['critical'] == 'copy' for r in rows)} of {len(rows)} layers) + "
        f"{_ms(sched['slowdown_s'])} ms of compute slowed by the copies"
    )
    return lines


def _row_line(row: dict, terms: list[float], widths: list[int]) -> str:
    values = (
        *terms,
        row["copy_end_s"] - row["copy_start_s"],
        row["copy_start_s"],
        row["copy_end_s"],
        row["compute_start_s"],
        row["compute_end_s"],
        row["wait_s"],
        row["slowdown_s"],
    )
    cells = [f"{row['layer']:>{widths[0]}}"]
    cells += [f"{_ms(v):>{w}}" for v, w in zip(values, widths[1:-1])]
    cells.append(f"{row['critical']:>{widths[-1]}}")
    return "  " + " ".join(cells)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def _alike(a: dict, b: dict) -> bool:
    def close(key_end: str, key_start: str) -> bool:
        return math.isclose(
            a[key_end] - a[key_start], b[key_end] - b[key_start], rel_tol=1e-9, abs_tol=1e-15
        )

    return (
        a["critical"] == b["critical"]
        and close("copy_end_s", "copy_start_s")
        and close("compute_end_s", "compute_start_s")
        and math.isclose(a["wait_s"], b["wait_s"], rel_tol=1e-9, abs_tol=1e-15)
    )


def _runs(rows: list[dict]) -> list[tuple[int, int]]:
    """(first, last) index of each run of consecutive alike layers."""
    runs: list[tuple[int, int]] = []
    for i, row in enumerate(rows):
        if runs and _alike(rows[runs[-1][1]], row):
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs
