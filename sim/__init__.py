"""The discrete-event core: tiered KV memory, eviction policies, the engine.

Every name here is imported on first use (PEP 562): the engine and its results need pandas, the
policy registry imports a policy's module when its name is first asked for, and a command that
only replays a cache (``kvsim cachesim``) or reads a config needs neither.
"""

import importlib
from typing import Any

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
    "EngineConfig": "sim.config",
    "MemoryConfig": "sim.config",
    "available_policies": "sim.policies",
    "SimResult": "sim.results",
    "EngineStats": "sim.results",
    "TURN_COLUMNS": "sim.results",
    "simulate": "sim.run",
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use."""
    if name in _ON_USE:
        return getattr(importlib.import_module(_ON_USE[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
