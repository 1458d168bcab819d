"""Shared fixtures for the traces tests. Real data lives in the shared data folder: $KVSIM_SHARED_DATA,
else ../shared/data beside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.shared_data import shared_data_dir

DATA_DIR = shared_data_dir()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared real-data folder; tests that need it skip cleanly when it is absent."""
    if not DATA_DIR.is_dir():
        pytest.skip(
            f"real data not found at {DATA_DIR.resolve()} (set KVSIM_SHARED_DATA, or put it in "
            "../shared/data beside the checkout)"
        )
    return DATA_DIR


@pytest.fixture
def write_text(tmp_path):
    """Write a file under tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return p

    return _write


@pytest.fixture(scope="session")
def data_file(data_dir):
    """Path of one real-data file (relative to shared/data), skipping when that file is missing."""

    def _get(rel: str) -> Path:
        p = data_dir / rel
        if not p.is_file():
            pytest.skip(f"real data file {rel} not found in {data_dir.resolve()}")
        return p

    return _get
