"""Fit the synthetic generator to a real trace: ``kvsim trace synth --like FILE``.

``fit_like(sessions)`` returns a ``SyntheticConfig`` whose draws reproduce the trace's marginals, so
a small real trace can be scaled to any number of sessions. Each parameter the generator exposes is
fitted from the trace's own empirical distribution (``marginals`` lists them exactly):

- ``turns_pmf``: the empirical pmf of turns per session over 1..max observed (exact, no folding).
- ``first_prompt_tokens`` (p_0), ``prompt_tokens`` (p_k, k >= 1, all later turns pooled) and
  ``output_tokens`` (o_k, all turns pooled): the empirical distribution, written in the generator's
  own form, a mixture of lognormals (``empirical_mix``). With at most ``max_components`` (256)
  distinct values it is the exact pmf: one component at ln(v) with sigma 1e-6 per value, weighted by
  its count, so every draw rounds back to v. With more, the sorted values are cut into 256
  equal-count groups and each group is one lognormal with the group's mean and std of ln(tokens), a
  log-space smoothing; its CDF is within 0.2 % of the data's on the shared real traces (ShareGPT,
  Azure, Mooncake), under one group's weight (1/256). A later-prompt distribution is needed even
  for a one-turn trace; it is then the first prompt's. Prompts of 0 tokens are drawn as 1 (the
  generator draws >= 1). ``prompt_max_tokens`` and ``output_max_tokens``
  are the trace's maxima, so no draw exceeds what the trace holds.
- ``arrival_rate_per_s``: session starts are Poisson; the rate is the maximum-likelihood
  (sessions - 1) / (last start - first start). Left at the default when no two starts differ.
- ``think``: lognormal with the median of the positive think times, sigma = (ln p90 - ln p10) /
  (2 * 1.2816) (so p10, p50 and p90 match) and max_s = the largest. A turn's think time is its
  ``think_s``, else the gap to the previous turn's ``arrival_s`` (then an upper bound: it includes
  that turn's service time). Left at the default when no session has a second turn.
- ``max_context_tokens``: None unless given: the generator's default cap (32,768) would truncate
  long sessions and shift the turn and length marginals.

Not kept: every correlation. Turn counts, prompt and reply lengths are drawn independently, so a
long first prompt does not predict long later ones, the reply length does not depend on the prompt,
and lengths do not depend on the turn index or on how many turns the session has (later prompts are
pooled over k >= 1, replies over all k). Arrival burstiness is lost (starts are Poisson, CV 1; the
trace's inter-arrival CV and rate changes over time are not kept), later turns are closed-loop
(``think_s`` only), zero think times are dropped from the think fit, and prefix hashes (blocks shared
across sessions, e.g. a common system prompt) and priorities are not generated: only the history
reuse within a session remains. A trace whose loader invents timing (ShareGPT has no timestamps)
gives back that loader's assumption, not a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np
import yaml

from traces.dists import POINT_SIGMA, LogNormalMix, ThinkTime
from traces.records import Session, TraceError
from traces.synthetic import SyntheticConfig

MAX_COMPONENTS = 256
Z90 = 1.2815515655446004  # Phi^-1(0.9): p90 / p50 of a lognormal is exp(sigma * Z90)
QUANTILES = (0.1, 0.5, 0.9)

MARGINALS = (
    "turns per session",
    "first prompt tokens",
    "later prompt tokens",
    "output tokens",
    "think time s",
    "session start gap s",
)


def empirical_mix(
    values: Sequence[int] | np.ndarray, max_components: int = MAX_COMPONENTS
) -> LogNormalMix:
    """The empirical distribution of token counts (>= 1; smaller values count as 1) as the
    LogNormalMix the generator draws from; see the module docstring."""
    v = np.maximum(np.asarray(values, dtype=np.int64), 1)
    if v.size == 0:
        raise TraceError("empirical_mix: no values")
    if max_components < 1:
        raise TraceError(f"empirical_mix: max_components must be >= 1, got {max_components}")
    distinct, counts = np.unique(v, return_counts=True)
    if len(distinct) <= max_components:
        return LogNormalMix(
            tuple(counts.astype(float)),
            tuple(np.log(distinct.astype(float))),
            (POINT_SIGMA,) * len(distinct),
        )
    groups = np.array_split(np.log(np.sort(v).astype(float)), max_components)
    parts: list[list[float]] = []  # [weight, mu, sigma]; neighbours of one value merged
    for g in groups:
        mu, sigma = float(g.mean()), max(float(g.std()), POINT_SIGMA)
        if parts and parts[-1][1:] == [mu, sigma]:  # the same part: draws are unchanged
            parts[-1][0] += len(g)
        else:
            parts.append([float(len(g)), mu, sigma])
    weights, mus, sigmas = zip(*parts, strict=True)
    return LogNormalMix(weights, mus, sigmas)


def think_times(sessions: Sequence[Session]) -> np.ndarray:
    """Per later turn: think_s, else the gap between its arrival_s and the previous turn's."""
    out = []
    for s in sessions:
        for prev, t in zip(s.turns, s.turns[1:]):
            if t.think_s is not None:
                out.append(t.think_s)
            elif t.arrival_s is not None and prev.arrival_s is not None:
                out.append(max(t.arrival_s - prev.arrival_s, 0.0))
    return np.asarray(out, dtype=float)


