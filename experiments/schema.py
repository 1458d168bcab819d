"""The experiment YAML: validation with pydantic and expansion into a grid of runs.

Any list-valued field under ``memory``, ``engine.kind``, ``engine.pipelining``, and ``policies``, ``seeds``,
``model``, ``hardware``, ``tp``, ``trace`` (a list of trace mappings) and a trace's ``time_scale`` (a
request-rate sweep: each value multiplies the trace's arrival and think times; summary.csv's
``time_scale`` column) is a grid axis; a scalar is a one-value axis. Every error is a
``ConfigError`` whose lines read ``FILE: KEY.PATH[i]: message``.

Grid order (deterministic, lists in the order written): trace, time_scale, model, hardware, tp, engine.kind,
evict_unit, pipelining, budgets, sparse, block_tokens, cpu_kv_gb, policy, gpu_kv_gb, cluster.router,
cluster.replicas (or cluster.groups), cluster.store.capacity_gb, cluster.store.policy, cluster.store.write,
cluster.disaggregation.prefill_replicas, cluster.kv_events.delay_ms, seed -- the last one varies fastest. ``tp`` is the tensor-parallel degree: the run prices one GPU of a group of tp, and
``memory.gpu_kv_gb`` / ``cpu_kv_gb`` are the whole group's (each GPU holds 1/tp of every page).
``tp`` may instead map each model to its own degree or list of degrees (``{llama-3-8b: 1,
llama-3-70b: [2, 4]}``), so one grid runs a small model on one GPU and a large one on several.
``budgets`` is a list of token-budget mappings (``kind``: full | streamingllm | smartkv);
``sparse`` a list of CPU-offload decode mappings (``kind``: off | quest | full). A sparse mode
with ``cpu_kv_gb = 0`` cannot run: those combinations are left out of the grid (so
one grid holds recompute, swap-in and offload). ``targets`` (a mapping of target -> threshold, or
none) is no axis: it sets the thresholds of summary.csv's pass_* columns (``experiments.targets``);
nor is ``figures`` (``format``: png, pdf, svg or a list of them), the file format of plots/.

An optional ``cluster`` section runs every point on ``replicas`` kvsim engines behind a ``router``
(``sim.cluster``); both are grid axes, and summary.csv gains their ``router`` and ``replicas``
label columns (only then: a run without the section keeps its columns). ``memory`` is then each
replica's. A cluster runs engine.kind kvsim only, with full KV (budgets kind full), no sparse
decode and an online policy; anything else is refused naming its key. Its optional ``store``
mapping puts a shared KV store behind the replicas (``sim.cluster.store``): ``capacity_gb`` is a
grid axis (0: no store at that point) and so are ``policy`` and ``write`` (a capacity of 0 is
one point, with no policy and no writes), and summary.csv gains their ``store_gb``,
``store_policy`` and ``store_write`` label columns (again only then; ``store_policy`` and
``store_write`` are ``none`` where there is no store); the store's other keys are scalars,
checked as ``StoreConfig`` checks them (each policy and write too). Its optional ``kv_events``
mapping's ``delay_ms`` (``sim.cluster.kvevents``) is a grid axis, and summary.csv gains its
``kv_delay_ms`` label column (only then). Its
optional ``disaggregation`` mapping splits the replicas into a prefill and a decode pool
(``sim.cluster.disagg``): ``prefill_replicas`` is a grid axis (0: colocated at that point; a value
that leaves a grid point no decode replica is an error) and summary.csv gains its
``prefill_replicas`` label column (only then); the link's keys are scalars, checked as
``DisaggConfig`` checks them. Its optional ``groups`` list gives groups of replicas, in replica
order, their own ``hardware`` (as the top-level key takes it), ``gpu_kv_gb``, ``cpu_kv_gb`` and
``policy`` (each left out: the point's) and their count ``replicas`` (1); ``cluster.replicas`` is
then their sum (given, it must be). A list of such lists is a grid axis of fleets, in the place of
``cluster.replicas``. With disaggregation the prefill pool is the first replicas in group order.
summary.csv gains a ``groups`` label column naming each point's fleet (only then).

Relative paths (``trace.path``, a model or hardware given as a file) resolve against the YAML
file's folder first, then the current directory; a path that starts with ``${KVSIM_SHARED_DATA}``
is in the shared data folder (``experiments.shared_data``: ``--data-dir``, else that environment
variable, else ../shared/data beside the checkout). The resolved experiment holds absolute paths.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from experiments.targets import DEFAULT_TARGETS, RULES
from sim.config import (
    BUDGET_KINDS,
    BUDGET_SCORERS,
    ENGINE_KINDS,
    EVICT_UNITS,
    GIB,
    OFFLOAD_POLICIES,
    PREFETCH_MODES,
    REPLAY_MODES,
    SPARSE_KINDS,
    SWAP_COPIES,
    BudgetConfig,
    EngineConfig,
    MemoryConfig,
    SparseConfig,
)
from sim.metrics import DEFAULT_SLO, Slo

if TYPE_CHECKING:
    from sim.cluster.disagg import DisaggConfig
    from sim.cluster.run import ClusterConfig
    from sim.cluster.store import StoreConfig

TRACE_KINDS = ("synthetic", "sharegpt", "mooncake", "azure", "burstgpt", "jsonl")
FILE_TRACE_KINDS = ("sharegpt", "mooncake", "azure", "burstgpt", "jsonl")  # need trace.path

# The closed sets as field types. Each set is written once, as a tuple; pydantic reads the Literal
# made from it exactly, but mypy reads only a Literal written out, so to mypy they are plain str.
if TYPE_CHECKING:
    TraceKind = str
    EvictUnit = str
    EngineKind = str
    ReplayMode = str
    PrefetchMode = str
    SwapCopies = str
    OffloadPolicy = str
    BudgetKind = str
    BudgetScorer = str
    SparseKind = str
else:
    TraceKind = Literal[TRACE_KINDS]
    EvictUnit = Literal[EVICT_UNITS]
    EngineKind = Literal[ENGINE_KINDS]
    ReplayMode = Literal[REPLAY_MODES]
    PrefetchMode = Literal[PREFETCH_MODES]
    SwapCopies = Literal[SWAP_COPIES]
    OffloadPolicy = Literal[OFFLOAD_POLICIES]
    BudgetKind = Literal[BUDGET_KINDS]
    BudgetScorer = Literal[BUDGET_SCORERS]
    SparseKind = Literal[SPARSE_KINDS]
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENGINE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(EngineConfig)}


class ConfigError(ValueError):
    """An invalid experiment file. ``str(err)`` holds one ``FILE: KEY: message`` line per problem."""

    def __init__(self, message: str, file: str | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.key = key


# ---------------------------------------------------------------------------------------------
# Field checks. Each raises ValueError; pydantic attaches the key path.


def _as_list(v: Any) -> Any:
    return v if isinstance(v, list) else [v]


def _no_duplicates(v: list) -> list:
    seen: list = []
    for x in v:
        if x in seen:
            raise ValueError(f"duplicate value {x!r} (each grid value once)")
        seen.append(x)
    return v


def _looks_like_path(value: str) -> bool:
    return value.endswith((".yaml", ".yml", ".json")) or "/" in value or os.sep in value


def _resolve_file(value: str, info: ValidationInfo) -> str:
    """Absolute path of ``value``: as given if absolute, else the YAML's folder, then the CWD. A
    leading ``${KVSIM_SHARED_DATA}`` is the shared data folder (``experiments.shared_data``)."""
    from experiments.shared_data import HOW_TO_SET, expand, names_shared_data, where_from

    data_dir = (info.context or {}).get("data_dir")
    p = Path(expand(value, data_dir)).expanduser()
    base = (info.context or {}).get("base_dir")
    candidates = [p] if p.is_absolute() else ([Path(base) / p] if base else []) + [Path.cwd() / p]
    for c in candidates:
        if c.is_file():
            return str(c.resolve())
    where = " or ".join(dict.fromkeys(str(c.parent) for c in candidates))  # each folder once
    if names_shared_data(value):
        raise ValueError(
            f"file not found: {value!r} (looked in {where}, the shared data folder from "
            f"{where_from(data_dir)}); {HOW_TO_SET}"
        )
    raise ValueError(f"file not found: {value!r} (looked in {where})")


def _check_model(value: str, info: ValidationInfo) -> str:
    """A registered model name or alias (costmodels.get_model), or a model spec YAML file."""
    import costmodels

    if _looks_like_path(value):
        value = _resolve_file(value, info)
    costmodels.get_model(value)  # ValueError names the registered models
    return value


def _check_hardware(value: str, info: ValidationInfo) -> str:
    """A GPU name (its analytic profile), a committed profile name, or a profile YAML file
    (costmodels.load_profile)."""
    import costmodels

    if _looks_like_path(value):
        value = _resolve_file(value, info)
    costmodels.load_profile(value)  # ValueError names what it accepts
    return value


def add_user_import_dirs(*dirs: str | os.PathLike | None) -> None:
    """Make a user's ``module:Class`` importable from the current directory and ``dirs`` (the
    experiment file's folder), as ``python -m`` would: each is appended to ``sys.path`` (after the
    installed packages, so it shadows none of them) unless already there. Spawned workers start
    with the caller's ``sys.path``, so they find the module too."""
    for d in (Path.cwd(), *dirs):
        if d is None:
            continue
        text = str(Path(d).resolve())
        if text not in sys.path:
            sys.path.append(text)


def check_policy_name(value: str, base_dir: str | os.PathLike | None = None) -> str:
    """A registered policy name, or ``module:Class`` importable here (``add_user_import_dirs``
    with ``base_dir``, the experiment file's folder). ValueError names the policy and the
    registered ones, with the closest registered name when one is close."""
    from sim.policies import policy_class

    if ":" in value:
        add_user_import_dirs(base_dir)
    policy_class(value)
    return value


