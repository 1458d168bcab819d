"""Typed measurement records shared by the measuring, loading, fitting and validating modules.

A ``Sample`` is one measured shape of one cost term on one per-GPU model shard: the median time of
one decoder layer's kernels for that shape (per layer, per GPU, as the profile's constants are).
Our own sweeps and the public tables produce the same records, so one fitter serves both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodels import ModelSpec, attention_pairs

# Terms a sample can measure. "gemm" is the four GEMMs of a layer alone, "elementwise" the norms,
# RoPE, activation, residual adds and KV write; "linear" is their sum (the profile's ``linear``
# term, priced by ``CostModel.linear_s + elementwise_s``). "lm_head" and "layer" are never fitted:
# they check that the fitted constants transfer to work they were not fitted on. "duplex" is an
# H2D and a D2H copy of the same shape run at once on their two copy engines, timed until both
# end: it fits the profile's ``overlap.duplex_Bps`` (``fit.fit_duplex``).
SAMPLE_TERMS = (
    "gemm",
    "elementwise",
    "linear",
    "prefill_attn",
    "decode_attn",
    "h2d",
    "d2h",
    "duplex",
    "lm_head",
    "layer",
)


@dataclass(frozen=True, slots=True)
class Timing:
    """Median and spread of repeated runs of one shape (seconds)."""

    median_s: float
    p20_s: float
    p80_s: float
    reps: int  # timed repetitions behind the median (1 for a published median we only read)

    def __post_init__(self) -> None:
        if not (self.median_s > 0):
            raise ValueError(f"a timing must be > 0 s, got {self.median_s}")

    @classmethod
    def published(cls, median_s: float) -> "Timing":
        """A median read from a table: no spread known."""
        return cls(median_s, median_s, median_s, 1)


@dataclass(frozen=True, slots=True)
class Shape:
    """The work of one measured call; fields unused by a term stay 0."""

    tokens: int = 0  # gemm / elementwise / lm_head / layer: rows through the layer
    n_new: int = 0  # prefill: new tokens per sequence
    n_ctx: int = 0  # prefill: cached tokens before them, per sequence; decode: context per sequence
    seqs: int = 0  # prefill / decode: sequences in the batch (uniform lengths)
    nbytes: int = 0  # copies: bytes moved in total (duplex: in each direction)
    copies: int = 0  # copies: number of copy calls (duplex: in each direction)
    # copies: host buffers pinned (page-locked) or pageable; every other term, and every file
    # written before pageable copies were measured, reads True.
    pinned: bool = True

    @property
    def pairs(self) -> float:
        """Causal (query, key) pairs of a prefill batch: seqs * n_new * (n_ctx + n_new/2)."""
        return self.seqs * attention_pairs(self.n_new, self.n_ctx) if self.n_new else 0.0

    @property
    def ctx_tokens(self) -> int:
        """Decode: total context tokens of the batch."""
        return self.seqs * self.n_ctx

    @property
    def kv_len(self) -> int:
        """Keys one sequence attends to (prefill: n_ctx + n_new; decode: n_ctx)."""
        return self.n_ctx + self.n_new


@dataclass(frozen=True, slots=True)
class Sample:
    term: str
    shape: Shape
    time: Timing
    model: ModelSpec  # the per-GPU shard whose bytes and FLOPs the shape moves
    group: str = ""  # sub-population for per-group errors, e.g. "tp2" or "llama-3-8b/tp1"
    kernel: str = ""  # what ran, e.g. "sdpa", "flashinfer-paged", "paged-gather+sdpa"
    # elementwise/linear: the elementwise kernels the row timed, by ``ModelSpec.elementwise_ops``
    # name, each with its own median (s). Empty: all of the layer's, timed together. A table that
    # times a subset (one residual add, no KV write) is scored on that subset.
    ew_parts: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.term not in SAMPLE_TERMS:
            raise ValueError(
                f"unknown sample term {self.term!r} (known: {', '.join(SAMPLE_TERMS)})"
            )

    @property
    def key(self) -> tuple:
        """Identity of the shape, term left out: repeats of one shape, and the GEMM, elementwise
        and linear samples of one table row, share it and so land in the same validation fold."""
        return (self.model.name, self.shape)


def shard(model: ModelSpec, tp: int) -> ModelSpec:
    """The per-GPU slice of ``model`` under tensor parallelism ``tp`` (``ModelSpec.shard``).

    Why samples carry it: the constants are per GPU, and a TP-sharded table moves the shard's bytes
    and FLOPs.
    """
    return model.shard(tp)


def with_dtype_bytes(model: ModelSpec, dtype_bytes: int) -> ModelSpec:
    """``model`` measured in another element size (e.g. fp32 on a CPU): bytes follow the real dtype."""
    if dtype_bytes == model.dtype_bytes:
        return model
    return dataclasses.replace(model, dtype_bytes=dtype_bytes)
