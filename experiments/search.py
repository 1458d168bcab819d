"""The smallest GPU KV that meets an SLO attainment target (the API behind `kvsim search`).

An experiment names one grid point but for ``memory.gpu_kv_gb`` (every other axis one value, the
policy picked among ``policies``); the search bisects the GPU KV capacity in whole pages (the KV of
``block_tokens`` tokens of the model, the tp group's), between ``lo`` and ``hi`` GiB, for the
smallest capacity whose ``slo_attainment`` (against the experiment's ``slo``) is at least the
target. Each probe is one simulation of that point, deterministic for its seed, so the answer is
exact to one page: the capacity N pages that meets the target while N - 1 does not. Bisection
assumes attainment does not fall as memory grows; where it does (FIFO can: Belady's anomaly), the
answer is a capacity where the target starts to be met, and the curve walked shows the probes.

``hi`` is probed first: if it misses the target there is no answer. Then ``lo``: if it meets the
target, it is the answer. Then the midpoints, each probe keeping the half the boundary lies in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from experiments.schema import ConfigError, ExecutorSpec, Experiment, GridPoint
from sim.config import GIB, MemoryConfig


@dataclass(frozen=True)
class Probe:
    """One simulation of the search: the capacity, in pages and GiB, and what it gave."""

    pages: int
    gpu_kv_gb: float
    slo_attainment: float
    turns: int
    rejected_turns: int
    meets: bool


@dataclass(frozen=True)
class SearchResult:
    point: GridPoint  # the grid point searched (its gpu_kv_gb: hi)
    target: float
    page_bytes: int
    probes: tuple[Probe, ...]  # in the order run
    answer: Probe | None  # the smallest capacity meeting the target; None: not even hi

    def curve(self) -> list[Probe]:
        """The probes by capacity."""
        return sorted(self.probes, key=lambda p: p.pages)


def page_bytes(point: GridPoint) -> int:
    """Bytes of one page of the point's GPU KV: ``block_tokens`` tokens of the model, over its tp
    GPUs (the unit the engine allocates; a capacity holds floor(bytes / this) pages)."""
    import costmodels

    per_token = costmodels.get_model(point.model).shard(point.tp).kv_bytes_per_token * point.tp
    return int(per_token * point.memory.block_tokens)


def gb_of_pages(pages: int, page: int) -> float:
    """The GiB value whose capacity is exactly ``pages`` pages (``MemoryConfig.capacity_bytes``
    truncates: the value is nudged up where float rounding would lose a byte)."""
    gb = pages * page / GIB
    while MemoryConfig.capacity_bytes(gb) < pages * page:
        gb = math.nextafter(gb, math.inf)
    return gb


def search_point(experiment: Experiment, policy: str | None = None) -> GridPoint:
    """The one grid point the search varies: ``policy`` (or the experiment's only one) and one
    value of every other axis. ConfigError naming the axes that have several values."""
    source = experiment.source
    if policy is None:
        if len(experiment.policies) > 1:
            raise ConfigError(
                f"{source}: policies: {len(experiment.policies)} policies "
                f"({', '.join(experiment.policies)}); name one with --policy",
                file=source,
                key="policies",
            )
        policy = experiment.policies[0]
    elif policy not in experiment.policies:
        raise ConfigError(
            f"{source}: policies: {policy!r} is not one of this experiment's "
            f"({', '.join(experiment.policies)})",
            file=source,
            key="policies",
        )
    points = [p for p in experiment.grid() if p.policy == policy]
    hi = max(p.memory.gpu_kv_gb for p in points)
    points = [p for p in points if p.memory.gpu_kv_gb == hi]
    if len(points) > 1:
        labels = [p.labels() for p in points]
        varying = [k for k in labels[0] if len({repr(lab[k]) for lab in labels}) > 1]
        raise ConfigError(
            f"{source}: the search varies memory.gpu_kv_gb alone, but {', '.join(varying)} "
            f"{'has' if len(varying) == 1 else 'have'} several values; give one of each",
            file=source,
            key=varying[0] if varying else None,
        )
    return points[0]


def search(
    experiment: Experiment,
    *,
    target: float,
    policy: str | None = None,
    lo_gb: float | None = None,
    hi_gb: float | None = None,
    on_probe: Callable[[Probe], None] | None = None,
) -> SearchResult:
    """Bisect ``memory.gpu_kv_gb`` in whole pages between ``lo_gb`` (default: the smallest of the
    experiment's values, or one page when it gives one) and ``hi_gb`` (default: the largest) for
    the smallest capacity whose ``slo_attainment`` >= ``target``. ``on_probe`` hears of each probe
    as it finishes."""
    from experiments.executor import run_points

    if not 0 < target <= 1:
        raise ValueError(f"--target: an SLO attainment share in (0, 1], got {target:g}")
    point = search_point(experiment, policy)
    page = page_bytes(point)
    finite = sorted(g for g in experiment.memory.gpu_kv_gb if not math.isinf(g))
    if hi_gb is None:
        if not finite:
            raise ValueError("memory.gpu_kv_gb is unbounded (inf): give --hi in GiB")
        hi_gb = finite[-1]
    if lo_gb is None:
        lo_gb = finite[0] if len(finite) > 1 else page / GIB
    for name, gb in (("--lo", lo_gb), ("--hi", hi_gb)):
        if not (gb > 0 and math.isfinite(gb)):
            raise ValueError(f"{name}: a GPU KV size > 0 in GiB, got {gb!r}")
    lo = max(1, int(MemoryConfig.capacity_bytes(lo_gb) // page))
    hi = int(MemoryConfig.capacity_bytes(hi_gb) // page)
    if hi < 1:
        raise ValueError(f"--hi: {hi_gb:g} GiB holds no page of {page} bytes")
    if lo > hi:
        raise ValueError(f"--lo ({lo_gb:g} GiB) is above --hi ({hi_gb:g} GiB)")

    probes: list[Probe] = []
    quiet = ExecutorSpec()  # in this process: one probe at a time, each decides the next

    def probe(pages: int) -> Probe:
        gb = gb_of_pages(pages, page)
        at = dataclasses.replace(point, memory=dataclasses.replace(point.memory, gpu_kv_gb=gb))
        (result,) = run_points(
            [at], quiet, debug=experiment.debug, show_progress=False, source=experiment.source
        )
        s = result.summary
        attained = float(s["slo_attainment"])
        got = Probe(
            pages=pages,
            gpu_kv_gb=gb,
            slo_attainment=attained,
            turns=int(s["turns"]),
            rejected_turns=int(s["rejected_turns"]),
            meets=attained >= target,  # NaN (no turn at all) does not
        )
        probes.append(got)
        if on_probe is not None:
            on_probe(got)
        return got

    def done(answer: Probe | None) -> SearchResult:
        return SearchResult(point, target, page, tuple(probes), answer)

    top = probe(hi)
    if not top.meets:
        return done(None)
    if lo == hi:
        return done(top)
    bottom = probe(lo)
    if bottom.meets:
        return done(bottom)
    best = top
    while hi - lo > 1:  # lo misses, hi meets
        mid = (lo + hi) // 2
        got = probe(mid)
        if got.meets:
            hi, best = mid, got
        else:
            lo = mid
    return done(best)


def describe(result: SearchResult) -> str:
    """The curve walked (by capacity, each probe's order in brackets) and the answer."""
    page_mib = result.page_bytes / 2**20
    order = {id(p): i for i, p in enumerate(result.probes, 1)}
    lines = [
        f"slo_attainment >= {result.target:g} with {result.point.policy}, "
        f"bisecting memory.gpu_kv_gb in pages of {page_mib:g} MiB:",
        "  probe    gpu_kv_gb    pages  slo_attainment  turns  rejected  meets",
    ]
    for p in result.curve():
        att = "-" if math.isnan(p.slo_attainment) else f"{p.slo_attainment:.4f}"
        lines.append(
            f"  {order[id(p)]:>5}  {p.gpu_kv_gb:>11.6g}  {p.pages:>7}  {att:>14}  "
            f"{p.turns:>5}  {p.rejected_turns:>8}  {'yes' if p.meets else 'no':>5}"
        )
    a = result.answer
    if a is None:
        top = max(result.probes, key=lambda p: p.pages)
        lines.append(
            f"not met: {top.slo_attainment:.4f} at the largest capacity, {top.gpu_kv_gb:g} GiB "
            "(raise --hi, or the SLO is out of reach at this load)"
        )
    else:
        lines.append(
            f"smallest memory.gpu_kv_gb meeting it: {a.gpu_kv_gb:.6g} GiB ({a.pages} pages), "
            f"slo_attainment {a.slo_attainment:.4f}"
        )
    return "\n".join(lines)
