"""Tensor parallelism: the per-GPU shard, the all-reduces per layer, and whether a model fits."""

from __future__ import annotations

import dataclasses
import math

import pytest

from costmodels import (
    BatchShape,
    CostModel,
    cost_model,
    get_hardware,
    get_model,
    load_profile,
    memory_fit,
)
from costmodels.profile import AllReduceTerm, Profile, read_profile_file, save_profile
from costmodels.tensor_parallel import (
    allreduce_term,
    fit_problem,
    replication_note,
    ring_allreduce_s,
)

L70 = get_model("llama-3-70b")
L8 = get_model("llama-3-8b")
H100 = load_profile("h100-sxm")


# --- the shard -----------------------------------------------------------------------------------
def test_shard_of_70b_over_4_by_hand() -> None:
    s = L70.shard(4)
    assert (s.num_heads, s.num_kv_heads, s.intermediate_size) == (16, 2, 7168)
    assert (s.hidden_size, s.head_dim, s.num_layers) == (8192, 128, 80)  # not split
    assert s.vocab_size == 128256 // 4 == 32064  # LM head and embedding split by vocabulary
    # Q and O: 8192 x (16*128) each; K and V: 8192 x (2*128) each; gate, up, down: 8192 x 7168.
    assert s.linear_params_per_layer == 2 * 8192 * 2048 + 2 * 8192 * 256 + 3 * 8192 * 7168
    assert s.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2 == 81920  # a quarter of 327680
    # weights per GPU: 80 layers + LM head + embedding, 2 bytes each
    assert s.weight_bytes == 2 * (80 * s.linear_params_per_layer + 2 * 8192 * 32064)
    assert s.weight_bytes == pytest.approx(L70.weight_bytes / 4, rel=1e-9)


def test_tp1_is_the_model_itself() -> None:
    assert L70.shard(1) is L70


def test_fewer_kv_heads_than_gpus_replicates_one_head_per_gpu() -> None:
    s = L8.shard(16)  # 8 KV heads over 16 GPUs
    assert s.num_kv_heads == 1 and L8.kv_head_copies(16) == 2 and L8.kv_head_copies(8) == 1
    assert s.kv_bytes_per_token == 2 * 32 * 1 * 128 * 2  # one head's, not half a head's
    note = replication_note(L8, 16)
    assert "8 KV heads" in note and "replicated on 2 GPUs" in note
    assert replication_note(L8, 8) == ""


@pytest.mark.parametrize("tp", [3, 5, 64])
def test_a_split_that_does_not_divide_is_refused(tp: int) -> None:
    with pytest.raises(ValueError, match=f"cannot be split over tp={tp}.*divisible"):
        L8.shard(tp)


@pytest.mark.parametrize("tp", [0, -2, True, 2.0])
def test_tp_must_be_a_positive_integer(tp) -> None:
    with pytest.raises(ValueError, match="tp must be a positive integer"):
        CostModel(L8, H100, tp)


# --- the all-reduce ------------------------------------------------------------------------------
def test_h100_allreduce_from_nvlink_by_hand() -> None:
    hw = get_hardware("h100-sxm")
    assert (hw.nvlink_per_direction_Bps, hw.allreduce_latency_s) == (450e9, 10e-6)
    assert get_hardware("a100-sxm").nvlink_per_direction_Bps == 300e9
    assert get_hardware("h200").nvlink_per_direction_Bps == 450e9
    term = allreduce_term(H100)
    assert (term.latency_s, term.bw_Bps) == (10e-6, pytest.approx(0.82 * 450e9))
    # 1000 tokens of Llama-3-70B activations: 1000 * 8192 * 2 B = 16.384 MB over a ring of 4:
    # 10 us + 2 * 3/4 * 16.384e6 / 369e9 = 10 us + 66.6 us
    want = 10e-6 + 1.5 * 16.384e6 / 369e9
    assert ring_allreduce_s(term, 4, 16.384e6) == pytest.approx(want, rel=1e-12)
    assert cost_model(L70, H100, tp=4).allreduce_s(1000) == pytest.approx(want, rel=1e-12)
    assert ring_allreduce_s(term, 1, 16.384e6) == 0.0


