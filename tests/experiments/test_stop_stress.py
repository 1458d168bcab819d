"""Sweeps stopped at random moments end cleanly every time (tests/experiments/stop_stress.py): two
tries of each way to stop one (SIGINT, SIGTERM, a killed worker, a crash of `kvsim run`, and the
same through the Python API, plus a failing grid point; one of each on Ray), each checked for a hang, anything left
alive, a lost signal, and a rerun that resumes to the uninterrupted result. About 5 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest
from stop_stress import RAY_WAYS, WAYS, stress, table

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sweeps_stopped_at_random_moments_always_end_cleanly():
    results = stress(REPO, list(WAYS), tries=2, seed=7, echo=lambda line: None)
    assert len(results) == 2 * len(WAYS)
    failed = [t for t in results if not t.ok]
    assert failed == [], table(results) + "\n" + "\n".join(map(str, failed))


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_ray_sweeps_stopped_at_random_moments_end_cleanly():
    pytest.importorskip("ray")
    results = stress(REPO, list(RAY_WAYS), tries=1, seed=11, echo=lambda line: None)
    failed = [t for t in results if not t.ok]
    assert failed == [], table(results) + "\n" + "\n".join(map(str, failed))
