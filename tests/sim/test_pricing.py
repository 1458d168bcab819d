"""Iteration pricing: closed-form decode runs equal pricing the steps one by one, to the bit."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import BatchShape, CostModel, DecodeAttnTerm, cost_model
from sim.pricing import Prefill, Pricer, recompute_pairs

COST = cost_model("llama-3-8b", "h100-sxm")
PAGE = 16 * COST.kv_bytes_per_token
# The same with a decode kernel without split-KV (the wave term is not linear in the context).
WAVES = CostModel(
    COST.model,
    dataclasses.replace(
        COST.profile,
        decode_attn=DecodeAttnTerm(3e-6, 9e-8, 3.35e12, 6e-7, 1.35e-10, 5.8e-11, 132, 64),
    ),
)


@settings(max_examples=200, deadline=None)
@given(
    cost=st.sampled_from([COST, WAVES]),
    seqs=st.integers(1, 300),
    ctx=st.integers(0, 2_000_000),
    steps=st.integers(1, 200),
    horizon=st.one_of(st.just(math.inf), st.floats(0.0, 5.0)),
    used=st.integers(0, 10**11),
    gbs=st.floats(0.0, 1e9),
)
def test_decode_run_equals_stepping(cost, seqs, ctx, steps, horizon, used, gbs):
    start = 1.25
    pricer = Pricer(cost, PAGE, pipelining=True)
    run = pricer.decode_run(seqs, ctx, steps, start, horizon, used, gbs)
    # the definition: one iteration at a time, each priced as a whole iteration of the batch
    t, acc, durations = start, gbs, []
    for k in range(steps):
        if k and t >= horizon:
            break
        d = cost.iteration(BatchShape.decode(seqs, ctx + k * seqs)).total_s
        durations.append(d)
        acc += used * d
        t += d
    assert run.steps == len(durations)
    assert run.durations == durations  # bit for bit
    assert run.end_s == t and run.gpu_byte_seconds == acc


@pytest.mark.parametrize("cost", [COST, WAVES], ids=["split-kv", "waves"])
def test_vector_and_scalar_decode_prices_are_the_iteration_price(cost):
    ctx = np.arange(0, 3_000_000, 7919)
    for seqs in (1, 2, 31, 256):
        price = cost.decode_pricer(seqs)
        vec = cost.decode_steps_s(seqs, ctx)
        for c, v in zip(ctx.tolist(), vec.tolist()):
            assert price(c) == v == cost.iteration(BatchShape.decode(seqs, c)).total_s


@given(
    cost=st.sampled_from([COST, WAVES]),
    asks=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 2_000_000)), max_size=30),
)
def test_the_pricers_decode_pricers_price_each_batch_size(cost, asks):
    # one pricer asked of batch sizes in any order, again and again: each price is its own size's
    pricer = Pricer(cost, PAGE, pipelining=True)
    for seqs, ctx in asks:
        assert pricer.decode_pricer(seqs)(ctx) == cost.decode_step_s(seqs, ctx)


@given(
    st.lists(st.integers(0, 400), max_size=60, unique=True).map(sorted),
    st.integers(1, 4),  # pages a unit
    st.integers(0, 8000),  # tokens the session held
)
def test_recompute_pairs_of_an_array_or_a_list_is_the_sum_in_page_order(units, ppu, old):
    span = ppu * 16
    model = 0.0  # the plain sum, unit by unit in order
    for i in units:
        n = min(old, i * span + span) - i * span
        model += n * (i * span + n / 2.0)
    as_list = recompute_pairs(units, ppu, 16, old)
    as_array = recompute_pairs(np.asarray(units, dtype=np.int64), ppu, 16, old)
    assert as_list == as_array == model


def test_recompute_pairs_by_hand():
    # pages of 16 tokens; the session held 40 tokens; pages 0 and 2 are recomputed:
    # page 0: 16 tokens at 0 -> 16 * (0 + 8) = 128; page 2: 8 tokens at 32 -> 8 * (32 + 4) = 288
    assert recompute_pairs([0, 2], 1, 16, 40) == 128 + 288
    many = list(range(0, 200, 3))  # the numpy path adds in the same order
    assert recompute_pairs(many, 1, 16, 5000) == sum(
        (min(5000, 16 * i + 16) - 16 * i) * (16 * i + (min(5000, 16 * i + 16) - 16 * i) / 2.0)
        for i in many
    )


@settings(max_examples=200, deadline=None)
@given(seqs=st.integers(1, 300), ctx=st.integers(0, 2_000_000), pages=st.integers(1, 4000))
def test_a_decode_step_with_a_demotion_is_the_iteration_price(seqs, ctx, pages):
    pricer = Pricer(COST, PAGE, pipelining=True)
    shape = BatchShape.decode(seqs, ctx)
    d2h = pages * PAGE
    expect = COST.iteration(shape, d2h_bytes=d2h, d2h_copies=pages * COST.model.num_layers).total_s
    assert pricer.decode_with_d2h_s(seqs, ctx, d2h) == expect


def test_per_layer_copies_pay_one_call_per_layer_by_hand():
    # 100 pages of all 32 layers swapped in: vLLM-style per-page copies are 3200 calls, a gather
    # per layer 32; the bytes are the same. No pipelining: the iteration is copies + compute.
    L, p = COST.model.num_layers, COST.profile.h2d
    shape = BatchShape.prefill(16, 1600)
    compute = COST.iteration(shape).total_s
    for per_layer, calls in ((False, 100 * L), (True, L)):
        pricer = Pricer(COST, PAGE, pipelining=False, per_layer_copies=per_layer)
        t = pricer.iteration_s(shape, 0, 0, h2d_bytes=100 * PAGE, h2d_pages=100)
        copy = calls * p.latency_s + 100 * PAGE / p.bw_Bps
        assert math.isclose(t, compute + copy, rel_tol=1e-12)
        # demotions of 70 pages of one layer each: a call each, or (not knowing which layers
        # they are in) at most one per layer
        one_layer = PAGE // L
        d2h = pricer.copy_s("d2h", 70 * one_layer)
        d = COST.profile.d2h
        assert d2h == (L if per_layer else 70) * d.latency_s + 70 * one_layer / d.bw_Bps
        assert pricer.copy_s("d2h", 7 * one_layer) == 7 * d.latency_s + 7 * one_layer / d.bw_Bps


# --- the shape-free prices: bit for bit what pricing the shapes gives ---------------------------
# A prefill kernel with a wave term and a per-row term too (prefill lengths matter to it).
PF_WAVES = CostModel(
    WAVES.model,
    dataclasses.replace(
        WAVES.profile,
        prefill_attn=dataclasses.replace(
            WAVES.profile.prefill_attn, query_elem_s=2e-12, wave_key_elem_s=4e-11, wave_sm_count=132
        ),
    ),
)
COSTS = st.sampled_from([COST, WAVES, PF_WAVES, cost_model("llama-2-13b", "a100-sxm")])


@st.composite
def decode_batches(draw):
    """(seqs, total context, each one's context or None or ())."""
    lens = draw(st.lists(st.integers(0, 40_000), max_size=40))
    known = draw(st.sampled_from(["lens", "none", "empty"]))
    given_lens = tuple(lens) if known == "lens" else (None if known == "none" else ())
    if known == "empty":  # () only where there is no decoder (a shape's rule)
        return 0, 0, given_lens
    return len(lens), sum(lens), given_lens


@settings(max_examples=300, deadline=None)
@given(
    cost=COSTS,
    batch=decode_batches(),
    pages=st.integers(0, 4000),
    async_save=st.booleans(),
    per_layer=st.booleans(),
)
def test_a_decode_only_iteration_is_the_shape_price(cost, batch, pages, async_save, per_layer):
    seqs, ctx, lens = batch
    pricer = Pricer(cost, PAGE, True, async_save=async_save, per_layer_copies=per_layer)
    d2h = pages * (PAGE // cost.model.num_layers)
    shape = BatchShape() + BatchShape.decode(seqs, ctx, lens)
    calls = pricer.copy_calls(pages)
    want = cost.iteration(shape, d2h_bytes=d2h, d2h_copies=calls, async_save=async_save).total_s
    assert pricer._shape_free
    assert pricer.iteration_s(BatchShape(), seqs, ctx, d2h_bytes=d2h, dec_lens=lens) == want


@settings(max_examples=300, deadline=None)
@given(cost=COSTS, prompt=st.integers(-3, 40_000), history=st.integers(0, 2_000_000))
def test_an_ideal_ttft_is_the_lone_prefill_shape_price(cost, prompt, history):
    want = cost.iteration(BatchShape.prefill(max(prompt, 1), history)).total_s
    assert Pricer(cost, PAGE, True).ideal_ttft_s(prompt, history) == want
    assert cost.lone_prefill_s(prompt, history) == cost.prefill_s(prompt, history)


@settings(max_examples=100, deadline=None)
@given(
    cost=COSTS,
    asks=st.lists(
        st.tuples(st.integers(-3, 400), st.sampled_from([0, 0, 0, 16, 5000])), max_size=40
    ),
)
def test_one_pricers_ideal_ttfts_are_each_asks_own(cost, asks):
    # one pricer asked again and again (first turns' prices are kept by prompt length)
    pricer = Pricer(cost, PAGE, True)
    for prompt, history in asks + asks:
        want = cost.iteration(BatchShape.prefill(max(prompt, 1), history)).total_s
        assert pricer.ideal_ttft_s(prompt, history) == want


@settings(max_examples=300, deadline=None)
@given(
    news=st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 100_000)), max_size=8),
    recorded=st.booleans(),
    batch=decode_batches(),
)
def test_an_admission_shape_is_the_sum_of_its_groups(news, recorded, batch):
    seqs, ctx, lens = batch
    pf = Prefill(
        sum(n for n, _ in news),
        sum(n * (c + n / 2.0) for n, c in news),
        len(news),
        lens=list(news) if recorded else [],
    )
    want = pf.shape + BatchShape.decode(seqs, ctx, lens)
    got = pf.with_decode(seqs, ctx, lens)
    assert got == want
    assert math.copysign(1.0, got.prefill_pairs) == math.copysign(1.0, want.prefill_pairs)


