"""The README's policy example runs as printed: it is extracted from README.md and simulated."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from sim.cachesim import simulate_cache, stream_from_arrays
from sim.policies import available_policies

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_policy_example_registers_and_decides():
    text = README.read_text()
    block = re.search(
        r"```python\n(from sim\.policies import EvictionPolicy.*?)```", text, re.S
    ).group(1)
    namespace: dict = {}
    if "oldest-session" not in available_policies():
        exec(compile(block, str(README), "exec"), namespace)
    assert "oldest-session" in available_policies()
    ids = np.random.default_rng(0).integers(0, 50, 3000)
    # on objects its key is (last request, -uid): exactly LRU's order
    assert (
        simulate_cache(stream_from_arrays(ids), "oldest-session", 10).hits
        == simulate_cache(stream_from_arrays(ids), "lru", 10).hits
    )
