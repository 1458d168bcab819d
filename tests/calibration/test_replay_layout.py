"""Replaying a paged layout: attention through the page table equals attention over each request's
contiguous K/V, and the cost model's prediction for the batch sits next to the measured time."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest
import yaml

from costmodels import ModelSpec, attention_pairs, cost_model
from sim.paged_layout import PagedLayout

torch = pytest.importorskip("torch")

from calibration.replay_layout import (  # noqa: E402  (after the torch skip)
    compare,
    main,
    predicted,
    reference_attention,
    replay,
)

TINY = ModelSpec(
    "tiny-replay",
    num_layers=2,
    hidden_size=32,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    vocab_size=100,
    dtype_bytes=2,
    gated_mlp=True,
    source="tests/calibration (a toy shape)",
)
SPEC_FIELDS = (
    "name",
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "dtype_bytes",
    "gated_mlp",
    "source",
)
PAGE = 4


def i32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def paged_batch(
    seq_lens, qo_lens=None, kv_layout="NHD", max_pages=24, device="cpu", dtype=torch.float32, seed=0
):
    """A layout over shuffled pool slots, the pool written from known per-request K and V
    ([seq, kv heads, d]) and NaN everywhere else, and random queries."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    pages = [-(-s // PAGE) for s in seq_lens]
    slots = rng.permutation(max_pages)[: sum(pages)]
    k_heads, d = TINY.num_kv_heads, TINY.head_dim
    layout = PagedLayout(
        kv_indptr=i32(np.r_[0, np.cumsum(pages)]),
        kv_page_indices=i32(slots),
        kv_last_page_len=i32([s - PAGE * (p - 1) for s, p in zip(seq_lens, pages)]),
        page_size=PAGE,
        num_kv_heads=k_heads,
        head_dim=d,
        max_num_pages=max_pages,
        kv_layout=kv_layout,
        qo_indptr=None if qo_lens is None else i32(np.r_[0, np.cumsum(qo_lens)]),
    )
    layout.check()
    pool = torch.full(layout.pool_shape, math.nan)
    ks, vs = [], []
    for i, seq in enumerate(seq_lens):
        k, v = torch.randn(seq, k_heads, d, generator=g), torch.randn(seq, k_heads, d, generator=g)
        ks.append(k)
        vs.append(v)
        for j, slot in enumerate(slots[layout.kv_indptr[i] : layout.kv_indptr[i + 1]]):
            a = j * PAGE
            n = min(PAGE, seq - a)
            for side, x in ((0, k), (1, v)):
                if kv_layout == "NHD":
                    pool[slot, side, :n] = x[a : a + n]
                else:
                    pool[slot, side, :, :n] = x[a : a + n].transpose(0, 1)
    total_q = sum(qo_lens) if qo_lens is not None else len(seq_lens)
    q = torch.randn(total_q, TINY.num_heads, d, generator=g)
    return layout, pool.to(device, dtype), q.to(device, dtype), ks, vs


def contiguous_attention(q, ks, vs, qo_lens):
    """Softmax attention written out: query head h reads KV head h // group, and the n queries of a
    request are its last n positions (each sees the keys up to itself)."""
    group = TINY.num_heads // TINY.num_kv_heads
    outs, start = [], 0
    for k, v, n in zip(ks, vs, qo_lens):
        qi = q[start : start + n].double()
        start += n
        kr = k.double().repeat_interleave(group, dim=1)  # [seq, Hq, d]
        vr = v.double().repeat_interleave(group, dim=1)
        seq = k.shape[0]
        scores = torch.einsum("qhd,shd->hqs", qi, kr) / math.sqrt(TINY.head_dim)
        pos = torch.arange(seq - n, seq)[:, None]  # each query's own position
        scores = scores.masked_fill(torch.arange(seq)[None, :] > pos, -math.inf)
        outs.append(torch.einsum("hqs,shd->qhd", scores.softmax(-1), vr))
    return torch.cat(outs)


