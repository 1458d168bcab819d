"""Which grid points the figures can show, decided without matplotlib: a run whose points have no
finite GPU capacity draws nothing and never imports it (a third of a small run's start-up)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

NO_FIGURES = "plots: no grid point with a finite GPU capacity; no figures drawn"


def drawable_points(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary rows with a finite ``gpu_kv_gb`` (the capacity axis of every figure)."""
    if not len(summary):
        return summary
    return summary[np.isfinite(summary["gpu_kv_gb"].astype(float))]