def _check_policy(value: str, info: ValidationInfo) -> str:
    return check_policy_name(value, (info.context or {}).get("base_dir"))


# ---------------------------------------------------------------------------------------------
# Schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _check_time_scale(v: Any) -> Any:
    """``trace.time_scale``: a number > 0, or a list of them (a grid axis: one run per value)."""

    def positive(x: Any) -> bool:
        return (
            not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0
        )

    if v is None:
        return v
    if isinstance(v, list):
        if not v:
            raise ValueError("must not be empty (a number > 0, or a list of them)")
        for i, x in enumerate(v):
            if not positive(x):
                raise ValueError(f"entry {i}: must be a finite number > 0, got {x!r}")
        return _no_duplicates(v)
    if not positive(v):
        raise ValueError(f"must be a finite number > 0 or a list of them, got {v!r}")
    return v


class TraceSpecModel(BaseModel):
    """A trace: ``kind`` plus options passed to ``traces.load_trace`` unchanged (``path`` resolved;
    a list of ``time_scale`` values is a grid axis, each run getting one of them)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    kind: TraceKind = Field(
        description="synthetic | sharegpt | mooncake | azure | burstgpt | jsonl"
    )
    path: StrictStr | None = Field(
        default=None,
        validate_default=True,
        description="trace file; needed by every kind but synthetic",
    )
    time_scale: Annotated[Any, AfterValidator(_check_time_scale)] = Field(
        default=None,
        description="multiplies every arrival and think time (2: half the request rate); a list "
        "is a grid axis (a request-rate sweep)",
    )

    def time_scales(self) -> list[Any]:
        """The values of the time_scale axis: the list, or the one value (None: as recorded)."""
        return self.time_scale if isinstance(self.time_scale, list) else [self.time_scale]

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if v is None:
            if kind in FILE_TRACE_KINDS:
                raise ValueError(f"required for kind {kind!r}")
            return None
        return _resolve_file(v, info)


PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
PosInt = Annotated[StrictInt, Field(ge=1)]


class MemorySpec(_Strict):
    """KV tiers. Each key may be a list: one grid axis per list."""

    gpu_kv_gb: Annotated[list[PosFloat], Field(min_length=1), AfterValidator(_no_duplicates)] = (
        Field(description="GPU KV capacity in GiB (.inf: unbounded)")
    )
    cpu_kv_gb: Annotated[list[NonNegFloat], Field(min_length=1), AfterValidator(_no_duplicates)] = (
        Field(default=[0.0], description="CPU swap tier in GiB (0: evictions drop)")
    )
    block_tokens: Annotated[list[PosInt], Field(min_length=1), AfterValidator(_no_duplicates)] = (
        Field(default=[16], description="page size in tokens")
    )
    evict_unit: Annotated[list[EvictUnit], Field(min_length=1), AfterValidator(_no_duplicates)] = (
        Field(
            default=["block"], description="session | block | layer_block (one page of one layer)"
        )
    )
    prefix_sharing: StrictBool = Field(
        default=True, description="equal prefix hashes of a trace share one KV across sessions"
    )

    wrap_lists = field_validator(
        "gpu_kv_gb", "cpu_kv_gb", "block_tokens", "evict_unit", mode="before"
    )(_as_list)


NonNegInt = Annotated[StrictInt, Field(ge=0)]
# vLLM's names for two of kvsim's knobs (the same meaning in both engines)
VLLM_ALIASES = {"max_num_batched_tokens": "max_batch_tokens", "max_num_seqs": "max_running"}
VLLM_ONLY = (
    "long_prefill_token_threshold",
    "scheduler_reserve_full_isl",
    "enable_prefix_caching",
    "async_scheduling",
    "offload_blocks_per_chunk",
    "offload_eviction_policy",
)


class EngineSpec(_Strict):
    """Engine behaviour: scalars, but ``kind`` and ``pipelining`` may be lists (grid axes).

    ``kind``: kvsim (session KV, the default) or vllm-v1 (vLLM 0.33.0's scheduler and prefix
    cache, docs/semantics.md section 11). vLLM's names ``max_num_batched_tokens`` and
    ``max_num_seqs`` may stand for ``max_batch_tokens`` and ``max_running``; the keys in
    ``VLLM_ONLY`` apply to vllm-v1 runs only."""

    kind: Annotated[list[EngineKind], Field(min_length=1), AfterValidator(_no_duplicates)] = Field(
        default=["kvsim"], description="the engine whose scheduling and KV cache are modelled"
    )
    max_batch_tokens: PosInt = Field(
        default=_ENGINE_DEFAULTS["max_batch_tokens"],
        description="prefill + decode tokens one iteration may compute",
    )
    max_running: PosInt = Field(
        default=_ENGINE_DEFAULTS["max_running"], description="sequences in the continuous batch"
    )
    replay: ReplayMode = Field(
        default=_ENGINE_DEFAULTS["replay"], description="when a session's next turn arrives"
    )
    pipelining: Annotated[list[StrictBool], Field(min_length=1), AfterValidator(_no_duplicates)] = (
        Field(
            default=[_ENGINE_DEFAULTS["pipelining"]],
            description="layer-wise overlap of swap-in copies with compute",
        )
    )
    async_save: StrictBool = Field(
        default=_ENGINE_DEFAULTS["async_save"],
        description="demotion copies (device to host) overlap compute on their own stream",
    )
    fused_recompute: StrictBool = Field(
        default=_ENGINE_DEFAULTS["fused_recompute"],
        description="dropped history is recomputed in the same prefill as the new prompt",
    )
    prefetch: PrefetchMode = Field(
        default=_ENGINE_DEFAULTS["prefetch"],
        description="swap a turn's CPU pages in ahead of its admission",
    )
    swap_copies: SwapCopies = Field(
        default=_ENGINE_DEFAULTS["swap_copies"], description="copy calls per swap"
    )
    chunked_prefill: StrictBool = Field(
        default=_ENGINE_DEFAULTS["chunked_prefill"],
        description="kvsim: cut a prefill over the token budget into chunks (vllm-v1 always does)",
    )
    long_prefill_token_threshold: NonNegInt | None = Field(
        default=None,
        description="vllm-v1: most tokens of one prefill chunk while others wait (0: none)",
    )
    scheduler_reserve_full_isl: StrictBool | None = Field(
        default=None, description="vllm-v1: admit a request only when its whole prompt's blocks fit"
    )
    enable_prefix_caching: StrictBool | None = Field(
        default=None, description="vllm-v1: reuse cached blocks of an equal prefix"
    )
    async_scheduling: StrictBool | None = Field(
        default=None,
        description="vllm-v1: plan each step while the one before runs, as vLLM on a GPU (off: "
        "the synchronous loop)",
    )

    offload_blocks_per_chunk: PosInt | None = Field(
        default=None, description="vllm-v1 with a CPU tier: GPU blocks per offloaded chunk"
    )
    offload_eviction_policy: OffloadPolicy | None = Field(
        default=None, description="vllm-v1 with a CPU tier: the CPU manager's eviction policy"
    )

    wrap_lists = field_validator("kind", "pipelining", mode="before")(_as_list)

    @model_validator(mode="before")
    @classmethod
    def _vllm_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for vllm_name, ours in VLLM_ALIASES.items():
            if vllm_name in data:
                if ours in data:
                    raise ValueError(f"give {vllm_name} or {ours} (one knob), not both")
                data[ours] = data.pop(vllm_name)
        if "block_size" in data:
            raise ValueError("vLLM's block_size is memory.block_tokens here")
        return data

    def config_options(self) -> dict[str, Any]:
        """EngineConfig's keyword arguments but the axes (kind, pipelining)."""
        opts = self.model_dump(exclude={"kind", "pipelining"})
        return {k: v for k, v in opts.items() if v is not None}


class BudgetSpec(_Strict):
    """A per-layer token budget (one value of the ``budgets`` axis): full KV, StreamingLLM's sink +
    window, or SmartKV's sink + window + the best-scored ``budget`` tokens."""

    kind: BudgetKind = "full"
    sink: NonNegInt = 0
    window: NonNegInt = 0
    budget: NonNegInt = 0
    scorer: BudgetScorer = "random"
    lifespans: StrictStr | None = Field(
        default=None,
        description="CSV lifespan_tokens,probability of the "
        "relevance model (default: the built-in one)",
    )
    quality_sample: PosInt = 200
    scorer_s_per_key: NonNegFloat | None = Field(
        default=None,
        description="measured scorer seconds per key (python -m calibration.measure_scorer)",
    )
    scorer_launch_s: NonNegFloat | None = None

    @field_validator("lifespans")
    @classmethod
    def _lifespans(cls, v: str | None, info: ValidationInfo) -> str | None:
        return None if v is None else _resolve_file(v, info)

    def config(self) -> BudgetConfig:
        return BudgetConfig(**self.model_dump())


def _check_budget(spec: BudgetSpec) -> BudgetSpec:
    spec.config()  # ValueError names the key (budget.window, ...)
    return spec


class SparseSpec(_Strict):
    """Decode served from CPU memory (one value of the ``sparse`` axis): ``off``, ``quest`` (the
    top ``k`` pages per layer) or ``full`` (every page), through ``ring_slots`` GPU page slots."""

    kind: SparseKind = "off"
    k: PosInt | None = None
    scorer: StrictStr = "recency"
    ring_slots: PosInt = 16
    phases: Annotated[list[Literal["prefill", "decode"]], Field(min_length=1)] = ["decode"]

    def config(self) -> SparseConfig:
        return SparseConfig(**{**self.model_dump(), "phases": tuple(self.phases)})


def _check_sparse(spec: SparseSpec) -> SparseSpec:
    spec.config()  # ValueError names the key (sparse.k, sparse.phases, ...)
    return spec


