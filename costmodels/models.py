"""Model configurations: the shapes that set the bytes and FLOPs of one decoder layer.

Registered models live in ``data/models.yaml`` (each with its source); ``get_model`` also reads a
user's spec YAML with the same fields. KV bytes follow docs/semantics.md section 2.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from . import _strict as S

_REGISTRY_FILE = Path(__file__).with_name("data") / "models.yaml"


class ElementwiseOpShape(NamedTuple):
    """One elementwise kernel of a layer as the per-op form prices it (``costmodels.elementwise``)."""

    name: str  # which op of the layer, e.g. "input_norm"
    kind: str  # whose fitted constants price it: "norm", "rope", "act" or "add"
    row_bytes: int  # HBM bytes one token moves through it (read + write)
    block_threads: int  # threads of its one CTA per token; 0: a grid-stride kernel (no waves)


# CTA widths of the one-CTA-per-token kernels (vLLM's RMSNorm, SiluAndMul and rotary embedding).
_NORM_MAX_THREADS = 1024
_ACT_MAX_THREADS = 1024
_ROPE_MAX_THREADS = 512


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A dense decoder-only transformer, as far as time and memory are concerned."""

    name: str
    num_layers: int  # L
    hidden_size: int  # h
    num_heads: int  # H_q, query heads
    num_kv_heads: int  # K, key/value heads (K < H_q is GQA)
    head_dim: int  # d
    intermediate_size: int  # I, MLP width
    vocab_size: int
    dtype_bytes: int  # bytes per element of weights and KV: 2 for bf16/fp16
    gated_mlp: bool  # SwiGLU (3 matrices: gate, up, down) vs plain FFN (2: up, down; OPT)
    source: str  # where the numbers come from
    max_context_tokens: int | None = (
        None  # the context window (max_position_embeddings); None: unknown
    )

    def __post_init__(self) -> None:
        for f in (
            "num_layers",
            "hidden_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "dtype_bytes",
        ):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(
                    f"ModelSpec {self.name!r}: {f} must be a positive integer, got {v!r}"
                )
        if self.max_context_tokens is not None and (
            isinstance(self.max_context_tokens, bool)
            or not isinstance(self.max_context_tokens, int)
            or self.max_context_tokens < 1
        ):
            raise ValueError(
                f"ModelSpec {self.name!r}: max_context_tokens must be a positive "
                f"integer, got {self.max_context_tokens!r}"
            )
        if not isinstance(self.gated_mlp, bool):
            raise ValueError(
                f"ModelSpec {self.name!r}: gated_mlp must be a bool, got {self.gated_mlp!r}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelSpec {self.name!r}: num_heads ({self.num_heads}) must be a "
                f"multiple of num_kv_heads ({self.num_kv_heads})"
            )

    # --- KV cache ------------------------------------------------------------------------------
    @property
    def kv_bytes_per_token_layer(self) -> int:
        """K and V of one token in one layer: 2 * K * d * b."""
        return 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """All layers: 2 * L * K * d * b (docs/semantics.md section 2)."""
        return self.num_layers * self.kv_bytes_per_token_layer

    def kv_bytes_per_token_over(self, tp: int) -> int:
        """A token's KV over a ``tp`` group's GPUs: every GPU's shard, so a replicated KV head
        counts on each GPU that holds it (``kv_bytes_per_token`` unless tp exceeds the KV heads)."""
        return self.shard(tp).kv_bytes_per_token * tp

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head (1 = MHA)."""
        return self.num_heads // self.num_kv_heads

    # --- weights -------------------------------------------------------------------------------
    @property
    def linear_params_per_layer(self) -> int:
        """Q, K, V, O projections and the MLP: h*Hq*d + 2*h*K*d + Hq*d*h + (3 or 2)*h*I."""
        h, d = self.hidden_size, self.head_dim
        attn = h * self.num_heads * d + 2 * h * self.num_kv_heads * d + self.num_heads * d * h
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size
        return attn + mlp

    @property
    def gemm_shapes(self) -> tuple[tuple[int, int], ...]:
        """(K, NO) of the layer's four GEMMs, K the reduction size and NO the output width:
        QKV (h -> (Hq + 2K)d), O (Hq*d -> h), the MLP's first GEMM (gate and up fused: I*2; a plain
        FFN's up: I), down (I -> h). Their K*NO sum to ``linear_params_per_layer``."""
        h, d, i = self.hidden_size, self.head_dim, self.intermediate_size
        up = (2 if self.gated_mlp else 1) * i
        return (
            (h, (self.num_heads + 2 * self.num_kv_heads) * d),
            (self.num_heads * d, h),
            (h, up),
            (i, h),
        )

    @property
    def linear_weight_bytes_per_layer(self) -> int:
        return self.linear_params_per_layer * self.dtype_bytes

    @property
    def lm_head_params(self) -> int:
        """h * vocab; run as a GEMM even when tied to the embedding (OPT)."""
        return self.hidden_size * self.vocab_size

    @property
    def weight_params(self) -> int:
        """Every weight a GPU holds: L layers, the LM head and the embedding (counted apart even
        when tied, as OPT's are: at most h*vocab too many). Norms and biases (< 0.1 %) left out."""
        return self.num_layers * self.linear_params_per_layer + 2 * self.lm_head_params

    @property
    def weight_bytes(self) -> int:
        return self.weight_params * self.dtype_bytes

    # --- tensor parallelism --------------------------------------------------------------------
    def kv_head_copies(self, tp: int) -> int:
        """GPUs of a ``tp`` group holding each KV head: 1, or tp / K when K < tp (replicated)."""
        return tp // self.num_kv_heads if self.num_kv_heads < tp else 1

    def shard(self, tp: int) -> ModelSpec:
        """The per-GPU slice under tensor parallelism ``tp`` (Megatron-style sharding).

        Query heads, KV heads and the MLP width are split by tp; the hidden size (norms, residual
        adds, the all-reduced activations) is not; the LM head and the embedding are split by
        vocabulary (rounded up, as engines pad it). With fewer KV heads than GPUs each GPU holds one
        KV head, replicated over tp / K GPUs (vLLM does the same), so its KV bytes per token are
        those of one head, not 1/tp of the model's.
        """
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"tp must be a positive integer, got {tp!r}")
        if tp == 1:
            return self
        k = self.num_kv_heads
        kv_ok = k % tp == 0 if k >= tp else tp % k == 0
        if self.num_heads % tp or self.intermediate_size % tp or not kv_ok:
            raise ValueError(
                f"{self.name} cannot be split over tp={tp}: num_heads ({self.num_heads}) and "
                f"intermediate_size ({self.intermediate_size}) must be divisible by tp, and "
                f"num_kv_heads ({k}) divisible by tp or a divisor of it"
            )
        return dataclasses.replace(
            self,
            name=f"{self.name}/tp{tp}",
            num_heads=self.num_heads // tp,
            num_kv_heads=max(k // tp, 1),
            intermediate_size=self.intermediate_size // tp,
            vocab_size=-(-self.vocab_size // tp),
        )

    # --- elementwise traffic -------------------------------------------------------------------
    @property
    def elementwise_bytes_per_token_layer(self) -> int:
        """HBM bytes one token moves through the non-GEMM, non-attention kernels of one layer.

        Why a byte count: these kernels are memory-bound, so their time is bytes / bandwidth and the
        bandwidth constant transfers across models. Counted per token, in elements:
          2 norms (read h, write h)           4h
          2 residual adds (read 2h, write h)  6h
          RoPE on q and k (read + write)      2(Hq + K)d   (also counted for OPT, which has none)
          MLP activation (gated: read 2I, write I; plain: read I, write I)  3I or 2I
          KV write to the paged cache (read + write 2Kd)                  4Kd
        """
        h, d, hq, k, i = (
            self.hidden_size,
            self.head_dim,
            self.num_heads,
            self.num_kv_heads,
            self.intermediate_size,
        )
        elems = 10 * h + 2 * (hq + k) * d + (3 if self.gated_mlp else 2) * i + 4 * k * d
        return elems * self.dtype_bytes

    @property
    def elementwise_ops(self) -> tuple[ElementwiseOpShape, ...]:
        """The kernels behind ``elementwise_bytes_per_token_layer``, one by one (their row bytes
        sum to it). The KV write has no constants of its own (no public table times it): it is
        priced as the residual add's kind, a grid-stride copy, on its own bytes."""
        h, d, hq, k, i, b = (
            self.hidden_size,
            self.head_dim,
            self.num_heads,
            self.num_kv_heads,
            self.intermediate_size,
            self.dtype_bytes,
        )
        norm = min(h, _NORM_MAX_THREADS)
        act = (3 if self.gated_mlp else 2) * i * b
        return (
            ElementwiseOpShape("input_norm", "norm", 2 * h * b, norm),
            ElementwiseOpShape(
                "rope", "rope", 2 * (hq + k) * d * b, min(hq * d // 2, _ROPE_MAX_THREADS)
            ),
            ElementwiseOpShape("attention_residual_add", "add", 3 * h * b, 0),
            ElementwiseOpShape("post_attention_norm", "norm", 2 * h * b, norm),
            ElementwiseOpShape("act", "act", act, min(i, _ACT_MAX_THREADS)),
            ElementwiseOpShape("mlp_residual_add", "add", 3 * h * b, 0),
            ElementwiseOpShape("kv_write", "add", 4 * k * d * b, 0),
        )


_FIELDS = tuple(f.name for f in fields(ModelSpec))
_INT_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "dtype_bytes",
)
_EXTRA_KEYS = ("aliases", "notes")  # documentation only
_OPTIONAL_FIELDS = ("max_context_tokens",)


def _spec_from_mapping(obj: Any, ctx: S.Ctx, name: str | None) -> tuple[ModelSpec, tuple[str, ...]]:
    """Validate one entry; ``name`` is given for registry entries (the key), else read from the file."""
    m = S.mapping(obj, ctx)
    required = [
        f for f in _FIELDS if not (name is not None and f == "name") and f not in _OPTIONAL_FIELDS
    ]
    S.check_keys(m, ctx, required=required, optional=_EXTRA_KEYS + _OPTIONAL_FIELDS)
    values: dict[str, Any] = {
        "name": name if name is not None else S.string(m["name"], ctx.child("name"))
    }
    for f in _INT_FIELDS:
        values[f] = S.integer(m[f], ctx.child(f), minimum=1)
    values["gated_mlp"] = S.boolean(m["gated_mlp"], ctx.child("gated_mlp"))
    values["source"] = S.string(m["source"], ctx.child("source"))
    if "max_context_tokens" in m:
        values["max_context_tokens"] = S.integer(
            m["max_context_tokens"], ctx.child("max_context_tokens"), minimum=1
        )
    aliases = S.string_list(m.get("aliases", []), ctx.child("aliases"))
    if "notes" in m:
        S.optional_string(m["notes"], ctx.child("notes"))
    try:
        return ModelSpec(**values), aliases
    except ValueError as exc:  # cross-field checks (heads divisible) still name the file
        raise ctx.error(str(exc)) from None


@lru_cache(maxsize=1)
def _registry() -> tuple[dict[str, ModelSpec], dict[str, str]]:
    """(name -> spec, lower-case alias -> name), read once from data/models.yaml."""
    ctx = S.Ctx(str(_REGISTRY_FILE))
    raw = S.mapping(S.read_yaml(_REGISTRY_FILE), ctx)
    specs: dict[str, ModelSpec] = {}
    index: dict[str, str] = {}
    for name, entry in raw.items():
        spec, aliases = _spec_from_mapping(entry, ctx.child(name), name)
        specs[name] = spec
        for alias in (name, *aliases):
            key = alias.strip().lower()
            if index.get(key, name) != name:
                raise ctx.child(name).error(f"alias {alias!r} already names {index[key]!r}")
            index[key] = name
    return specs, index


def load_model_file(path: str | os.PathLike[str]) -> ModelSpec:
    """Read a model spec YAML: a mapping with every ModelSpec field (plus optional aliases, notes)."""
    spec, _ = _spec_from_mapping(S.read_yaml(path), S.Ctx(str(path)), None)
    return spec


def get_model(name_or_path: str | os.PathLike[str] | ModelSpec) -> ModelSpec:
    """A registered model by name or alias (case-insensitive), or a model spec YAML by path."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = os.fspath(name_or_path)
    return S.lookup(
        text,
        _registry(),
        load_model_file,
        "model",
        lambda: (
            f"unknown model {text!r}: registered models are {', '.join(available_models())} "
            f"(aliases accepted, case-insensitive), or give a path to a model spec YAML"
        ),
    )


def available_models() -> list[str]:
    """Registered model names (aliases not listed)."""
    return sorted(_registry()[0])


def model_aliases(name: str) -> list[str]:
    """Every lower-case key that resolves to the registered model ``name``."""
    return S.aliases_of(get_model(name).name, _registry()[1])
