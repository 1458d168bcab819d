"""Recovery costs of evicted KV (recompute or pipelined swap-in), against hand calculations."""

from __future__ import annotations

import pytest

from costmodels import (
    BatchShape,
    attention_pairs,
    cost_model,
    pipelined_time_uniform,
    recompute_s,
    recovery_s,
    swap_in_s,
)

# Analytic H100 constants (datasheet figures at the Level-0 efficiencies) and Llama-3-8B's shape.
H100_F = 989.4e12
GEMM_F, ATTN_F = 0.7 * H100_F, 0.4 * H100_F
P_L3 = 4096 * 4096 + 2 * 4096 * 8 * 128 + 4096 * 4096 + 3 * 4096 * 14336
L, HQ, D, BT = 32, 32, 128, 16


@pytest.fixture(scope="module")
def cm():
    return cost_model("llama-3-8b", "h100-sxm")


def test_recompute_by_hand(cm) -> None:
    # 16 tokens after 144 of context: per layer the GEMM slope, the elementwise pass and the causal
    # attention pairs 16*144 + 16*16/2 = 2432 at 4*H_q*d FLOPs each.
    n, before = 16, 144
    assert attention_pairs(n, before) == 16 * 144 + 16 * 16 / 2
    per_layer = n * 2 * P_L3 / GEMM_F + cm.elementwise_s(n) + 2432 * 4 * HQ * D / ATTN_F
    assert recompute_s(cm, n, before) == pytest.approx(L * per_layer, rel=1e-12)
    assert recompute_s(cm, n, before, layer=5) == pytest.approx(6 * per_layer, rel=1e-12)  # 0..5
    assert recompute_s(cm, 0, before) == 0.0


def test_swap_in_is_the_pipelined_stall(cm) -> None:
    nbytes = BT * cm.kv_bytes_per_token
    t_copy = cm.copy_s("h2d", nbytes, L)  # one copy per layer of one page
    t_c = cm.layer_s(BatchShape.prefill(BT, 160))
    stall = (
        pipelined_time_uniform(L, t_copy / L, t_c, cm.profile.overlap.compute_slowdown) - L * t_c
    )
    assert swap_in_s(cm, nbytes, 1, 160, BT) == pytest.approx(stall, rel=1e-12)
    assert 0 < stall < t_copy  # pipelining hides part of the copy


def test_recovery_chooses_and_clips_to_the_context(cm) -> None:
    # Page 9 of a 150-token session holds tokens 144..149: 6 tokens to recompute.
    span = {
        "first_page": 9,
        "pages": 1,
        "layer": -1,
        "nbytes": BT * cm.kv_bytes_per_token,
        "context_tokens": 150,
        "block_tokens": BT,
    }
    assert recovery_s(cm, dropped=True, **span) == recompute_s(cm, 6, 144)
    assert recovery_s(cm, dropped=False, **span) == swap_in_s(cm, span["nbytes"], 1, 150, BT)
    assert recovery_s(cm, dropped=True, **{**span, "first_page": 10}) == 0.0  # past the context


def test_recompute_under_tensor_parallelism_pays_the_all_reduces_per_token() -> None:
    # One GPU of four: the shard's GEMMs and attention, plus per layer two all-reduces of the
    # recomputed tokens' activations (ring: 2(tp-1)/tp * hidden * 2 bytes over the bus bandwidth
    # per token). The all-reduce latency is a batch's, paid once per iteration, not a span's.
    from costmodels.tensor_parallel import allreduce_term

    tp4 = cost_model("llama-3-70b", "h100-sxm", tp=4)
    one = cost_model("llama-3-70b", "h100-sxm")
    ar = allreduce_term(tp4.profile)
    per_tok = 2 * 3 / 4 * 8192 * 2 / ar.bw_Bps
    assert tp4.allreduce_s_per_token == pytest.approx(per_tok, rel=1e-12)
    assert one.allreduce_s_per_token == 0.0
    n, before, layers = 64, 1000, 80
    shard = tp4.model
    hd = shard.num_heads * shard.head_dim
    per_layer = (
        n * 2 * shard.linear_params_per_layer / tp4.profile.linear.flops
        + tp4.elementwise_s(n)
        + attention_pairs(n, before) * 4 * hd / tp4.profile.prefill_attn.flops
        + n * hd * tp4.profile.prefill_attn.query_elem_s
        + n * 2 * per_tok
    )
    assert recompute_s(tp4, n, before) == pytest.approx(layers * per_layer, rel=1e-12)
