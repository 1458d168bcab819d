"""One calibration sweep as an ordered list of jobs, and the time budget that trims its grid.

A job is one measured shape: the unit that is timed, appended to the raw CSV when it is done, and
skipped when a rerun finds it there (resume). The order is the sweep's: token-level work (GEMMs and
elementwise ops per shard and token count), LM head, prefill, decode, H2D, D2H copies from pinned
buffers, then from pageable ones, then H2D and D2H at once ("duplex"); each group is shuffled with
the seed (``grids.shuffled``) so clock drift is not read as a shape effect. A CPU has no copy
engines, so its plan leaves out the pageable and duplex copies (its "copies" are host memcpy).

``--tp K`` measures one layer of the model's per-GPU shard at tensor parallelism K; its GEMMs are
also measured on the narrower shards K*2, K*4, K*8 of the full model (the grid's ``gemm_shards``),
because distinct weight sizes are what separate the fixed cost from the weight-read time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from costmodels import ModelSpec

from .grids import Grid, shuffled
from .samples import Sample, Shape
from .timing import TimingConfig

TOKEN_TERMS = ("gemm", "elementwise", "linear")  # one token-level job yields these three samples
CPU_LM_HEAD_LIMIT = 1 << 30  # bytes: a bigger LM head is left out on a CPU (minutes per shape)


def tp_shard(model: ModelSpec, tp: int) -> ModelSpec:
    """The per-GPU shard of ``model`` at tensor parallelism ``tp``. The measuring code shards a
    model only through here, so where the shard helper lives is one line to change."""
    return model.shard(tp)


@dataclass(frozen=True, slots=True)
class Job:
    kind: str  # "token" | "lm_head" | "prefill_attn" | "decode_attn" | "h2d" | "d2h" | "duplex"
    model: ModelSpec  # the shard the kernels run on, bytes per element as measured
    shape: Shape
    shard: int = 1  # token-level: the layer's width divided by this (group "shard/k")

    @property
    def key(self) -> tuple:
        return (self.kind, self.model.name, self.shape)

    @property
    def terms(self) -> tuple[str, ...]:
        """The sample terms a finished job has written."""
        return TOKEN_TERMS if self.kind == "token" else (self.kind,)

    @property
    def timed_calls(self) -> int:
        """Closures timed for this job (token-level: the GEMMs, the elementwise ops, and both in
        one closure)."""
        return 3 if self.kind == "token" else 1


def job_key(sample: Sample) -> tuple:
    """The key of the job that wrote ``sample`` (``Job.key``)."""
    kind = "token" if sample.term in TOKEN_TERMS else sample.term
    return (kind, sample.model.name, sample.shape)


@dataclass(frozen=True, slots=True)
class SweepPlan:
    jobs: tuple[Job, ...]
    skipped: tuple[str, ...]  # what the grid asked for and will not be measured, and why
    grid: Grid  # the grid the jobs come from (trimmed when a budget asked for it)
    estimate_s: float  # the sweep's estimated duration (see ``estimated_call_s``)

    def count(self, kind: str) -> int:
        return sum(j.kind == kind for j in self.jobs)


def plan_sweep(
    grid: Grid,
    model: ModelSpec,
    tp: int = 1,
    terms: Sequence[str] = (
        "linear",
        "lm_head",
        "prefill_attn",
        "decode_attn",
        "h2d",
        "d2h",
        "pageable",
        "duplex",
    ),
    device: str = "cpu",
    seed: int = 0,
    call_s: float = 0.0,
) -> SweepPlan:
    """Every job of a sweep of ``grid`` over one layer of ``model`` (dtype bytes as measured) at
    tensor parallelism ``tp``; ``call_s`` seconds per timed closure give the estimate. Terms
    "pageable" (the copy directions of ``terms`` from pageable host buffers too) and "duplex"
    (H2D and D2H at once) are planned on a GPU only."""
    layer = tp_shard(model, tp)
    jobs: list[Job] = []
    skipped: list[str] = []
    if "linear" in terms:
        shards: dict[int, ModelSpec] = {}
        for k in grid.gemm_shards:
            try:
                shards[k] = tp_shard(model, tp * k)
            except ValueError as exc:  # the shard helper's "not divisible" refusal
                skipped.append(f"gemm shard /{k}: {exc}")
        pairs = shuffled([(k, n) for k in shards for n in grid.gemm_tokens], seed)
        jobs += [Job("token", shards[k], Shape(tokens=n), k) for k, n in pairs]
    if "lm_head" in terms and grid.lm_head_rows:
        head_bytes = layer.lm_head_params * layer.dtype_bytes
        if device == "cpu" and head_bytes > CPU_LM_HEAD_LIMIT:
            skipped.append(f"lm_head: {head_bytes / 2**30:.1f} GiB of weights is too slow on a CPU")
        else:
            jobs += [Job("lm_head", layer, Shape(tokens=r)) for r in grid.lm_head_rows]
    if "prefill_attn" in terms:
        jobs += [
            Job("prefill_attn", layer, Shape(n_new=a, n_ctx=c, seqs=s))
            for a, c, s in shuffled(grid.prefill, seed)
        ]
    if "decode_attn" in terms:
        jobs += [
            Job("decode_attn", layer, Shape(n_ctx=c, seqs=b))
            for b, c in shuffled(grid.decode, seed)
        ]
    for direction in ("h2d", "d2h"):
        if direction in terms:
            jobs += [
                # The bytes a measurement moves: equal chunks, the remainder dropped.
                Job(direction, layer, Shape(nbytes=(b // c) * c, copies=c))
                for b, c in shuffled(grid.copy_shapes(), seed)
            ]
    jobs += _copy_engine_jobs(grid, layer, terms, device, seed, skipped)
    estimate = call_s * sum(j.timed_calls for j in jobs)
    return SweepPlan(tuple(jobs), tuple(skipped), grid, estimate)


def _copy_engine_jobs(
    grid: Grid,
    layer: ModelSpec,
    terms: Sequence[str],
    device: str,
    seed: int,
    skipped: list[str],
) -> list[Job]:
    """The pageable-buffer copies (per direction in ``terms``) and the duplex pairs."""
    asked = [
        what
        for what, shapes in (
            ("pageable", grid.pageable_shapes()),
            ("duplex", grid.duplex_shapes()),
        )
        if what in terms and shapes
    ]
    if device == "cpu":
        skipped += [
            f"{what}: no copy engines on a CPU (its copies are host memcpy)" for what in asked
        ]
        return []
    jobs: list[Job] = []
    if "pageable" in asked:
        jobs += [
            Job(direction, layer, Shape(nbytes=(b // c) * c, copies=c, pinned=False))
            for direction in ("h2d", "d2h")
            if direction in terms
            for b, c in shuffled(grid.pageable_shapes(), seed)
        ]
    if "duplex" in asked:
        jobs += [
            Job("duplex", layer, Shape(nbytes=(b // c) * c, copies=c))
            for b, c in shuffled(grid.duplex_shapes(), seed)
        ]
    return jobs


# --- time budget ----------------------------------------------------------------------------------
# Seconds a timed closure costs beyond its warm-up and repetitions (allocating its inputs, graph
# capture and upload, the cache flushes). GPU: the H100 Llama-3-8B sweep timed 965 closures in
# 266 s with 0.125 s of warm-up and repetitions each, leaving ~0.15 s. CPU: this repository's
# shared 2-core machine, tiny model, quick timing and the 64 MB flush: 82 closures in 28-34 s.
SETUP_S = {"cuda": 0.15, "cpu": 0.35}


def estimated_call_s(device: str, timing: TimingConfig) -> float:
    """Seconds one timed closure takes, for kernels shorter than a repetition: longer kernels (a
    large model on a CPU, the biggest prefills on a GPU) take longer than this estimate."""
    kind = "cpu" if device == "cpu" else "cuda"
    return timing.warmup_s + timing.rep_s + SETUP_S[kind]


# The order in which a budget thins the grid, one axis per step, cycling until the estimate fits.
# Each step keeps every other distinct value of its axis, always the smallest and the largest, and
# needs four values or more (so three remain). GEMM token counts first: they are half of a sweep
# and sampled densely (Vidur's steps). Never thinned: the GEMM shards (they separate the fixed
# cost from the weight-read time), the prefill batch sizes and the copy counts (they separate the
# per-sequence and per-copy costs).
TRIM_ORDER = (
    "gemm_tokens",
    "decode_ctx",
    "prefill_n_ctx",
    "decode_batch",
    "prefill_n_new",
    "copy_sizes",
    "lm_head_rows",
)


def _every_other(values: Sequence[int]) -> set[int] | None:
    vals = sorted(set(values))
    if len(vals) < 4:
        return None
    return set(vals[::2]) | {vals[-1]}


def _thin(grid: Grid, axis: str) -> Grid | None:
    """``grid`` with one axis thinned, or None when that axis has too few values left."""
    if axis in ("gemm_tokens", "copy_sizes", "lm_head_rows"):
        keep = _every_other(getattr(grid, axis))
        if keep is None:
            return None
        thinned: dict[str, Any] = {axis: tuple(v for v in getattr(grid, axis) if v in keep)}
        return replace(grid, **thinned)
    if axis in ("decode_batch", "decode_ctx"):
        i = 0 if axis == "decode_batch" else 1
        keep = _every_other([d[i] for d in grid.decode])
        return (
            None
            if keep is None
            else replace(grid, decode=tuple(d for d in grid.decode if d[i] in keep))
        )
    i = {"prefill_n_new": 0, "prefill_n_ctx": 1}[axis]
    keep = _every_other([p[i] for p in grid.prefill])
    return (
        None
        if keep is None
        else replace(grid, prefill=tuple(p for p in grid.prefill if p[i] in keep))
    )


def plan_within_budget(
    grid: Grid, budget_s: float, call_s: float, **plan_args
) -> tuple[SweepPlan, str]:
    """The plan of ``grid`` thinned in ``TRIM_ORDER`` until its estimate fits ``budget_s``, and a
    sentence saying what was trimmed (empty when nothing was). Depends on the grid, the budget and
    the estimate only, never on how fast this run goes, so a rerun plans the same shapes."""
    if budget_s <= 0:
        raise ValueError(f"a time budget must be > 0 s, got {budget_s}")
    full = plan_sweep(grid, call_s=call_s, **plan_args)
    plan, steps = full, []
    turn = stuck = 0  # a whole cycle of axes with nothing to thin ends the loop
    while plan.estimate_s > budget_s and stuck < len(TRIM_ORDER):
        axis = TRIM_ORDER[turn % len(TRIM_ORDER)]
        turn += 1
        thinner = _thin(plan.grid, axis)
        if thinner is None:
            stuck += 1
            continue
        stuck = 0
        steps.append(axis)
        plan = plan_sweep(thinner, call_s=call_s, **plan_args)
    if not steps:
        return plan, ""
    plan = replace(plan, grid=replace(plan.grid, name=f"{grid.name}/budget-{budget_s:g}s"))
    halvings = ", ".join(f"{axis} x{n}" for axis, n in Counter(steps).items())
    what = (
        f"time budget {budget_s:g} s: {len(full.jobs)} shapes (estimated {full.estimate_s:.0f} s) "
        f"thinned to {len(plan.jobs)} (estimated {plan.estimate_s:.0f} s) by halving {halvings}"
    )
    if plan.estimate_s > budget_s:
        what += "; nothing left to thin, so the estimate stays above the budget"
    return plan, what