def marginals(sessions: Sequence[Session]) -> dict[str, np.ndarray]:
    """The marginals ``fit_like`` fits, by name (MARGINALS), as arrays of raw values."""
    starts = np.sort(np.asarray([s.start_s for s in sessions], dtype=float))
    return {
        "turns per session": np.asarray([len(s.turns) for s in sessions], dtype=np.int64),
        "first prompt tokens": np.asarray([s.turns[0].prompt_tokens for s in sessions], np.int64),
        "later prompt tokens": np.asarray(
            [t.prompt_tokens for s in sessions for t in s.turns[1:]], dtype=np.int64
        ),
        "output tokens": np.asarray([t.output_tokens for s in sessions for t in s.turns], np.int64),
        "think time s": think_times(sessions),
        "session start gap s": np.diff(starts),
    }


def fit_think(values: np.ndarray) -> ThinkTime | None:
    """Lognormal matching p10/p50/p90 of the positive values; a constant 0 when no value is
    positive; None when there are no values."""
    pos = values[values > 0]
    if pos.size == 0:
        return None if values.size == 0 else ThinkTime(median_s=0.0, sigma=0.0, max_s=0.0)
    q10, q50, q90 = np.quantile(pos, QUANTILES)
    return ThinkTime(
        median_s=float(q50),
        sigma=max(float(math.log(q90 / q10)) / (2 * Z90), 0.0),
        max_s=float(pos.max()),
    )


def fit_like(
    sessions: Sequence[Session],
    *,
    max_components: int = MAX_COMPONENTS,
    max_context_tokens: int | None = None,
    where: str = "trace",
    notes: list[str] | None = None,
) -> SyntheticConfig:
    """A SyntheticConfig fitted to ``sessions`` (sessions = their count, seed 0). ``where`` names the
    source in errors; ``notes`` (if given) receives one line per parameter left at its default."""
    if not sessions:
        raise TraceError(f"{where}: no sessions to fit")
    notes = notes if notes is not None else []
    m = marginals(sessions)
    turns = m["turns per session"]
    first, later, outputs = m["first prompt tokens"], m["later prompt tokens"], m["output tokens"]
    defaults = SyntheticConfig()

    gaps = m["session start gap s"]
    span = float(gaps.sum())
    if span > 0:
        rate = len(gaps) / span
    else:
        rate = defaults.arrival_rate_per_s
        notes.append(f"arrival_rate_per_s: default {rate} (no two session starts differ)")
    think = fit_think(m["think time s"])
    if think is None:
        think = defaults.think
        notes.append("think: default (no session has a second turn)")
    if later.size == 0:
        notes.append(
            "prompt_tokens: the first prompt's distribution (no session has a second turn)"
        )
    return SyntheticConfig(
        sessions=len(sessions),
        seed=0,
        arrival_rate_per_s=rate,
        turns_pmf=tuple(float(c) for c in np.bincount(turns)[1:]),
        first_prompt_tokens=empirical_mix(first, max_components),
        prompt_tokens=empirical_mix(later if later.size else first, max_components),
        output_tokens=empirical_mix(outputs, max_components),
        prompt_max_tokens=int(max(1, first.max(), later.max() if later.size else 1)),
        output_max_tokens=int(max(1, outputs.max())),
        think=think,
        max_context_tokens=max_context_tokens,
    )


# --- the fitted parameters as YAML: the keys of a `kind: synthetic` trace spec ---


def config_to_dict(cfg: SyntheticConfig) -> dict:
    """Every SyntheticConfig field, as plain YAML-able values at full float precision, so
    ``SyntheticConfig.from_dict(config_to_dict(cfg))`` draws the same trace as ``cfg``."""
    out: dict = {}
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, LogNormalMix):
            values = v.point_values()  # an exact pmf reads as token counts
            if values is not None:
                v = {"weights": list(v.weights), "values": values}
            else:
                v = {"weights": list(v.weights), "mu": list(v.mu), "sigma": list(v.sigma)}
        elif isinstance(v, ThinkTime):
            v = {"median_s": v.median_s, "sigma": v.sigma, "max_s": v.max_s}
        elif isinstance(v, tuple):
            v = list(v)
        out[f.name] = v
    return out


