"""Frozen configuration of one simulation run: memory tiers and engine behaviour.

Plain dataclasses with help text and no side effects; experiments/ validates user YAML into these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 2**30  # capacities are GiB (2^30 bytes), as vLLM's swap/offload sizes are
EVICT_UNITS = ("session", "block", "layer_block")
REPLAY_MODES = ("closed-loop", "open-loop")
PREFETCH_MODES = ("off", "queue", "think")  # ahead-of-time swap-in (docs/semantics.md)
# How KV pages cross the host link: one copy call per page of one layer (vLLM's swap_blocks), or
# one per layer for all its pages (a gather kernel or batched copy, as LMCache does).
SWAP_COPIES = ("per_page", "per_layer")


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    gpu_kv_gb: float  # GPU KV capacity in GiB (math.inf: unbounded)
    cpu_kv_gb: float = 0.0  # CPU swap tier in GiB (0: no CPU tier, evictions drop)
    block_tokens: int = 16  # page size in tokens; a session's last page counts whole
    evict_unit: str = "block"  # session | block | layer_block (the eviction granularity)
    prefix_sharing: bool = True  # equal prefix hashes of a trace share one KV (``sim.prefix``)

    def __post_init__(self) -> None:
        if not (self.gpu_kv_gb > 0):
            raise ValueError(f"memory.gpu_kv_gb must be > 0, got {self.gpu_kv_gb}")
        if not (self.cpu_kv_gb >= 0):
            raise ValueError(f"memory.cpu_kv_gb must be >= 0, got {self.cpu_kv_gb}")
        if self.block_tokens < 1:
            raise ValueError(f"memory.block_tokens must be >= 1, got {self.block_tokens}")
        if self.evict_unit not in EVICT_UNITS:
            raise ValueError(
                f"memory.evict_unit must be one of {EVICT_UNITS}, got {self.evict_unit!r}"
            )

    @staticmethod
    def capacity_bytes(gb: float) -> float:
        return math.inf if math.isinf(gb) else int(gb * GIB)


ENGINE_KINDS = ("kvsim", "vllm-v1")
OFFLOAD_POLICIES = ("lru", "arc")  # vLLM's CPU manager policies


@dataclass(frozen=True, slots=True)
class EngineConfig:
    kind: str = "kvsim"  # kvsim: session KV (sim.scheduler); vllm-v1: vLLM's (sim.vllm_v1)
    max_batch_tokens: int = 8192  # prefill + decode tokens one iteration may compute
    max_running: int = 256  # sequences in the continuous batch
    replay: str = "closed-loop"  # closed-loop: turn k+1 arrives think_s after turn k ends
    pipelining: bool = True  # layer-wise overlap of swap-in copies with compute
    async_save: bool = True  # demotion copies (D2H) overlap compute on their own stream
    fused_recompute: bool = True  # dropped history recomputed in the same prefill as the prompt
    prefetch: str = "off"  # swap a turn's CPU units in ahead: off | queue | think
    swap_copies: str = "per_page"  # copy calls per swap: per_page | per_layer
    chunked_prefill: bool = False  # kvsim: a prefill over the token budget is cut into chunks
    # vllm-v1 only (vLLM's names and defaults)
    long_prefill_token_threshold: int = 0  # cap of one prefill chunk when others wait (0: none)
    scheduler_reserve_full_isl: bool = True  # admit only if the whole prompt's blocks fit
    enable_prefix_caching: bool = True
    async_scheduling: bool = True  # plan step k+1 while step k runs, as vLLM on a GPU does
    # vllm-v1's CPU tier (memory.cpu_kv_gb > 0): vLLM's offloading connector
    offload_blocks_per_chunk: int = 1  # GPU blocks per offloaded chunk
    offload_eviction_policy: str = "lru"  # the CPU manager's policy: lru | arc

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"engine.kind must be one of {ENGINE_KINDS}, got {self.kind!r}")
        if self.max_batch_tokens < 1:
            raise ValueError(f"engine.max_batch_tokens must be >= 1, got {self.max_batch_tokens}")
        if self.max_running < 1:
            raise ValueError(f"engine.max_running must be >= 1, got {self.max_running}")
        if self.prefetch not in PREFETCH_MODES:
            raise ValueError(
                f"engine.prefetch must be one of {PREFETCH_MODES}, got {self.prefetch!r}"
            )
        if self.replay not in REPLAY_MODES:
            raise ValueError(f"engine.replay must be one of {REPLAY_MODES}, got {self.replay!r}")
        if self.offload_blocks_per_chunk < 1:
            raise ValueError(
                f"engine.offload_blocks_per_chunk must be >= 1, got {self.offload_blocks_per_chunk}"
            )
        if self.offload_eviction_policy not in OFFLOAD_POLICIES:
            raise ValueError(
                f"engine.offload_eviction_policy must be one of {OFFLOAD_POLICIES}, "
                f"got {self.offload_eviction_policy!r}"
            )
        if self.swap_copies not in SWAP_COPIES:
            raise ValueError(
                f"engine.swap_copies must be one of {SWAP_COPIES}, got {self.swap_copies!r}"
            )


BUDGET_KINDS = ("full", "streamingllm", "smartkv")
BUDGET_SCORERS = ("random", "recency", "lifespan")


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """Per-layer token budgets (docs/semantics.md, section 8): every layer of a session keeps
    ``sink`` first tokens, a ``window`` of the most recent and the ``budget`` highest-scoring
    others; the rest are pruned for good. ``full`` keeps everything; ``streamingllm`` is sink +
    window (no scored budget, no scorer to run); ``smartkv`` scores every new token at every layer
    with a learned scorer whose cost is charged."""

    kind: str = "full"
    sink: int = 0
    window: int = 0
    budget: int = 0
    scorer: str = "random"  # what the quality report assumes the scores are (smartkv)
    lifespans: str | None = None  # CSV of the relevance model's lifespan histogram (None: built-in)
    quality_sample: int = 200  # sessions the quality report evaluates (a seeded sample)
    scorer_s_per_key: float | None = None  # measured scorer cost per key (None: its FLOPs)
    scorer_launch_s: float | None = None  # measured fixed cost per layer (None: the GEMM tau)

    def __post_init__(self) -> None:
        if self.kind not in BUDGET_KINDS:
            raise ValueError(f"budget.kind must be one of {BUDGET_KINDS}, got {self.kind!r}")
        for key in ("sink", "window", "budget"):
            if getattr(self, key) < 0:
                raise ValueError(f"budget.{key} must be >= 0, got {getattr(self, key)}")
        if self.scorer not in BUDGET_SCORERS:
            raise ValueError(f"budget.scorer must be one of {BUDGET_SCORERS}, got {self.scorer!r}")
        for key in ("scorer_s_per_key", "scorer_launch_s"):
            v = getattr(self, key)
            if v is not None and not v >= 0:
                raise ValueError(f"budget.{key} must be >= 0 seconds, got {v}")
        if self.quality_sample < 1:
            raise ValueError(f"budget.quality_sample must be >= 1, got {self.quality_sample}")
        if self.kind == "full" and (self.sink or self.window or self.budget):
            raise ValueError(
                "budget.kind 'full' keeps every token: leave sink, window and budget at 0"
            )
        if self.kind == "streamingllm" and self.budget:
            raise ValueError(
                f"budget.kind 'streamingllm' keeps sink + window only: budget.budget "
                f"must be 0, got {self.budget}"
            )
        if self.kind != "full" and self.sink + self.window + self.budget < 1:
            raise ValueError(
                f"budget.kind {self.kind!r} keeps sink + window + budget tokens per "
                f"layer: their sum must be >= 1"
            )

    @property
    def capacity(self) -> int | None:
        """Tokens a session keeps per layer (S + W + B); None when nothing is pruned."""
        return None if self.kind == "full" else self.sink + self.window + self.budget

    @property
    def scores_tokens(self) -> bool:
        """Does every new token pass through a learned scorer (whose cost is charged)?"""
        return self.kind == "smartkv"

    @property
    def label(self) -> str:
        """A short name for results: the kind and its shape."""
        if self.kind == "full":
            return "full"
        if self.kind == "streamingllm":
            return f"streamingllm-{self.sink}+{self.window}"
        return f"smartkv-{self.sink}+{self.window}+{self.budget}-{self.scorer}"


SPARSE_KINDS = ("off", "quest", "full")


@dataclass(frozen=True, slots=True)
class SparseConfig:
    """Serving decode from CPU memory (docs/semantics.md, section 9):
    after its prefill a session's full pages move to the CPU; every decode step streams the pages
    a selector picks (``quest``: the top ``k`` per layer; ``full``: all) through a ring buffer of
    ``ring_slots`` page slots on the GPU. ``off``: decode from GPU memory (no offload)."""

    kind: str = "off"
    k: int | None = None  # quest: pages read per layer and step
    scorer: str = "recency"  # quest: how pages are ranked (a stand-in for query-key bounds)
    ring_slots: int = 16
    phases: tuple[str, ...] = ("decode",)  # where the selector runs; prefill is always dense

    def __post_init__(self) -> None:
        if self.kind not in SPARSE_KINDS:
            raise ValueError(f"sparse.kind must be one of {SPARSE_KINDS}, got {self.kind!r}")
        if self.ring_slots < 1:
            raise ValueError(f"sparse.ring_slots must be >= 1, got {self.ring_slots}")
        if self.kind == "off":
            return  # no selector: sim.sparse is not imported
        from sim.sparse import check_phase, make_selector, validate_sparse

        if self.kind == "full" and self.k is not None:
            raise ValueError("sparse.k is for kind 'quest'; kind 'full' reads every page")
        selector = make_selector(self.kind, k=self.k, scorer=self.scorer)
        validate_sparse(self.k, self.ring_slots)
        for phase in self.phases:
            check_phase(selector, phase)

    def selector(self):
        if self.kind == "off":
            return None
        from sim.sparse import make_selector

        return make_selector(self.kind, k=self.k, scorer=self.scorer)

    @property
    def enabled(self) -> bool:
        return self.kind != "off"

    @property
    def label(self) -> str:
        if self.kind == "off":
            return "off"
        if self.kind == "full":
            return f"cpu-full-r{self.ring_slots}"
        return f"quest-k{self.k}-r{self.ring_slots}"


# -- combinations ---------------------------------------------------------------------------------
# The rules for features used together, in one place. Each is (the YAML key it names, the reason);
# the engine raises the first for a run, and experiment validation reports every one with its key.
def combination_problems(
    memory: MemoryConfig,
    engine: EngineConfig,
    budget: BudgetConfig | None = None,
    sparse: SparseConfig | None = None,
) -> list[tuple[str, str]]:
    """What kvsim's engine does not model about these settings together (empty: all fine).
    Prefix sharing's rules depend on the trace too: ``sharing_problems``."""
    out = []
    if engine.chunked_prefill:
        if memory.evict_unit == "layer_block":
            out.append(
                (
                    "engine.chunked_prefill",
                    "chunked prefill cuts a prefill of whole pages: memory.evict_unit must be "
                    "block or session, not layer_block",
                )
            )
        if not engine.fused_recompute:
            out.append(
                (
                    "engine.chunked_prefill",
                    "chunked prefill cuts the recompute with the prompt: engine.fused_recompute "
                    "must be true",
                )
            )
    if sparse is not None and sparse.enabled:
        if memory.evict_unit == "session":
            out.append(
                (
                    "sparse.kind",
                    "sparse offload moves a session's pages one by one: memory.evict_unit must be "
                    "block or layer_block",
                )
            )
        if not memory.cpu_kv_gb > 0:
            out.append(
                (
                    "sparse.kind",
                    "sparse offload serves decode from CPU memory: memory.cpu_kv_gb must be > 0",
                )
            )
        if budget is not None and budget.capacity is not None:
            out.append(
                (
                    "sparse.kind",
                    "token budgets and sparse offload together are not modelled: use one of them",
                )
            )
        if engine.chunked_prefill:
            out.append(
                (
                    "sparse.kind",
                    "chunked prefill and sparse offload together are not modelled: use one of them",
                )
            )
    return out


def sharing_problems(
    memory: MemoryConfig, budget: BudgetConfig | None = None, sparse: SparseConfig | None = None
) -> list[tuple[str, str]]:
    """What prefix sharing cannot take, once a trace names shared blocks (sharing on)."""
    out = []
    if memory.evict_unit != "block":
        out.append(
            (
                "memory.prefix_sharing",
                "memory.prefix_sharing shares whole pages across sessions: memory.evict_unit must "
                "be block (or set prefix_sharing: false)",
            )
        )
    if (budget is not None and budget.capacity is not None) or (
        sparse is not None and sparse.enabled
    ):
        out.append(
            (
                "memory.prefix_sharing",
                "prefix sharing with token budgets or sparse offload is not modelled: set "
                "memory.prefix_sharing: false",
            )
        )
    return out


def raise_first(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise ValueError(problems[0][1])
