"""The learned token scorer's MLP: its size, its FLOPs per key, and its seconds per token and layer.

The scorer of a learned token budget (docs/semantics.md, section 8) is an MLP over one key vector:
key_dim -> hidden -> ... -> hidden -> 1, ``depth`` linear layers, ReLU between them, no
activation on the score. FLOPs per key, counted exactly (depth >= 2):
    matmuls  2 * (key_dim*hidden + (depth-2)*hidden*hidden + hidden)   (2 FLOPs per MAC)
    biases   (depth-1)*hidden + 1                                      (one add per output)
    ReLUs    (depth-1)*hidden                                          (one max per hidden output)
At the default 128 -> 256 -> 256 -> 256 -> 1 the elementwise part is 0.5 % of the total; it is
counted because it is exact, not because it matters.

Needs only the model's shape and a GEMM rate, so ``cost.CostModel`` (which adds the scorer to
every layer) and ``token_scoring`` (which prices it for a ``CostModel``) both build on it.
"""

from __future__ import annotations

import itertools

from .models import ModelSpec


def _check(name: str, v: int, minimum: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")


def _widths(key_dim: int, hidden: int, depth: int) -> list[tuple[int, int]]:
    """(in, out) of each linear layer: key_dim -> hidden x (depth-1) -> 1."""
    _check("key_dim", key_dim, 1)
    _check("hidden", hidden, 1)
    _check("depth", depth, 1)
    dims = [key_dim] + [hidden] * (depth - 1) + [1]
    return list(itertools.pairwise(dims))


def scorer_params(key_dim: int = 128, hidden: int = 256, depth: int = 4) -> int:
    """Weights and biases of the scorer MLP (what a scoring pass reads once)."""
    return sum(i * o + o for i, o in _widths(key_dim, hidden, depth))


def scorer_flops_per_key(key_dim: int = 128, hidden: int = 256, depth: int = 4) -> int:
    """FLOPs to score one key: 2 per multiply-accumulate, 1 per bias add, 1 per ReLU."""
    widths = _widths(key_dim, hidden, depth)
    macs = sum(i * o for i, o in widths)
    biases = sum(o for _, o in widths)
    relus = sum(o for _, o in widths[:-1])
    return 2 * macs + biases + relus


def scorer_s_per_token_layer(
    model: ModelSpec,
    gemm_flops: float,
    *,
    key_dim: int | None = None,
    hidden: int = 256,
    depth: int = 4,
    s_per_key: float | None = None,
) -> float:
    """Marginal seconds to score one new token at one layer: num_kv_heads keys, each at
    ``s_per_key`` (measured) or FLOPs per key / ``gemm_flops`` (analytic; a profile's
    ``linear.flops``). key_dim defaults to the model's head_dim."""
    if s_per_key is not None:
        if not s_per_key > 0:
            raise ValueError(f"s_per_key must be > 0, got {s_per_key}")
        return model.num_kv_heads * s_per_key
    kd = model.head_dim if key_dim is None else key_dim
    return model.num_kv_heads * scorer_flops_per_key(kd, hidden, depth) / gemm_flops