class ExecutorSpec(_Strict):
    """Where grid points run: local processes (workers=1: in this process) or a Ray cluster."""

    kind: Literal["local", "ray"] = "local"
    workers: PosInt = 1
    address: StrictStr | None = Field(
        default=None,
        description="ray only -- local: a new Ray on this machine for this sweep, ended with it "
        "however the sweep ends; auto: the latest cluster started here with `ray start` (an "
        "error if none); host:port or ray://...: that cluster; unset: RAY_ADDRESS, else local",
    )


class TargetsSpec(_Strict):
    """The thresholds each grid point is judged against (``experiments.targets``): the ``pass_*``
    columns of summary.csv. A key set to null drops that target."""

    evict_us: PosFloat | None = Field(
        default=DEFAULT_TARGETS["evict_us"], description="evict_us_p50 below this, in microseconds"
    )
    reprefill: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=DEFAULT_TARGETS["reprefill"], description="reprefill_rate below this (0 to 1)"
    )
    jain: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=DEFAULT_TARGETS["jain"], description="jain_service at least this (0 to 1)"
    )
    gpu_util: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=DEFAULT_TARGETS["gpu_util"], description="gpu_util at least this (0 to 1)"
    )
    throughput_impact: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=DEFAULT_TARGETS["throughput_impact"],
        description="throughput_impact below this (0 to 1; judged with baseline_infinite only)",
    )

    def thresholds(self) -> dict[str, float | None]:
        return self.model_dump()


class SloSpec(_Strict):
    """The per-turn latency objectives of the summary's SLO columns (``slo_attainment``,
    ``goodput_turns_s``, ``goodput_tok_s``): a turn meets them when its TTFT and its TPOT are at
    most these. A key set to null is not applied."""

    ttft_s: PosFloat | None = Field(
        default=DEFAULT_SLO.ttft_s, description="time to first token at most this, in seconds"
    )
    tpot_s: PosFloat | None = Field(
        default=DEFAULT_SLO.tpot_s,
        description="time per output token after the first (the turn's mean) at most this, in "
        "seconds",
    )

    def config(self) -> Slo:
        return Slo(ttft_s=self.ttft_s, tpot_s=self.tpot_s)


def _check_formats(v: Any) -> Any:
    """``figures.format``: png, pdf or svg, or a list of them (each once)."""
    from experiments.figure_style import FORMATS

    items = v if isinstance(v, list) else [v]
    if not items:
        raise ValueError(f"must not be empty ({', '.join(FORMATS)}, or a list of them)")
    for x in items:
        if not isinstance(x, str) or x not in FORMATS:
            raise ValueError(f"{x!r} is not one of {', '.join(FORMATS)}")
    if len(set(items)) < len(items):
        raise ValueError(f"lists a format twice: {items!r}")
    return v


class FiguresSpec(_Strict):
    """How the figures of plots/ are written (``kvsim run --format`` overrides it)."""

    format: Annotated[StrictStr | list[StrictStr], BeforeValidator(_check_formats)] = Field(
        default="png",
        description="file format of the figures: png, pdf or svg (vector, for a paper), or a "
        "list of them (each figure in each)",
    )

    def formats(self) -> tuple[str, ...]:
        return tuple(_as_list(self.format))


def _check_router(value: str, info: ValidationInfo) -> str:
    """A built-in router's name, or ``module:Class`` importable here (as a user's policy is)."""
    from sim.cluster.routers import router_class

    if ":" in value:
        add_user_import_dirs((info.context or {}).get("base_dir"))
    try:
        router_class(value)
    except ValueError as exc:
        raise ValueError(_after_key(str(exc))) from None
    return value


def _after_key(message: str) -> str:
    """A message of ``sim.cluster`` without the key path it starts with (the caller names the key):
    "cluster.router: unknown router 'x'" -> "unknown router 'x'"."""
    return re.sub(r"^cluster\.[a-z_]+(?=[ :])", "", message).lstrip(": ")


# StoreConfig's defaults, written here so that loading an experiment without a store does not
# import sim.cluster (tests/experiments/test_exp_store.py holds them equal).
STORE_DEFAULTS: dict[str, Any] = {
    "policy": "lru",
    "bandwidth_gb_s": 25.0,
    "latency_us": 20.0,
    "chunk_tokens": 256,
    "write": "completion",
}


def _finite_capacity(v: list[float]) -> list[float]:
    for i, x in enumerate(v):
        if math.isinf(x):
            raise ValueError(f"entry {i}: must be a finite number of GB (0: no store), got {x!r}")
    return v


class StoreSpec(_Strict):
    """A shared KV store behind every replica (``sim.cluster.store``): ``capacity_gb`` is a grid
    axis (0: no store at that point), and so is ``policy`` (after it); the other keys are
    scalars, checked by ``StoreConfig`` itself (``_store_problems``) so that the YAML and the
    simulator refuse the same values."""

    capacity_gb: Annotated[
        list[NonNegFloat],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
        AfterValidator(_finite_capacity),
    ] = Field(description="the store's KV capacity in GB (1e9 bytes); 0: no store")
    policy: Annotated[
        list[StrictStr],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ] = Field(
        default=[STORE_DEFAULTS["policy"]],
        description="its eviction policy: any online policy (those that read a conversation "
        "read the store's view of a chunk's; not belady or cost-belady) or module:Class, or a "
        "list of them (a grid axis)",
    )
    bandwidth_gb_s: float = Field(
        default=STORE_DEFAULTS["bandwidth_gb_s"],
        description="each replica's link to the store, GB/s",
    )
    latency_us: float = Field(
        default=STORE_DEFAULTS["latency_us"],
        description="before a load's first byte arrives, microseconds",
    )
    chunk_tokens: StrictInt = Field(
        default=STORE_DEFAULTS["chunk_tokens"],
        description="tokens per stored object (a whole number of pages)",
    )
    write: Annotated[
        list[StrictStr],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ] = Field(
        default=[STORE_DEFAULTS["write"]],
        description="when a replica writes to the store: completion (a completed turn's context), "
        "eviction (the whole chunks it holds as their KV is dropped from its last tier) or both, "
        "or a list of them (a grid axis)",
    )

    wrap_lists = field_validator("capacity_gb", "policy", "write", mode="before")(_as_list)

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if any(":" in p for p in v):  # a user's policy, found as the policies' are (checked in
            add_user_import_dirs((info.context or {}).get("base_dir"))  # _store_problems)
        return v

    def points(self) -> list[tuple[float, str | None, str | None]]:
        """The store axes' values, capacity, policy, then write (the last varies fastest): one
        point of capacity 0 (no store, so no policy and no writes: None), and every policy and
        write at each other capacity."""
        return [
            (gb, policy, write)
            for gb in self.capacity_gb
            for policy in ([None] if gb == 0 else self.policy)
            for write in ([None] if gb == 0 else self.write)
        ]

    def config(
        self, capacity_gb: float, policy: str | None = None, write: str | None = None
    ) -> StoreConfig | None:
        """The store of one grid point: None at capacity 0 (no store); ``policy`` and ``write``:
        one of their axes' values (None: the first)."""
        from sim.cluster.store import StoreConfig  # here, as ClusterConfig is

        if capacity_gb == 0:
            return None
        return StoreConfig(
            capacity_gb=capacity_gb,
            policy=self.policy[0] if policy is None else policy,
            write=self.write[0] if write is None else write,
            **self.model_dump(exclude={"capacity_gb", "policy", "write"}),
        )


# DisaggConfig's defaults, written here so that loading an experiment without disaggregation does
# not import sim.cluster (tests/experiments/test_exp_disagg.py holds them equal).
DISAGG_DEFAULTS: dict[str, Any] = {
    "bandwidth_gb_s": 50.0,
    "latency_us": 20.0,
    "layerwise": True,
    "link": "network",
}


class DisaggSpec(_Strict):
    """Prefill/decode disaggregation (``sim.cluster.disagg``): the first ``prefill_replicas``
    replicas prefill, the rest decode; ``prefill_replicas`` is a grid axis (0: colocated at that
    point); the link's keys are scalars, checked by ``DisaggConfig`` itself
    (``_disagg_problems``) so that the YAML and the simulator refuse the same values."""

    prefill_replicas: Annotated[
        list[NonNegInt], Field(min_length=1), AfterValidator(_no_duplicates)
    ] = Field(description="replicas in the prefill pool (the first ones); 0: colocated")
    bandwidth_gb_s: float = Field(
        default=DISAGG_DEFAULTS["bandwidth_gb_s"],
        description="the link between a prefill and a decode replica, GB/s",
    )
    latency_us: float = Field(
        default=DISAGG_DEFAULTS["latency_us"],
        description="before a transfer's first byte arrives, microseconds",
    )
    layerwise: StrictBool = Field(
        default=DISAGG_DEFAULTS["layerwise"],
        description="a decode part's first step runs layer l once its KV is in (false: once all "
        "of it is)",
    )
    link: StrictStr = Field(
        default=DISAGG_DEFAULTS["link"],
        description="network (bandwidth_gb_s, latency_us: RDMA, NVLink) or pcie-host (a copy to "
        "the sender's host, then one to the receiving GPU, priced by the cost model)",
    )

    wrap_lists = field_validator("prefill_replicas", mode="before")(_as_list)

    def config(self, prefill_replicas: int) -> DisaggConfig | None:
        """The disaggregation of one grid point: None at 0 prefill replicas (colocated)."""
        from sim.cluster.disagg import DisaggConfig  # here, as ClusterConfig is

        if prefill_replicas == 0:
            return None
        return DisaggConfig(
            prefill_replicas=prefill_replicas,
            **self.model_dump(exclude={"prefill_replicas"}),
        )


def _finite_delays(v: list[float]) -> list[float]:
    for i, x in enumerate(v):
        if not math.isfinite(x):
            raise ValueError(f"entry {i}: must be a finite number >= 0, got {x!r}")
    return v


