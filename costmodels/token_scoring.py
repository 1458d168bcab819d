"""What a learned token scorer costs: a small MLP run on every new key, per layer, per KV head.

The MLP itself (its parameters and FLOPs per key, counted exactly) is ``costmodels.scorer_mlp``.

Time (``scoring_s``; its per-token slope is ``scoring_s_per_token_layer``): the MLP's GEMMs
priced like the layer's own GEMMs, from the profile's linear term:
tau + max(weight read floor, FLOPs / profile.linear.flops). That rate is measured on the
model's large GEMMs; a 256-wide MLP runs at a fraction of it, so the analytic time is a lower
bound. ``calibration/measure_scorer.py`` measures seconds per key on real hardware; pass its fit as
``s_per_key`` (and ``tau_s``) to use it instead.
"""

from __future__ import annotations

from .cost import CostModel
from .scorer_mlp import scorer_flops_per_key, scorer_params, scorer_s_per_token_layer

# The MLP's counts live in scorer_mlp; they are re-exported because callers reach them here.
__all__ = ["scorer_flops_per_key", "scorer_params", "scoring_s", "scoring_s_per_token_layer"]


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
    return scorer_s_per_token_layer(
        cost_model.model,
        cost_model.profile.linear.flops,
        key_dim=key_dim,
        hidden=hidden,
        depth=depth,
        s_per_key=s_per_key,
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
