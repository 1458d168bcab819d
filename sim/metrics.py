"""Metrics of one simulation: pure functions from the ledger (``SimResult``) to figures.

Definitions as in docs/semantics.md (Metrics). Conventions worth stating:

* Ratios over history tokens (``reprefill_rate``, ``gpu_hit_rate``, ``cpu_hit_rate``) are token
  weighted over turns with H > 0 and are 0.0 when the ledger holds no history at all (sum H = 0:
  nothing could be hit or re-prefilled). ``turns_with_reprefill`` is the share of turns with k >= 1
  that recomputed some history; 0.0 when there are no such turns.
* Latency percentiles use numpy's default (linear interpolation). They are NaN on an empty ledger.
* TBT percentiles are weighted percentiles of the engine's decode-iteration durations, each
  iteration weighted by the sequences it decoded (every decoded token waited one iteration). The
  weighted percentile is the inverted-CDF one (no interpolation): the value of the token at rank
  ceil(q * N) in the sorted multiset, i.e. ``np.percentile(np.repeat(v, w), q, method="inverted_cdf")``.
* Jain's index is NaN over an empty set (no session with >= 2 completed turns) and 1.0 when every
  value is 0 (equal treatment). Sessions whose value is not finite are left out.
* ``evict_us_*`` are NaN when no make-room call had to evict (``evict_calls`` = 0).
* ``turns`` counts completed turns (the ledger); ``rejected_turns`` (EngineStats) those the engine
  refused because their context cannot fit in the GPU KV at all -- every other metric covers only
  the completed turns. ``evict_calls`` is the number of make-room calls that evicted (each timed once, however many
  victims it chose);
  ``gpu_peak_gb`` the highest GPU KV occupancy (with infinite memory: the peak demand).
* Per-priority-class Jain indices (``jain_service_p<class>``, ``jain_hit_p<class>``) appear only
  when the ledger holds more than one class. A session's class is the priority of its first turn.
* TPOT (time per output token after the first) is per turn: the ledger's ``tbt_mean_s``,
  (finish - first token) / (o_k - 1), undefined for o_k = 1. ``tpot_p*_s`` are linear percentiles
  over the turns where it is defined. ITL (the gap between two tokens of one turn) is per token:
  the ``tbt_p*_s`` columns above, from the per-iteration record (a preempted turn's wait is in its
  TPOT, in no iteration's duration).
* SLO columns judge each completed turn against an ``Slo`` (``DEFAULT_SLO`` unless the caller gives
  one): it meets the SLO when ttft_s <= the TTFT bound and its TPOT <= the TPOT bound (a turn of one
  output token has no TPOT and meets that bound; a bound of None is not applied), as vLLM's
  benchmark counts a good request. ``slo_attainment`` = turns meeting it / (completed + rejected
  turns): a rejected turn never got a first token, so it misses; NaN with no turn at all.
  ``goodput_turns_s`` (vLLM's request goodput) and ``goodput_tok_s`` (the output tokens of those
  turns) are per second of ``sim_time_s``, the span ``throughput_tok_s`` divides by.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.config import GIB
from sim.results import SimResult

if TYPE_CHECKING:
    import pandas as pd

    from sim.ledger_spool import SpooledResult

# Summary columns summarize() always produces, in order (per-class Jain columns follow them).
SUMMARY_COLUMNS: tuple[str, ...] = (
    "turns",
    "sessions",
    "rejected_turns",
    "reprefill_rate",
    "turns_with_reprefill",
    "gpu_hit_rate",
    "cpu_hit_rate",
    "pruned_share",
    "shared_hit_rate",
    "jain_service",
    "jain_hit",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tbt_p50_s",
    "tbt_p90_s",
    "tbt_p99_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
    "throughput_tok_s",
    "slo_attainment",
    "goodput_turns_s",
    "goodput_tok_s",
    "evict_calls",
    "evict_us_p50",
    "evict_us_p99",
    "gpu_util",
    "gpu_peak_gb",
    "swap_in_gb",
    "swap_out_gb",
    "decode_h2d_gb",
    "gpu_reserved_peak_gb",
    "recompute_tokens",
    "preemptions",
    "preempt_recompute_tokens",
    "sim_time_s",
    "wall_s",
)

# Columns that depend on the wall clock and so differ between identical runs.
WALL_CLOCK_COLUMNS: tuple[str, ...] = ("wall_s", "evict_us_p50", "evict_us_p99")

# The default pass/fail targets (docs/semantics.md, Targets): an experiment's ``targets:`` sets its
# own, and ``experiments.targets`` judges a summary row against them. The eviction target is judged on the p50 of the measured
# victim-selection wall-clock: the p99 of a Python-level timer is dominated by interpreter and OS
# noise (GC pauses, scheduling), so it says more about the machine than about the policy.
EVICT_US_TARGET = 100.0
REPREFILL_TARGET = 0.2
JAIN_TARGET = 0.8
GPU_UTIL_TARGET = 0.9
THROUGHPUT_IMPACT_TARGET = 0.05


@dataclass(frozen=True, slots=True)
class Slo:
    """Per-turn latency objectives, in simulated seconds: a completed turn meets them when its
    ttft_s <= ``ttft_s`` and its TPOT (the ledger's ``tbt_mean_s``) <= ``tpot_s``. None: that
    bound is not applied. An experiment's ``slo:`` section sets them."""

    ttft_s: float | None = 2.0
    tpot_s: float | None = 0.1

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not v > 0 or math.isnan(v)):
                raise ValueError(f"slo.{name}: must be a number > 0 or None, got {v!r}")


