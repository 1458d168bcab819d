"""The discrete-event core: tiered KV memory, eviction policies, the engine."""

from sim.config import EngineConfig, MemoryConfig
from sim.policies import available_policies
from sim.results import TURN_COLUMNS, EngineStats, SimResult
from sim.run import simulate

__all__ = [
    "EngineConfig",
    "MemoryConfig",
    "SimResult",
    "EngineStats",
    "TURN_COLUMNS",
    "available_policies",
    "simulate",
]
