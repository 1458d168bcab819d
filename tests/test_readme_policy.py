"""The policy example of docs/policies.md runs as printed: it is extracted from the page and simulated."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from sim.cachesim import simulate_cache, stream_from_arrays
from sim.policies import available_policies

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "policies.md"


def test_guide_policy_example_registers_and_decides():
    text = GUIDE.read_text()
    block = re.search(
        r"```python\n(from sim\.policies import EvictionPolicy.*?)```", text, re.S
    ).group(1)
    namespace: dict = {}
    if "oldest-session" not in available_policies():
        exec(compile(block, str(GUIDE), "exec"), namespace)
    assert "oldest-session" in available_policies()
    ids = np.random.default_rng(0).integers(0, 50, 3000)
    # on objects its key is (last request, -uid): exactly LRU's order
    assert (
        simulate_cache(stream_from_arrays(ids), "oldest-session", 10).hits
        == simulate_cache(stream_from_arrays(ids), "lru", 10).hits
    )
