"""What a learned token scorer costs: a small MLP run on every new key, per layer, per KV head.

The scorer of a learned token budget (docs/semantics.md, section 8) is an MLP over one key vector:
key_dim -> hidden -> ... -> hidden -> 1, ``depth`` linear layers, ReLU between them, no
activation on the score. FLOPs per key, counted exactly (depth >= 2):
    matmuls  2 * (key_dim*hidden + (depth-2)*hidden*hidden + hidden)   (2 FLOPs per MAC)
    biases   (depth-1)*hidden + 1                                      (one add per output)
    ReLUs    (depth-1)*hidden                                          (one max per hidden output)
At the default 128 -> 256 -> 256 -> 256 -> 1 the elementwise part is 0.5 % of the total; it is
counted because it is exact, not because it matters.

Time (``scoring_s``; its per-token slope is ``scoring_s_per_token_layer``): the MLP's GEMMs
priced like the layer's own GEMMs, from the profile's linear term:
tau + max(weight read floor, FLOPs / profile.linear.flops). That rate is measured on the
model's large GEMMs; a 256-wide MLP runs at a fraction of it, so the analytic time is a lower
bound. ``calibration/measure_scorer.py`` measures seconds per key on real hardware; pass its fit as
``s_per_key`` (and ``tau_s``) to use it instead.
"""

from __future__ import annotations

import itertools

from .cost import CostModel


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


def scoring_s_per_token_layer(
    cost_model: CostModel,
    *,
    key_dim: int | None = None,
    hidden: int = 256,
    depth: int = 4,
    s_per_key: float | None = None,
) -> float:
    """Marginal seconds to score one new token at one layer: num_kv_heads keys, each at
    ``s_per_key`` (measured) or FLOPs per key / profile.linear.flops (analytic). The slope of
    ``scoring_s``; what an engine adds per token and layer when the scorer rides on the layer's
    other kernels. key_dim defaults to the model's head_dim."""
    model = cost_model.model
    if s_per_key is not None:
        if not s_per_key > 0:
            raise ValueError(f"s_per_key must be > 0, got {s_per_key}")
        return model.num_kv_heads * s_per_key
    kd = model.head_dim if key_dim is None else key_dim
    return (
        model.num_kv_heads
        * scorer_flops_per_key(kd, hidden, depth)
        / cost_model.profile.linear.flops
    )


def scoring_s(
    cost_model: CostModel,
    tokens: int,
    *,
    key_dim: int | None = None,
    hidden: int = 256,
    depth: int = 4,
    s_per_key: float | None = None,
    tau_s: float | None = None,
) -> float:
    """Seconds to score ``tokens`` new tokens at ONE layer as a kernel of its own:
    tokens * num_kv_heads keys.

    Analytic: tau + max(params * dtype_bytes / weight_bw, tokens * ``scoring_s_per_token_layer``),
    tau = profile.linear.tau_s (the launch and tail cost of a layer's handful of GEMM kernels; the
    MLP is ``depth`` more of them). Measured: ``s_per_key`` (seconds per key, e.g. from
    calibration.measure_scorer) gives tau + keys * s_per_key, no floor (the fit's intercept, passed
    as ``tau_s``, holds it). ``tau_s`` overrides the launch cost (0 for a scorer fused into
    another kernel)."""
    if tokens <= 0:
        return 0.0
    lin = cost_model.profile.linear
    tau = lin.tau_s if tau_s is None else tau_s
    if tau < 0:
        raise ValueError(f"tau_s must be >= 0, got {tau}")
    slope = scoring_s_per_token_layer(
        cost_model, key_dim=key_dim, hidden=hidden, depth=depth, s_per_key=s_per_key
    )
    if s_per_key is not None:
        return tau + tokens * slope
    kd = cost_model.model.head_dim if key_dim is None else key_dim
    floor = scorer_params(kd, hidden, depth) * cost_model.model.dtype_bytes / lin.weight_bw_Bps
    return tau + max(floor, tokens * slope)
