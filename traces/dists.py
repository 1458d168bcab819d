"""Small, frozen length and time distributions shared by the fit and the generators.

Token lengths are mixtures of lognormals: a draw is exp(N(mu_c, sigma_c)) for a component c chosen by
weight, rounded to the nearest integer and clipped to [lo, hi]. One component is a plain lognormal.
Think times are lognormal, parameterised by their median (the more readable number) and sigma.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from traces.records import TraceError

_erf = np.vectorize(math.erf, otypes=[float])  # numpy has no erf; inputs here are small grids


def _norm_ppf(p: float) -> float:
    """Inverse standard normal CDF by bisection (called for a handful of mixture weights only)."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _check_keys(d: Mapping, allowed: Sequence[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise TraceError(f"{where}: expected a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise TraceError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(allowed)}"
        )


POINT_SIGMA = 1e-6  # ln-space width of a one-value part: draws round back to the value


@dataclass(frozen=True, slots=True)
class LogNormalMix:
    """Mixture of lognormals over token counts; ``mu``/``sigma`` are the mean/std of ln(tokens)."""

    weights: tuple[float, ...]
    mu: tuple[float, ...]
    sigma: tuple[float, ...]

    def __post_init__(self) -> None:
        # Coerce lists (from YAML) to tuples so the config stays hashable and comparable.
        for name in ("weights", "mu", "sigma"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        k = len(self.weights)
        if k == 0 or len(self.mu) != k or len(self.sigma) != k:
            raise TraceError(
                f"LogNormalMix: weights, mu, sigma need the same non-zero length, got "
                f"{len(self.weights)}, {len(self.mu)}, {len(self.sigma)}"
            )
        if any(w < 0 or not math.isfinite(w) for w in self.weights) or sum(self.weights) <= 0:
            raise TraceError(
                f"LogNormalMix: weights must be >= 0 with a positive sum, got {self.weights}"
            )
        if any(s <= 0 or not math.isfinite(s) for s in self.sigma):
            raise TraceError(f"LogNormalMix: sigma must be > 0, got {self.sigma}")
        if not all(math.isfinite(m) for m in self.mu):
            raise TraceError(f"LogNormalMix: mu must be finite, got {self.mu}")
        total = sum(self.weights)
        object.__setattr__(self, "weights", tuple(w / total for w in self.weights))

    @classmethod
    def lognormal(cls, median: float, sigma: float) -> "LogNormalMix":
        return cls((1.0,), (math.log(median),), (sigma,))

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "LogNormalMix") -> "LogNormalMix":
        """``{weights, mu, sigma}``, or an empirical pmf ``{weights, values}``: token counts, each
        a part at ln(value) with sigma ``POINT_SIGMA`` (every draw rounds back to it)."""
        _check_keys(d, ("weights", "mu", "sigma", "values"), where)
        if "values" in d:
            if "mu" in d or "sigma" in d:
                raise TraceError(f"{where}: give either values or mu and sigma, not both")
            values = d["values"]
            if not isinstance(values, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values
            ):
                raise TraceError(f"{where}: values must be a list of token counts >= 1")
            mu = tuple(math.log(v) for v in values)
            return cls(tuple(d.get("weights", ())), mu, (POINT_SIGMA,) * len(values))
        try:
            return cls(tuple(d["weights"]), tuple(d["mu"]), tuple(d["sigma"]))
        except KeyError as e:
            raise TraceError(f"{where}: missing key {e.args[0]!r}") from None

    def point_values(self) -> list[int] | None:
        """The token counts of an empirical pmf (every part a point at ln(v), exactly), or None."""
        if any(s != POINT_SIGMA for s in self.sigma):
            return None
        values = [round(math.exp(m)) for m in self.mu]
        return values if all(math.log(v) == m for v, m in zip(values, self.mu)) else None

    def to_dict(self, digits: int = 4) -> dict:
        return {
            "weights": [round(w, digits) for w in self.weights],
            "mu": [round(m, digits) for m in self.mu],
            "sigma": [round(s, digits) for s in self.sigma],
        }

    def sample(self, rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
        """n integer draws in [lo, hi] (int64).

        Each draw consumes one row of two standard normals (component pick, value), so the first m
        draws are the same whatever n is: a longer trace extends a shorter one with the same seed.
        """
        g = rng.standard_normal((n, 2))
        comp = np.searchsorted(self._thresholds(), g[:, 0], side="right")
        x = np.exp(np.asarray(self.mu)[comp] + np.asarray(self.sigma)[comp] * g[:, 1])
        return np.clip(np.floor(x + 0.5), lo, hi).astype(np.int64)

    def _thresholds(self) -> np.ndarray:
        """z-scores splitting N(0, 1) into the component weights: Phi^-1(cumulative weight)."""
        return np.array([_norm_ppf(c) for c in np.cumsum(self.weights)[:-1]])

    def cdf(self, x: np.ndarray) -> np.ndarray:
        """P(X <= x) of the continuous mixture (before rounding and clipping)."""
        x = np.asarray(x, dtype=float)
        out = np.zeros_like(x)
        pos = x > 0
        lx = np.log(x[pos])
        for w, m, s in zip(self.weights, self.mu, self.sigma):
            out[pos] += w * 0.5 * (1.0 + _erf((lx - m) / (s * math.sqrt(2.0))))
        return out

    def int_cdf(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Support [lo..hi] and P(draw <= v) of the rounded, clipped variable that ``sample`` draws."""
        v = np.arange(lo, hi + 1)
        f = self.cdf(v + 0.5)  # rounding to nearest: draw <= v  <=>  x < v + 0.5
        f[-1] = 1.0  # clipping puts the upper tail on hi
        return v, f

    def quantiles(self, qs: Sequence[float], lo: int, hi: int) -> np.ndarray:
        """Exact quantiles of the rounded, clipped draw (smallest v with P(draw <= v) >= q)."""
        v, f = self.int_cdf(lo, hi)
        idx = np.searchsorted(f, np.asarray(qs, dtype=float) - 1e-12, side="left")
        return v[np.minimum(idx, len(v) - 1)]


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """User think time between a reply and the next prompt: lognormal, median_s * exp(sigma * Z).

    ShareGPT has no timestamps, so the default (median 30 s, sigma 1.0) is an ASSUMPTION, not a fit.
    For scale only: in the Mooncake conversation trace the gap between reconstructed consecutive turns
    (think time plus service time, so an upper bound) has median ~126 s and a log-spread close to 1.
    sigma = 0 gives a constant think time; max_s (optional) clips the tail.
    """

    median_s: float = 30.0
    sigma: float = 1.0
    max_s: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median_s) and self.median_s >= 0):
            raise TraceError(f"think.median_s must be finite and >= 0, got {self.median_s}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise TraceError(f"think.sigma must be finite and >= 0, got {self.sigma}")
        if self.max_s is not None and not self.max_s >= 0:
            raise TraceError(f"think.max_s must be >= 0 or None, got {self.max_s}")

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "think") -> "ThinkTime":
        _check_keys(d, ("median_s", "sigma", "max_s"), where)
        for k, v in d.items():
            if not (v is None and k == "max_s") and (
                isinstance(v, bool) or not isinstance(v, (int, float))
            ):
                raise TraceError(f"{where}.{k} must be a number, got {type(v).__name__} {v!r}")
        return cls(**dict(d))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        t = self.median_s * np.exp(self.sigma * rng.standard_normal(n))
        return t if self.max_s is None else np.minimum(t, self.max_s)