def test_each_layer_pays_two_allreduces_in_its_linear_term() -> None:
    cm = CostModel(L70, H100, tp=4)
    lin, s = H100.linear, L70.shard(4)
    p = s.linear_params_per_layer
    for n in (1, 64, 4096):
        gemms = lin.tau_s + max(p * 2 / lin.weight_bw_Bps, n * 2.0 * p / lin.flops)
        ar = 10e-6 + 2 * 3 / 4 * n * 8192 * 2 / (0.82 * 450e9)
        assert cm.linear_s(n) == pytest.approx(gemms + 2 * ar, rel=1e-12)
    # The all-reduce reaches every path that prices a layer: decode, spans, Pensieve constants.
    assert cm.decode_step_s(3, 3000) == cm.iteration(BatchShape.decode(3, 3000)).total_s
    assert cm.decode_steps_s(3, [3000])[0] == cm.decode_step_s(3, 3000)
    assert cm.pensieve_constants(1).non_attention == cm.linear_s(1) + cm.elementwise_s(1)


def test_tp1_prices_are_bit_identical_to_the_single_gpu_formulas() -> None:
    """tp = 1 adds no all-reduce and keeps the whole model: the same operations as before TP."""
    cm = CostModel(L8, H100)
    assert cm.tp == 1 and cm.model is L8 and cm.allreduce_s(1000) == 0.0
    lin = H100.linear
    p = L8.linear_params_per_layer
    for n in (1, 7, 300, 8192):
        assert cm.linear_s(n) == lin.tau_s + 0.0 + max(
            p * 2 / lin.weight_bw_Bps, n * (2.0 * p / lin.flops)
        )
    # An all-reduce term in the profile, or none at all, changes nothing at tp = 1.
    bare = dataclasses.replace(H100, allreduce=None)
    shapes = [BatchShape.decode(8, 8 * 2000), BatchShape.prefill(512, 4096)]
    for other in (CostModel(L8, bare), CostModel(L8, H100, tp=1)):
        for shape in shapes:
            assert other.iteration(shape) == cm.iteration(shape)
        assert other.decode_step_s(8, 16000) == cm.decode_step_s(8, 16000)


def test_profile_allreduce_term_overrides_the_hardware_and_round_trips(tmp_path) -> None:
    mine = dataclasses.replace(H100, allreduce=AllReduceTerm(latency_s=5e-6, bw_Bps=300e9))
    path = save_profile(mine, tmp_path / "mine.yaml")
    again = read_profile_file(path)
    assert again.allreduce == AllReduceTerm(5e-6, 300e9)
    cm = CostModel(L70, again, tp=2)
    assert cm.allreduce_s(100) == pytest.approx(5e-6 + 1.0 * 100 * 8192 * 2 / 300e9, rel=1e-12)


def test_old_profile_files_load_without_an_allreduce_term() -> None:
    p = load_profile("a100-vidur")  # committed before TP: no allreduce key
    assert p.allreduce is None
    # at tp > 1 it is derived from meta.gpu's hardware (a100-sxm: NVLink3, 300 GB/s per direction)
    assert allreduce_term(p) == AllReduceTerm(10e-6, pytest.approx(0.82 * 300e9))


def test_bad_allreduce_term_names_the_key(tmp_path) -> None:
    data = H100.to_dict()
    data["allreduce"] = {"latency_s": 1e-5, "bw_Bps": 0}
    with pytest.raises(ValueError, match="allreduce.bw_Bps"):
        Profile.from_dict(data, "bad.yaml")


def test_tp_without_any_allreduce_cost_is_an_error() -> None:
    unknown = dataclasses.replace(
        H100, allreduce=None, meta=dataclasses.replace(H100.meta, gpu="some-pcie-card")
    )
    CostModel(L8, unknown)  # tp = 1 needs none
    with pytest.raises(ValueError, match="tp > 1 needs an all-reduce cost.*some-pcie-card"):
        CostModel(L8, unknown, tp=2)


# --- memory fit ----------------------------------------------------------------------------------
def test_70b_on_one_h100_does_not_fit_and_says_why() -> None:
    fit = memory_fit(L70, 1, get_hardware("h100-sxm"), 4.0)
    assert not fit.fits and fit.weight_bytes == L70.weight_bytes
    assert fit.kv_bytes == 4 * 2**30
    msg = fit_problem(L70, 1, H100, 4.0)
    for words in (
        "Llama-3-70B at tp=1",
        "141.1 GB of weights",
        "4.3 GB of KV",
        "80.0 GB",
        "h100-sxm",
    ):
        assert words in msg, msg
    assert "(tp=2 fits)" in msg