class _Recording(CostModel):
    """A cost model that overrides ``iteration``: the pricer must keep calling it."""

    def __init__(self, base: CostModel) -> None:
        super().__init__(base.model, base.profile)
        self.seen: list[BatchShape] = []

    def iteration(self, shape, *args, **kwargs):
        self.seen.append(shape)
        return super().iteration(shape, *args, **kwargs)


def test_a_cost_model_that_overrides_iteration_sees_every_priced_shape():
    cost = _Recording(COST)
    pricer = Pricer(cost, PAGE, True)
    assert not pricer._shape_free
    assert pricer.iteration_s(BatchShape(), 3, 300) == COST.decode_step_s(3, 300)
    assert pricer.ideal_ttft_s(100, 50) == COST.prefill_s(100, 50)
    assert cost.seen == [BatchShape.decode(3, 300), BatchShape.prefill(100, 50)]


@given(
    st.integers(0, 3000),  # the run's first unit
    st.integers(1, 600),  # its units
    st.integers(1, 4),  # pages a unit
    st.integers(1, 64),  # tokens a page
    st.one_of(st.integers(0, 200_000), st.integers(0, 1 << 27)),  # tokens the session held
    st.integers(-1, 40),  # a unit left out of the run (none when out of range)
)
def test_recompute_pairs_of_a_run_is_the_sum_in_page_order(first, count, ppu, bt, old, gap):
    # a session's dropped run (its units below what it held, or not), or one unit short of it
    units = [i for i in range(first, first + count) if i != first + gap]
    span = ppu * bt
    model = 0.0  # the plain sum, unit by unit in order
    for i in units:
        n = min(old, i * span + span) - i * span
        model += n * (i * span + n / 2.0)
    got = recompute_pairs(np.asarray(units, dtype=np.int64), ppu, bt, old)
    assert got == model and type(got) is float
    assert recompute_pairs(units, ppu, bt, old) == model


def test_recompute_pairs_past_the_exact_bound_is_the_loops_sum():
    # a history of 476M tokens (pages of 313), its last 1.3M pages recomputed: the partial sums
    # pass 2^52, where a double rounds, and the closed form (exact) and the loop differ: the
    # loop's sum is the one
    span, first, count = 313, 215_257, 1_305_461
    units = np.arange(first, first + count)
    a = units * span
    loop = float((span * (a + span / 2.0)).cumsum()[-1])  # the numpy path: the loop's sums
    assert loop != span * span * ((first + count) ** 2 - first**2) / 2  # (rounded)
    assert recompute_pairs(units, 1, span, span * (first + count)) == loop