# The thresholds summarize() judges against when its caller gives none (docs/semantics.md).
DEFAULT_SLO = Slo()


def slo_met(turns: pd.DataFrame, slo: Slo = DEFAULT_SLO) -> np.ndarray:
    """One bool per ledger row: the turn meets ``slo`` (a turn of one output token has no TPOT,
    so meets the TPOT bound, as vLLM's benchmark counts its TPOT as 0)."""
    return _slo_mask(
        turns["ttft_s"].to_numpy(dtype=float), turns["tbt_mean_s"].to_numpy(dtype=float), slo
    )


def _slo_mask(ttft: np.ndarray, tpot: np.ndarray, slo: Slo) -> np.ndarray:
    """``slo_met`` of the columns ttft_s and tbt_mean_s (float arrays)."""
    ok = _ttft_met(ttft, slo)
    _and_tpot_met(ok, tpot, slo)
    return ok


def _ttft_met(ttft: np.ndarray, slo: Slo) -> np.ndarray:
    """The TTFT half of ``_slo_mask``: one bool per turn (a new array)."""
    ok = np.ones(len(ttft), dtype=bool)
    if slo.ttft_s is not None:
        ok &= ttft <= slo.ttft_s
    return ok


def _and_tpot_met(ok: np.ndarray, tpot: np.ndarray, slo: Slo) -> None:
    """The TPOT half of ``_slo_mask``, and-ed into ``ok`` in place (so a long ledger's TTFT
    column can go before its TPOT column is read)."""
    if slo.tpot_s is not None:
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_s)


SESSION_COLUMNS: tuple[str, ...] = (
    "session_id",
    "turns",
    "priority",
    "history_tokens",
    "gpu_hit_tokens",
    "cpu_hit_tokens",
    "recomputed_tokens",
    "hit_fraction",
    "mean_slowdown",
    "ttft_mean_s",
)


