"""Helpers shared by the calibration tests (a module with a unique name, importable by tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

# The public tables live beside the checkout: <repo>/../shared/data.
DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
needs_data = pytest.mark.skipif(
    not (DATA / "vidur").is_dir() or not (DATA / "llmservingsim").is_dir(),
    reason="../shared/data (public GPU tables) not present beside the checkout",
)
