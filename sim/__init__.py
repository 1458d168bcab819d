"""The discrete-event core: tiered KV memory, eviction policies, the engine.

The engine and its results (pandas) are imported on first use, so that a command that only replays
a cache (``kvsim cachesim``) or reads a config does not pay for them.
"""

import importlib
from typing import Any

from sim.config import EngineConfig, MemoryConfig
from sim.policies import available_policies

__all__ = [
    "EngineConfig",
    "MemoryConfig",
    "SimResult",
    "EngineStats",
    "TURN_COLUMNS",
    "available_policies",
    "simulate",
]
_ON_USE = {
    "SimResult": "sim.results",
    "EngineStats": "sim.results",
    "TURN_COLUMNS": "sim.results",
    "simulate": "sim.run",
}


def __getattr__(name: str) -> Any:
    """``simulate`` and the result types, imported on first use (PEP 562)."""
    if name in _ON_USE:
        return getattr(importlib.import_module(_ON_USE[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