class KVEventsSpec(_Strict):
    """How the router hears of the replicas' KV (``sim.cluster.kvevents``): ``delay_ms``, how long
    after a replica's KV changes the router knows (0: at once); a list is a grid axis."""

    delay_ms: Annotated[
        list[NonNegFloat],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
        AfterValidator(_finite_delays),
    ] = Field(
        default=[0.0],
        description="the router sees each replica's KV as it was this long ago (its in-flight "
        "counts are its own, not delayed), ms; 0: at once; a list of them is a grid axis",
    )

    wrap_lists = field_validator("delay_ms", mode="before")(_as_list)


def _check_group_policy(value: str, info: ValidationInfo) -> str:
    """A group's policy: a name the policy axis takes, and online (a cluster runs no offline
    bound)."""
    from sim.policies import policy_class

    check_policy_name(value, (info.context or {}).get("base_dir"))
    if policy_class(value).offline:
        raise ValueError(
            f"{value!r} reads each session's next access, which depends on where the router "
            "sends it: a group's policy must be an online one"
        )
    return value


class GroupSpec(_Strict):
    """A group of replicas of one kind (``sim.cluster.groups``): each key it leaves out is the
    grid point's own."""

    replicas: PosInt = Field(default=1, description="replicas of this kind (in order)")
    hardware: Annotated[StrictStr, AfterValidator(_check_hardware)] | None = Field(
        default=None,
        description="their GPU (a GPU name, a committed profile or a profile file, as the "
        "top-level hardware); none: the point's",
    )
    gpu_kv_gb: PosFloat | None = Field(
        default=None, description="each one's GPU KV in GiB; none: memory.gpu_kv_gb"
    )
    cpu_kv_gb: NonNegFloat | None = Field(
        default=None, description="each one's CPU KV in GiB; none: memory.cpu_kv_gb"
    )
    policy: Annotated[StrictStr, AfterValidator(_check_group_policy)] | None = Field(
        default=None, description="their eviction policy (online); none: the point's"
    )
    tp: PosInt | None = Field(
        default=None,
        description="their tensor-parallel degree (gpu_kv_gb is the whole group's, as the "
        "top-level tp takes it); none: the point's",
    )

    def config(self) -> Any:
        from sim.cluster.groups import ReplicaGroup  # here, as ClusterConfig is

        return ReplicaGroup(**self.model_dump())


# ``cluster.groups``: one fleet (a list of group mappings) or a grid axis of fleets (a list of such
# lists), told apart by their first entry's type; the tags are left out of the key paths in
# messages (``format_loc``).
_FLEET, _FLEETS = "<one fleet>", "<fleets>"
_Fleet = Annotated[list[GroupSpec], Field(min_length=1)]


def _fleet_form(v: Any) -> str:
    return _FLEETS if isinstance(v, list) and v and isinstance(v[0], list) else _FLEET


class ClusterSpec(_Strict):
    """Replicas behind a router (``sim.cluster``): ``replicas`` (or a list of fleets of
    ``groups``) and ``router`` are grid axes, and with a ``store``, its ``capacity_gb`` and
    ``policy``, with a ``disaggregation``, its ``prefill_replicas``."""

    replicas: Annotated[list[PosInt], Field(min_length=1), AfterValidator(_no_duplicates)] = Field(
        default=[1],
        description="kvsim engines serving the trace, each with the memory section's KV",
    )
    router: Annotated[
        list[Annotated[StrictStr, AfterValidator(_check_router)]],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ] = Field(
        default=["round-robin"],
        description="which replica a turn goes to: round-robin, least-loaded, session-affinity, "
        "kv-aware, least-time (kv-aware's cost at each replica's prefill speed), or module:Class "
        "(a sim.cluster.Router)",
    )
    router_params: dict[StrictStr, dict[StrictStr, Any]] = Field(
        default_factory=dict,
        description="router name -> its parameters (kv-aware: prefill_weight, cpu_hit_value, "
        "load_weight; least-time: those, speed_tokens, decode_weight and decode_tokens; "
        "session-affinity: overload)",
    )

    store: StoreSpec | None = Field(
        default=None,
        description="a shared KV store behind every replica (capacity_gb and policy are grid "
        "axes; capacity 0: no store); none: no store",
    )
    disaggregation: DisaggSpec | None = Field(
        default=None,
        description="prefill and decode pools (prefill_replicas is a grid axis; 0: colocated); "
        "none: colocated",
    )
    kv_events: KVEventsSpec | None = Field(
        default=None,
        description="how late the router applies the replicas' KV events: delay_ms (0: at once); "
        "none: at once",
    )
    groups: (
        Annotated[
            Annotated[_Fleet, Tag(_FLEET)]
            | Annotated[
                Annotated[list[_Fleet], Field(min_length=1), AfterValidator(_no_duplicates)],
                Tag(_FLEETS),
            ],
            Discriminator(_fleet_form),
        ]
        | None
    ) = Field(
        default=None,
        description="groups of replicas with their own hardware, gpu_kv_gb, cpu_kv_gb, policy and tp, "
        "in replica order (replicas: their count, summing to cluster.replicas); a list of such "
        "lists is a grid axis of fleets; none: every replica the point's",
    )

    wrap_lists = field_validator("replicas", "router", mode="before")(_as_list)

    @property
    def groups_axis(self) -> bool:
        """``groups`` is a grid axis of fleets (a list of lists of groups)."""
        return bool(self.groups) and isinstance(self.groups[0], list)  # type: ignore[index]

    def fleets(self) -> list[list[GroupSpec]]:
        """The values of the groups axis (each a fleet: its groups in replica order); [] without
        a groups section."""
        groups: Any = self.groups
        if groups is None:
            return []
        return groups if self.groups_axis else [groups]

    def sizes(self) -> list[tuple[int, list[GroupSpec] | None]]:
        """The replicas axis as (count, fleet) pairs: each fleet with its sum, or each
        cluster.replicas value with no fleet (None)."""
        fleets = self.fleets()
        if fleets:
            return [(sum(g.replicas for g in f), f) for f in fleets]
        return [(r, None) for r in self.replicas]

    def store_points(
        self,
    ) -> list[tuple[float, str | None, str | None]] | list[tuple[None, None, None]]:
        """The values of the store's capacity, policy and write axes, as (capacity, policy,
        write) triples (``StoreSpec.points``); [(None, None, None)] without a store section."""
        return self.store.points() if self.store is not None else [(None, None, None)]

    def delays(self) -> list[float] | list[None]:
        """The values of the kv_events.delay_ms axis; [None] without a kv_events section."""
        return list(self.kv_events.delay_ms) if self.kv_events is not None else [None]

    def prefill_counts(self) -> list[int] | list[None]:
        """The values of the prefill_replicas axis; [None] without a disaggregation section."""
        d = self.disaggregation
        return list(d.prefill_replicas) if d is not None else [None]

    def config(
        self,
        router: str,
        replicas: int,
        store_gb: float | None = None,
        prefill_replicas: int | None = None,
        store_policy: str | None = None,
        fleet: list[GroupSpec] | None = None,
        store_write: str | None = None,
        kv_delay_ms: float | None = None,
    ) -> ClusterConfig:
        """The ``sim.cluster`` configuration of one grid point (its parameters in name order, so a
        point's checkpoint key does not depend on the order they were written in); a store of
        ``store_gb`` GB (None or 0: none) under ``store_policy``, written at ``store_write``
        (None: the first of cluster.store.policy, of cluster.store.write); ``prefill_replicas`` of
        them prefill (None or 0: colocated); ``fleet``: its groups (None: every replica the
        point's); ``kv_delay_ms``: the router's KV events' delay (None: the first of
        cluster.kv_events.delay_ms, 0 without that section)."""
        from sim.cluster.run import ClusterConfig  # here: a run without a cluster never imports it

        params = dict(sorted(self.router_params.get(router, {}).items()))
        store = (
            None
            if self.store is None or not store_gb
            else self.store.config(store_gb, store_policy, store_write)
        )
        if kv_delay_ms is None:
            kv_delay_ms = self.kv_events.delay_ms[0] if self.kv_events is not None else 0.0
        d = self.disaggregation
        disagg = None if d is None or not prefill_replicas else d.config(prefill_replicas)
        return ClusterConfig(
            replicas=replicas,
            router=router,
            router_params=params,
            store=store,
            disaggregation=disagg,
            kv_events_delay_ms=kv_delay_ms,
            groups=tuple(g.config() for g in fleet or ()),
        )


def _targets_off(v: Any) -> Any:
    """``targets: none`` (or ``off``) as null: no judging."""
    if isinstance(v, str):
        if v.strip().lower() in ("none", "off"):
            return None
        raise ValueError(f"expected a mapping of targets ({', '.join(RULES)}) or none, got {v!r}")
    return v


# ``tp``: a list of degrees, or a mapping of model -> degrees. The union's two forms are told apart
# by their type (a tagged union), so an error names the entry, not both forms; the tags are left
# out of the key paths in messages (``format_loc``).
_TP_LIST, _TP_MAP = "<tp list>", "<tp mapping>"
_TpList = Annotated[
    list[PosInt],
    BeforeValidator(_as_list),
    Field(min_length=1),
    AfterValidator(_no_duplicates),
]


