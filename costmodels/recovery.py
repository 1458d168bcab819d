"""What it costs to get evicted KV back: recompute it, or swap it in from host memory.

A span of KV is described by plain numbers: ``first_page`` and ``pages`` (its pages in the
session), ``layer`` (-1 for all layers, else the one layer it holds), ``nbytes`` and the session's
``context_tokens``. A dropped span is recomputed in the prefill of the session's next turn; a span
demoted to the host is copied back, layer-wise pipelined with that turn's compute.
"""

from __future__ import annotations

from .cost import BatchShape, CostModel, attention_pairs
from .pipeline import pipelined_time, pipelined_time_uniform
from .tensor_parallel import ALLREDUCES_PER_LAYER


def recompute_s(cost: CostModel, n_tokens: int, n_before: int, layer: int = -1) -> float:
    """Seconds to recompute ``n_tokens`` tokens that follow ``n_before`` tokens of context, as the
    marginal cost of joining the next prefill's new tokens: per layer,
    n * 2P/F (GEMM slope) + elementwise(n) + attention_pairs(n, n_before) * 4*H_q*d/F_attn
    + n * H_q*d * query_elem_s (prefill attention's per-row work; its wave term is the batch's, not
    a span's, and is left out) + n * the all-reduces' per-token cost (tensor parallelism), over all
    L layers (``layer`` = -1) or over layers 0..layer (a hidden state at layer l needs the forward
    pass through the layers before it)."""
    if n_tokens <= 0:
        return 0.0
    model, prof = cost.model, cost.profile
    per_layer = (
        n_tokens * 2.0 * model.linear_params_per_layer / prof.linear.flops
        + cost.elementwise_s(n_tokens)
        + attention_pairs(n_tokens, n_before)
        * 4.0
        * model.num_heads
        * model.head_dim
        / prof.prefill_attn.flops
        + n_tokens * model.num_heads * model.head_dim * prof.prefill_attn.query_elem_s
        + n_tokens * ALLREDUCES_PER_LAYER * cost.allreduce_s_per_token
    )
    layers = model.num_layers if layer < 0 else layer + 1
    return layers * per_layer


def swap_in_s(
    cost: CostModel,
    nbytes: float,
    pages: int,
    context_tokens: int,
    block_tokens: int,
    layer: int = -1,
) -> float:
    """Seconds a swap-in of ``nbytes`` (``pages`` pages) adds to the iteration that brings it back:
    the pipelined stall T - L*t_c, with the copy priced by ``copy_s('h2d', nbytes, copies)`` (one
    copy per page per layer held) and t_c the per-layer compute of the smallest turn that uses it,
    a one-page append after ``context_tokens``. All layers spread the copy evenly; one layer l
    copies only for l, which hides behind layers 0..l-1. Without layer-wise H2D in the profile:
    the whole copy time."""
    L = cost.model.num_layers
    copies = pages * (L if layer < 0 else 1)
    t_copy = cost.copy_s("h2d", nbytes, copies)
    overlap = cost.profile.overlap
    if not overlap.layerwise_h2d:
        return t_copy
    t_c = cost.layer_s(BatchShape.prefill(block_tokens, context_tokens))
    if layer < 0:
        total = pipelined_time_uniform(L, t_copy / L, t_c, overlap.compute_slowdown)
    else:
        xs = [0.0] * L
        xs[layer] = t_copy
        total = pipelined_time(xs, [t_c] * L, overlap.compute_slowdown)
    return max(0.0, total - L * t_c)


def recovery_s(
    cost: CostModel,
    *,
    dropped: bool,
    first_page: int,
    pages: int,
    layer: int,
    nbytes: float,
    context_tokens: int,
    block_tokens: int,
) -> float:
    """The recovery cost of one span of a session's KV: ``recompute_s`` of the context tokens it
    holds when it is ``dropped``, else ``swap_in_s`` of its bytes."""
    if dropped:
        lo = first_page * block_tokens
        n = max(0, min(context_tokens, (first_page + pages) * block_tokens) - lo)
        return recompute_s(cost, n, lo, layer)
    return swap_in_s(cost, nbytes, pages, context_tokens, block_tokens, layer)