DECODE = [1, 4, 9, 13, 2]
PREFILL_SEQ, PREFILL_QO = [7, 5, 20, 9, 3], [1, 5, 3, 9, 1]


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
def test_decode_through_the_page_table_equals_contiguous_attention(kv_layout):
    layout, pool, q, ks, vs = paged_batch(DECODE, kv_layout=kv_layout)
    out = reference_attention(layout, q, pool)
    want = contiguous_attention(q, ks, vs, [1] * len(DECODE))
    assert out.shape == (len(DECODE), TINY.num_heads, TINY.head_dim)
    assert torch.allclose(out.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
def test_a_ragged_prefill_batch_equals_contiguous_causal_attention(kv_layout):
    layout, pool, q, ks, vs = paged_batch(PREFILL_SEQ, PREFILL_QO, kv_layout=kv_layout, seed=1)
    res = replay(layout, TINY, backend="torch", repeats=2, q=q, pool=pool)
    want = contiguous_attention(q, ks, vs, PREFILL_QO)
    assert res.backend == "torch" and res.output.shape == (
        sum(PREFILL_QO),
        TINY.num_heads,
        TINY.head_dim,
    )
    assert torch.allclose(res.output.double(), want, atol=1e-5, rtol=1e-5)
    assert res.decode_s > 0 and res.prefill_s > 0  # one-token requests decode, the rest prefill


def test_a_decode_batch_has_no_prefill_time_and_random_inputs_fill_the_pool():
    layout, *_ = paged_batch(DECODE)
    res = replay(layout, TINY, repeats=2)
    assert res.prefill_s is None and res.decode_s > 0
    assert res.output.shape == (len(DECODE), TINY.num_heads, TINY.head_dim)
    assert torch.isfinite(res.output).all()


def test_the_prediction_is_the_cost_models_for_this_batch():
    cost = cost_model(TINY, "h100-sxm")
    layout, *_ = paged_batch(PREFILL_SEQ, PREFILL_QO)
    pred = predicted(layout, cost)
    # Requests 0 and 4 decode (7 + 3 tokens of context); 1, 2, 3 prefill 5, 3 and 9 tokens.
    pairs = attention_pairs(5, 0) + attention_pairs(3, 17) + attention_pairs(9, 0)
    assert (pred.decode_requests, pred.decode_ctx_tokens) == (2, 10)
    assert (pred.prefill_requests, pred.prefill_tokens, pred.prefill_pairs) == (3, 17, pairs)
    assert pred.predicted_decode_s == cost.decode_attn_s(2, 10)
    assert pred.predicted_prefill_s == cost.prefill_attn_s(pairs, 3, 17, ((5, 0), (3, 17), (9, 0)))
    both = compare(layout, cost, repeats=2)
    assert both.predicted_prefill_s == pred.predicted_prefill_s
    assert both.measured_decode_s > 0 and both.measured_prefill_s > 0 and both.backend == "torch"


def test_a_model_that_does_not_match_the_pool_is_refused():
    layout, *_ = paged_batch(DECODE)
    with pytest.raises(ValueError, match="KV heads"):
        replay(layout, cost_model("llama-3-8b", "h100-sxm").model)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        replay(layout, TINY, backend="flashinfer")


def test_the_command_prints_prediction_and_measurement_per_file(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump({f: getattr(TINY, f) for f in SPEC_FIELDS}))
    paged_batch(DECODE)[0].save(tmp_path / "iter-7.npz")
    paged_batch(PREFILL_SEQ, PREFILL_QO)[0].save(tmp_path / "iter-12.npz")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(tmp_path), "--model", str(spec), "--repeats", "2"]) == 0
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["iter-7.npz", "iter-12.npz"]
    cost = cost_model(TINY, "h100-sxm")
    assert f"{cost.decode_attn_s(5, sum(DECODE)) * 1e3:.4f}" in lines[2]


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)"
)
@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
def test_cuda_replay_matches_the_reference_and_is_timed(kv_layout):
    """FlashInfer when installed (else the torch reference on the GPU), fp16, against the CPU
    reference of the same pool; then the cost model's prediction next to the CUDA time."""
    layout, pool, q, ks, vs = paged_batch(
        PREFILL_SEQ, PREFILL_QO, kv_layout=kv_layout, max_pages=64, seed=2
    )
    cpu_pool = torch.nan_to_num(pool)  # FlashInfer may read a page's unused tail
    res = replay(
        layout,
        TINY,
        device="cuda",
        repeats=5,
        q=q.to("cuda", torch.float16),
        pool=cpu_pool.to("cuda", torch.float16),
    )
    want = contiguous_attention(
        q.half().float(), [k.half().float() for k in ks], [v.half().float() for v in vs], PREFILL_QO
    )
    assert torch.allclose(res.output.double().cpu(), want, atol=2e-2, rtol=2e-2)
    cmp = compare(layout, cost_model(TINY, "h100-sxm"), measured=res)
    assert cmp.measured_decode_s > 0 and cmp.measured_prefill_s > 0
    assert cmp.predicted_decode_s > 0 and cmp.predicted_prefill_s > 0