def test_70b_over_4_h100s_fits_with_a_quarter_of_the_kv_pool_each() -> None:
    fit = memory_fit(L70, 4, get_hardware("h100-sxm"), 40.0)
    assert fit.fits and fit.kv_bytes == 10 * 2**30
    assert fit.weight_bytes == pytest.approx(35.28e9, rel=1e-3)
    assert fit_problem(L70, 4, H100, 40.0) is None


def test_unbounded_kv_pool_checks_weights_alone() -> None:
    fit = memory_fit(L8, 1, get_hardware("h100-sxm"), math.inf)
    assert fit.fits and fit.kv_bytes == 0.0 and "unbounded" in fit.describe()


# --- 70B over 4 H100s against physics ------------------------------------------------------------
H100_HW = get_hardware("h100-sxm")
WEIGHT_BYTES_PER_GPU = L70.weight_params * L70.dtype_bytes / 4


def test_70b_tp4_decode_is_above_its_weight_read_bound_and_near_it() -> None:
    cm = cost_model("llama-3-70b", "h100-sxm", tp=4)
    bound = WEIGHT_BYTES_PER_GPU / H100_HW.hbm_bw_Bps  # each GPU reads its weights once a step
    for ctx in (1, 1000, 8000):
        t = cm.decode_step_s(1, ctx)
        assert t >= bound
        assert t < 3 * bound, (ctx, t, bound)


@pytest.mark.parametrize("n", [512, 4096, 8192])
def test_70b_tp4_prefill_is_above_its_flop_and_byte_bounds(n: int) -> None:
    cm = cost_model("llama-3-70b", "h100-sxm", tp=4)
    flop_bound = 2.0 * L70.weight_params / 4 * n / H100_HW.dense_bf16_flops
    byte_bound = WEIGHT_BYTES_PER_GPU / H100_HW.hbm_bw_Bps
    assert cm.prefill_s(n) >= max(flop_bound, byte_bound)


def test_tp_cuts_the_per_gpu_step_but_not_by_more_than_tp() -> None:
    one = cost_model("llama-3-8b", "h100-sxm")
    two = cost_model("llama-3-8b", "h100-sxm", tp=2)
    for t1, t2 in (
        (one.decode_step_s(1, 1000), two.decode_step_s(1, 1000)),
        (one.prefill_s(4096), two.prefill_s(4096)),
    ):
        assert t1 / 2 < t2 < t1


# --- the simulator's memory at tp > 1 ------------------------------------------------------------
def test_each_gpu_holds_its_share_of_the_groups_kv_pool() -> None:
    import sim
    import traces
    from sim.config import GIB, MemoryConfig

    sessions = traces.load_trace({"kind": "synthetic", "sessions": 3, "seed": 1}).sessions
    memory = MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=2.0)
    stats = {
        tp: sim.simulate(sessions, cost_model("llama-3-8b", "h100-sxm", tp=tp), memory).stats
        for tp in (1, 4)
    }
    assert stats[1].gpu_capacity_bytes == GIB and stats[1].cpu_capacity_bytes == 2 * GIB
    assert stats[4].gpu_capacity_bytes == GIB // 4 and stats[4].cpu_capacity_bytes == GIB // 2
    # 8 KV heads over 4 GPUs: each GPU's page is a quarter, so the group holds as many tokens
    page = {
        tp: 16 * cost_model("llama-3-8b", "h100-sxm", tp=tp).kv_bytes_per_token for tp in (1, 4)
    }
    assert stats[1].gpu_capacity_bytes // page[1] == stats[4].gpu_capacity_bytes // page[4]


def test_a_tokens_kv_over_the_group_counts_replicated_heads_on_each_gpu():
    # Llama-3-8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 B a token, split by tp up
    # to its 8 KV heads; at tp 16 each head is held on two GPUs: twice the bytes over the group
    from costmodels import get_model

    m = get_model("llama-3-8b")
    assert [m.kv_bytes_per_token_over(tp) for tp in (1, 2, 8, 16, 32)] == [
        131_072, 131_072, 131_072, 262_144, 524_288,
    ]  # fmt: skip
