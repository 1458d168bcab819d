"""One decode iteration under sparse attention with CPU offload (docs/semantics.md, section 9).

A session's pages live in CPU memory; each decode step, in every layer, a selector picks some of
them, and the picked pages stream into a GPU ring buffer (``costmodels.ring_buffer``) while the
attention consumes them. Per layer, in order:

    non-attention   linear_s(B) + elementwise_s(B), B = sequences in the batch
    selection       metadata bytes of the scanned pages / decode KV bandwidth (a memory-bound read
                    like decode attention; no launch cost of its own)
    attention       the ring timeline's end: the compute stream first attends densely to each
                    sequence's GPU-resident tail (``local_tokens``) while round 0 is copied, then
                    to round j = 0..R-1 (R = max selected), one page of this layer for every
                    sequence that selected more than j pages

Round j with c sequences copies c pages (``copy_s('h2d', c * page bytes, c)``) and attends to them
with ``decode_attn_s(c, c * page_tokens)``. Each round pays the kernel's fixed cost tau and its
per-sequence cost: a round is its own kernel launch over the slot, and the per-sequence term stands
for merging that round's partial result into the running one (the merge is part of attention).

Layers do not overlap: the copies of layer l start after its selection, which needs layer l's
query. iteration = L * layer + lm_head_s(B) + step_overhead_s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cost import CostModel
from .models import ModelSpec
from .ring_buffer import ring_buffer_timeline


@dataclass(frozen=True, slots=True)
class SparseDecodeCost:
    """One sparse decode iteration. ``*_s`` without "layer" in the comment cover the whole step."""

    total_s: float  # wall time of the iteration
    compute_s: float  # total_s if copies were free: no wait on the ring
    h2d_s: float  # copy-stream busy time, all layers
    stall_s: float  # total_s - compute_s: copy time the attention could not hide
    layer_s: float  # one layer: non_attention_s + selection_s + attention_s
    non_attention_s: float  # one layer: GEMMs and elementwise work
    selection_s: float  # one layer: the metadata scan
    attention_s: float  # one layer: local attention then the ring pipeline, to its end
    rounds: int  # ring rounds per layer: max over sequences of selected pages
    h2d_bytes: int  # bytes copied host-to-device, all layers
    h2d_copies: int  # copies issued, all layers (one per page per layer)


def layer_page_bytes(model: ModelSpec, page_tokens: int) -> int:
    """K and V of one page of one layer: what one ring slot holds for one sequence."""
    return _positive("page_tokens", page_tokens) * model.kv_bytes_per_token_layer


def metadata_bytes_per_page_layer(model: ModelSpec) -> int:
    """Min and max key per KV head of one page in one layer: 2 * K * d * b (as much as one
    token's K and V)."""
    return 2 * model.num_kv_heads * model.head_dim * model.dtype_bytes


def ring_buffer_bytes(model: ModelSpec, page_tokens: int, slots: int, seqs: int) -> int:
    """The ring: ``slots`` rounds of one page of one layer for each of ``seqs`` sequences. One layer
    only: layers run one after another and reuse it."""
    return _positive("slots", slots) * _count("seqs", seqs) * layer_page_bytes(model, page_tokens)


def metadata_bytes(model: ModelSpec, metadata_pages: int) -> int:
    """Metadata of ``metadata_pages`` pages, every layer, kept on the GPU."""
    return (
        _count("metadata_pages", metadata_pages)
        * model.num_layers
        * metadata_bytes_per_page_layer(model)
    )


def sparse_gpu_bytes(
    model: ModelSpec, page_tokens: int, slots: int, seqs: int, metadata_pages: int
) -> int:
    """GPU memory sparse offload takes beside the resident KV: the ring for a batch of ``seqs``
    sequences plus the metadata of ``metadata_pages`` offloaded pages."""
    return ring_buffer_bytes(model, page_tokens, slots, seqs) + metadata_bytes(
        model, metadata_pages
    )


def round_counts(selected: np.ndarray) -> np.ndarray:
    """Sequences in round j = 0..max(selected)-1: how many selected more than j pages."""
    sel = _per_seq("selected", selected)
    if sel.size == 0 or sel.max() == 0:
        return np.zeros(0, dtype=np.int64)
    at_most = np.cumsum(np.bincount(sel))  # at_most[j] = sequences with selected <= j
    return len(sel) - at_most[:-1]


def sparse_decode_cost(
    cost: CostModel,
    page_tokens: int,
    selected: np.ndarray,
    local_tokens: np.ndarray,
    metadata_pages: int | np.ndarray,
    slots: int,
    gather: bool = False,
) -> SparseDecodeCost:
    """Price one decode iteration of a batch: ``selected[i]`` pages of sequence i come from the
    CPU through the ring of ``slots`` slots, ``local_tokens[i]`` tokens of it are on the GPU, and
    selection scans the metadata of ``metadata_pages`` pages (a count, or per-sequence counts).
    ``gather``: a round's pages arrive in one copy (a gather from pinned host memory, what the
    engine charges); otherwise one copy per page."""
    sel = _per_seq("selected", selected)
    local = _per_seq("local_tokens", local_tokens)
    if len(sel) != len(local):
        raise ValueError(f"selected has {len(sel)} sequences, local_tokens {len(local)}")
    scanned = int(np.sum(_per_seq("metadata_pages", np.atleast_1d(metadata_pages))))
    page_bytes = layer_page_bytes(cost.model, page_tokens)
    slots = _positive("slots", slots)
    seqs = len(sel)
    if seqs == 0:
        return SparseDecodeCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0)
    non_attention = cost.linear_s(seqs) + cost.elementwise_s(seqs)
    selection = (
        scanned * metadata_bytes_per_page_layer(cost.model) / cost.profile.decode_attn.kv_bw_Bps
    )
    local_s = cost.decode_attn_s(int(np.count_nonzero(local)), int(local.sum()))
    counts = round_counts(sel)
    kinds, which = np.unique(counts, return_inverse=True)  # a handful of distinct round sizes
    copy_by = [cost.copy_s("h2d", int(c) * page_bytes, 1 if gather else int(c)) for c in kinds]
    attn_by = [cost.decode_attn_s(int(c), int(c) * page_tokens) for c in kinds]
    copies = [copy_by[k] for k in which]
    attns = [attn_by[k] for k in which]
    ring = ring_buffer_timeline(copies, attns, slots, copy_start_s=0.0, compute_start_s=local_s)
    layers = cost.model.num_layers
    head, overhead = cost.lm_head_s(seqs), cost.profile.step_overhead_s
    layer = (non_attention + selection) + ring.end_s
    total = layers * layer + head + overhead
    compute = (
        layers * ((non_attention + selection) + (local_s + float(sum(attns)))) + head + overhead
    )
    pages = int(sel.sum())
    return SparseDecodeCost(
        total_s=total,
        compute_s=compute,
        h2d_s=layers * float(sum(copies)),
        stall_s=total - compute,
        layer_s=layer,
        non_attention_s=non_attention,
        selection_s=selection,
        attention_s=ring.end_s,
        rounds=len(counts),
        h2d_bytes=layers * pages * page_bytes,
        h2d_copies=layers * (len(counts) if gather else pages),
    )


# --- argument checks ------------------------------------------------------------------------------
def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)


def _per_seq(name: str, values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(
            f"{name} must be a 1-D integer array, got {arr.dtype} of shape {arr.shape}"
        )
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0 for every sequence, got {arr.min()}")
    return arr.astype(np.int64, copy=False)
