"""Samples that a run keeps for percentiles (decode-step durations, eviction timings) in memory
that does not grow with the run.

A ``Samples`` is exact while it holds at most ``limit`` values: its ``values`` (and ``weights``)
are compact arrays that the engine appends to directly. Past the limit it folds them into a
histogram of logarithmic buckets (the DDSketch layout: bucket i holds the values in
(gamma^(i-1), gamma^i], gamma = (1 + a) / (1 - a)) and starts the arrays again. A percentile read
from the histogram is within a relative error ``a`` (``REL_ACCURACY``, 0.01 %) of the exact one,
whatever the number of samples; its memory follows the range of the values (about 11,500 buckets
per decade at 0.01 %), not their count. Histograms with the same accuracy merge by adding buckets.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np

EXACT_LIMIT = 1 << 22  # values kept exactly: 4,194,304 (32 MiB of float64, as much in weights)
REL_ACCURACY = 1e-4
_FOLD_CHUNK = 1 << 16  # values folded at a time
_EXACT_SUM = float(1 << 53)  # integers up to this sum add exactly in a double, in any order
_EXPAND_LIMIT = 8  # weighted percentiles repeat each value by its weight up to this mean weight


def finite_percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """numpy's (linear) q-th percentile of the finite values; NaN when there is none."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(np.percentile(a, q)) if a.size else math.nan


def weighted_percentile(
    values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray, q: float
) -> float:
    """Inverted-CDF weighted percentile (q in [0, 100]): the smallest value whose cumulative weight
    reaches q % of the total. NaN when there is no positive weight."""
    return weighted_percentiles(values, weights, (q,))[0]