class Experiment(_Strict):
    """A validated experiment. Build it with ``load_experiment``; expand it with ``grid()``."""

    name: StrictStr = Field(description="names the results folder (results/<name>)")
    trace: Annotated[list[TraceSpecModel], Field(min_length=1)]
    model: Annotated[
        list[Annotated[StrictStr, AfterValidator(_check_model)]],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ]
    hardware: Annotated[
        list[Annotated[StrictStr, AfterValidator(_check_hardware)]],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ]
    tp: Annotated[
        Annotated[_TpList, Tag(_TP_LIST)] | Annotated[dict[StrictStr, _TpList], Tag(_TP_MAP)],
        Discriminator(lambda v: _TP_MAP if isinstance(v, dict) else _TP_LIST),
    ] = Field(
        default=[1],
        description="tensor-parallel degree: GPUs sharing each layer (Megatron); a list is a grid "
        "axis, a mapping gives each model its own value or list",
    )
    memory: MemorySpec
    engine: EngineSpec = EngineSpec()
    policies: Annotated[
        list[Annotated[StrictStr, AfterValidator(_check_policy)]],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ]
    seeds: Annotated[list[StrictInt], Field(min_length=1), AfterValidator(_no_duplicates)] = [0]
    budgets: Annotated[
        list[Annotated[BudgetSpec, AfterValidator(_check_budget)]],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ] = [BudgetSpec()]
    sparse: Annotated[
        list[Annotated[SparseSpec, AfterValidator(_check_sparse)]],
        Field(min_length=1),
        AfterValidator(_no_duplicates),
    ] = [SparseSpec()]
    executor: ExecutorSpec = ExecutorSpec()
    targets: Annotated[TargetsSpec | None, BeforeValidator(_targets_off)] = Field(
        default=TargetsSpec(),
        description="thresholds each grid point is judged against (pass_* columns); none: no "
        "judging",
    )
    slo: SloSpec = Field(
        default=SloSpec(),
        description="per-turn TTFT and TPOT objectives of the SLO attainment and goodput columns",
    )
    cluster: ClusterSpec | None = Field(
        default=None,
        description="replicas behind a router (router, replicas or groups, store.capacity_gb "
        "and disaggregation.prefill_replicas are grid axes); none: one engine",
    )
    figures: FiguresSpec = Field(
        default=FiguresSpec(),
        description="the figures' file format (png, pdf, svg, or a list); kvsim run --format "
        "overrides it",
    )
    baseline_infinite: StrictBool = Field(
        False,
        description="also run every point with gpu_kv_gb=inf to measure the throughput impact",
    )
    debug: StrictBool = False
    step_log: StrictBool = Field(
        False,
        description="write steps.jsonl: one line per engine step of every grid point "
        "(docs/semantics.md, the step log); `kvsim run --step-log` sets it",
    )

    _source: str = PrivateAttr(default="<memory>")
    wrap_lists = field_validator(
        "trace", "model", "hardware", "policies", "seeds", "budgets", "sparse", mode="before"
    )(_as_list)

    def tp_for(self, model: str) -> list[int]:
        """The tensor-parallel degrees ``model`` runs at: ``tp`` itself, or its entry when ``tp``
        maps models to degrees (every model has one: ``_tp_problems``)."""
        return self.tp.get(model, [1]) if isinstance(self.tp, dict) else self.tp

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                f"{v!r}: use letters, digits, '.', '_' or '-' (it names the results folder)"
            )
        return v

    @property
    def source(self) -> str:
        """The YAML file this experiment came from (for error messages)."""
        return self._source

    def with_overrides(self, **updates: Any) -> Experiment:
        """A copy with top-level fields replaced (e.g. executor, debug), keeping the source."""
        new = self.model_copy(update=updates)
        new._source = self._source
        return new

    def resolved(self) -> dict[str, Any]:
        """The experiment with defaults filled in, paths resolved and aliases of registered models
        and GPUs replaced by their names (``llama3-8b`` -> ``Llama-3-8B``, ``h100`` -> ``h100-sxm``;
        a name in another case is kept as written). Plain data, YAML-dumpable. The grid's labels
        keep what the YAML wrote."""
        out = self.model_dump(mode="python", exclude_none=True)
        models = {m: _registered_model(m) for m in self.model}
        out["model"] = [models[m] for m in self.model]
        if isinstance(out.get("tp"), dict):
            out["tp"] = {models.get(k, k): v for k, v in out["tp"].items()}
        out["hardware"] = [_registered_gpu(h) for h in self.hardware]
        out["targets"] = self.thresholds()  # every key, null ones too (exclude_none drops them)
        out["slo"] = self.slo.model_dump()  # the same: a null bound is shown
        return out

    def thresholds(self) -> dict[str, float | None] | None:
        """The targets (``experiments.targets``) as target -> threshold (None: dropped), or None
        when judging is off."""
        return None if self.targets is None else self.targets.thresholds()

    def trace_specs(self) -> list[TraceSpec]:
        labels = [t.kind + (f":{Path(t.path).name}" if t.path else "") for t in self.trace]
        if len(set(labels)) < len(labels):
            labels = [f"{lab}[{i}]" for i, lab in enumerate(labels)]
        wheres = (
            ["trace"] if len(self.trace) == 1 else [f"trace[{i}]" for i in range(len(self.trace))]
        )
        return [
            TraceSpec.from_model(t, lab, w, scale)
            for t, lab, w in zip(self.trace, labels, wheres)
            for scale in t.time_scales()
        ]

    def grid(self) -> list[GridPoint]:
        """Every run of the experiment, in the module's documented order."""
        opts = self.engine.config_options()
        m = self.memory
        slo = self.slo.config()
        # gpu_kv_gb, then the cluster's router, replicas (or fleet of groups), store capacity,
        # policy and write (one point of capacity 0: no store, no policy, no writes), prefill
        # replicas and the KV events' delay (without a cluster section: one value, no cluster),
        # as one axis of the product (the documented order)
        clusters = (
            [
                (router, replicas, gb, prefill, policy, fleet, write, delay)
                for router, (replicas, fleet), (gb, policy, write), prefill, delay in (
                    itertools.product(
                        self.cluster.router,
                        self.cluster.sizes(),  # replicas, or each fleet of groups with its count
                        self.cluster.store_points(),
                        self.cluster.prefill_counts(),
                        self.cluster.delays(),
                    )
                )
            ]
            if self.cluster
            else [None]
        )
        gpu_clusters = list(itertools.product(m.gpu_kv_gb, clusters))
        points = []
        for (
            trace,
            model,
            hw,
            tp,
            kind,
            unit,
            pipe,
            budget,
            sparse,
            bt,
            cpu,
            policy,
            (gpu, cluster_axes),
            seed,
        ) in (
            (trace, model, hw, tp, *rest)
            for trace, model, hw in itertools.product(self.trace_specs(), self.model, self.hardware)
            for tp in self.tp_for(model)  # each model its own degrees when tp maps them
            for rest in itertools.product(
                self.engine.kind,
                m.evict_unit,
                self.engine.pipelining,
                self.budgets,
                self.sparse,
                m.block_tokens,
                m.cpu_kv_gb,
                self.policies,
                gpu_clusters,
                self.seeds,
            )
        ):
            if sparse.kind != "off" and cpu == 0:
                continue  # decode from CPU memory needs a CPU tier: no such run
            mem = MemoryConfig(
                gpu_kv_gb=gpu,
                cpu_kv_gb=cpu,
                block_tokens=bt,
                evict_unit=unit,
                prefix_sharing=m.prefix_sharing,
            )
            engine = EngineConfig(**opts, kind=kind, pipelining=pipe)
            cluster = (
                None
                if self.cluster is None or cluster_axes is None
                else self.cluster.config(*cluster_axes)
            )
            points.append(
                GridPoint(
                    self.name,
                    trace,
                    model,
                    hw,
                    mem,
                    engine,
                    policy,
                    seed,
                    budget.config(),
                    sparse.config(),
                    tp,
                    self.step_log,
                    slo,
                    cluster,
                    None if cluster_axes is None else cluster_axes[2],
                    None if cluster_axes is None else cluster_axes[3],
                    None if cluster_axes is None else cluster_axes[7],
                )
            )
        return points

    def baseline_points(self) -> list[GridPoint]:
        """With ``baseline_infinite``: each grid point with gpu_kv_gb = inf, once, unless the grid
        already holds it. Empty otherwise."""
        if not self.baseline_infinite:
            return []
        grid = self.grid()
        out: list[GridPoint] = []
        for p in grid:
            b = p.infinite_baseline()
            if b not in grid and b not in out:
                out.append(b)
        return out


# ---------------------------------------------------------------------------------------------
# Grid points


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """One trace of the grid: what ``traces.load_trace`` gets (``to_dict()``) and a short label."""

    kind: str
    options_json: str  # every option but kind, as canonical JSON (hashable, picklable)
    label: str
    where: str = dataclasses.field(default="trace", compare=False)  # key path in the YAML

    @classmethod
    def from_model(
        cls, t: TraceSpecModel, label: str, where: str = "trace", time_scale: Any = None
    ) -> TraceSpec:
        """``time_scale``: the value of the time_scale axis this spec runs at (None: t's own,
        which must then be a single value)."""
        opts = {k: v for k, v in t.model_dump().items() if k != "kind" and v is not None}
        if time_scale is not None:
            opts["time_scale"] = time_scale
        if isinstance(opts.get("time_scale"), list):
            raise ValueError(f"{where}.time_scale is a list: give the value this spec runs at")
        return cls(t.kind, json.dumps(opts, sort_keys=True, default=str), label, where)

    @property
    def time_scale(self) -> float:
        """The factor on arrival and think times this spec loads with (1: as recorded)."""
        return float(json.loads(self.options_json).get("time_scale", 1.0))

    def at_time_scale(self, time_scale: float) -> TraceSpec:
        """This spec at another value of the time_scale axis."""
        opts = {**json.loads(self.options_json), "time_scale": time_scale}
        return dataclasses.replace(self, options_json=json.dumps(opts, sort_keys=True, default=str))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **json.loads(self.options_json)}

    @property
    def key(self) -> str:
        """Cache key: equal for equal specs."""
        return f"{self.kind}:{self.options_json}"


LABEL_COLUMNS: tuple[str, ...] = (
    "name",
    "policy",
    "engine",
    "model",
    "hardware",
    "tp",
    "trace",
    "time_scale",
    "gpu_kv_gb",
    "cpu_kv_gb",
    "block_tokens",
    "evict_unit",
    "pipelining",
    "budget",
    "sparse",
    "seed",
)
# The labels of a point with a cluster (an experiment with a cluster section; groups only with a
# cluster.groups section, store_gb, store_policy and store_write only with a cluster.store section,
# prefill_replicas only with a cluster.disaggregation section, kv_delay_ms only with a
# cluster.kv_events section), before seed.
CLUSTER_LABEL_COLUMNS: tuple[str, ...] = (
    "router",
    "replicas",
    "groups",
    "store_gb",
    "store_policy",
    "store_write",
    "prefill_replicas",
    "kv_delay_ms",
)
# store_policy (and store_write) where a point has no store (capacity 0)
NO_STORE_POLICY = "none"


