"""The line `kvsim run` prints after a run that rejected turns: how many, why, and what to change.

A turn whose whole context (history + prompt + reply) is larger than the whole GPU KV is refused,
with the rest of its session, as a server refuses a request beyond its maximum length (both
engines; docs/semantics.md, section 3). The count is the ``rejected_turns`` column of the summary.
What serves them is more GPU KV (``memory.gpu_kv_gb``), or shorter contexts: a synthetic trace's
``trace.max_context_tokens``; a trace file's contexts are as recorded. ``trace.time_scale`` does not
change it (lengths decide, not times), nor does ``tp`` (``gpu_kv_gb`` is the whole group's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from experiments.schema import Experiment, GridPoint

GIB = 2**30


def rejection_note(summary: pd.DataFrame, experiment: Experiment) -> str | None:
    """One line when some grid point rejected turns; None when none did (or the summary has no
    ``rejected_turns`` column). ``summary``'s rows are the experiment's grid points, then its
    baselines, in that order (as ``run_experiment`` returns them)."""
    if "rejected_turns" not in summary.columns or summary.empty:
        return None
    rejected = pd.to_numeric(summary["rejected_turns"], errors="coerce").fillna(0)
    if not (rejected > 0).any():
        return None
    points = experiment.grid() + experiment.baseline_points()
    aligned = len(points) == len(summary)
    hit = [i for i in range(len(summary)) if rejected.iloc[i] > 0]
    most = int(rejected.max())
    caps = (
        sorted({float(summary["gpu_kv_gb"].iloc[i]) for i in hit}) if "gpu_kv_gb" in summary else []
    )
    where = f" at memory.gpu_kv_gb = {', '.join(f'{c:g}' for c in caps)}" if caps else ""
    n, of = len(hit), len(summary)
    if n == 1:
        head = f"1 of {of} grid points rejected {most} turn{'s' if most != 1 else ''}{where}"
    else:
        head = f"{n} of {of} grid points rejected turns (up to {most} at one){where}"
    fixes = [f"raise memory.gpu_kv_gb{_needed(points, hit) if aligned else ''}"]
    if aligned and any(p.cluster is not None and p.cluster.groups for p in _at(points, hit)):
        # a group's own gpu_kv_gb takes the place of memory.gpu_kv_gb on its replicas
        fixes[0] += " (a group's own under cluster.groups[].gpu_kv_gb)"
    synthetic = _synthetic_caps(points, hit) if aligned else []
    if synthetic:
        fixes.append(
            f"lower trace.max_context_tokens (now {', '.join(dict.fromkeys(synthetic))}), "
            "the synthetic trace's cap on a conversation's context"
        )
    files = not aligned or any(p.trace.kind != "synthetic" for p in _at(points, hit))
    return (
        f"note: {head} (column rejected_turns): a turn whose context (history + prompt + reply) "
        "is larger than the whole GPU KV is refused with the rest of its session, and the other "
        f"metrics cover only the turns served. To serve them, {'; or '.join(fixes)}."
        + (
            " A trace file's conversations are as recorded (kvsim trace stats FILE shows their "
            "lengths)."
            if files
            else ""
        )
    )


def _at(points: Sequence[GridPoint], rows: Sequence[int]) -> list[GridPoint]:
    return [points[i] for i in rows if i < len(points)]


def _synthetic_caps(points: Sequence[GridPoint], rows: Sequence[int]) -> list[str]:
    out = []
    for p in _at(points, rows):
        if p.trace.kind == "synthetic":
            cap = p.trace.to_dict().get("max_context_tokens", _default_cap())
            out.append("none" if cap is None else f"{cap}")
    return out


def _default_cap() -> Any:
    from traces.synthetic import SyntheticConfig

    return SyntheticConfig().max_context_tokens


def _needed(points: Sequence[GridPoint], rows: Sequence[int]) -> str:
    """What the longest conversation of a rejecting point's trace takes in KV, where it can be read
    off (the trace as this process loaded it, the cost model's KV bytes per token); '' otherwise."""
    best: tuple[float, int, str, str] | None = None
    for p in _at(points, rows):
        try:
            longest = _longest_context(p)
            per_token = _kv_bytes_per_token(p)
        except Exception:  # a figure to help, never a reason for the note to fail
            return ""
        bt = p.memory.block_tokens
        pages = math.ceil(longest / bt) + (p.engine.kind == "vllm-v1")  # vLLM keeps one block back
        gib = pages * bt * per_token / GIB
        if best is None or gib > best[0]:
            best = (gib, longest, p.trace.label, p.labels()["model"])
    if best is None:
        return ""
    gib, longest, trace, model = best
    return (
        f" (the longest conversation of trace {trace}, {longest:,} tokens, needs "
        f"{_round_up(gib):g} GiB of {model} KV)"
    )


def _round_up(x: float) -> float:
    """``x`` rounded up to 3 significant digits: a capacity of that many GiB holds ``x``."""
    if x <= 0 or not math.isfinite(x):
        return x
    step = 10 ** (math.floor(math.log10(x)) - 2)
    return math.ceil(x / step - 1e-9) * step


def _longest_context(point: GridPoint) -> int:
    from experiments.executor import load_sessions

    return max(
        (
            sum(t.prompt_tokens + t.output_tokens for t in s.turns)
            for s in load_sessions(point.trace)
        ),
        default=0,
    )


def _kv_bytes_per_token(point: GridPoint) -> int:
    """KV bytes of one token as ``gpu_kv_gb`` counts them: kvsim's engine, in the whole
    tensor-parallel group (a replicated KV head counted on each GPU that holds it); vllm-v1, on
    one GPU (its blocks are ``gpu_kv_gb`` over one GPU's page)."""
    import costmodels

    cost = costmodels.cost_model(point.model, point.hardware, tp=point.tp)
    group = 1 if point.engine.kind == "vllm-v1" else point.tp
    return int(cost.kv_bytes_per_token) * group
