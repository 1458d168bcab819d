"""Cost terms and iteration assembly, against figures worked by hand from the specs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import (
    BatchShape,
    CostModel,
    IterationCost,
    attention_pairs,
    cost_model,
    get_model,
    load_profile,
    pipelined_time,
)

# Analytic H100 constants, from the datasheet figures and the stated Level-0 efficiencies.
H100_BW, H100_F = 3.35e12, 989.4e12
W_BW, GEMM_F, ATTN_F, KV_BW, EW_BW = (
    0.8 * H100_BW,
    0.7 * H100_F,
    0.4 * H100_F,
    0.75 * H100_BW,
    0.5 * H100_BW,
)
TAU = 10e-6

# Llama-3-8B, from its config: h=4096, 32 q heads, 8 kv heads, d=128, I=14336, L=32
P_L3 = 4096 * 4096 + 2 * 4096 * 8 * 128 + 4096 * 4096 + 3 * 4096 * 14336


@pytest.fixture(scope="module")
def cm() -> CostModel:
    return cost_model("llama-3-8b", "h100-sxm")


def test_gemm_floor_at_one_token(cm) -> None:
    floor = P_L3 * 2 / W_BW  # 436 MB of bf16 weights at 2.68 TB/s = 162.8 us
    assert floor == pytest.approx(162.76e-6, rel=1e-3)
    assert cm.linear_s(1) == pytest.approx(TAU + floor, rel=1e-12)
    # Flat below the knee N* = F_eff * b / (2 * BW_eff) = 258 tokens: memory-bound.
    assert cm.linear_s(200) == cm.linear_s(1)
    assert cm.linear_s(300) > cm.linear_s(1)


def test_gemm_compute_slope(cm) -> None:
    slope = 2 * P_L3 / GEMM_F  # 0.63 us per token per layer
    assert cm.linear_s(8192) - cm.linear_s(4096) == pytest.approx(4096 * slope, rel=1e-9)
    assert cm.linear_s(4096) == pytest.approx(TAU + 4096 * slope, rel=1e-12)


def _tiled(cm: CostModel, **fields) -> CostModel:
    lin = dataclasses.replace(cm.profile.linear, **fields)
    return CostModel(cm.model, dataclasses.replace(cm.profile, linear=lin))


def test_per_gemm_form_by_hand(cm) -> None:
    # One 128x256 tile, no overhead, full waves (tail 1), hard max, weights only: each GEMM is
    # max(b*K*NO/bw, waves*SMs*2*128*256*K/flops) with ceil(N/128)*ceil(NO/256) tiles.
    t = _tiled(cm, gemm_tiles=((128, 256),), gemm_wave_tail=1.0, gemm_sm_count=132)
    shapes = ((4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096))
    for n in (1, 128, 129, 4096):
        want = 0.0
        for k, no in shapes:
            waves = -(-(-(-n // 128) * -(-no // 256)) // 132)
            want += max(2 * k * no / W_BW, waves * 132 * 2 * 128 * 256 * k / GEMM_F)
        assert t.linear_s(n) == pytest.approx(TAU + want, rel=1e-12)
        assert t.linear_s(n) == t.linear_s(n)  # the cached price is the price
    # The knee p and activation bytes: smax of the memory (weights + N*(K + NO)) and compute terms.
    s = _tiled(cm, gemm_knee_p=2.0, gemm_activation_bytes=True)
    want = sum(
        ((2 * (k * no + 64 * (k + no)) / W_BW) ** 2 + (2 * 64 * k * no / GEMM_F) ** 2) ** 0.5
        for k, no in shapes
    )
    assert s.linear_s(64) == pytest.approx(TAU + want, rel=1e-12)


def test_layer_form_is_the_default(cm) -> None:
    # Defaults of the per-GEMM fields: the layer's max(floor, slope), to the last bit.
    for n in (1, 200, 300, 4096):
        assert cm.linear_s(n) == TAU + max(P_L3 * 2 / W_BW, n * (2.0 * P_L3 / GEMM_F))


def test_elementwise(cm) -> None:
    assert cm.elementwise_s(1000) == pytest.approx(1000 * 196_608 / EW_BW, rel=1e-12)
    assert cm.elementwise_s(0) == 0.0


def test_prefill_attention_quadratic_in_new_linear_in_ctx(cm) -> None:
    per_pair = 4 * 32 * 128 / ATTN_F
    t = lambda n, c: cm.prefill_attn_s(attention_pairs(n, c), 1, n, ((n, c),)) - TAU  # noqa: E731
    assert t(1000, 0) == pytest.approx(1000 * 500 * per_pair, rel=1e-12)
    # quadratic in n_new at n_ctx = 0
    assert t(2000, 0) == pytest.approx(4 * t(1000, 0), rel=1e-12)
    # linear in n_ctx at fixed n_new, slope 4*Hq*d*n_new/F
    assert t(256, 8000) - t(256, 4000) == pytest.approx(t(256, 4000) - t(256, 0), rel=1e-9)
    assert t(256, 4000) - t(256, 0) == pytest.approx(4 * 32 * 128 * 256 * 4000 / ATTN_F, rel=1e-9)


def test_decode_attention_linear_in_total_context(cm) -> None:
    per_tok = 4096 / KV_BW  # 4 KiB per token-layer at 2.51 TB/s = 1.63 ns
    assert cm.decode_attn_s(64, 128_000) == pytest.approx(TAU + 128_000 * per_tok, rel=1e-12)
    d = lambda b, c: cm.decode_attn_s(b, c) - TAU  # noqa: E731
    assert d(64, 256_000) == pytest.approx(2 * d(64, 128_000), rel=1e-12)
    assert cm.decode_attn_s(0, 0) == 0.0


def test_per_sequence_terms() -> None:
    base = load_profile("h100")
    prof = dataclasses.replace(
        base,
        name="per-seq",
        prefill_attn=dataclasses.replace(base.prefill_attn, per_seq_s=3e-6),
        decode_attn=dataclasses.replace(base.decode_attn, per_seq_s=1e-7),
    )
    cm2 = CostModel(get_model("llama-3-8b"), prof)
    cm1 = CostModel(get_model("llama-3-8b"), base)
    assert cm2.decode_attn_s(64, 1000) - cm1.decode_attn_s(64, 1000) == pytest.approx(64 * 1e-7)
    pairs = 2 * attention_pairs(100, 0)
    lens = ((100, 0), (100, 0))
    assert cm2.prefill_attn_s(pairs, 2, 200, lens) - cm1.prefill_attn_s(
        pairs, 2, 200, lens
    ) == pytest.approx(2 * 3e-6)


def test_layer_is_the_sum_of_its_terms(cm) -> None:
    shape = BatchShape.prefill(500, 3000) + BatchShape.decode(32, 32 * 1500)
    n = 500 + 32
    expected = (
        cm.linear_s(n)
        + cm.elementwise_s(n)
        + cm.prefill_attn_s(attention_pairs(500, 3000), 1, 500, ((500, 3000),))
        + cm.decode_attn_s(32, 48_000)
    )
    assert cm.layer_s(shape) == pytest.approx(expected, rel=1e-12)
    assert cm.layer_s(BatchShape()) == 0.0


def test_lm_head(cm) -> None:
    head = 4096 * 128256
    assert cm.lm_head_s(1) == pytest.approx(head * 2 / W_BW, rel=1e-12)  # 392 us floor
    assert cm.lm_head_s(4096) == pytest.approx(4096 * 2 * head / GEMM_F, rel=1e-12)
    assert cm.lm_head_s(0) == 0.0


def test_copy_time(cm) -> None:
    gib = 2**30
    # One page-layer copy per (16-token page, layer): 1 GiB of Llama-3-8B KV = 512 pages x 32 layers.
    copies = gib // (16 * 131072) * 32
    assert copies == 16384
    assert cm.copy_s("h2d", gib, copies) == pytest.approx(copies * 5e-6 + gib / 55.63e9, rel=1e-12)
    assert cm.copy_s("d2h", gib, 1) == pytest.approx(5e-6 + gib / (0.8 * 64e9), rel=1e-12)
    assert cm.copy_s("h2d", 0, 0) == 0.0
    with pytest.raises(ValueError, match="direction"):
        cm.copy_s("p2p", 1, 1)
    with pytest.raises(ValueError):
        cm.copy_s("h2d", -1, 0)


def test_empty_iteration_costs_nothing(cm) -> None:
    assert cm.iteration(BatchShape()) == IterationCost(0.0, 0.0, 0.0, 0.0, 0.0)


def test_iteration_without_copies(cm) -> None:
    shape = BatchShape.decode(64, 64 * 2000)
    it = cm.iteration(shape)
    expected = 32 * cm.layer_s(shape) + cm.lm_head_s(64) + 0.5e-3
    assert it.total_s == it.compute_s == pytest.approx(expected, rel=1e-12)
    assert it.stall_s == 0.0 and it.h2d_s == 0.0 and it.d2h_s == 0.0


def test_iteration_pipelined_follows_the_layer_recurrence(cm) -> None:
    shape = BatchShape.prefill(2000, 0)
    t_c = cm.layer_s(shape)
    eps = cm.profile.overlap.compute_slowdown
    for h2d_bytes, copies in [
        (10 * 2**20, 320),
        (2 * 2**30, 32 * 1024),
    ]:  # compute-bound, copy-bound
        it = cm.iteration(shape, h2d_bytes=h2d_bytes, h2d_copies=copies)
        assert it.h2d_s == pytest.approx(copies * 5e-6 + h2d_bytes / 55.63e9, rel=1e-12)
        t_x = it.h2d_s / 32
        body = pipelined_time([t_x] * 32, [t_c] * 32, compute_slowdown=eps)
        assert it.total_s == pytest.approx(body + cm.lm_head_s(1) + 0.5e-3, rel=1e-9)
        assert it.compute_s == pytest.approx(32 * t_c + cm.lm_head_s(1) + 0.5e-3, rel=1e-12)
        assert it.stall_s == pytest.approx(it.total_s - it.compute_s, rel=1e-12)
        assert it.stall_s > 0
    # Copy-bound by hand: every layer waits for its copy, the last layer's compute sticks out.
    it = cm.iteration(shape, h2d_bytes=2 * 2**30, h2d_copies=32 * 1024)
    assert it.total_s == pytest.approx(it.h2d_s + t_c + cm.lm_head_s(1) + 0.5e-3, rel=1e-12)


def test_iteration_without_pipelining(cm) -> None:
    shape = BatchShape.decode(16, 16 * 4000)
    it = cm.iteration(shape, h2d_bytes=64 * 2**20, h2d_copies=512, pipelining=False)
    assert it.total_s == pytest.approx(it.h2d_s + it.compute_s, rel=1e-12)
    assert it.stall_s == pytest.approx(it.h2d_s, rel=1e-9)
    # A backend that cannot pipeline per layer ignores pipelining=True.
    prof = dataclasses.replace(
        cm.profile,
        name="no-layerwise",
        overlap=dataclasses.replace(cm.profile.overlap, layerwise_h2d=False),
    )
    cm2 = CostModel(cm.model, prof)
    assert cm2.iteration(shape, h2d_bytes=64 * 2**20, h2d_copies=512).total_s == it.total_s


def test_d2h_runs_concurrently(cm) -> None:
    shape = BatchShape.decode(8, 8000)
    plain = cm.iteration(shape)
    small = cm.iteration(shape, d2h_bytes=2**20, d2h_copies=16)
    assert small.total_s == plain.total_s and small.d2h_s > 0 and small.stall_s == 0.0
    big = cm.iteration(shape, d2h_bytes=4 * 2**30, d2h_copies=1024)
    assert big.total_s == pytest.approx(big.d2h_s, rel=1e-12) and big.d2h_s > plain.total_s


def test_copy_only_iteration(cm) -> None:
    it = cm.iteration(BatchShape(), h2d_bytes=2**30, h2d_copies=100)
    assert it.compute_s == 0.0
    assert it.total_s == pytest.approx(it.h2d_s, rel=1e-12) == pytest.approx(it.stall_s, rel=1e-12)


shapes = st.builds(
    lambda n, c, b, k: BatchShape.prefill(n, c) + BatchShape.decode(b, b * k),
    st.integers(0, 8192),
    st.integers(0, 32768),
    st.integers(0, 256),
    st.integers(1, 8192),
)


@settings(max_examples=200, deadline=None)
@given(shape=shapes, nbytes=st.integers(0, 8 * 2**30), copies=st.integers(0, 100_000))
def test_pipelining_never_worse_and_copies_never_free(shape, nbytes, copies) -> None:
    cm = cost_model("llama-3-8b", "h100")
    pipe = cm.iteration(shape, h2d_bytes=nbytes, h2d_copies=copies)
    serial = cm.iteration(shape, h2d_bytes=nbytes, h2d_copies=copies, pipelining=False)
    base = cm.iteration(shape)
    assert serial.total_s >= pipe.total_s - 1e-12
    assert pipe.total_s >= base.total_s - 1e-12
    assert pipe.total_s >= pipe.h2d_s - 1e-12
    assert pipe.stall_s >= -1e-12


def test_prefill_s_is_a_lone_prefill(cm) -> None:
    expected = 32 * cm.layer_s(BatchShape.prefill(1000, 0)) + cm.lm_head_s(1) + 0.5e-3
    assert cm.prefill_s(1000) == pytest.approx(expected, rel=1e-12)
    assert cm.prefill_s(100, 5000) > cm.prefill_s(100, 0)  # a resident history is attended to


def test_pensieve_constants(cm) -> None:
    dec = cm.pensieve_constants()
    assert dec.alpha == pytest.approx(4096 / KV_BW, rel=1e-12)
    assert dec.beta == pytest.approx(TAU, rel=1e-12)
    assert dec.non_attention == pytest.approx(cm.linear_s(1) + cm.elementwise_s(1), rel=1e-12)
    pf = cm.pensieve_constants(128)
    assert pf.alpha == pytest.approx(4 * 32 * 128 * 128 / ATTN_F, rel=1e-12)
    for ctx in (0, 100, 5000, 100_000):
        assert dec.layer_s(ctx) == pytest.approx(cm.layer_s(BatchShape.decode(1, ctx)), rel=1e-12)
        assert pf.layer_s(ctx) == pytest.approx(cm.layer_s(BatchShape.prefill(128, ctx)), rel=1e-12)
    with pytest.raises(ValueError):
        cm.pensieve_constants(0)


def test_constants_transfer_across_models() -> None:
    # One profile, two models: the memory-bound floor scales with the weight bytes exactly.
    a, b = cost_model("llama-3-8b", "h100"), cost_model("llama-3-70b", "h100")
    ratio = (
        get_model("llama-3-70b").linear_params_per_layer
        / get_model("llama-3-8b").linear_params_per_layer
    )
    assert (b.linear_s(1) - TAU) / (a.linear_s(1) - TAU) == pytest.approx(ratio, rel=1e-12)
    assert b.kv_bytes_per_token == 327680


def test_batch_shape_rules() -> None:
    assert attention_pairs(10, 5) == 10 * (5 + 5)
    assert BatchShape.prefill(0, 100) == BatchShape()
    s = BatchShape.prefill(10, 5) + BatchShape.prefill(4, 0) + BatchShape.decode(3, 300)
    # The sums, and each prefill's (n_new, n_ctx) in order; the decode lengths were not given.
    assert s == BatchShape(14, 108.0, 2, 3, 300, prefill_lens=((10, 5), (4, 0)))
    assert s != BatchShape(14, 108.0, 2, 3, 300)  # a shape without lengths is another shape
    assert s.decode_lens is None and s.tokens == 17 and s.rows == 5
    d = BatchShape.decode(2, 30, (10, 20)) + BatchShape.decode(1, 5, (5,))
    assert d.decode_lens == (10, 20, 5) and d.prefill_lens is None
    assert (BatchShape() + d) == d  # an empty group adds no lengths and loses none
    for bad in (
        dict(prefill_tokens=-1),
        dict(prefill_tokens=5),
        dict(prefill_seqs=1),
        dict(decode_ctx_tokens=10),
        dict(prefill_pairs=3.0),
        dict(prefill_tokens=5, prefill_seqs=1, prefill_lens=((4, 0),)),  # lengths miss the sum
        dict(prefill_tokens=5, prefill_seqs=2, prefill_lens=((5, 0),)),  # one length per sequence
        dict(decode_seqs=2, decode_ctx_tokens=9, decode_lens=(4, 4)),
        dict(decode_seqs=2, decode_ctx_tokens=8, decode_lens=(9, -1)),
    ):
        with pytest.raises(ValueError):
            BatchShape(**bad)
    with pytest.raises(ValueError):
        attention_pairs(-1, 0)


def test_decode_step_s_equals_iteration_to_the_last_bit():
    import random

    from costmodels import BatchShape, cost_model

    rng = random.Random(5)
    for model, hw in (
        ("llama-3-8b", "h100-sxm"),
        ("llama-2-13b", "a100-sxm"),
        ("qwen2.5-7b", "h200"),
    ):
        cm = cost_model(model, hw)
        for _ in range(200):
            b = rng.randint(1, 512)
            c = rng.randint(0, 4_000_000)
            assert cm.decode_step_s(b, c) == cm.iteration(BatchShape.decode(b, c)).total_s


# --- decode kernels without split-KV: CTAs per (sequence, query head) in waves ------------------------
def test_decode_waves_by_hand() -> None:
    from costmodels.cost import decode_waves

    # contexts 100, 30, 200 rounded up to 64-key tiles: 128, 64, 256; 16 heads over 20 SMs.
    # Longest first: 256 fills 16 of a wave (4 free); 128 takes the 4 and a new wave (8 free);
    # 64 takes the 8 and a third wave. Wave keys 256 + 128 + 64, longest 256.
    assert decode_waves((100, 30, 200), 16, 20, 64) == (3, 448, 256)
    # B equal contexts: ceil(B * heads / sms) waves of the rounded context
    assert decode_waves((1000,) * 9, 16, 132, 64) == (2, 2 * 1024, 1024)
    assert decode_waves((), 16, 132, 64) == (0, 0, 0)
    # a sequence with no context still runs its CTAs (as the even split prices it)
    assert decode_waves((0, 0), 100, 132, 64) == (2, 0, 0)


def test_decode_wave_term_prices_by_hand() -> None:
    from costmodels import DecodeAttnTerm

    base = cost_model("llama-3-70b", "h100-sxm", tp=4)  # 16 query heads per GPU, d = 128
    dec = DecodeAttnTerm(3e-6, 1e-7, 3e12, 6e-7, 1.5e-10, 5e-11, 132, 64)
    cm = CostModel(get_model("llama-3-70b"), dataclasses.replace(base.profile, decode_attn=dec), 4)
    kv = cm.model.kv_bytes_per_token_layer  # 2 kv heads * 128 * 2 (K, V) * 2 bytes = 1024
    assert kv == 1024
    d = 128

    def hand(seqs, ctx, waves, wave_keys, longest):
        return (
            3e-6 + 1e-7 * seqs + ctx * kv / 3e12
            + waves * 6e-7 + d * (1.5e-10 * wave_keys + 5e-11 * longest)
        )  # fmt: skip

    # one sequence of 54,016 keys (844 tiles): 16 CTAs, one wave
    assert cm.decode_attn_s(1, 54016) == pytest.approx(hand(1, 54016, 1, 54016, 54016), rel=1e-12)
    # 16 sequences, 3,000 keys in all: the even split's longest is 188 -> 192; 256 CTAs, 2 waves
    assert cm.decode_attn_s(16, 3000) == pytest.approx(hand(16, 3000, 2, 384, 192), rel=1e-12)
    # with each sequence's context: one of 2,000 and 15 of 40 (1,000 + 600 = 2,600 keys in all)
    lens = (2000,) + (40,) * 15  # 2048 (16 CTAs), then 64 for 240 CTAs: 116 fit, 124 in a wave
    assert cm.decode_attn_s(16, 2600, lens) == pytest.approx(
        hand(16, 2600, 2, 2048 + 64, 2048), rel=1e-12
    )
    # the shape's lengths reach the layer price
    shape = BatchShape.decode(16, 2600)
    listed = dataclasses.replace(shape, decode_lens=lens)
    diff = cm.layer_s(listed) - cm.layer_s(shape)
    assert diff == pytest.approx(cm.decode_attn_s(16, 2600, lens) - cm.decode_attn_s(16, 2600))
    # Pensieve's decode constants are the one-sequence price at whole tiles
    pc = cm.pensieve_constants(1)
    for ctx in (64, 640, 54016):
        one = cm.layer_s(BatchShape.decode(1, ctx))
        assert pc.alpha * ctx + pc.beta + pc.non_attention == pytest.approx(one, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    seqs=st.integers(1, 300),
    ctx=st.integers(1, 70000),
    heads=st.sampled_from([2, 8, 16, 32, 64]),
    sms=st.sampled_from([84, 108, 132]),
    tile=st.sampled_from([1, 16, 32, 64, 128]),
)
def test_decode_waves_of_equal_contexts_in_closed_form(seqs, ctx, heads, sms, tile) -> None:
    # The fitter's design and the even split's price use this closed form.
    from costmodels.cost import decode_waves, equal_decode_waves

    waves, longest = equal_decode_waves(seqs, ctx, heads, sms, tile)
    assert waves == -(-seqs * heads // sms) and longest == -(-ctx // tile) * tile
    assert decode_waves((ctx,) * seqs, heads, sms, tile) == (waves, waves * longest, longest)


def test_shape_free_prices_equal_iteration_to_the_last_bit():
    import random

    rng = random.Random(7)
    for cm in (
        cost_model("llama-3-8b", "h100-sxm"),
        cost_model("llama-2-13b", "a100-sxm"),
        cost_model("llama-3-70b", "h100-sxm", tp=4),
    ):
        for _ in range(200):
            lens = tuple(rng.randint(0, 30_000) for _ in range(rng.randint(0, 64)))
            b, c = len(lens), sum(lens)
            d2h, calls, async_save = rng.choice((0, 2**20)), rng.randint(0, 64), rng.random() < 0.5
            for known in (lens, None):
                shape = BatchShape.decode(b, c, known or None)
                want = cm.iteration(
                    shape, d2h_bytes=d2h, d2h_copies=calls, async_save=async_save
                ).total_s
                assert cm.decode_iteration_s(b, c, known, d2h, calls, async_save) == want
            n, ctx = rng.randint(0, 20_000), rng.randint(0, 3_000_000)
            assert cm.lone_prefill_s(n, ctx) == cm.iteration(BatchShape.prefill(n, ctx)).total_s
