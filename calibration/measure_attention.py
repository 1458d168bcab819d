"""Attention of one decoder layer: prefill/append over (new tokens, cached context), decode over
(batch, context per sequence).

Backends (the one used is recorded in every sample's ``kernel`` and in the profile's meta):
  * torch SDPA (any device). Prefill: q [S, H_q, n_new, d] against K/V [S, K, n_ctx + n_new, d] with
    ``enable_gqa=True`` (no repeat_interleave: it would multiply the bytes read by H_q/K) and the
    bottom-right causal mask ``causal_lower_right`` for appends (``is_causal`` is top-left aligned,
    which is wrong when q_len < kv_len). Decode, ``decode_impl``:
      - "sdpa": SDPA over each sequence's contiguous KV, one new query per sequence. Reads every KV
        byte once, as a paged decode kernel does; the paging itself is not exercised.
      - "gather": a paged cache [pages, 2, page, K, d] with a shuffled block table; the sequences'
        pages are gathered, then SDPA. Exercises paging but moves each byte ~3 times.
  * FlashInfer (GPU-only, when installed): ``BatchPrefillWithPagedKVCacheWrapper`` and
    ``BatchDecodeWithPagedKVCacheWrapper`` with ``plan`` outside the timed closure (plan runs on the
    CPU once per batch composition; it belongs to the step overhead, see flashinfer/decode.py), page size
    and NHD/HND layout recorded, tensor-core decode for GQA groups >= 4 (FlashInfer's advice).
torch and flashinfer are imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from costmodels import ModelSpec

from .measure_gemm import torch_dtype
from .samples import Sample, Shape

WORKSPACE_BYTES = 128 * 2**20  # FlashInfer's recommended float workspace


@dataclass(frozen=True, slots=True)
class AttentionBackend:
    name: str  # "sdpa" | "flashinfer"
    decode_impl: str = "sdpa"  # torch decode: "sdpa" | "gather"
    page_size: int = 16
    kv_layout: str = "NHD"  # FlashInfer paged-cache layout: "NHD" or "HND"

    def describe(self) -> str:
        if self.name == "flashinfer":
            return f"flashinfer paged (page {self.page_size}, {self.kv_layout})"
        dec = (
            "SDPA over per-sequence contiguous KV"
            if self.decode_impl == "sdpa"
            else f"paged gather (page {self.page_size}) + SDPA"
        )
        return f"torch SDPA (prefill: causal_lower_right, enable_gqa; decode: {dec})"


# --- torch ------------------------------------------------------------------------------------------
def sdpa_prefill_closure(
    model: ModelSpec, n_new: int, n_ctx: int, seqs: int, device: str, dtype: str
) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    dt = torch_dtype(dtype)
    hq, k, d = model.num_heads, model.num_kv_heads, model.head_dim
    q = torch.randn(seqs, hq, n_new, d, device=device, dtype=dt)
    kv = torch.randn(2, seqs, k, n_ctx + n_new, d, device=device, dtype=dt)
    if n_ctx == 0:
        return lambda: F.scaled_dot_product_attention(
            q, kv[0], kv[1], is_causal=True, enable_gqa=True
        )
    mask = causal_lower_right(n_new, n_ctx + n_new)
    return lambda: F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=mask, enable_gqa=True)


def sdpa_decode_closure(
    model: ModelSpec, seqs: int, ctx: int, device: str, dtype: str
) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F

    dt = torch_dtype(dtype)
    q = torch.randn(seqs, model.num_heads, 1, model.head_dim, device=device, dtype=dt)
    kv = torch.randn(2, seqs, model.num_kv_heads, ctx, model.head_dim, device=device, dtype=dt)
    return lambda: F.scaled_dot_product_attention(q, kv[0], kv[1], enable_gqa=True)


def gather_decode_closure(
    model: ModelSpec, seqs: int, ctx: int, page: int, device: str, dtype: str, seed: int = 0
) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F

    dt = torch_dtype(dtype)
    k, d = model.num_kv_heads, model.head_dim
    per_seq = -(-ctx // page)
    n_pages = seqs * per_seq
    cache = torch.randn(n_pages, 2, page, k, d, device=device, dtype=dt)
    g = torch.Generator(device="cpu").manual_seed(seed)
    table = torch.randperm(n_pages, generator=g).view(seqs, per_seq).to(device)
    q = torch.randn(seqs, model.num_heads, 1, d, device=device, dtype=dt)

    def run():
        pages = cache[table]  # [B, pages, 2, page, K, d]
        kv = pages.permute(2, 0, 4, 1, 3, 5).reshape(2, seqs, k, per_seq * page, d)[..., :ctx, :]
        return F.scaled_dot_product_attention(q, kv[0], kv[1], enable_gqa=True)

    return run


# --- FlashInfer (GPU-only) ---------------------------------------------------------------------------
def _paged(seqs: int, kv_len: int, page: int, device: str):
    import torch

    per_seq = -(-kv_len // page)
    indptr = torch.arange(seqs + 1, dtype=torch.int32, device=device) * per_seq
    indices = torch.arange(seqs * per_seq, dtype=torch.int32, device=device)
    last = torch.full((seqs,), kv_len - (per_seq - 1) * page, dtype=torch.int32, device=device)
    return per_seq, indptr, indices, last


def _cache(n_pages: int, model: ModelSpec, be: AttentionBackend, device: str, dt):
    import torch

    k, d, p = model.num_kv_heads, model.head_dim, be.page_size
    shape = (n_pages, 2, p, k, d) if be.kv_layout == "NHD" else (n_pages, 2, k, p, d)
    return torch.randn(*shape, device=device, dtype=dt)


def flashinfer_prefill_closure(
    model: ModelSpec,
    n_new: int,
    n_ctx: int,
    seqs: int,
    be: AttentionBackend,
    device: str,
    dtype: str,
) -> Callable[[], object]:  # GPU-only
    import flashinfer
    import torch

    dt = torch_dtype(dtype)
    per_seq, kv_indptr, kv_indices, last = _paged(seqs, n_ctx + n_new, be.page_size, device)
    qo_indptr = torch.arange(seqs + 1, dtype=torch.int32, device=device) * n_new
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, kv_layout=be.kv_layout)
    w.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        last,
        model.num_heads,
        model.num_kv_heads,
        model.head_dim,
        be.page_size,
        causal=True,
        q_data_type=dt,
        kv_data_type=dt,
    )
    q = torch.randn(seqs * n_new, model.num_heads, model.head_dim, device=device, dtype=dt)
    cache = _cache(seqs * per_seq, model, be, device, dt)
    return lambda: w.run(q, cache)


def flashinfer_decode_closure(
    model: ModelSpec, seqs: int, ctx: int, be: AttentionBackend, device: str, dtype: str
) -> Callable[[], object]:  # GPU-only
    import flashinfer
    import torch

    dt = torch_dtype(dtype)
    per_seq, indptr, indices, last = _paged(seqs, ctx, be.page_size, device)
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        ws, kv_layout=be.kv_layout, use_tensor_cores=model.gqa_group >= 4
    )
    w.plan(
        indptr,
        indices,
        last,
        model.num_heads,
        model.num_kv_heads,
        model.head_dim,
        be.page_size,
        q_data_type=dt,
        kv_data_type=dt,
    )
    q = torch.randn(seqs, model.num_heads, model.head_dim, device=device, dtype=dt)
    cache = _cache(seqs * per_seq, model, be, device, dt)
    return lambda: w.run(q, cache)


# --- one shape -> one sample -------------------------------------------------------------------------
def measure_prefill(
    model: ModelSpec,
    n_new: int,
    n_ctx: int,
    seqs: int,
    be: AttentionBackend,
    timer,
    device: str,
    dtype: str,
) -> Sample:
    if be.name == "flashinfer":
        fn = flashinfer_prefill_closure(model, n_new, n_ctx, seqs, be, device, dtype)
        kernel = be.describe()
    else:
        fn = sdpa_prefill_closure(model, n_new, n_ctx, seqs, device, dtype)
        kernel = "sdpa causal_lower_right" if n_ctx else "sdpa is_causal"
    return Sample(
        "prefill_attn",
        Shape(n_new=n_new, n_ctx=n_ctx, seqs=seqs),
        timer.measure(fn),
        model,
        "append" if n_ctx else "full",
        kernel,
    )


def measure_decode(
    model: ModelSpec, seqs: int, ctx: int, be: AttentionBackend, timer, device: str, dtype: str
) -> Sample:
    if be.name == "flashinfer":
        fn = flashinfer_decode_closure(model, seqs, ctx, be, device, dtype)
        kernel = be.describe()
    elif be.decode_impl == "gather":
        fn = gather_decode_closure(model, seqs, ctx, be.page_size, device, dtype)
        kernel = f"paged gather (page {be.page_size}) + sdpa"
    else:
        fn = sdpa_decode_closure(model, seqs, ctx, device, dtype)
        kernel = "sdpa per-sequence KV"
    return Sample("decode_attn", Shape(n_ctx=ctx, seqs=seqs), timer.measure(fn), model, "", kernel)