# libyaml's dumper where PyYAML has it: the same text, 6x faster. Typed Any because mypy takes no
# base class picked at run time.
_SafeDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _FlowListDumper(_SafeDumper):
    """Block-style mappings, flow-style lists (one distribution's list on one line)."""


_FlowListDumper.add_representer(
    list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)
# Ten significant digits, not seventeen (the file is a third shorter): a parameter read back moves
# by under 5e-10 of itself. `kvsim trace synth` draws its trace from the text, so the two agree.
_FlowListDumper.add_representer(
    float, lambda d, v: _SafeDumper.represent_float(d, float(f"{v:.10g}"))
)


def dump_params(cfg: SyntheticConfig, header: Sequence[str] = ()) -> str:
    """The YAML text of ``config_to_dict(cfg)`` (floats to ten significant digits), after
    ``header`` lines written as comments."""
    body = yaml.dump(config_to_dict(cfg), Dumper=_FlowListDumper, sort_keys=False, width=10**9)
    return "".join(f"# {h}\n" for h in header) + body


def load_params(text: str, where: str = "params") -> SyntheticConfig:
    """A SyntheticConfig from ``dump_params`` text (or any YAML mapping of its fields)."""
    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # C: 10x faster
    if not isinstance(doc, dict):
        raise TraceError(f"{where}: expected a YAML mapping of synthetic options")
    return SyntheticConfig.from_dict(doc, where=where)


# --- source vs synthetic: what the CLI prints and the tests check ---


@dataclass(frozen=True)
class MarginalFit:
    """One marginal of two traces: p10/p50/p90, means and the two-sample KS statistic."""

    name: str
    n: tuple[int, int]
    quantiles: tuple[tuple[float, ...], tuple[float, ...]]
    mean: tuple[float, float]
    ks: float


def ks_2samp(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic sup |F_a - F_b| (exact with ties); NaN if one is empty."""
    if a.size == 0 or b.size == 0:
        return math.nan
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / a.size
    fb = np.searchsorted(b, grid, side="right") / b.size
    return float(np.abs(fa - fb).max())


def compare(source: dict[str, np.ndarray], synthetic: dict[str, np.ndarray]) -> list[MarginalFit]:
    """The MARGINALS of ``marginals(a)`` and ``marginals(b)`` side by side (source first)."""

    def q(x: np.ndarray) -> tuple[float, ...]:
        if x.size == 0:
            return (math.nan,) * len(QUANTILES)
        return tuple(float(v) for v in np.quantile(x, QUANTILES, method="inverted_cdf"))

    rows = []
    for name in MARGINALS:
        a, b = source[name], synthetic[name]
        rows.append(
            MarginalFit(
                name,
                (a.size, b.size),
                (q(a), q(b)),
                (float(a.mean()) if a.size else math.nan, float(b.mean()) if b.size else math.nan),
                ks_2samp(a, b),
            )
        )
    return rows


def multi_turn_share(m: dict[str, np.ndarray]) -> float:
    t = m["turns per session"]
    return float((t >= 2).mean()) if t.size else math.nan


def format_comparison(source: dict[str, np.ndarray], synthetic: dict[str, np.ndarray]) -> str:
    """A plain-text table: per marginal, p10/p50/p90 and mean of the source -> the synthetic trace,
    and their KS statistic; then the multi-turn shares."""

    def g(v: float) -> str:
        return "-" if math.isnan(v) else f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"

    lines = [
        f"  {'marginal':<22} {'source p10 / p50 / p90 (mean)':>34}   "
        f"{'synthetic p10 / p50 / p90 (mean)':>34}   KS"
    ]
    for r in compare(source, synthetic):
        cols = [f"{' / '.join(g(v) for v in qs)} ({g(mu)})" for qs, mu in zip(r.quantiles, r.mean)]
        ks = "-" if math.isnan(r.ks) else f"{r.ks:.3f}"
        lines.append(f"  {r.name:<22} {cols[0]:>34}   {cols[1]:>34}   {ks}")
    lines.append(
        f"  {'multi-turn share':<22} {multi_turn_share(source):>34.1%}   "
        f"{multi_turn_share(synthetic):>34.1%}"
    )
    return "\n".join(lines)
