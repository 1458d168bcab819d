"""Frozen configuration of one simulation run: memory tiers and engine behaviour.

Plain dataclasses with help text and no side effects; experiments/ validates user YAML into these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 2**30  # capacities are GiB (2^30 bytes), as vLLM's swap/offload sizes are
EVICT_UNITS = ("session", "block", "layer_block")
REPLAY_MODES = ("closed-loop", "open-loop")
PREFETCH_MODES = ("off", "queue", "think")   # ahead-of-time swap-in (docs/semantics.md)


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    gpu_kv_gb: float                 # GPU KV capacity in GiB (math.inf: unbounded)
    cpu_kv_gb: float = 0.0           # CPU swap tier in GiB (0: no CPU tier, evictions drop)
    block_tokens: int = 16           # page size in tokens; a session's last page counts whole
    evict_unit: str = "block"        # session | block | layer_block (the eviction granularity)

    def __post_init__(self) -> None:
        if not (self.gpu_kv_gb > 0):
            raise ValueError(f"memory.gpu_kv_gb must be > 0, got {self.gpu_kv_gb}")
        if not (self.cpu_kv_gb >= 0):
            raise ValueError(f"memory.cpu_kv_gb must be >= 0, got {self.cpu_kv_gb}")
        if self.block_tokens < 1:
            raise ValueError(f"memory.block_tokens must be >= 1, got {self.block_tokens}")
        if self.evict_unit not in EVICT_UNITS:
            raise ValueError(f"memory.evict_unit must be one of {EVICT_UNITS}, got {self.evict_unit!r}")

    @staticmethod
    def capacity_bytes(gb: float) -> float:
        return math.inf if math.isinf(gb) else int(gb * GIB)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_batch_tokens: int = 8192     # prefill + decode tokens one iteration may compute
    max_running: int = 256           # sequences in the continuous batch
    replay: str = "closed-loop"      # closed-loop: turn k+1 arrives think_s after turn k ends
    pipelining: bool = True          # layer-wise overlap of swap-in copies with compute
    async_save: bool = True          # demotion copies (D2H) overlap compute on their own stream
    fused_recompute: bool = True     # dropped history recomputed in the same prefill as the prompt
    prefetch: str = "off"            # swap a turn's CPU units in ahead: off | queue | think

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1:
            raise ValueError(f"engine.max_batch_tokens must be >= 1, got {self.max_batch_tokens}")
        if self.max_running < 1:
            raise ValueError(f"engine.max_running must be >= 1, got {self.max_running}")
        if self.prefetch not in PREFETCH_MODES:
            raise ValueError(f"engine.prefetch must be one of {PREFETCH_MODES}, got {self.prefetch!r}")
        if self.replay not in REPLAY_MODES:
            raise ValueError(f"engine.replay must be one of {REPLAY_MODES}, got {self.replay!r}")
