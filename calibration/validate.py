"""Held-out validation of the fitted forms.

Two splits per term, both by whole shapes (every repeat of a shape, and the GEMM/elementwise/linear
samples of one table row, fall in the same fold):
  * random: ~20 % of the distinct shapes left out, seeded;
  * extrapolation: fit on small shapes, test on the large ones (tokens > 2048 for token-level
    work, per-sequence context > 16k or batch > 64 for decode, keys > 2048 for prefill, copies
    > 16 MiB). Where a table never reaches the nominal threshold, the threshold becomes the 70th
    percentile of the distinct sizes, and the split's description says which was used.
Errors are absolute percentage errors of the median time: MAPE, p95, max, and R^2 of log t.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .fit import (
    ElementwiseFit,
    GemmFit,
    PerOpForm,
    RateLimits,
    TermFit,
    TileWaveForm,
    fit_term,
    predict,
    predict_linear,
)
from .samples import Sample


@dataclass(frozen=True, slots=True)
class ErrorStats:
    n: int
    mape: float  # fractions: 0.05 = 5 %
    p95_ape: float
    max_ape: float
    r2_log: float  # R^2 of log(time): how much of the spread across shapes the form explains

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> "ErrorStats":
        predicted = np.asarray(predicted, dtype=float)
        measured = np.asarray(measured, dtype=float)
        if len(measured) == 0:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        ape = np.abs(predicted - measured) / measured
        ly, lp = np.log(measured), np.log(np.maximum(predicted, 1e-30))
        ss = float(np.sum((ly - ly.mean()) ** 2))
        r2 = 1.0 - float(np.sum((ly - lp) ** 2)) / ss if ss > 0 else math.nan
        return cls(
            len(measured), float(ape.mean()), float(np.percentile(ape, 95)), float(ape.max()), r2
        )


@dataclass(frozen=True, slots=True)
class Split:
    name: str  # "random" | "extrapolation" | "in-sample"
    description: str  # what was left out, with the thresholds used
    train: frozenset  # sample keys (Sample.key) in the training fold
    test: frozenset


@dataclass(frozen=True, slots=True)
class TermReport:
    source: str
    term: str
    split: Split
    fits: tuple[TermFit, ...]  # the fits behind the prediction (two for "linear")
    train_n: int
    test: ErrorStats
    by_group: tuple[tuple[str, ErrorStats], ...] = ()
    # The held-out samples and what the form predicted for each (for plots of the misses).
    points: tuple[tuple[Sample, float], ...] = field(default=(), compare=False, repr=False)


# --- splits -------------------------------------------------------------------------------------------
def _keys(samples: Sequence[Sample]) -> list:
    return sorted({s.key for s in samples}, key=repr)


def random_split(samples: Sequence[Sample], frac: float = 0.2, seed: int = 0) -> Split:
    """Leave out ~``frac`` of the distinct shapes (at least one), chosen by a seeded permutation."""
    keys = _keys(samples)
    if len(keys) < 2:
        raise ValueError("a random split needs at least two distinct shapes")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(keys))
    n_test = max(1, int(round(frac * len(keys))))
    test = frozenset(keys[i] for i in order[:n_test])
    return Split(
        "random",
        f"random {frac:.0%} of {len(keys)} shapes held out (seed {seed})",
        frozenset(keys) - test,
        test,
    )


# Nominal extrapolation thresholds (train on kv <= 16k and batch <= 64, test beyond).
_SIZE: dict[str, tuple[str, Callable[[Sample], float], float]] = {
    "gemm": ("tokens", lambda s: s.shape.tokens, 2048),
    "elementwise": ("tokens", lambda s: s.shape.tokens, 2048),
    "linear": ("tokens", lambda s: s.shape.tokens, 2048),
    "lm_head": ("rows", lambda s: s.shape.tokens, 2048),
    "layer": ("tokens", lambda s: s.shape.tokens, 2048),
    "prefill_attn": ("keys per sequence (n_ctx + n_new)", lambda s: s.shape.kv_len, 2048),
    "h2d": ("bytes", lambda s: s.shape.nbytes, 16 * 2**20),
    "d2h": ("bytes", lambda s: s.shape.nbytes, 16 * 2**20),
}


def extrapolation_split(term: str, samples: Sequence[Sample]) -> Split | None:
    """Train on the small shapes, test on the large ones; None when the sizes do not spread."""
    if term == "decode_attn":
        return _decode_extrapolation(samples)
    label, size, nominal = _SIZE[term]
    sizes = np.array(sorted({size(s) for s in samples}), dtype=float)
    if len(sizes) < 4:
        return None
    if sizes.max() > nominal and (sizes <= nominal).sum() >= 3:
        thr, how = nominal, "nominal"
    else:
        thr, how = (
            float(np.percentile(sizes, 70)),
            "70th percentile: the data never exceeds the nominal",
        )
    return _threshold_split(
        samples,
        lambda s: size(s) <= thr,
        f"extrapolation: train {label} <= {thr:g}, test above ({how})",
    )


def _decode_extrapolation(samples: Sequence[Sample]) -> Split | None:
    ctx = np.array(sorted({s.shape.n_ctx for s in samples}), dtype=float)
    batch = np.array(sorted({s.shape.seqs for s in samples}), dtype=float)
    if len(ctx) * len(batch) < 4:
        return None
    kv_thr, b_thr = 16384.0, 64.0
    how = "nominal"
    if not (ctx.max() > kv_thr or batch.max() > b_thr):
        # Small tables: split on the total context instead (train small batches x short contexts).
        tot = np.array(sorted({s.shape.ctx_tokens for s in samples}), dtype=float)
        thr = float(np.percentile(tot, 70))
        return _threshold_split(
            samples,
            lambda s: s.shape.ctx_tokens <= thr,
            f"extrapolation: train total context <= {thr:g}, test above "
            "(70th percentile: per-sequence kv never > 16384 and batch never > 64)",
        )
    return _threshold_split(
        samples,
        lambda s: s.shape.n_ctx <= kv_thr and s.shape.seqs <= b_thr,
        f"extrapolation: train per-sequence kv <= {kv_thr:g} and batch <= "
        f"{b_thr:g}, test the rest ({how})",
    )


def _threshold_split(
    samples: Sequence[Sample], is_train: Callable[[Sample], bool], description: str
) -> Split | None:
    train = frozenset(s.key for s in samples if is_train(s))
    test = frozenset(s.key for s in samples if not is_train(s)) - train
    if not train or not test:
        return None
    return Split("extrapolation", description, train, test)


def in_sample(samples: Sequence[Sample]) -> Split:
    keys = frozenset(_keys(samples))
    return Split("in-sample", "in-sample (every shape fitted and scored)", keys, keys)


# --- evaluation ---------------------------------------------------------------------------------------
def _by_group(samples: Sequence[Sample], pred: np.ndarray) -> tuple[tuple[str, ErrorStats], ...]:
    groups = sorted({s.group for s in samples})
    if len(groups) < 2:
        return ()
    y = np.array([s.time.median_s for s in samples])
    out = []
    for g in groups:
        idx = [i for i, s in enumerate(samples) if s.group == g]
        out.append((g, ErrorStats.of(pred[idx], y[idx])))
    return tuple(out)


def _pick(samples: Sequence[Sample], term: str, keys: frozenset) -> list[Sample]:
    return [s for s in samples if s.term == term and s.key in keys]


def evaluate(
    source: str,
    term: str,
    samples: Sequence[Sample],
    split: Split,
    limits: RateLimits | None = None,
    wave_sms: int = 0,
    gemm_form: TileWaveForm | None = None,
    ew_form: PerOpForm | None = None,
    link: bool = False,
    kv_floor_Bps: float = 0.0,
) -> TermReport:
    """Fit ``term`` on the training fold of ``samples`` and score the held-out fold.

    "linear" fits "gemm" and "elementwise" on the training rows and scores their sum.
    ``gemm_form``: the GEMMs' per-GEMM form to fit (None: the layer form); ``ew_form``: the
    elementwise per-op form (None: the layer form); ``link``: copies in the link form;
    ``kv_floor_Bps``: prefill attention under its KV-read floor at this rate (``fit_term``).
    """
    if term == "linear":
        g = fit_term("gemm", _pick(samples, "gemm", split.train), limits, gemm_form=gemm_form)
        e = fit_term(
            "elementwise", _pick(samples, "elementwise", split.train), limits, ew_form=ew_form
        )
        test = _pick(samples, "linear", split.test)
        pred = predict_linear(g.params_as(GemmFit), e.params_as(ElementwiseFit), test)
        fits: tuple[TermFit, ...] = (g, e)
        train_n = g.n
    else:
        train = _pick(samples, term, split.train)
        f = fit_term(term, train, limits, wave_sms, gemm_form, ew_form, link, kv_floor_Bps)
        test = _pick(samples, term, split.test)
        pred = predict(term, f.params, test, f.lead_s, f.kv_floor_Bps)
        fits, train_n = (f,), len(train)
    y = np.array([s.time.median_s for s in test])
    return TermReport(
        source,
        term,
        split,
        fits,
        train_n,
        ErrorStats.of(pred, y),
        _by_group(test, pred),
        tuple(zip(test, map(float, pred), strict=True)),
    )


def score(
    source: str,
    term: str,
    test: Sequence[Sample],
    predicted: np.ndarray,
    description: str,
    split_name: str = "transfer",
) -> TermReport:
    """A report for predictions made elsewhere (constants fitted on other data, or a whole profile)."""
    keys = frozenset(s.key for s in test)
    y = np.array([s.time.median_s for s in test])
    pred = np.asarray(predicted, dtype=float)
    return TermReport(
        source,
        term,
        Split(split_name, description, frozenset(), keys),
        (),
        0,
        ErrorStats.of(pred, y),
        _by_group(test, pred),
        tuple(zip(test, map(float, pred), strict=True)),
    )


def transfer_check(
    source: str,
    term: str,
    samples: Sequence[Sample],
    gemm: GemmFit,
    ew: ElementwiseFit | None = None,
    note: str = "",
) -> TermReport:
    """Score constants fitted elsewhere on samples they never saw (lm_head, another table's GEMMs)."""
    test = [s for s in samples if s.term == term]
    if term in ("lm_head", "gemm"):
        pred = predict(term, gemm, test)
    elif term == "linear":
        if ew is None:
            raise ValueError("a linear transfer check needs the elementwise fit")
        pred = predict_linear(gemm, ew, test)
    else:
        raise ValueError(f"no transfer check for {term!r}")
    return score(
        source, term, test, pred, note or "constants fitted on other data, every shape scored"
    )


def leave_out_split(
    samples: Sequence[Sample], is_test: Callable[[Sample], bool], description: str
) -> Split:
    """Leave a whole sub-population out (e.g. one model's shards: do the constants transfer?)."""
    test = frozenset(s.key for s in samples if is_test(s))
    train = frozenset(s.key for s in samples if not is_test(s)) - test
    if not train or not test:
        raise ValueError(f"leave-out split {description!r} leaves an empty fold")
    return Split("leave-out", description, train, test)


def validate_term(
    source: str,
    term: str,
    samples: Sequence[Sample],
    seed: int = 0,
    frac: float = 0.2,
    limits: RateLimits | None = None,
    wave_sms: int = 0,
    gemm_form: TileWaveForm | None = None,
    ew_form: PerOpForm | None = None,
    link: bool = False,
    kv_floor_Bps: float = 0.0,
) -> tuple[TermReport, ...]:
    """The random and (where the sizes allow) the extrapolation report of one term."""
    rows = [s for s in samples if s.term == term]
    split = random_split(rows, frac, seed)
    forms = (wave_sms, gemm_form, ew_form, link, kv_floor_Bps)
    reports = [evaluate(source, term, samples, split, limits, *forms)]
    ex = extrapolation_split(term, rows)
    if ex is not None:
        reports.append(evaluate(source, term, samples, ex, limits, *forms))
    return tuple(reports)


# --- printing -------------------------------------------------------------------------------------------
def format_table(reports: Sequence[TermReport], targets: dict[str, float] | None = None) -> str:
    """A fixed-width table: source, term, split, n train/test, MAPE, p95, max, R^2(log), target."""
    targets = targets or {}
    head = (
        f"{'source':<34} {'term':<13} {'split':<13} {'train':>6} {'test':>6} {'MAPE':>7} "
        f"{'p95':>7} {'max':>7} {'R2log':>6}  target"
    )
    lines = [head, "-" * len(head)]
    for r in reports:
        t = r.test
        tgt = targets.get(r.term)
        verdict = "" if tgt is None else (f"<{tgt:.0%} " + ("met" if t.mape < tgt else "MISSED"))
        lines.append(
            f"{r.source:<34} {r.term:<13} {r.split.name:<13} {r.train_n:>6} {t.n:>6} "
            f"{t.mape:>6.1%} {t.p95_ape:>6.1%} {t.max_ape:>6.1%} {t.r2_log:>6.3f}  {verdict}"
        )
    return "\n".join(lines)
