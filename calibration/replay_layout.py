"""Replay an exported paged KV layout through attention kernels and set the time next to the cost
model's: does the simulator charge what this exact batch costs?

A layout (``sim.paged_layout.PagedLayout``, written by `kvsim export-layout`) is one iteration's
page table. ``replay`` fills a random pool of ``layout.pool_shape`` and runs one layer's attention
for the batch: FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` for the requests with one query
token and ``BatchPrefillWithPagedKVCacheWrapper`` (causal, queries at the tail) for those with more,
when FlashInfer is installed and the device is CUDA; otherwise a torch reference that gathers each
request's pages through ``kv_page_indices``/``kv_last_page_len`` and runs SDPA with GQA. The two
groups are timed apart, as the cost model prices them apart (decode_attn_s, prefill_attn_s).

    python -m calibration.replay_layout DIR [--model llama-3-8b --hardware h100-sxm --device cuda]

A one-token append (a fully cached prompt) counts as a decode here; the simulator prices it with
the prefill term. torch and flashinfer are imported lazily; a layout is any object with the
``PagedLayout`` attributes (this module imports ``sim`` only to read files).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from costmodels import CostModel, ModelSpec, attention_pairs

from .timing import TimingConfig, make_timer

WORKSPACE_BYTES = 128 * 2**20  # FlashInfer's recommended float workspace
BACKENDS = ("auto", "torch", "flashinfer")


@dataclass(frozen=True)
class ReplayResult:
    """One layer's attention over the batch: outputs packed as the queries are, and the time of
    each group (None when the batch has none of it)."""

    output: Any  # torch tensor [total query tokens, num_heads, head_dim]
    decode_s: float | None  # median seconds, requests with one query token
    prefill_s: float | None  # median seconds, requests with more
    backend: str  # "flashinfer" | "torch"
    device: str


@dataclass(frozen=True)
class Comparison:
    """What the cost model charges one layer of this batch's attention, next to a measurement."""

    decode_requests: int
    decode_ctx_tokens: int
    prefill_requests: int
    prefill_tokens: int
    prefill_pairs: float
    predicted_decode_s: float
    predicted_prefill_s: float
    measured_decode_s: float | None = None
    measured_prefill_s: float | None = None
    backend: str = ""


# --- inputs ------------------------------------------------------------------------------------------
def _dtype(device: str):
    import torch

    return torch.float32 if device == "cpu" else torch.float16


def _queries(layout) -> np.ndarray:
    """qo_indptr, or one query per request when the layout has none."""
    if layout.qo_indptr is not None:
        return np.asarray(layout.qo_indptr, dtype=np.int64)
    return np.arange(layout.num_requests + 1, dtype=np.int64)


def random_inputs(layout, model: ModelSpec, device: str = "cpu", seed: int = 0):
    """(q [total query tokens, num_heads, head_dim], pool of ``layout.pool_shape``), random."""
    import torch

    _check_model(layout, model)
    g = torch.Generator(device="cpu").manual_seed(seed)
    dt = _dtype(device)
    total_q = int(_queries(layout)[-1])
    q = torch.randn(total_q, model.num_heads, model.head_dim, generator=g).to(device, dt)
    pool = torch.randn(*layout.pool_shape, generator=g).to(device, dt)
    return q, pool


def _check_model(layout, model: ModelSpec) -> None:
    if (model.num_kv_heads, model.head_dim) != (layout.num_kv_heads, layout.head_dim):
        raise ValueError(
            f"model {model.name!r} has {model.num_kv_heads} KV heads of {model.head_dim}; "
            f"the layout's pool has {layout.num_kv_heads} of {layout.head_dim}"
        )


# --- the torch reference -----------------------------------------------------------------------------
def request_kv(layout, pool, i: int):
    """Request i's K and V, contiguous: two tensors [num_kv_heads, seq_len, head_dim]."""
    import torch

    a, b = int(layout.kv_indptr[i]), int(layout.kv_indptr[i + 1])
    idx = torch.as_tensor(
        np.asarray(layout.kv_page_indices[a:b], dtype=np.int64), device=pool.device
    )
    seq = int(layout.page_size * (b - a - 1) + layout.kv_last_page_len[i])
    pages = pool[idx]  # [n, 2, P, K, d] (NHD) or [n, 2, K, P, d] (HND)
    n, k, d = b - a, layout.num_kv_heads, layout.head_dim
    if layout.kv_layout == "NHD":
        kv = pages.permute(1, 3, 0, 2, 4).reshape(2, k, n * layout.page_size, d)
    else:
        kv = pages.permute(1, 2, 0, 3, 4).reshape(2, k, n * layout.page_size, d)
    return kv[0, :, :seq], kv[1, :, :seq]


