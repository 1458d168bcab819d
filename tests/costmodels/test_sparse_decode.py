"""Sparse decode with CPU offload: one iteration priced by hand on a tiny model, bounds, memory."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import (
    CopyTerm,
    CostModel,
    DecodeAttnTerm,
    LinearTerm,
    ModelSpec,
    OverlapTerm,
    PrefillAttnTerm,
    Profile,
    ProfileMeta,
    cost_model,
)
from costmodels.sparse_decode import (
    layer_page_bytes,
    metadata_bytes,
    ring_buffer_bytes,
    round_counts,
    sparse_decode_cost,
    sparse_gpu_bytes,
)

# Times in units of MS = 2**-10 s: every sum below is exact in binary.
MS = 2.0**-10

# h=64, 2 query heads, 1 KV head, d=4, I=128, gated, bf16, 2 layers.
#   KV per token per layer: 2 * 1 * 4 * 2 = 16 B; a 4-token page of one layer: 64 B.
#   Linear params per layer: 64*8 + 2*64*4 + 8*64 + 3*64*128 = 26112 (52224 B);
#   LM head: 64 * 408 = 26112 params, the same 52224 B.
#   Elementwise bytes per token per layer: 2 * (10*64 + 2*3*4 + 3*128 + 4*4) = 2128 B.
TINY = ModelSpec(
    name="tiny",
    num_layers=2,
    hidden_size=64,
    num_heads=2,
    num_kv_heads=1,
    head_dim=4,
    intermediate_size=128,
    vocab_size=408,
    dtype_bytes=2,
    gated_mlp=True,
    source="made up for tests",
)
PAGE = 4


@cache
def tiny_cm(copy_latency: float = MS, copy_bw: float = 64 / MS) -> CostModel:
    """Per layer: GEMMs MS + 4 MS (weights at 52224 B per 4 MS; FLOPs free), elementwise MS per
    sequence, decode attention MS + MS per sequence + MS/4 per token (16 B at 64 B/MS), a page copy
    MS + MS (64 B at 64 B/MS). LM head 4 MS, step overhead 8 MS."""
    profile = Profile(
        name="tiny-hand",
        linear=LinearTerm(
            tau_s=MS, weight_bw_Bps=52224 / (4 * MS), flops=1e30, elementwise_bw_Bps=2128 / MS
        ),
        prefill_attn=PrefillAttnTerm(tau_s=0.0, flops=1e15, per_seq_s=0.0),
        decode_attn=DecodeAttnTerm(tau_s=MS, per_seq_s=MS, kv_bw_Bps=64 / MS),
        h2d=CopyTerm(latency_s=copy_latency, bw_Bps=copy_bw),
        d2h=CopyTerm(latency_s=MS, bw_Bps=64 / MS),
        overlap=OverlapTerm(compute_slowdown=0.0, layerwise_h2d=True),
        step_overhead_s=8 * MS,
        meta=ProfileMeta(gpu="test", backend="test", dtype="bf16", source="analytic: hand-made"),
    )
    return CostModel(TINY, profile)


def test_tiny_profile_is_what_we_think() -> None:
    cm = tiny_cm()
    assert TINY.kv_bytes_per_token_layer == 16 and layer_page_bytes(TINY, PAGE) == 64
    assert cm.linear_s(2) == 5 * MS and cm.elementwise_s(2) == 2 * MS
    assert cm.decode_attn_s(2, 8) == (1 + 2 + 2) * MS
    assert cm.copy_s("h2d", 2 * 64, 2) == 4 * MS
    assert cm.lm_head_s(2) == 4 * MS and cm.profile.step_overhead_s == 8 * MS


# Two sequences: 3 and 1 selected CPU pages, 2 and 0 tokens on the GPU, 5 + 2 pages scanned.
SELECTED, LOCAL, SCANNED = np.array([3, 1]), np.array([2, 0]), np.array([5, 2])


def test_hand_iteration_two_slots() -> None:
    # Per layer (MS): non-attention 5 + 2 = 7; selection 7 pages * 16 B / (64 B/MS) = 1.75.
    # Local attention (1 sequence, 2 tokens): 1 + 1 + 0.5 = 2.5, from 0 on the compute stream.
    # Rounds: j=0 two pages (copy 4, attention 1 + 2 + 8/4 = 5), j=1 and j=2 one page (copy 2,
    # attention 3). Ring, 2 slots: copy 0-4, attention 4-9; copy 4-6, attention 9-12; page 2 waits
    # for round 0's slot (free at 9): copy 9-11, attention 12-15. Attention part: 15, of which
    # 4 - 2.5 = 1.5 waiting on round 0's copy.
    c = sparse_decode_cost(tiny_cm(), PAGE, SELECTED, LOCAL, SCANNED, slots=2)
    assert (c.non_attention_s, c.selection_s, c.attention_s) == (7 * MS, 1.75 * MS, 15 * MS)
    assert c.layer_s == 23.75 * MS and c.rounds == 3
    assert c.total_s == (2 * 23.75 + 4 + 8) * MS  # 2 layers + head + overhead
    assert c.compute_s == (2 * (7 + 1.75 + 2.5 + 11) + 4 + 8) * MS
    assert c.stall_s == 2 * 1.5 * MS
    assert c.h2d_s == 2 * (4 + 2 + 2) * MS
    assert (c.h2d_bytes, c.h2d_copies) == (2 * 4 * 64, 2 * 4)


def test_hand_iteration_one_slot_serialises() -> None:
    # 1 slot: copy 0-4, attention 4-9; copy 9-11, attention 11-14; copy 14-16, attention 16-19.
    c = sparse_decode_cost(tiny_cm(), PAGE, SELECTED, LOCAL, SCANNED, slots=1)
    assert c.attention_s == 19 * MS
    assert c.total_s == (2 * (7 + 1.75 + 19) + 4 + 8) * MS


def test_free_copies_leave_dense_attention_plus_per_round_overhead() -> None:
    # No latency, bandwidth so high that 64 B round to nothing next to MS: the ring never waits.
    # Dense attention over the selected 16 tokens of 2 sequences: 1 + 2 + 16/4 = 7 MS. Three
    # rounds instead of one kernel: 2 more launches (2 MS) and each sequence's pages beyond its
    # first pay the per-sequence (merge) cost again: (4 - 2) * 1 MS. Plus the local 2.5 MS first.
    cm = tiny_cm(copy_latency=0.0, copy_bw=1e300)
    c = sparse_decode_cost(cm, PAGE, SELECTED, LOCAL, SCANNED, slots=2)
    assert cm.decode_attn_s(2, 16) == 7 * MS
    assert c.attention_s == (2.5 + 7 + 2 + 2) * MS
    assert c.stall_s == 0.0 and c.compute_s == c.total_s
    assert (
        sparse_decode_cost(cm, PAGE, SELECTED, LOCAL, SCANNED, slots=1).attention_s == c.attention_s
    )


def test_nothing_offloaded_is_the_dense_decode_step() -> None:
    cm = tiny_cm()
    local = np.array([3, 7, 1])
    c = sparse_decode_cost(cm, PAGE, np.zeros(3, dtype=int), local, 0, slots=4)
    assert c.total_s == cm.decode_step_s(3, 11)
    assert c.rounds == 0 and c.h2d_s == 0.0 and c.stall_s == 0.0


def test_empty_batch_costs_nothing() -> None:
    c = sparse_decode_cost(tiny_cm(), PAGE, np.array([], dtype=int), np.array([], dtype=int), 0, 2)
    assert c.total_s == 0.0 and c.rounds == 0


def test_round_counts() -> None:
    assert round_counts(np.array([3, 1, 0, 2])).tolist() == [3, 2, 1]
    assert round_counts(np.array([0, 0])).tolist() == []
    assert round_counts(np.array([2, 2])).tolist() == [2, 2]


@pytest.mark.parametrize(
    "args, key",
    [
        ((np.array([1, 2]), np.array([0]), 0, 2), "selected has 2 sequences, local_tokens 1"),
        ((np.array([1, -1]), np.array([0, 0]), 0, 2), "selected must be >= 0"),
        ((np.array([1.0]), np.array([0]), 0, 2), "selected must be a 1-D integer array"),
        ((np.array([1]), np.array([0]), -3, 2), "metadata_pages must be >= 0"),
        ((np.array([1]), np.array([0]), 0, 0), "slots must be an integer >= 1"),
    ],
)
def test_rejects_bad_input(args, key) -> None:
    with pytest.raises(ValueError, match=key):
        sparse_decode_cost(tiny_cm(), PAGE, *args)
    with pytest.raises(ValueError, match="page_tokens"):
        sparse_decode_cost(tiny_cm(), 0, np.array([1]), np.array([0]), 0, 2)


def test_gpu_bytes_by_hand() -> None:
    # Ring: 3 slots x 2 sequences x one 4-token page of one layer (64 B) = 384 B. Metadata of 10
    # pages: min and max key (2 x 1 head x 4 x 2 B = 16 B) per page per layer, 2 layers = 320 B.
    assert ring_buffer_bytes(TINY, PAGE, 3, 2) == 384
    assert metadata_bytes(TINY, 10) == 320
    assert sparse_gpu_bytes(TINY, PAGE, 3, 2, 10) == 704
    with pytest.raises(ValueError, match="slots"):
        sparse_gpu_bytes(TINY, PAGE, 0, 2, 10)
    with pytest.raises(ValueError, match="metadata_pages"):
        sparse_gpu_bytes(TINY, PAGE, 3, 2, -1)


@pytest.fixture(scope="module")
def llama() -> CostModel:
    return cost_model("llama-3-8b", "h100-sxm")


contexts = st.lists(st.integers(1, 40_000), min_size=1, max_size=32)


@settings(max_examples=150, deadline=None)
@given(ctx=contexts)
def test_reading_every_page_costs_at_least_dense_decode(llama, ctx) -> None:
    """K = all, slots plenty, no selection scan: every token is attended as in dense decode, plus
    copies and per-round launches, so the step is never cheaper than dense."""
    page = 16
    ctx = np.array(ctx)
    sel, local = ctx // page, ctx % page
    c = sparse_decode_cost(llama, page, sel, local, 0, slots=4096)
    dense = llama.decode_step_s(len(ctx), int(ctx.sum()))
    assert c.total_s >= dense * (1 - 1e-12)
    if sel.any():
        assert c.total_s > dense


@settings(max_examples=150, deadline=None)
@given(ctx=contexts, k=st.integers(1, 64), slots=st.integers(1, 16), extra=st.integers(0, 31))
def test_monotone_in_slots_and_selection(llama, ctx, k, slots, extra) -> None:
    page = 16
    ctx = np.array(ctx)
    cpu_pages, local = ctx // page, ctx % page
    sel = np.minimum(cpu_pages, k)
    base = sparse_decode_cost(llama, page, sel, local, cpu_pages, slots)
    wider = sparse_decode_cost(llama, page, sel, local, cpu_pages, slots + 1)
    assert wider.total_s <= base.total_s * (1 + 1e-12)
    more = sel.copy()
    more[extra % len(more)] += 1
    grown = sparse_decode_cost(llama, page, more, local, cpu_pages, slots).total_s
    assert grown >= base.total_s * (1 - 1e-12)  # a longer round may be off the critical path
    if more.max() > sel.max():  # a new round is always on it
        assert grown > base.total_s
    assert base.total_s == pytest.approx(base.compute_s + base.stall_s, rel=1e-12)
    assert base.stall_s >= -1e-15


def test_slowdown_and_layerwise_flag_do_not_enter() -> None:
    """The ring assumes its copy engine runs beside compute at full speed (documented); the profile's
    overlap settings are the layer pipeline's, not the ring's."""
    cm = tiny_cm()
    other = CostModel(TINY, dataclasses.replace(cm.profile, overlap=OverlapTerm(0.5, False)))
    a = sparse_decode_cost(cm, PAGE, SELECTED, LOCAL, SCANNED, 2)
    b = sparse_decode_cost(other, PAGE, SELECTED, LOCAL, SCANNED, 2)
    assert a.total_s == b.total_s