def jain_index(values: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all equal, 1/n when one takes all."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan
    if not np.any(x):
        return 1.0  # all zero: treated equally
    with np.errstate(over="ignore", invalid="ignore"):
        index = np.sum(x) ** 2 / (x.size * np.sum(x * x))
    if not np.isfinite(index):  # squares past the float range: the index is scale-free, so scale
        x = x / np.max(np.abs(x))
        index = np.sum(x) ** 2 / (x.size * np.sum(x * x))
    return float(index)


def finite_percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """``sim.samples.finite_percentile`` at each q of ``qs``, to the bit: the finite values are
    copied once and partitioned in place for every q together, where a call per q copies them
    twice (a long run's latency columns are 8 bytes a turn)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]  # a copy of its own, which the partition may reorder
    if not a.size:
        return [math.nan] * len(qs)
    return [float(v) for v in np.percentile(a, list(qs), overwrite_input=True)]


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den > 0 else 0.0


_SESSION_INPUTS = (
    "session_id",
    "turn",
    "priority",
    "history_tokens",
    "gpu_hit_tokens",
    "cpu_hit_tokens",
    "recomputed_tokens",
    "ttft_s",
    "ttft_ideal_s",
)


def _column_reader(result: SimResult | SpooledResult) -> Callable[[str], np.ndarray]:
    """column(name): one ledger column as a numpy array (a SpooledResult's read from its file,
    in its row order: the summary's figures do not depend on the order of the rows)."""
    if isinstance(result, SimResult):
        turns = result.turns
        return lambda name: turns[name].to_numpy()
    return result.ledger.column


def session_table(result: SimResult | SpooledResult) -> pd.DataFrame:
    """One row per session (sorted by session_id): token split of its history over turns k >= 1,
    hit fraction (g+c)/H, mean TTFT slowdown (ttft_s / ttft_ideal_s over all its turns), mean TTFT.
    A SpooledResult's is the same table, read from its file a column at a time. The frame of
    ``session_columns``."""
    return session_frame(session_columns(result))


def session_frame(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """``session_columns``' arrays as ``session_table``'s frame (session_id a text column)."""
    import pandas as pd

    if not len(columns["session_id"]):
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c == "session_id" else float) for c in SESSION_COLUMNS}
        )
    out = pd.DataFrame({c: columns[c] for c in SESSION_COLUMNS if c != "session_id"}, copy=False)
    out.index = pd.Index(columns["session_id"], name="session_id")
    out = out.reset_index()
    return out[list(SESSION_COLUMNS)]


def session_columns(result: SimResult | SpooledResult) -> dict[str, np.ndarray]:
    """``session_table``'s columns as numpy arrays (session_id: an object array of the ids), in
    SESSION_COLUMNS order; built without pandas for a SpooledResult. Each value is the one pandas'
    groupby gives: sizes, first priorities and integer sums exact, the means summed as pandas
    sums a group (Kahan's compensated sum, NaN left out)."""
    if isinstance(result, SimResult):
        if result.turns.empty:
            return _empty_session_columns()
        turns = result.turns

        def ids_and_ranks() -> tuple[np.ndarray, np.ndarray]:
            import pandas as pd

            codes, uniques = pd.factorize(turns["session_id"], sort=True)
            return np.asarray(uniques, dtype=object), codes.astype(np.int32)

    else:
        if len(result.ledger) == 0:
            return _empty_session_columns()
        ids_and_ranks = result.ledger.session_ranks
    return _session_columns(_column_reader(result), ids_and_ranks)


def _empty_session_columns() -> dict[str, np.ndarray]:
    return {c: np.empty(0, dtype=object if c == "session_id" else float) for c in SESSION_COLUMNS}


