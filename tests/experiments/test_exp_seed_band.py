"""The seed band of the line plots: a 95 % confidence interval of the mean, by hand."""

from __future__ import annotations

import pytest

from experiments.plots import seed_interval


def test_seed_bands_are_the_95_percent_interval_of_the_mean():
    # 3 seeds: mean 2, sample sd 1, t(0.975, 2) = 4.303 -> 2 -/+ 4.303 / sqrt(3)
    lo, hi = seed_interval([1.0, 2.0, 3.0])
    assert (lo, hi) == pytest.approx((2 - 4.303 / 3**0.5, 2 + 4.303 / 3**0.5))
    assert seed_interval([5.0]) == (5.0, 5.0)
    assert seed_interval([4.0, float("nan"), 4.0]) == (4.0, 4.0)  # NaNs left out, no spread