def store_policies_vary(summary: Any) -> bool:
    """summary.csv (a DataFrame) names two store policies or more in ``store_policy``. A point
    without a store (``none``) is no policy of its own: ``store_gb`` tells it apart already, so a
    run of one store policy at capacities 0 and 64 does not vary its store policy."""
    if "store_policy" not in summary:
        return False
    return len(set(summary["store_policy"].dropna().map(str)) - {NO_STORE_POLICY}) > 1


# Every label column there can be, in summary.csv's order (a run has the cluster's or not).
ALL_LABEL_COLUMNS: tuple[str, ...] = (
    *LABEL_COLUMNS[: LABEL_COLUMNS.index("seed")],
    *CLUSTER_LABEL_COLUMNS,
    "seed",
)


@dataclass(frozen=True, slots=True)
class GridPoint:
    """One simulation run. ``model`` and ``hardware`` are names or absolute file paths."""

    name: str
    trace: TraceSpec
    model: str
    hardware: str
    memory: MemoryConfig
    engine: EngineConfig
    policy: str
    seed: int
    budget: BudgetConfig = dataclasses.field(default_factory=BudgetConfig)
    sparse: SparseConfig = dataclasses.field(default_factory=SparseConfig)
    tp: int = 1  # tensor-parallel degree: the memory is the group's, the prices one GPU's
    step_log: bool = False  # keep the run's step log (steps.jsonl)
    slo: Slo = DEFAULT_SLO  # the thresholds of the summary's SLO columns (not a grid label)
    cluster: ClusterConfig | None = None  # replicas behind a router; None: one engine
    # the cluster.store.capacity_gb axis' value (0: no store at this point); None: no such section
    # (the cluster.store.policy axis' value is the store's: cluster.store.policy)
    store_gb: float | None = None
    # the cluster.disaggregation.prefill_replicas axis' value (0: colocated at this point); None:
    # no such section
    prefill_replicas: int | None = None
    # the cluster.kv_events.delay_ms axis' value (the cluster's own); None: no such section
    kv_delay_ms: float | None = None

    def labels(self) -> dict[str, Any]:
        """The grid columns of this point (LABEL_COLUMNS order, with the cluster's router and
        replicas, the store's capacity, policy and write when the experiment has a cluster.store
        section, the prefill pool's size when it has a cluster.disaggregation section and the KV
        events' delay when it has a cluster.kv_events section, before seed when it has a
        cluster) for summary.csv and the ledgers."""
        labels = {
            "name": self.name,
            "policy": self.policy,
            "engine": self.engine.kind,
            "model": _short(self.model),
            "hardware": _short(self.hardware),
            "tp": self.tp,
            "trace": self.trace.label,
            "time_scale": self.trace.time_scale,
            "gpu_kv_gb": float(self.memory.gpu_kv_gb),
            "cpu_kv_gb": float(self.memory.cpu_kv_gb),
            "block_tokens": self.memory.block_tokens,
            "evict_unit": self.memory.evict_unit,
            "pipelining": self.engine.pipelining,
            "budget": self.budget.label,
            "sparse": self.sparse.label,
        }
        if self.cluster is not None:
            labels |= {"router": self.cluster.router, "replicas": self.cluster.replicas}
            if self.cluster.groups:  # a fleet of groups (``sim.cluster.groups.fleet_label``)
                from sim.cluster.groups import fleet_label

                labels["groups"] = fleet_label(self.cluster.groups, self.hardware, _short)
            if self.store_gb is not None:
                store = self.cluster.store
                labels["store_gb"] = float(self.store_gb)
                labels["store_policy"] = NO_STORE_POLICY if store is None else store.policy
                labels["store_write"] = NO_STORE_POLICY if store is None else store.write
            if self.prefill_replicas is not None:
                labels["prefill_replicas"] = int(self.prefill_replicas)
            if self.kv_delay_ms is not None:
                labels["kv_delay_ms"] = float(self.kv_delay_ms)
        return labels | {"seed": self.seed}

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.labels().items() if k != "name")

    def infinite_baseline(self) -> GridPoint:
        return dataclasses.replace(
            self, memory=dataclasses.replace(self.memory, gpu_kv_gb=math.inf)
        )


def _registered_model(value: str) -> str:
    """The registered name of a model alias; a path, or the name in any case, as written."""
    import costmodels

    if os.path.isabs(value):
        return value
    name = costmodels.get_model(value).name
    return value if value.strip().lower() == name.lower() else name


def _registered_gpu(value: str) -> str:
    """The registered GPU name of an alias (its analytic profile); a committed profile's name, a
    path, or the name in any case, as written."""
    from costmodels.hardware import find_hardware

    if os.path.isabs(value):
        return value
    hw = find_hardware(value.strip().lower().removeprefix("analytic-"))
    if hw is None:
        return value
    return value if value.strip().lower() == hw.name.lower() else hw.name


def _short(name_or_path: str) -> str:
    return Path(name_or_path).stem if os.path.isabs(name_or_path) else name_or_path


# ---------------------------------------------------------------------------------------------
# Loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key written twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | os.PathLike) -> Any:
    """Parse a YAML file; syntax errors become ConfigError with the line and column."""
    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{shown}: no such file", file=shown) from None
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read: {exc.strerror}", file=shown) from None
    except UnicodeDecodeError as exc:
        head = exc.object[: exc.start]
        line = head.count(b"\n") + 1
        column = exc.start - (head.rfind(b"\n") + 1) + 1
        raise ConfigError(
            f"{shown}: not UTF-8 text (line {line}, column {column}: byte "
            f"0x{exc.object[exc.start]:02x}); save it as UTF-8",
            file=shown,
        ) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{shown}: {where}YAML syntax error: {problem}", file=shown) from None


def parse_experiment(
    data: Any,
    source: str = "<memory>",
    base_dir: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
) -> Experiment:
    """Validate already-parsed YAML data. ``source`` names the file in errors; ``data_dir`` is the
    shared data folder that ``${KVSIM_SHARED_DATA}`` in a path stands for (default: the
    environment variable, else ../shared/data beside the checkout)."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(
            f"{source}: the experiment must be a mapping of keys, got {got}", file=source
        )
    try:
        exp = Experiment.model_validate(
            data,
            context={
                "base_dir": str(base_dir) if base_dir else None,
                "data_dir": str(data_dir) if data_dir is not None else None,
            },
        )
    except ValidationError as exc:
        lines, keys = [], []
        for err in exc.errors(include_url=False):
            key = format_loc(err["loc"], data)
            keys.append(key)
            lines.append(f"{source}: {key}: {_message(err)}")
        raise ConfigError("\n".join(lines), file=source, key=keys[0] if keys else None) from None
    problems = _impossible_combinations(exp)
    if problems:
        keys = [format_loc(loc, data) for loc, _ in problems]
        raise ConfigError(
            "\n".join(f"{source}: {k}: {msg}" for k, (_, msg) in zip(keys, problems)),
            file=source,
            key=keys[0],
        )
    exp._source = source
    return exp


def _full_kv_problems(exp: Experiment, why: str) -> list[tuple[tuple[str | int, ...], str]]:
    """The budgets and sparse modes an engine that keeps full KV and decodes from the GPU (a
    vLLM engine, a cluster) cannot run, each at its key."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    for i, b in enumerate(exp.budgets):
        if b.kind != "full":
            out.append((("budgets", i), why + "keeps full KV: give budgets only kind full"))
    for i, sp in enumerate(exp.sparse):
        if sp.kind != "off":
            out.append((("sparse", i), why + "has no CPU offload decode: give sparse kind off"))
    return out


