"""The smallest memory, or the highest request rate, that meets an SLO attainment target (the API
behind `kvsim search`).

An experiment names one grid point but for the axis searched (every other axis one value, the
policy picked among ``policies``); the search bisects that axis for the boundary where the point's
``slo_attainment`` (against the experiment's ``slo``) reaches the target. Each probe is one
simulation of that point, deterministic for its seed, so a rerun makes the same probes and gives the
same answer, exact to one step of the axis's grid:

- ``gpu_kv_gb`` (the default) and ``cpu_kv_gb``: the capacity in whole pages (the KV of
  ``block_tokens`` tokens of the model, the tp group's), between ``lo`` and ``hi`` GiB, for the
  smallest capacity N pages that meets the target while N - 1 does not. The CPU tier may be 0 pages
  (no CPU tier: evicted KV is dropped).
- ``rate``: the request rate as a multiplier of the trace's own (2: twice the recorded rate, that is
  ``trace.time_scale`` 0.5: time_scale multiplies every arrival and think time, so the rate is
  1 / time_scale), on the multipliers of three significant digits (..., 0.999, 1.00, 1.01, ...), for
  the highest multiplier that meets the target while the next one up does not. A probe runs at
  ``time_scale`` = 1 / multiplier rounded to six significant digits, the value reported and the
  value to write in the YAML.

Bisection assumes attainment is monotone: not falling as memory grows, not rising as the rate
grows. Neither is guaranteed (FIFO can lose hits with more memory: Belady's anomaly; a faster
arrival can batch turns better): where it is not, the answer is a point where the target starts
(or stops) to be met, and the curve walked shows the probes.

The end most likely to meet the target (``hi`` for memory, ``lo`` for the rate) is probed first: if
it misses there is no answer. Then the other end: if it meets the target, it is the answer (the
search could not look past it). Then the midpoints, each probe keeping the half the boundary lies in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from experiments.schema import ConfigError, ExecutorSpec, Experiment, GridPoint
from sim.config import GIB, MemoryConfig

AXES = ("gpu_kv_gb", "cpu_kv_gb", "rate")
_KEY = {
    "gpu_kv_gb": "memory.gpu_kv_gb",
    "cpu_kv_gb": "memory.cpu_kv_gb",
    "rate": "trace.time_scale",
}
_LABEL = {"gpu_kv_gb": "gpu_kv_gb", "cpu_kv_gb": "cpu_kv_gb", "rate": "time_scale"}
RATE_DIGITS = 3  # significant digits of the rate multipliers bisected
TIME_SCALE_DIGITS = 6  # significant digits of the time_scale a rate probe runs at
_PER_DECADE = 9 * 10 ** (RATE_DIGITS - 1)  # multipliers per decade: 100..999 x 10^e


@dataclass(frozen=True)
class Probe:
    """One simulation of the search: where on the axis, and what it gave. ``step``: the position on
    the axis's grid (memory: the capacity in pages; rate: the multiplier's index, ``rate_of``);
    ``value``: GiB (memory) or the request-rate multiplier; ``time_scale``: the rate axis's
    ``trace.time_scale`` simulated (None on the memory axes)."""

    step: int
    value: float
    slo_attainment: float
    turns: int
    rejected_turns: int
    meets: bool
    axis: str = "gpu_kv_gb"
    time_scale: float | None = None

    @property
    def pages(self) -> int:
        """The capacity in pages (the memory axes)."""
        return self.step

    @property
    def gpu_kv_gb(self) -> float:
        """The GPU KV in GiB (the gpu_kv_gb axis)."""
        return self.value


@dataclass(frozen=True)
class SearchResult:
    point: GridPoint  # the grid point searched (every other axis's value)
    target: float
    page_bytes: int
    probes: tuple[Probe, ...]  # in the order run
    answer: Probe | None  # the boundary step meeting the target; None: not even the easy end
    axis: str = "gpu_kv_gb"

    def curve(self) -> list[Probe]:
        """The probes along the axis (capacity or rate, rising)."""
        return sorted(self.probes, key=lambda p: p.step)


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


def rate_of(step: int) -> float:
    """The request-rate multiplier at ``step`` of the rate grid: the numbers of three significant
    digits in order (step 0: 1.00, step 1: 1.01, step -1: 0.999)."""
    decade, m = divmod(step, _PER_DECADE)
    return float(f"{m + 10 ** (RATE_DIGITS - 1)}e{decade - RATE_DIGITS + 1}")


def rate_step(rate: float, *, up: bool) -> int:
    """The step of the rate grid at ``rate``, rounded up (``up``) or down onto the grid."""
    d = Decimal(repr(rate))
    e = d.adjusted() - (RATE_DIGITS - 1)
    n = int(d.scaleb(-e).to_integral_value(rounding=ROUND_CEILING if up else ROUND_FLOOR))
    return _PER_DECADE * (e + RATE_DIGITS - 1) + n - 10 ** (RATE_DIGITS - 1)


def time_scale_of(rate: float) -> float:
    """The ``trace.time_scale`` a rate probe runs at: 1 / ``rate`` to six significant digits."""
    return float(f"{1 / rate:.{TIME_SCALE_DIGITS}g}")


def search_point(
    experiment: Experiment, policy: str | None = None, axis: str = "gpu_kv_gb"
) -> GridPoint:
    """The one grid point the search varies along ``axis``: ``policy`` (or the experiment's only
    one) and one value of every other axis. ConfigError naming the axes that have several
    values."""
    if axis not in AXES:
        raise ValueError(f"--axis: one of {', '.join(AXES)}, got {axis!r}")
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
    label = _LABEL[axis]
    hi = max(p.labels()[label] for p in points)
    points = [p for p in points if p.labels()[label] == hi]
    if len(points) > 1:
        labels = [p.labels() for p in points]
        varying = [k for k in labels[0] if len({repr(lab[k]) for lab in labels}) > 1]
        raise ConfigError(
            f"{source}: the search varies {_KEY[axis]} alone, but {', '.join(varying)} "
            f"{'has' if len(varying) == 1 else 'have'} several values; give one of each",
            file=source,
            key=varying[0] if varying else None,
        )
    return points[0]


def _memory_grid(
    experiment: Experiment, axis: str, page: int, lo_gb: float | None, hi_gb: float | None
) -> tuple[int, int]:
    """The capacities searched, in pages: (lo, hi)."""
    cpu = axis == "cpu_kv_gb"
    values = experiment.memory.cpu_kv_gb if cpu else experiment.memory.gpu_kv_gb
    finite = sorted(g for g in values if not math.isinf(g))
    if hi_gb is None:
        if not finite:
            raise ValueError(f"{_KEY[axis]} is unbounded (inf): give --hi in GiB")
        if not finite[-1] > 0:
            raise ValueError(f"{_KEY[axis]} is 0 (no CPU tier): give --hi in GiB")
        hi_gb = finite[-1]
    if lo_gb is None:
        lo_gb = finite[0] if len(finite) > 1 else 0.0 if cpu else page / GIB
    what = "a CPU KV size" if cpu else "a GPU KV size"
    if not (lo_gb >= 0 if cpu else lo_gb > 0) or not math.isfinite(lo_gb):
        raise ValueError(f"--lo: {what} {'>=' if cpu else '>'} 0 in GiB, got {lo_gb!r}")
    if not (hi_gb > 0 and math.isfinite(hi_gb)):
        raise ValueError(f"--hi: {what} > 0 in GiB, got {hi_gb!r}")
    lo = int(MemoryConfig.capacity_bytes(lo_gb) // page)
    if not cpu:
        lo = max(1, lo)
    hi = int(MemoryConfig.capacity_bytes(hi_gb) // page)
    if hi < 1:
        raise ValueError(f"--hi: {hi_gb:g} GiB holds no page of {page} bytes")
    if lo > hi:
        raise ValueError(f"--lo ({lo_gb:g} GiB) is above --hi ({hi_gb:g} GiB)")
    return lo, hi


def _rate_grid(
    experiment: Experiment, point: GridPoint, lo: float | None, hi: float | None
) -> tuple[int, int]:
    """The rate multipliers searched, as steps of the rate grid: (lo, hi)."""
    scales = sorted({p.trace.time_scale for p in experiment.grid() if p.policy == point.policy})
    if lo is None:
        lo = 1 / scales[-1] if len(scales) > 1 else 0.1 / scales[0]
    if hi is None:
        hi = 1 / scales[0] if len(scales) > 1 else 10 / scales[0]
    for name, x in (("--lo", lo), ("--hi", hi)):
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(
                f"{name}: a request-rate multiplier > 0 (x the trace's rate), got {x!r}"
            )
    if lo > hi:
        raise ValueError(f"--lo ({lo:g}x the trace's rate) is above --hi ({hi:g}x)")
    first, last = rate_step(lo, up=True), rate_step(hi, up=False)
    if first > last:
        raise ValueError(
            f"--lo ({lo:g}x) and --hi ({hi:g}x) hold no multiplier of {RATE_DIGITS} significant "
            "digits: widen them"
        )
    return first, last


def search(
    experiment: Experiment,
    *,
    target: float,
    policy: str | None = None,
    axis: str = "gpu_kv_gb",
    lo: float | None = None,
    hi: float | None = None,
    on_probe: Callable[[Probe], None] | None = None,
) -> SearchResult:
    """Bisect ``axis`` for the boundary where ``slo_attainment`` >= ``target``.

    ``gpu_kv_gb`` / ``cpu_kv_gb``: the smallest capacity, in whole pages, between ``lo`` and ``hi``
    GiB (defaults: the smallest and the largest of the experiment's values; with one value, ``hi``
    is it and ``lo`` one page of GPU KV, or 0 for the CPU tier). ``rate``: the highest request-rate
    multiplier of three significant digits between ``lo`` and ``hi`` (x the trace's rate;
    defaults: 1 / the largest and 1 / the smallest ``time_scale`` of the experiment's; with one
    value, a tenth of and ten times its rate). ``on_probe`` hears of each probe as it finishes."""
    from experiments.executor import run_points

    if not 0 < target <= 1:
        raise ValueError(f"--target: an SLO attainment share in (0, 1], got {target:g}")
    point = search_point(experiment, policy, axis)
    page = page_bytes(point)
    if axis == "rate":
        first, last = _rate_grid(experiment, point, lo, hi)
    else:
        first, last = _memory_grid(experiment, axis, page, lo, hi)

    probes: list[Probe] = []
    quiet = ExecutorSpec()  # in this process: one probe at a time, each decides the next

    def at(step: int) -> tuple[GridPoint, float, float | None]:
        if axis == "rate":
            rate = rate_of(step)
            scale = time_scale_of(rate)
            return dataclasses.replace(point, trace=point.trace.at_time_scale(scale)), rate, scale
        gb = gb_of_pages(step, page)
        memory = (
            dataclasses.replace(point.memory, cpu_kv_gb=gb)
            if axis == "cpu_kv_gb"
            else dataclasses.replace(point.memory, gpu_kv_gb=gb)
        )
        return dataclasses.replace(point, memory=memory), gb, None

    def probe(step: int) -> Probe:
        here, value, scale = at(step)
        (result,) = run_points(
            [here], quiet, debug=experiment.debug, show_progress=False, source=experiment.source
        )
        s = result.summary
        attained = float(s["slo_attainment"])
        got = Probe(
            step=step,
            value=value,
            slo_attainment=attained,
            turns=int(s["turns"]),
            rejected_turns=int(s["rejected_turns"]),
            meets=attained >= target,  # NaN (no turn at all) does not
            axis=axis,
            time_scale=scale,
        )
        probes.append(got)
        if on_probe is not None:
            on_probe(got)
        return got

    # memory: more meets more easily, the answer is the smallest; rate: the other way round
    easy, hard = (first, last) if axis == "rate" else (last, first)
    answer = _bisect(easy, hard, probe)
    return SearchResult(point, target, page, tuple(probes), answer, axis)


def _bisect(easy: int, hard: int, probe: Callable[[int], Probe]) -> Probe | None:
    """The step nearest ``hard`` that meets the target, assuming every step between it and
    ``easy`` does and every one past it does not; None when ``easy`` misses."""
    top = probe(easy)
    if not top.meets:
        return None
    if easy == hard:
        return top
    bottom = probe(hard)
    if bottom.meets:
        return bottom
    best = top
    while abs(hard - easy) > 1:  # easy meets, hard misses
        mid = (easy + hard) // 2
        got = probe(mid)
        if got.meets:
            easy, best = mid, got
        else:
            hard = mid
    return best


def describe_probe(p: Probe) -> str:
    """One probe as the command prints it while the search runs."""
    met = f"slo_attainment {p.slo_attainment:.4f} {'meets' if p.meets else 'misses'}"
    if p.axis == "rate":
        return f"probe: {p.value:g}x the trace's rate (time_scale {p.time_scale:g}): {met}"
    pages = f"{p.pages} page{'s' if p.pages != 1 else ''}"
    if p.axis == "cpu_kv_gb":
        return f"probe: cpu_kv_gb {p.value:.6g} GiB ({pages}): {met}"
    return f"probe: {p.gpu_kv_gb:.6g} GiB ({pages}): {met}"


def describe(result: SearchResult) -> str:
    """The curve walked (along the axis, each probe's order in brackets) and the answer."""
    if result.axis == "rate":
        return _describe_rate(result)
    page_mib = result.page_bytes / 2**20
    order = {id(p): i for i, p in enumerate(result.probes, 1)}
    axis = result.axis
    cpu = axis == "cpu_kv_gb"
    fixed = f" (memory.gpu_kv_gb {result.point.memory.gpu_kv_gb:g})" if cpu else ""
    lines = [
        f"slo_attainment >= {result.target:g} with {result.point.policy}, "
        f"bisecting memory.{axis} in pages of {page_mib:g} MiB{fixed}:",
        f"  probe    {axis}    pages  slo_attainment  turns  rejected  meets",
    ]
    for p in result.curve():
        lines.append(
            f"  {order[id(p)]:>5}  {p.value:>11.6g}  {p.pages:>7}  {_att(p):>14}  "
            f"{p.turns:>5}  {p.rejected_turns:>8}  {'yes' if p.meets else 'no':>5}"
        )
    a = result.answer
    if a is None:
        top = max(result.probes, key=lambda p: p.pages)
        if cpu:
            lines.append(
                f"not met: {top.slo_attainment:.4f} at the largest CPU tier, {top.value:g} GiB "
                "(raise --hi, or the SLO is out of reach with this GPU KV and load)"
            )
        else:
            lines.append(
                f"not met: {top.slo_attainment:.4f} at the largest capacity, {top.gpu_kv_gb:g} "
                "GiB (raise --hi, or the SLO is out of reach at this load)"
            )
    elif cpu:
        lowest = min(p.pages for p in result.probes)
        note = (
            ": no CPU tier needed"
            if a.pages == 0
            else ", the smallest considered (lower --lo to look below)"
            if a.pages == lowest
            else f"; {a.pages - 1} pages miss"
        )
        lines.append(
            f"smallest memory.cpu_kv_gb meeting it: {a.value:.6g} GiB ({a.pages} pages{note}), "
            f"slo_attainment {a.slo_attainment:.4f}"
        )
    else:
        lines.append(
            f"smallest memory.gpu_kv_gb meeting it: {a.gpu_kv_gb:.6g} GiB ({a.pages} pages), "
            f"slo_attainment {a.slo_attainment:.4f}"
        )
    return "\n".join(lines)


def _att(p: Probe) -> str:
    return "-" if math.isnan(p.slo_attainment) else f"{p.slo_attainment:.4f}"


def _describe_rate(result: SearchResult) -> str:
    order = {id(p): i for i, p in enumerate(result.probes, 1)}
    lines = [
        f"slo_attainment >= {result.target:g} with {result.point.policy}, bisecting the request "
        f"rate (x the trace's rate = 1 / trace.time_scale) on multipliers of {RATE_DIGITS} "
        "significant digits:",
        "  probe       rate  time_scale  slo_attainment  turns  rejected  meets",
    ]
    for p in result.curve():
        lines.append(
            f"  {order[id(p)]:>5}  {p.value:>8g}x  {p.time_scale:>10g}  {_att(p):>14}  "
            f"{p.turns:>5}  {p.rejected_turns:>8}  {'yes' if p.meets else 'no':>5}"
        )
    a = result.answer
    if a is None:
        low = min(result.probes, key=lambda p: p.step)
        lines.append(
            f"not met: {low.slo_attainment:.4f} at the lowest rate, {low.value:g}x the trace's "
            "(lower --lo, or the SLO is out of reach with this memory)"
        )
        return "\n".join(lines)
    if a.step == max(p.step for p in result.probes):
        note = "the largest considered: raise --hi to look above"
    else:
        note = f"{rate_of(a.step + 1):g}x misses"
    lines.append(
        f"highest request rate meeting it: {a.value:g}x the trace's rate ({note}), "
        f"slo_attainment {a.slo_attainment:.4f}; in the YAML: trace.time_scale: {a.time_scale:g}"
    )
    return "\n".join(lines)