def weighted_percentiles(
    values: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray,
    qs: Sequence[float],
) -> list[float]:
    """``weighted_percentile`` at each q of ``qs``, sorting the values once (the sort is nearly
    all of the cost: a long run's decode steps number in the millions).

    Where the weights are integers whose total is exact in a double (a run's: sequences per
    step) and no value is zero, the sort need not be stable (numpy's unstable one takes half the
    time): an answer is the value of the first place whose cumulative weight reaches the target,
    and reordering equal values changes neither the value there nor, the sums being exact, the
    cumulative weight at the end of their run, so the first place to reach the target lies in
    the same run of equal values. A zero is excluded: -0.0 and 0.0 are equal but print apart.
    Where the mean weight is small (a run's is 1-4 sequences a step) there is no sort at all:
    ``_expanded_percentiles`` selects from the values repeated by their weights."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    if v.shape != w.shape:
        raise ValueError(f"values and weights differ in shape: {v.shape} vs {w.shape}")
    if np.any(w < 0):
        raise ValueError("weights must be >= 0")
    keep = w > 0
    v, w = v[keep], w[keep]
    if v.size == 0:
        return [math.nan] * len(qs)
    total = float(w.sum())
    exact_sums = total <= _EXACT_SUM and bool((w == np.floor(w)).all())
    if exact_sums and not (v == 0).any():
        if total <= _EXPAND_LIMIT * v.size and all(0.0 <= q <= 100.0 for q in qs):
            return _expanded_percentiles(v, w, total, qs)
        order = np.argsort(v)
    else:
        order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(w[order])
    out = []
    for q in qs:
        target = q / 100.0 * cum[-1]
        i = int(np.searchsorted(cum, target, side="left"))
        out.append(float(v[min(max(i, 0), v.size - 1)]))
    return out


def _expanded_percentiles(
    v: np.ndarray, w: np.ndarray, total: float, qs: Sequence[float]
) -> list[float]:
    """``weighted_percentiles`` of values with integer weights whose total is exact and at most
    ``_EXPAND_LIMIT`` per value, none of them zero: each value repeated as often as its weight,
    then a partition (a selection, no sort) at each target's place. The first place whose
    cumulative weight reaches ``target`` holds the copy at 0-based rank ``ceil(target) - 1`` of
    the repeated values in order: the weights before that place sum to an integer below
    ``target``, those up to it to one at least ``target``."""
    expanded = np.repeat(v, w.astype(np.int64))
    last = expanded.size - 1
    places = [min(max(math.ceil(q / 100.0 * total) - 1, 0), last) for q in qs]
    expanded.partition(sorted(set(places)))
    return [float(expanded[k]) for k in places]


class Samples:
    """Values (with integer weights if ``weighted``) for percentiles: exact up to ``limit``
    values, then a log-bucket histogram (see the module docstring).

    The owner appends to ``values`` and ``weights`` (array('d') and array('q')) and calls
    ``compact()`` now and then (once an iteration or a turn): that is where the arrays are folded
    once they pass the limit, emptied in place, so references to them stay valid."""

    __slots__ = (
        "values",
        "weights",
        "limit",
        "rel_accuracy",
        "_log_gamma",
        "_hist",
        "_lo",
        "_nonpositive",
        "_folded",
    )

    def __init__(
        self,
        weighted: bool = False,
        typecode: str = "d",
        limit: int | None = None,
        rel_accuracy: float = REL_ACCURACY,
    ) -> None:
        limit = EXACT_LIMIT if limit is None else limit  # read at run time: tests may lower it
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if not 0.0 < rel_accuracy < 1.0:
            raise ValueError(f"rel_accuracy must be in (0, 1), got {rel_accuracy}")
        self.values: array = array(typecode)  # int64 or float64 (typecode)
        self.weights: array | None = array("q") if weighted else None
        self.limit = limit
        self.rel_accuracy = rel_accuracy
        self._log_gamma = math.log((1 + rel_accuracy) / (1 - rel_accuracy))
        self._hist = np.zeros(0)  # weight per bucket _lo, _lo + 1, ...
        self._lo = 0
        self._nonpositive = 0.0  # weight of values <= 0 (reported as 0.0)
        self._folded = 0  # samples folded into the histogram

    @classmethod
    def of(cls, values, weights=None, **kw) -> Samples:
        """Samples holding ``values`` (with ``weights``: weighted), for tests and fakes."""
        v = np.asarray(values)
        typecode = "q" if v.dtype.kind in "iu" else "d"
        out = cls(weighted=weights is not None, typecode=typecode, **kw)
        out.values.extend(v.astype(np.int64 if typecode == "q" else np.float64).tolist())
        if weights is not None:
            assert out.weights is not None
            out.weights.extend(np.asarray(weights, dtype=np.int64).tolist())
        out.compact()
        return out

    # -- filling ---------------------------------------------------------------------------------
    def compact(self) -> None:
        """Fold the arrays into the histogram if they hold more than ``limit`` values."""
        if len(self.values) > self.limit:
            self._fold()

    def _fold(self) -> None:
        values, weights = self.values, self.weights
        if weights is not None and len(weights) != len(values):
            raise ValueError(f"{len(values)} values but {len(weights)} weights")
        dtype = np.float64 if values.typecode == "d" else np.int64
        for start in range(0, len(values), _FOLD_CHUNK):  # in slices: few temporaries at once
            stop = min(start + _FOLD_CHUNK, len(values))
            self._fold_slice(
                np.frombuffer(values, dtype=dtype)[start:stop],
                None if weights is None else np.frombuffer(weights, dtype=np.int64)[start:stop],
            )
        # the views above died with their call: the arrays can be emptied in place
        self._folded += len(values)
        del values[:]
        if weights is not None:
            del weights[:]

    def _fold_slice(self, values: np.ndarray, weights: np.ndarray | None) -> None:
        v = values.astype(np.float64)
        w = np.ones(v.size) if weights is None else weights.astype(np.float64)
        positive = v > 0
        self._nonpositive += float(w[~positive].sum())
        v, w = v[positive], w[positive]
        if v.size:
            idx = np.ceil(np.log(v) / self._log_gamma).astype(np.int64)
            lo = int(idx.min())
            self._add_buckets(lo, np.bincount(idx - lo, weights=w))

    def _add_buckets(self, lo: int, counts: np.ndarray) -> None:
        """Add ``counts`` for buckets lo, lo + 1, ... to the histogram, widening it as needed."""
        if not self._hist.size:
            self._hist, self._lo = counts.astype(np.float64), lo
            return
        new_lo = min(self._lo, lo)
        new_hi = max(self._lo + self._hist.size, lo + counts.size)
        if new_lo != self._lo or new_hi != self._lo + self._hist.size:
            wide = np.zeros(new_hi - new_lo)
            wide[self._lo - new_lo : self._lo - new_lo + self._hist.size] = self._hist
            self._hist, self._lo = wide, new_lo
        self._hist[lo - self._lo : lo - self._lo + counts.size] += counts

    def merge(self, other: Samples) -> None:
        """Take in ``other``'s samples (the same accuracy and weighting); the result is folded."""
        if other.rel_accuracy != self.rel_accuracy or (other.weights is None) != (
            self.weights is None
        ):
            raise ValueError("only Samples of the same accuracy and weighting merge")
        other._fold()
        self._fold()
        if other._hist.size:
            self._add_buckets(other._lo, other._hist)
        self._nonpositive += other._nonpositive
        self._folded += other._folded

    # -- reading ---------------------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """Are all samples still held one by one (nothing folded)?"""
        return self._folded == 0

    def __len__(self) -> int:
        """Samples taken (folded or not)."""
        return self._folded + len(self.values)

    def arrays(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(values, weights) of an exact Samples, sharing the arrays' memory."""
        if not self.exact:
            raise ValueError(
                f"{len(self):,} samples were folded into a histogram past the exact limit of "
                f"{self.limit:,}: only percentiles are kept"
            )
        dtype = np.float64 if self.values.typecode == "d" else np.int64
        v = np.frombuffer(self.values, dtype=dtype)
        w = None if self.weights is None else np.frombuffer(self.weights, dtype=np.int64)
        return v, w

    @property
    def nbytes(self) -> int:
        """Memory of the record: its arrays' contents and the histogram."""
        n = self.values.itemsize * len(self.values) + self._hist.nbytes
        return n + (0 if self.weights is None else self.weights.itemsize * len(self.weights))

    def percentile(self, q: float) -> float:
        """The q-th percentile (q in [0, 100]); NaN with no samples. Exact: numpy's linear one
        (unweighted) or the inverted-CDF weighted one (``weighted_percentile``). Folded: the
        inverted-CDF one of the histogram, within ``rel_accuracy`` of the exact value."""
        return self.percentiles((q,))[0]

    def percentiles(self, qs: Sequence[float]) -> list[float]:
        """``percentile`` at each q of ``qs``; exact weighted samples are sorted once for all."""
        if self.exact:
            v, w = self.arrays()
            if w is not None:
                return weighted_percentiles(v, w, qs)
            return [finite_percentile(v, q) for q in qs]
        return [self._histogram_percentile(q) for q in qs]

    def _histogram_percentile(self, q: float) -> float:
        self._fold()
        cum = np.cumsum(np.concatenate(([self._nonpositive], self._hist)))
        if cum[-1] <= 0:
            return math.nan
        # the first bucket whose cumulative weight reaches the target (q = 0: the first non-empty)
        target = max(q / 100.0 * cum[-1], np.finfo(float).tiny)
        i = int(np.searchsorted(cum, target, side="left"))
        if i == 0:
            return 0.0
        gamma = math.exp(self._log_gamma)
        # the bucket's value of least relative error: 2 gamma^i / (gamma + 1)
        return 2.0 * gamma ** (self._lo + i - 1) / (gamma + 1.0)
