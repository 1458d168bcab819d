"""Candidate prefill-attention forms that are NOT in the cost model, scored on the same splits.

They exist so the gain of a form change can be judged with numbers before anyone changes
``costmodels.cost`` (`kvsim calibrate fit --proposed`). Both extra terms are physical:

  +tokens  c_tok * S * n_new * H_q * d: work per new query row that does not depend on the context
           (loading Q, writing O, the softmax epilogue, the partly masked diagonal tile). DistServe's
           prefill model has the same b * sum(len) term (simdistserve/estimators/time_estimator.py).
  +waves   c_kv * waves * (n_ctx + n_new) * d, waves = ceil(S * ceil(n_new / 128) * H_q / SMs):
           kernels that give one CTA to each (128-row query tile, head) and do not split the keys
           stream a sequence's keys serially inside the CTA, so while the grid fits in one wave
           the time is the longest CTA's key loop, and waves serialise (FlashAttention without
           split-KV; LLMServingSim's tables show time set by the key count, not the chunk, and
           steps exactly where the tile count crosses a multiple of the SM count).

The cost model's ``BatchShape`` keeps only sums over sequences, so +waves would need per-sequence
lengths (or a mean-length approximation) to be used in the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .fit import TermFit, _nonneg_rel_lstsq
from .samples import Sample
from .validate import ErrorStats, Split, TermReport, extrapolation_split, random_split

SM_COUNT = {"a100-sxm": 108, "h100-sxm": 132, "h200": 132, "a6000": 84}
Q_TILE = 128
FORMS = ("+tokens", "+waves", "+tokens+waves")


@dataclass(frozen=True, slots=True)
class ProposedFit:
    form: str
    columns: tuple[str, ...]
    coef: tuple[float, ...]


def _design(form: str, samples: Sequence[Sample], sms: int) -> tuple[np.ndarray, tuple[str, ...]]:
    cols = ["tau_s", "per_seq_s", "1/flops"]
    if "tokens" in form:
        cols.append("s_per_row_elem")
    if "waves" in form:
        cols.append("s_per_key_elem_per_wave")
    rows = []
    for s in samples:
        m, sh = s.model, s.shape
        r = [1.0, sh.seqs, 4.0 * m.num_heads * m.head_dim * sh.pairs]
        if "tokens" in form:
            r.append(sh.seqs * sh.n_new * m.num_heads * m.head_dim)
        if "waves" in form:
            waves = math.ceil(sh.seqs * math.ceil(sh.n_new / Q_TILE) * m.num_heads / sms)
            r.append(waves * sh.kv_len * m.head_dim)
        rows.append(r)
    return np.array(rows, dtype=float), tuple(cols)


def _evaluate(
    source: str, form: str, samples: Sequence[Sample], split: Split, sms: int
) -> TermReport:
    train = [s for s in samples if s.key in split.train]
    test = [s for s in samples if s.key in split.test]
    a, cols = _design(form, train, sms)
    keep = [0] + [j for j in range(1, a.shape[1]) if np.ptp(a[:, j]) > 0]
    coef = np.zeros(a.shape[1])
    coef[keep] = _nonneg_rel_lstsq(a[:, keep], np.array([s.time.median_s for s in train]))
    at, _ = _design(form, test, sms)
    pred = at @ coef
    y = np.array([s.time.median_s for s in test])
    fit = TermFit(
        "prefill_attn", ProposedFit(form, cols, tuple(float(c) for c in coef)), len(train)
    )  # type: ignore[arg-type]
    return TermReport(
        f"{source} [{form}]", "prefill_attn", split, (fit,), len(train), ErrorStats.of(pred, y)
    )


def evaluate_proposed(
    source: str, gpu: str, samples: Sequence[Sample], seed: int = 0
) -> tuple[TermReport, ...]:
    rows = [s for s in samples if s.term == "prefill_attn"]
    if not rows or gpu not in SM_COUNT:
        return ()
    splits = [random_split(rows, 0.2, seed)]
    ex = extrapolation_split("prefill_attn", rows)
    if ex is not None:
        splits.append(ex)
    return tuple(
        _evaluate(source, form, rows, sp, SM_COUNT[gpu]) for form in FORMS for sp in splits
    )