def reference_attention(layout, q, pool, requests=None):
    """Attention of ``requests`` (all by default) through the page table, request by request:
    SDPA with GQA, the queries causal at the tail of their sequence (bottom-right mask). Returns
    the queries' outputs packed in the order given."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    qo = _queries(layout)
    rows = range(layout.num_requests) if requests is None else requests
    outs = []
    for i in rows:
        k, v = request_kv(layout, pool, i)
        qi = q[int(qo[i]) : int(qo[i + 1])].transpose(0, 1).unsqueeze(0)  # [1, Hq, n_q, d]
        n_q, seq = qi.shape[2], k.shape[1]
        mask = None if n_q == 1 else causal_lower_right(n_q, seq)
        o = F.scaled_dot_product_attention(
            qi, k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask, enable_gqa=True
        )
        outs.append(o[0].transpose(0, 1))
    if not outs:
        return q.new_zeros((0,) + tuple(q.shape[1:]))
    return torch.cat(outs)


# --- FlashInfer (GPU-only) ---------------------------------------------------------------------------
def flashinfer_available() -> bool:
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True


def _flashinfer_closure(layout, q, pool, model: ModelSpec, prefill: bool) -> Callable[[], Any]:
    """FlashInfer's wrapper for this (sub-)batch, planned outside the returned closure."""
    import flashinfer
    import torch

    dev = pool.device

    def i32(a):
        return torch.as_tensor(np.asarray(a, dtype=np.int32), device=dev)

    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    args = (i32(layout.kv_indptr), i32(layout.kv_page_indices), i32(layout.kv_last_page_len))
    heads = (model.num_heads, layout.num_kv_heads, layout.head_dim, layout.page_size)
    if prefill:
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, kv_layout=layout.kv_layout)
        w.plan(
            i32(_queries(layout)),
            *args,
            *heads,
            causal=True,
            q_data_type=q.dtype,
            kv_data_type=pool.dtype,
        )
    else:
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            ws, kv_layout=layout.kv_layout, use_tensor_cores=model.gqa_group >= 4
        )
        w.plan(*args, *heads, q_data_type=q.dtype, kv_data_type=pool.dtype)
    return lambda: w.run(q, pool)


# --- replay ------------------------------------------------------------------------------------------
def _backend(backend: str, device: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "flashinfer" and not device.startswith("cuda"):
        raise ValueError("the flashinfer backend needs a CUDA device")
    if backend == "flashinfer" and not flashinfer_available():
        raise ValueError("the flashinfer backend needs the flashinfer package")
    if backend == "auto":
        return "flashinfer" if device.startswith("cuda") and flashinfer_available() else "torch"
    return backend


def groups(layout) -> tuple[np.ndarray, np.ndarray]:
    """(decode requests: one query token, prefill requests: more), as request indices."""
    lens = np.diff(_queries(layout))
    return np.flatnonzero(lens == 1), np.flatnonzero(lens > 1)


def _query_rows(layout, requests: np.ndarray) -> np.ndarray:
    qo = _queries(layout)
    if not len(requests):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(qo[i], qo[i + 1]) for i in requests])


def replay(
    layout,
    model: ModelSpec,
    device: str = "cpu",
    backend: str = "auto",
    repeats: int = 20,
    seed: int = 0,
    q=None,
    pool=None,
) -> ReplayResult:
    """Run and time one layer's attention for the batch (random q and pool unless given: fp16 on
    CUDA, fp32 on a CPU). ``repeats`` timed runs per group, after a short warm-up."""
    import torch

    layout.check()
    _check_model(layout, model)
    backend = _backend(backend, device)
    if q is None or pool is None:
        q, pool = random_inputs(layout, model, device, seed)
    timer = make_timer(
        device, TimingConfig(warmup_s=0.01, rep_s=0.0, min_reps=repeats, max_reps=repeats)
    )
    output = q.new_empty(q.shape)
    times: list[float | None] = []
    for prefill, requests in zip((False, True), groups(layout)):
        if not len(requests):
            times.append(None)
            continue
        rows = torch.as_tensor(_query_rows(layout, requests), device=q.device)
        if backend == "flashinfer":
            sub = layout.select(requests)
            fn = _flashinfer_closure(sub, q[rows].contiguous(), pool, model, prefill)
        else:
            sub_q = q

            def fn(requests=requests, sub_q=sub_q):
                return reference_attention(layout, sub_q, pool, requests)

        output[rows] = fn().to(output.dtype)
        times.append(timer.measure(fn).median_s)
    return ReplayResult(output, times[0], times[1], backend, device)


