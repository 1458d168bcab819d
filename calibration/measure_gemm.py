"""Token-level work of one decoder layer, measured on the model's shapes and dtype.

Per token count N (and per narrower shard of the layer, see ``grids``):
  gemm         QKV (fused), O, gate/up (fused), down: the four GEMMs of vLLM-style layers
  elementwise  2 RMSNorms, RoPE on q and k, SiLU(gate)*up (ReLU for plain MLPs), 2 residual adds,
               and the write of the new K and V into a paged cache (``ModelSpec.elementwise_bytes``)
  linear       gemm and elementwise back to back in one timed closure (one graph), as they run
               inside a layer; the profile's linear term. The separately timed closures run about
               4 % slower than the same kernels inside a whole-layer graph, so their sum is not it.
  lm_head      h x vocab GEMM over ``rows`` sampled rows (not fitted: a transfer check of the
               GEMM constants)
Inputs are built once per shape, outside the timed closure, so only the kernels are timed.
torch is imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable

from costmodels import ModelSpec

from .samples import Sample, Shape


def torch_dtype(name: str):
    import torch

    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if name not in table:
        raise ValueError(f"dtype must be one of {', '.join(table)}, got {name!r}")
    return table[name]


def dtype_bytes(name: str) -> int:
    return {"bf16": 2, "fp16": 2, "fp32": 4}[name]


class LayerWeights:
    """Random weights of one decoder layer (values do not matter for timing)."""

    def __init__(self, model: ModelSpec, device: str, dtype: str, seed: int = 0) -> None:
        import torch

        g = torch.Generator(device="cpu").manual_seed(seed)
        dt = torch_dtype(dtype)
        h, d, hq, k, i = (
            model.hidden_size,
            model.head_dim,
            model.num_heads,
            model.num_kv_heads,
            model.intermediate_size,
        )

        def w(rows: int, cols: int):
            return (torch.randn(rows, cols, generator=g) * rows**-0.5).to(device=device, dtype=dt)

        self.model, self.device, self.dtype = model, device, dt
        self.w_qkv = w(h, (hq + 2 * k) * d)
        self.w_o = w(hq * d, h)
        self.w_up = w(h, (2 if model.gated_mlp else 1) * i)
        self.w_down = w(i, h)
        self.norm = torch.ones(h, device=device, dtype=dt)


def gemm_closure(lw: LayerWeights, tokens: int) -> Callable[[], object]:
    import torch

    m = lw.model
    x = torch.randn(tokens, m.hidden_size, device=lw.device, dtype=lw.dtype)
    attn = torch.randn(tokens, m.num_heads * m.head_dim, device=lw.device, dtype=lw.dtype)
    act = torch.randn(tokens, m.intermediate_size, device=lw.device, dtype=lw.dtype)

    def run():
        torch.matmul(x, lw.w_qkv)
        torch.matmul(attn, lw.w_o)
        torch.matmul(x, lw.w_up)
        return torch.matmul(act, lw.w_down)

    return run


def elementwise_closure(lw: LayerWeights, tokens: int, page_size: int = 16) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F

    m = lw.model
    dev, dt = lw.device, lw.dtype
    h, d, hq, k, i = m.hidden_size, m.head_dim, m.num_heads, m.num_kv_heads, m.intermediate_size
    x = torch.randn(tokens, h, device=dev, dtype=dt)
    resid = torch.randn(tokens, h, device=dev, dtype=dt)
    q = torch.randn(tokens, hq, d, device=dev, dtype=dt)
    kk = torch.randn(tokens, k, d, device=dev, dtype=dt)
    v = torch.randn(tokens, k, d, device=dev, dtype=dt)
    up = torch.randn(tokens, (2 if m.gated_mlp else 1) * i, device=dev, dtype=dt)
    pos = torch.arange(tokens, device=dev, dtype=torch.float32)[:, None]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    ang = torch.cat([pos * inv, pos * inv], dim=-1)
    cos, sin = ang.cos().to(dt)[:, None, :], ang.sin().to(dt)[:, None, :]
    # Paged KV cache of one layer: slots = pages * page_size, K and V apart; the new tokens go to
    # scattered slots (a shuffled page order), as a paged allocator would place them.
    pages = -(-tokens // page_size) + 1
    cache_k = torch.zeros(pages * page_size, k, d, device=dev, dtype=dt)
    cache_v = torch.zeros_like(cache_k)
    order = torch.randperm(pages)[: -(-tokens // page_size)]
    slots = (
        (order[:, None] * page_size + torch.arange(page_size)[None, :]).flatten()[:tokens].to(dev)
    )

    def rope(t):
        t1, t2 = t[..., : d // 2], t[..., d // 2 :]
        return t * cos + torch.cat([-t2, t1], dim=-1) * sin

    def norm(t):
        return F.rms_norm(t, (h,), lw.norm, 1e-5)

    def run():
        a = norm(x)
        rope(q)
        rope(kk)
        cache_k.index_copy_(0, slots, kk)
        cache_v.index_copy_(0, slots, v)
        r = resid + a
        norm(r)
        if m.gated_mlp:
            g_, u_ = up[:, :i], up[:, i:]
            F.silu(g_) * u_
        else:
            F.relu(up)
        return r + a

    return run


def lm_head_closure(
    model: ModelSpec, rows: int, device: str, dtype: str, seed: int = 0
) -> Callable[[], object]:
    import torch

    dt = torch_dtype(dtype)
    w = torch.randn(model.hidden_size, model.vocab_size, device=device, dtype=dt)
    x = torch.randn(rows, model.hidden_size, device=device, dtype=dt)
    return lambda: torch.matmul(x, w)


def linear_closure(lw: LayerWeights, tokens: int, page_size: int = 16) -> Callable[[], object]:
    """The GEMMs and the elementwise ops in one closure: timed as one graph, like the layer."""
    gemms = gemm_closure(lw, tokens)
    elementwise = elementwise_closure(lw, tokens, page_size)

    def run():
        gemms()
        return elementwise()

    return run


def measure_token_level(
    lw: LayerWeights,
    tokens: int,
    timer,
    group: str,
    page_size: int = 16,
    kernel: str = "torch.matmul",
) -> list[Sample]:
    """gemm, elementwise and linear samples of one layer shard at N = ``tokens``."""
    g = timer.measure(gemm_closure(lw, tokens))
    e = timer.measure(elementwise_closure(lw, tokens, page_size))
    both = timer.measure(linear_closure(lw, tokens, page_size))
    shape = Shape(tokens=tokens)
    return [
        Sample("gemm", shape, g, lw.model, group, kernel),
        Sample("elementwise", shape, e, lw.model, group, "torch eager ops"),
        Sample("linear", shape, both, lw.model, group, kernel + " + eager ops, one graph"),
    ]