def _session_columns(
    column: Callable[[str], np.ndarray],
    ids_and_ranks: Callable[[], tuple[np.ndarray, np.ndarray]],
) -> dict[str, np.ndarray]:
    """``session_columns`` from the ledger's columns (``column(name)``), its distinct session ids
    sorted and each row's index into them (``ids_and_ranks()``; made here, so that the ranks go
    once the keys replace them): the rows put in (session_id, turn) order, then each column
    reduced over the sessions' runs of rows, so a ledger on disk needs one column in memory (and
    a reordered copy) at a time."""
    ids, ranks = ids_and_ranks()
    # int32 (a ledger of under 2**31 turns): the order and the keys are the table's largest arrays
    order = np.lexsort((column("turn"), ranks)).astype(np.int32)
    keys = ranks[order]  # sorted: the groups come out by session_id
    del ranks
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    del keys
    sizes = np.diff(np.r_[starts, len(order)]).astype(np.int64)
    out: dict[str, np.ndarray] = {"session_id": ids, "turns": sizes}
    out["priority"] = column("priority")[order[starts]]
    for name in ("history_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "recomputed_tokens"):
        out[name] = np.add.reduceat(column(name)[order], starts)  # exact: integers
    ttft = column("ttft_s")[order]  # a copy of its own
    ttft_mean = _group_means(ttft, starts, sizes)
    ideal = column("ttft_ideal_s")[order]
    del order
    # the slowdown ttft / ideal (NaN where ideal <= 0 or NaN) in the TTFT's array once its mean is
    # taken: two columns in memory, not four
    with np.errstate(all="ignore"):  # as pandas divides: inf and NaN, no warning
        slowdown = np.divide(ttft, ideal, out=ttft)
    slowdown[~(ideal > 0)] = np.nan
    del ideal, ttft
    mean_slowdown = _group_means(slowdown, starts, sizes)
    del slowdown
    hist = out["history_tokens"].astype(float)
    with np.errstate(all="ignore"):
        hit = (out["gpu_hit_tokens"] + out["cpu_hit_tokens"]) / hist
    hit[~(hist > 0)] = np.nan
    out["hit_fraction"] = hit
    out["mean_slowdown"] = mean_slowdown
    out["ttft_mean_s"] = ttft_mean
    return {c: out[c] for c in SESSION_COLUMNS}


def _group_means(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The mean of each run of ``values`` (``starts``, ``sizes``; float64) as pandas' groupby mean
    of sorted keys gives it: where no value is NaN, each run's ``np.add.reduceat`` sum over its
    size; else (pandas' Cython kernel) each run summed in order, Kahan-compensated (a
    compensation that turns NaN, past an infinity, is reset to 0), NaN values left out, NaN
    where a run has none. For that sum all the runs' k-th values are added together, for k = 0,
    1, ...: numpy operations per turn of the longest session, not per row."""
    if not len(starts):
        return np.empty(0)
    if not np.isnan(values).any():
        with np.errstate(all="ignore"):  # inf - inf: NaN, no warning
            return np.add.reduceat(values, starts) / sizes.astype(np.float64)
    n = len(starts)
    total = np.zeros(n)
    comp = np.zeros(n)
    count = np.zeros(n, dtype=np.int64)
    live = np.arange(n)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, as in pandas
        for k in range(int(sizes.max()) if n else 0):
            if k:
                live = live[sizes[live] > k]
            val = values[starts[live] + k]
            seen = val == val
            at = live[seen] if not seen.all() else live
            if not seen.all():
                val = val[seen]
            count[at] += 1
            y = val - comp[at]
            s = total[at]
            t = s + y
            c = t - s - y
            c[c != c] = 0.0
            comp[at] = c
            total[at] = t
    with np.errstate(all="ignore"):
        means = total / count
    means[count == 0] = np.nan
    return means


def _jain_columns(sessions: Mapping[str, np.ndarray], suffix: str = "") -> dict[str, float]:
    multi = np.asarray(sessions["turns"]) >= 2
    with np.errstate(divide="ignore", over="ignore"):  # as pandas divides: inf, no warning
        service = 1.0 / np.asarray(sessions["mean_slowdown"], dtype=float)[multi]
    return {
        f"jain_service{suffix}": jain_index(service),
        f"jain_hit{suffix}": jain_index(np.asarray(sessions["hit_fraction"], dtype=float)[multi]),
    }


def _session_arrays(sessions: pd.DataFrame | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The session table's columns that the summary reads, as numpy arrays (a frame's, or
    ``session_columns``')."""
    return {
        c: np.asarray(sessions[c]) for c in ("turns", "priority", "mean_slowdown", "hit_fraction")
    }


def summarize(
    result: SimResult | SpooledResult,
    sessions: pd.DataFrame | Mapping[str, np.ndarray] | None = None,
    slo: Slo | None = None,
) -> dict[str, Any]:
    """The summary row of one run: every SUMMARY_COLUMNS entry, then per-class Jain columns.
    ``result``: a SimResult, or a SpooledResult (its ledger on disk, read a column at a time: the
    same row). ``sessions``: the run's ``session_table`` (or ``session_columns``), when the caller has it already. ``slo``:
    the thresholds of the SLO columns (None: ``DEFAULT_SLO``)."""
    s = result.stats
    column = _column_reader(result)
    n_turns = len(result.turns) if isinstance(result, SimResult) else len(result.ledger)
    # one column at a time, and masks, not filtered frames: a long run's ledger is not copied
    history = column("history_tokens")
    in_hist = history > 0
    sum_h = float(history[in_hist].sum())
    del history

    def hist_sum(name: str):
        return column(name)[in_hist].sum()

    later = column("turn") >= 1
    with_reprefill = int((column("recomputed_tokens")[later] > 0).sum())
    n_later = int(later.sum())
    del later
    table = _session_arrays(session_columns(result) if sessions is None else sessions)
    tbt_p50, tbt_p90, tbt_p99 = s.tbt.percentiles((50, 90, 99))
    # one latency column in memory at a time (and one copy of its finite values): a long ledger
    # on disk is read column by column
    bounds = DEFAULT_SLO if slo is None else slo
    ttft = np.asarray(column("ttft_s"), dtype=float)
    met = _ttft_met(ttft, bounds)
    ttft_p = finite_percentiles(ttft, (50, 90, 99))
    del ttft
    tpot = np.asarray(column("tbt_mean_s"), dtype=float)
    _and_tpot_met(met, tpot, bounds)
    tpot_p = finite_percentiles(tpot, (50, 90, 99))
    del tpot
    e2e_p = finite_percentiles(column("e2e_s"), (50, 90, 99))
    asked = n_turns + int(getattr(s, "rejected_turns", 0))  # the turns that wanted serving
    good_tokens = int(column("output_tokens")[met].sum())
    evict_ns_p50, evict_ns_p99 = s.evict_ns.percentiles((50, 99))

    row: dict[str, Any] = {
        "turns": int(n_turns),
        "sessions": int(len(table["turns"])),
        "rejected_turns": int(getattr(s, "rejected_turns", 0)),
        "reprefill_rate": _ratio(hist_sum("recomputed_tokens"), sum_h),
        "turns_with_reprefill": _ratio(with_reprefill, n_later),
        "gpu_hit_rate": _ratio(hist_sum("gpu_hit_tokens"), sum_h),
        "cpu_hit_rate": _ratio(hist_sum("cpu_hit_tokens"), sum_h),
        "pruned_share": _ratio(hist_sum("pruned_tokens"), sum_h),  # what a token budget saves
        # prompt tokens whose KV another turn left on the GPU (equal prefix hashes)
        "shared_hit_rate": _ratio(column("shared_hit_tokens").sum(), column("prompt_tokens").sum()),
        **_jain_columns(table),
        "ttft_p50_s": ttft_p[0],
        "ttft_p90_s": ttft_p[1],
        "ttft_p99_s": ttft_p[2],
        "tbt_p50_s": tbt_p50,
        "tbt_p90_s": tbt_p90,
        "tbt_p99_s": tbt_p99,
        "tpot_p50_s": tpot_p[0],
        "tpot_p90_s": tpot_p[1],
        "tpot_p99_s": tpot_p[2],
        "e2e_p50_s": e2e_p[0],
        "e2e_p90_s": e2e_p[1],
        "e2e_p99_s": e2e_p[2],
        "throughput_tok_s": s.output_tokens / s.sim_time_s if s.sim_time_s > 0 else math.nan,
        "slo_attainment": int(met.sum()) / asked if asked else math.nan,
        "goodput_turns_s": int(met.sum()) / s.sim_time_s if s.sim_time_s > 0 else math.nan,
        "goodput_tok_s": good_tokens / s.sim_time_s if s.sim_time_s > 0 else math.nan,
        "evict_calls": len(s.evict_ns),
        "evict_us_p50": evict_ns_p50 / 1e3,
        "evict_us_p99": evict_ns_p99 / 1e3,
        "gpu_util": float(s.gpu_util),
        "gpu_peak_gb": float(getattr(s, "gpu_peak_bytes", math.nan)) / GIB,
        "swap_in_gb": s.swap_in_bytes / GIB,
        "swap_out_gb": s.swap_out_bytes / GIB,
        "decode_h2d_gb": getattr(s, "decode_h2d_bytes", 0.0) / GIB,  # decode from CPU
        "gpu_reserved_peak_gb": getattr(s, "gpu_reserved_peak_bytes", 0)
        / GIB,  # its ring, metadata
        "recompute_tokens": int(column("recomputed_tokens").sum()),
        "preemptions": int(s.preemptions),
        "preempt_recompute_tokens": int(s.preempt_recompute_tokens),
        "sim_time_s": float(s.sim_time_s),
        "wall_s": float(s.wall_s),
    }
    gpu_policy: Any = (getattr(s, "policy_metrics", ()) or (None,))[0]
    if hasattr(gpu_policy, "admission_inversions"):
        # QoS: turns admitted with a swap-in or recompute while lower-class KV held the GPU
        row["priority_inversions"] = int(gpu_policy.admission_inversions)
        row["priority_inversion_tokens"] = int(gpu_policy.inversion_tokens)
    priority = table["priority"]
    if priority.dtype.kind == "f":
        priority = priority[~np.isnan(priority)]
    classes = sorted(set(priority.tolist()))
    if len(classes) > 1:
        for cls in classes:
            of = table["priority"] == cls
            row.update(_jain_columns({c: v[of] for c, v in table.items()}, f"_p{int(cls)}"))
    return row