# --- the cost model's view ---------------------------------------------------------------------------
def predicted(layout, cost: CostModel) -> Comparison:
    """One layer's attention as the cost model prices it: decode_attn_s over the decode requests'
    total context, prefill_attn_s over the prefills' (query, key) pairs."""
    _check_model(layout, cost.model)
    seq = np.asarray(layout.seq_lens, dtype=np.int64)
    qo = np.diff(_queries(layout))
    dec, pre = groups(layout)
    ctx = int(seq[dec].sum())
    lens = tuple((int(qo[i]), int(seq[i] - qo[i])) for i in pre)
    pairs = float(sum(attention_pairs(n, c) for n, c in lens))
    return Comparison(
        decode_requests=len(dec),
        decode_ctx_tokens=ctx,
        prefill_requests=len(pre),
        prefill_tokens=int(qo[pre].sum()),
        prefill_pairs=pairs,
        predicted_decode_s=cost.decode_attn_s(len(dec), ctx),
        predicted_prefill_s=cost.prefill_attn_s(pairs, len(pre), int(qo[pre].sum()), lens)
        if len(pre)
        else 0.0,
    )


def compare(
    layout,
    cost_model: CostModel,
    measured: ReplayResult | None = None,
    device: str = "cpu",
    backend: str = "auto",
    repeats: int = 20,
) -> Comparison:
    """``predicted`` next to a measurement (``measured``, or a ``replay`` run now)."""
    if measured is None:
        measured = replay(layout, cost_model.model, device, backend, repeats)
    pred = predicted(layout, cost_model)
    return dataclasses.replace(
        pred,
        measured_decode_s=measured.decode_s,
        measured_prefill_s=measured.prefill_s,
        backend=measured.backend,
    )


# --- command line ------------------------------------------------------------------------------------
def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.4f}"


def _ratio(measured: float | None, pred: float) -> str:
    return "-" if measured is None or pred <= 0 else f"{measured / pred:.2f}"


def format_table(rows: list[tuple[str, Comparison]]) -> str:
    header = (
        "layout",
        "dec",
        "ctx",
        "pred_dec_ms",
        "meas_dec_ms",
        "x",
        "pre",
        "q_tok",
        "pred_pre_ms",
        "meas_pre_ms",
        "x",
    )
    body = [
        (
            name,
            str(c.decode_requests),
            str(c.decode_ctx_tokens),
            _ms(c.predicted_decode_s),
            _ms(c.measured_decode_s),
            _ratio(c.measured_decode_s, c.predicted_decode_s),
            str(c.prefill_requests),
            str(c.prefill_tokens),
            _ms(c.predicted_prefill_s),
            _ms(c.measured_prefill_s),
            _ratio(c.measured_prefill_s, c.predicted_prefill_s),
        )
        for name, c in rows
    ]
    widths = [
        max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)
    ]
    lines = [
        "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))
    ]
    lines += [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in body
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m calibration.replay_layout",
        description="Replay exported paged layouts (iter-*.npz, or one file) through one layer's "
        "attention and print the cost model's prediction next to the measured time.",
    )
    p.add_argument(
        "path", help="a folder of iter-<n>.npz files (`kvsim export-layout`), or one file"
    )
    p.add_argument("--model", default="llama-3-8b", help="model of the exported run")
    p.add_argument("--hardware", default="h100-sxm", help="GPU name or profile of the cost model")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)

    import costmodels
    from sim.paged_layout import PagedLayout

    path = Path(args.path)
    files = (
        sorted(path.glob("iter-*.npz"), key=lambda f: int(f.stem.split("-")[1]))
        if path.is_dir()
        else [path]
    )
    if not files:
        print(f"replay_layout: no iter-*.npz files in {path}", file=sys.stderr)
        return 2
    cost = costmodels.cost_model(args.model, args.hardware)
    rows = []
    for f in files:
        layout = PagedLayout.load(f)
        rows.append(
            (
                f.name,
                compare(
                    layout, cost, device=args.device, backend=args.backend, repeats=args.repeats
                ),
            )
        )
    print(
        f"one layer's attention, {cost!r}, measured on {args.device} ({rows[0][1].backend}); "
        f"x = measured / predicted"
    )
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