def _impossible_combinations(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """Values valid one by one that no run can use together: (pydantic-style loc, message).

    * A GPU (or non-zero CPU) KV capacity smaller than one page of some model and page size holds
      nothing: every turn would be rejected (or the CPU tier would silently do nothing).
    * ``engine.max_batch_tokens`` below ``engine.max_running``: every running sequence decodes one
      token per iteration, so the batch could not hold them (vLLM refuses this too).
    * A model that cannot be split over ``tp`` GPUs, or whose per-GPU weights and KV share exceed
      one GPU's memory (``_tp_problems``).
    """
    import costmodels

    out = _tp_problems(exp)
    m = exp.memory
    page_bytes = [
        # A page of the group's pool: tp shards (a replicated KV head counts on every GPU).
        (costmodels.get_model(model).kv_bytes_per_token_over(tp) * bt, bt, model, tp)
        for model in exp.model
        for tp in exp.tp_for(model)
        if _splits(model, tp)
        for bt in m.block_tokens
    ]
    biggest, bt, model, tp = max(page_bytes, default=(0, 0, "", 1))
    page = f"one page of {bt} tokens of {_short(model)} takes {_size(biggest)}" + (
        f" over its {tp} GPUs" if tp > 1 else ""
    )
    for field_name, values in (("gpu_kv_gb", m.gpu_kv_gb), ("cpu_kv_gb", m.cpu_kv_gb)):
        for i, gb in enumerate(values):
            if gb == 0 or math.isinf(gb) or MemoryConfig.capacity_bytes(gb) >= biggest:
                continue
            hint = (
                "; use 0 for no CPU tier"
                if field_name == "cpu_kv_gb"
                else "; every turn would be rejected"
            )
            out.append((("memory", field_name, i), f"{gb:g} GiB holds no page: {page}{hint}"))
    for i, b in enumerate(exp.budgets):
        cap = b.config().capacity
        for model in exp.model:
            window = costmodels.get_model(model).max_context_tokens
            if cap is not None and window is not None and cap > window:
                msg = (
                    f"keeps sink + window + budget = {cap} tokens per layer, more than the "
                    f"context window of {_short(model)} ({window})"
                )
                out.append((("budgets", i), msg))
    e = exp.engine
    if e.max_batch_tokens < e.max_running:
        msg = (
            f"must be >= engine.max_running ({e.max_running}), got {e.max_batch_tokens}: "
            "each running sequence decodes one token per iteration"
        )
        out.append((("engine", "max_batch_tokens"), msg))
    out += _combination_rules(exp)
    out += _vllm_problems(exp)
    out += _cluster_problems(exp)
    return out


def _cluster_problems(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """What a ``cluster`` section cannot run with, and router parameters its routers refuse."""
    c = exp.cluster
    if c is None:
        return []
    from sim.policies import policy_class

    out: list[tuple[tuple[str | int, ...], str]] = []
    why = "a cluster (the cluster section) "
    for i, kind in enumerate(exp.engine.kind):
        if kind != "kvsim":
            out.append((("engine", "kind", i), why + "runs engine.kind kvsim replicas only"))
    out += _full_kv_problems(exp, why)
    for i, name in enumerate(exp.policies):
        if policy_class(name).offline:
            out.append(
                (
                    ("policies", i),
                    f"{name!r} reads each session's next access, which depends on where the "
                    "router sends it: an offline bound runs without a cluster section only",
                )
            )
    if exp.step_log:
        out.append((("step_log",), why + "writes no step log"))
    out += _router_param_problems(c)
    out += _groups_problems(c)
    out += _group_fit_problems(exp)
    out += _groups_cross_problems(exp)
    out += _store_problems(exp)
    out += _disagg_problems(exp)
    return out


def _groups_problems(c: ClusterSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """``cluster.replicas`` beside ``cluster.groups``: one value (left out: each fleet's sum),
    which every fleet's groups must sum to."""
    if c.groups is None or "replicas" not in c.model_fields_set:
        return []
    if len(c.replicas) > 1:
        msg = "with cluster.groups give one value, or none (each fleet's replicas are its sum)"
        return [(("cluster", "replicas"), msg)]
    out: list[tuple[tuple[str | int, ...], str]] = []
    for i, fleet in enumerate(c.fleets()):
        total = sum(g.replicas for g in fleet)
        if total != c.replicas[0]:
            where: tuple[str | int, ...] = ("cluster", "groups", *((i,) if c.groups_axis else ()))
            msg = f"the groups' replicas sum to {total}, but cluster.replicas is {c.replicas[0]}"
            out.append((where, msg))
    return out


def _group_fit_problems(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """A group's per-GPU weights plus its GPU KV beyond its GPU's memory, at each model and tp,
    as ``_tp_problems`` checks the point's (a group that sets neither hardware nor gpu_kv_gb is
    the point's, checked there)."""
    import costmodels
    from costmodels.tensor_parallel import fit_problem

    c = exp.cluster
    if c is None or c.groups is None:
        return []
    finite = [gb for gb in exp.memory.gpu_kv_gb if not math.isinf(gb)]
    out: list[tuple[tuple[str | int, ...], str]] = []
    for i, fleet in enumerate(c.fleets()):
        for k, g in enumerate(fleet):
            if g.hardware is None and g.gpu_kv_gb is None and g.tp is None:
                continue
            where: tuple[str | int, ...] = (
                "cluster",
                "groups",
                *((i,) if c.groups_axis else ()),
                k,
            )
            kv_gb = g.gpu_kv_gb if g.gpu_kv_gb is not None else max(finite, default=math.inf)
            for hardware in [g.hardware] if g.hardware is not None else exp.hardware:
                profile = costmodels.load_profile(hardware)
                for model in exp.model:
                    spec = costmodels.get_model(model)
                    for tp in [g.tp] if g.tp is not None else exp.tp_for(model):
                        if g.tp is not None:
                            try:
                                spec.shard(tp)
                            except ValueError as exc:
                                out.append(((*where, "tp"), str(exc)))
                                continue
                        elif not _splits(model, tp):
                            continue  # _tp_problems names it
                        problem = fit_problem(spec, tp, profile, kv_gb)
                        if problem is not None:
                            fix = "choose hardware with more memory, or lower its gpu_kv_gb"
                            msg = f"{problem}, with hardware {_short(hardware)}; {fix}"
                            out.append((where, msg))
    return list(dict.fromkeys(out))


def _groups_cross_problems(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """Groups at tps whose pages differ in bytes (a tp above the model's KV heads replicates them)
    where KV crosses between replicas (a shared store or disaggregation): the run would refuse
    them (``sim.cluster.groups.check_pages_cross``); named here, at the fleet, before any run."""
    import costmodels

    c = exp.cluster
    if c is None or c.groups is None:
        return []
    crossing = []
    if c.store is not None and any(gb for gb, _, _ in c.store_points()):
        crossing.append("cluster.store")
    if c.disaggregation is not None and any(c.prefill_counts()):
        crossing.append("cluster.disaggregation")
    if not crossing:
        return []
    out: list[tuple[tuple[str | int, ...], str]] = []
    for i, fleet in enumerate(c.fleets()):
        where: tuple[str | int, ...] = ("cluster", "groups", *((i,) if c.groups_axis else ()))
        for model in exp.model:
            spec = costmodels.get_model(model)
            for point_tp in exp.tp_for(model):
                tps = sorted({g.tp if g.tp is not None else point_tp for g in fleet})
                if not all(_splits(model, tp) for tp in tps):
                    continue  # _tp_problems and _group_fit_problems name it
                per_token = {tp: spec.kv_bytes_per_token_over(tp) for tp in tps}
                if len(set(per_token.values())) > 1:
                    out.append(
                        (
                            where,
                            f"tp {tps} with {' and '.join(crossing)}: a token of "
                            f"{_short(model)} takes {sorted(set(per_token.values()))} bytes over "
                            "the groups' GPUs (a tp above the model's KV heads replicates them), "
                            "so KV could not cross between them; choose tps that split the KV "
                            "heads",
                        )
                    )
    return list(dict.fromkeys(out))


def _store_problems(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """A ``cluster.store`` as ``sim.cluster`` checks it, each problem once at the key it names:
    the store's own keys (``StoreConfig``, at each capacity under each policy), its chunk against
    each page size and its capacity against a chunk of each model (``SharedStore``). A store
    works with every eviction unit, write and prefetch mode. Capacity 0 (no store) is never
    checked against anything."""
    import costmodels

    store = exp.cluster.store if exp.cluster is not None else None
    if store is None or not any(store.capacity_gb):
        return []
    from sim.cluster.store import SharedStore

    out: list[tuple[tuple[str | int, ...], str]] = []

    def add(message: str, index: int, policy: int, write: int) -> None:
        m = re.match(r"cluster\.store\.([a-z_]+): (.*)", message, re.S)
        if m is None:
            out.append((("cluster", "store"), message))
            return
        where: tuple[str | int, ...] = ("cluster", "store", m[1])
        at = {"capacity_gb": (index,), "policy": (policy,), "write": (write,)}.get(m[1], ())
        out.append(((*where, *at), m[2]))

    pages = [
        costmodels.get_model(model).shard(tp).kv_bytes_per_token  # a replica's page, per token
        for model in exp.model
        for tp in exp.tp_for(model)
        if _splits(model, tp)
    ]
    for (i, gb), (j, policy), (k, write) in itertools.product(
        enumerate(store.capacity_gb), enumerate(store.policy), enumerate(store.write)
    ):
        if gb == 0:
            continue
        try:
            cfg = store.config(gb, policy, write)
        except ValueError as exc:
            add(str(exc), i, j, k)
            continue
        assert cfg is not None  # a capacity > 0 has a store
        for per_token, bt in itertools.product(pages, exp.memory.block_tokens):
            try:
                SharedStore(cfg, per_token * bt, bt)
            except ValueError as exc:
                add(str(exc), i, j, k)
    return list(dict.fromkeys(out))


def _disagg_problems(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """A ``cluster.disaggregation`` as ``sim.cluster`` checks it, each problem once at the key it
    names: the link's keys (``DisaggConfig``, whatever the axis holds), each prefill pool against
    each cluster size (``ClusterConfig``: a grid point needs a decode replica; the user fixes the
    grid, nothing is skipped). Disaggregation works with every eviction unit and prefetch mode.
    0 prefill replicas (colocated) conflict with nothing."""
    c = exp.cluster
    d = c.disaggregation if c is not None else None
    if c is None or d is None:
        return []
    from sim.cluster.disagg import DisaggConfig

    out: list[tuple[tuple[str | int, ...], str]] = []
    where: tuple[str | int, ...] = ("cluster", "disaggregation")
    try:  # the link's keys, on a pool of one (prefill_replicas is checked below, per value)
        DisaggConfig(1, **d.model_dump(exclude={"prefill_replicas"}))
    except ValueError as exc:
        m = re.match(r"cluster\.disaggregation\.([a-z_]+): (.*)", str(exc), re.S)
        out.append(((*where, m[1]), m[2]) if m is not None else (where, str(exc)))
    if d.link == "pcie-host":  # the cost model prices those copies: a network's numbers mislead
        for key in sorted({"bandwidth_gb_s", "latency_us"} & d.model_fields_set):
            msg = "a network link's: with link pcie-host the cost model prices the copies"
            out.append(((*where, key), msg))
    sizes = c.sizes()
    for i, n in enumerate(d.prefill_replicas):
        for j, (r, fleet) in enumerate(sizes):
            if n and n >= r:
                size = ("cluster.groups" if fleet else "cluster.replicas") + (
                    "" if len(sizes) == 1 else f"[{j}]"
                )
                size += f" ({r} replicas)" if fleet else f" = {r}"
                pool = f"{n} prefill replica" + (" leaves" if n == 1 else "s leave")
                msg = (
                    f"{pool} no decode replica with {size}: give every cluster size "
                    "more replicas than the prefill pool (0: colocated)"
                )
                out.append(((*where, "prefill_replicas", i), msg))
    return out


def _router_param_problems(c: ClusterSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Each router's parameters as its class takes them (``make_router``), at the key they name."""
    from sim.cluster.routers import make_router

    out: list[tuple[tuple[str | int, ...], str]] = []
    for name, params in c.router_params.items():
        where: tuple[str | int, ...] = ("cluster", "router_params", name)
        if name not in c.router:
            out.append((where, f"{name!r} is not one of cluster.router ({', '.join(c.router)})"))
            continue
        try:
            make_router(name, 1, params)
        except (ValueError, TypeError) as exc:
            # "cluster.router_params.KEY: why" names one parameter: the key path goes on to it
            m = re.match(r"cluster\.router_params(?:\.([^:\s]+))?: (.*)", str(exc), re.S)
            if m is None:
                out.append((where, str(exc)))
            else:
                out.append(((*where, m[1]) if m[1] else where, m[2]))
    return out


def _combination_rules(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """The engine's rules for features used together (``sim.config.combination_problems``, the
    one place they are written) on every combination of the axes the grid runs, each problem
    once, at the key it names (a sparse entry by its index)."""
    from sim.config import EngineConfig, MemoryConfig, combination_problems

    m = exp.memory
    engine = EngineConfig(**exp.engine.config_options())
    any_cpu = any(c > 0 for c in m.cpu_kv_gb)
    out: list[tuple[tuple[str | int, ...], str]] = []
    for unit, cpu, budget, (i, sp) in itertools.product(
        m.evict_unit, m.cpu_kv_gb, exp.budgets, enumerate(exp.sparse)
    ):
        if sp.kind != "off" and cpu == 0 and any_cpu:
            continue  # no such grid point (decode from CPU memory needs a CPU tier)
        mem = MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=cpu, evict_unit=unit)
        for key, why in combination_problems(mem, engine, budget.config(), sp.config()):
            loc: tuple[str | int, ...] = (
                ("sparse", i) if key == "sparse.kind" else tuple(key.split("."))
            )
            if (loc, why) not in out:
                out.append((loc, why))
    return out


def _vllm_problems(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """What an ``engine.kind: vllm-v1`` run cannot take (and vLLM-only keys without such a run)."""
    e, m = exp.engine, exp.memory
    out: list[tuple[tuple[str | int, ...], str]] = []
    if "vllm-v1" not in e.kind:
        for key in VLLM_ONLY:
            if getattr(e, key) is not None:
                out.append((("engine", key), "applies to engine.kind vllm-v1 only"))
        return out
    from sim.vllm_v1.run import check_policy  # here: a kvsim-only run does not import vLLM's model

    why = "engine.kind vllm-v1 "
    if e.chunked_prefill and "kvsim" not in e.kind:
        out.append((("engine", "chunked_prefill"), "applies to engine.kind kvsim (vllm-v1 chunks)"))
    for i, gb in enumerate(m.gpu_kv_gb):
        if math.isinf(gb):
            out.append((("memory", "gpu_kv_gb", i), why + "counts vLLM's blocks: give a size"))
    for i, unit in enumerate(m.evict_unit):
        if unit != "block":
            out.append((("memory", "evict_unit", i), why + "evicts vLLM's blocks: use block"))
    out += _full_kv_problems(exp, why)
    for i, name in enumerate(exp.policies):
        try:
            check_policy(name)
        except ValueError as exc:
            out.append((("policies", i), str(exc)))
    return out


def _splits(model: str, tp: int) -> bool:
    import costmodels

    try:
        costmodels.get_model(model).shard(tp)
    except ValueError:
        return False
    return True


def _tp_problems(exp: Experiment) -> list[tuple[tuple[str | int, ...], str]]:
    """Tensor parallelism that no run can use: a model whose heads or MLP width do not split over
    tp, a profile with no all-reduce cost at tp > 1, or per-GPU weights plus the GPU's share of the
    largest finite ``memory.gpu_kv_gb`` beyond its HBM (a profile naming no registered GPU in
    ``meta.gpu`` is not checked: its memory is unknown)."""
    import costmodels
    from costmodels.tensor_parallel import allreduce_term, fit_problem

    finite = [gb for gb in exp.memory.gpu_kv_gb if not math.isinf(gb)]
    kv_gb = max(finite, default=math.inf)
    out: list[tuple[tuple[str | int, ...], str]] = []
    if isinstance(exp.tp, dict):
        for model in exp.model:
            if model not in exp.tp:
                out.append((("tp",), f"gives no tensor-parallel degree for model {model!r}"))
        for key in exp.tp:
            if key not in exp.model:
                out.append((("tp", key), f"{key!r} is not one of this experiment's models"))
    for model in exp.model:
        spec = costmodels.get_model(model)
        for i, tp in enumerate(exp.tp_for(model)):
            where = ("tp", model, i) if isinstance(exp.tp, dict) else ("tp", i)
            try:
                spec.shard(tp)
            except ValueError as exc:
                out.append((where, str(exc)))
                continue
            for j, hardware in enumerate(exp.hardware):
                profile = costmodels.load_profile(hardware)
                if tp > 1:
                    try:
                        allreduce_term(profile)
                    except ValueError as exc:
                        out.append((("hardware", j), f"at tp={tp}: {exc}"))
                        continue
                problem = fit_problem(spec, tp, profile, kv_gb)
                if problem is not None:
                    fix = "raise tp, choose hardware with more memory, or lower memory.gpu_kv_gb"
                    out.append((where, f"{problem}, with hardware {_short(hardware)}; {fix}"))
    return list(dict.fromkeys(out))  # one line per problem, however many keys share it


def bundled_experiments() -> list[str]:
    """The experiments that ship with kvsim (``experiments/*.yaml``), by name."""
    return sorted(p.stem for p in Path(__file__).parent.glob("*.yaml"))


def resolve_config(path: str | os.PathLike) -> Path:
    """A YAML file as given, or the name of a bundled experiment (``quickstart``, ``budgets``, ...),
    so an installed kvsim runs them from any directory."""
    p = Path(path)
    if p.is_file():
        return p
    name = p.name[:-5] if p.name.endswith(".yaml") else p.name
    bundled = Path(__file__).parent / f"{name}.yaml"
    # "quickstart", or the README's "experiments/quickstart.yaml" run outside a checkout
    if p.parent in (Path("."), Path("experiments")) and bundled.is_file():
        return bundled
    raise ConfigError(
        f"{path}: no such file, and not a bundled experiment ({', '.join(bundled_experiments())})",
        file=str(path),
    )


def load_experiment(
    path: str | os.PathLike, data_dir: str | os.PathLike | None = None
) -> Experiment:
    """Read and validate an experiment YAML file (or a bundled one, by name); raise ConfigError
    naming the file and the key. ``data_dir``: the shared data folder (``parse_experiment``)."""
    path = resolve_config(path)
    data = read_yaml(path)
    return parse_experiment(
        data, source=str(path), base_dir=Path(path).resolve().parent, data_dir=data_dir
    )


def _size(nbytes: float) -> str:
    return f"{nbytes / GIB:.3g} GiB" if nbytes >= GIB else f"{nbytes / 2**20:.3g} MiB"


# ---------------------------------------------------------------------------------------------
# Error messages


def format_loc(loc: Sequence[str | int], data: Any) -> str:
    """pydantic's loc tuple as a key path: ``memory.gpu_kv_gb[2]``. An index into a value the user
    wrote as a scalar (wrapped into a one-value list) is left out."""
    out = ""
    node = data
    for seg in loc:
        if seg in (_TP_LIST, _TP_MAP, _FLEET, _FLEETS):
            continue
        if isinstance(seg, int):
            if isinstance(node, list):
                out += f"[{seg}]"
                node = node[seg] if 0 <= seg < len(node) else None
            continue
        out += f".{seg}" if out else str(seg)
        node = node.get(seg) if isinstance(node, dict) else None
    return out or "(top level)"


_TYPE_WORDS = {
    "float_type": "a number",
    "int_type": "an integer",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "model_type": "a mapping",
    "dict_type": "a mapping",
    "model_attributes_type": "a mapping",
    "int_from_float": "an integer",
    "float_parsing": "a number",
    "int_parsing": "an integer",
}

_SECTIONS: dict[tuple[str, ...], type[BaseModel]] = {
    (): Experiment,
    ("memory",): MemorySpec,
    ("engine",): EngineSpec,
    ("executor",): ExecutorSpec,
    ("budgets",): BudgetSpec,
    ("sparse",): SparseSpec,
    ("targets",): TargetsSpec,
    ("slo",): SloSpec,
    ("figures",): FiguresSpec,
    ("cluster",): ClusterSpec,
    ("cluster", "store"): StoreSpec,
    ("cluster", "disaggregation"): DisaggSpec,
}


def _message(err: ErrorDetails) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        parent = tuple(s for s in err["loc"][:-1] if isinstance(s, str))
        allowed = sorted(_SECTIONS[parent].model_fields) if parent in _SECTIONS else []
        hint = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
        return (
            "unknown key"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + (f"; allowed: {', '.join(allowed)}" if allowed else "")
        )
    if kind == "missing":
        return "required key is missing"
    if kind in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[kind]}, got {type(value).__name__} {value!r}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '?').replace(' or ', ', ')}; got {value!r}"
    bounds = {
        "greater_than": ">",
        "greater_than_equal": ">=",
        "less_than": "<",
        "less_than_equal": "<=",
    }
    if kind in bounds:
        bound = next(iter(ctx.values()))
        return f"must be {bounds[kind]} {bound:g}, got {value!r}"
    if kind == "too_short":
        return "must not be empty"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    return str(err["msg"])
