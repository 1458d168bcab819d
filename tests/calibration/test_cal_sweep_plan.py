"""The plan of a sweep (its shapes, in order) and the time budget that thins it: no torch needed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from calibration.grids import LONG_APPEND_N_CTX, LONG_APPEND_N_NEW, full_grid, quick_grid
from calibration.samples_io import read_samples_csv
from calibration.sweep_plan import (
    TRIM_ORDER,
    estimated_call_s,
    job_key,
    plan_sweep,
    plan_within_budget,
)
from calibration.timing import TimingConfig
from costmodels import get_model

GPU_CALL_S = estimated_call_s("cuda", TimingConfig())
COMMITTED = (
    Path(__file__).resolve().parents[2]
    / "calibration"
    / "measured"
    / "h100-sxm-llama3-8b-samples.csv"
)
OLD_TERMS = ("linear", "lm_head", "prefill_attn", "decode_attn", "h2d", "d2h")


def test_the_8b_plan_is_the_h100_sweep_and_its_estimate_its_duration() -> None:
    """The committed H100 sweep: 1281 samples (965 timed closures) in 266 s; the plan without
    the pageable and duplex copies holds its shapes and nothing else but the long appends."""
    plan = plan_sweep(
        full_grid(), get_model("llama-3-8b"), terms=OLD_TERMS, device="cuda", call_s=GPU_CALL_S
    )
    committed = {job_key(s) for s in read_samples_csv(COMMITTED)}
    old = [j for j in plan.jobs if j.key in committed]
    assert {j.key for j in old} == committed
    # That sweep timed 965 closures: two per token job; each now times a third (the linear part
    # in one closure), 316 more.
    tokens = sum(j.kind == "token" for j in old)
    assert sum(len(j.terms) for j in old) == 1281 and tokens == 316
    assert sum(j.timed_calls for j in old) == 965 + tokens
    assert GPU_CALL_S * 965 == pytest.approx(266, rel=0.02)
    added = [j for j in plan.jobs if j.key not in committed]
    assert Counter(j.kind for j in added) == {"prefill_attn": 20, "lm_head": 7}
    assert len({j.key for j in plan.jobs}) == len(plan.jobs)  # a key names one shape


def test_the_8b_plan_adds_long_appends_pageable_and_duplex_copies() -> None:
    """What the next GPU sweep measures beyond the committed one, and what it costs: 20 appends,
    18 pageable copies per direction, 10 duplex pairs, 7 LM head row counts (73 samples, one
    closure each) and the linear part of each token job in one closure (316): 389 closures,
    107 s."""
    from experiments.commands._calibrate_gpu_run import SHARDED_BUDGET_S

    plan = plan_sweep(full_grid(), get_model("llama-3-8b"), device="cuda", call_s=GPU_CALL_S)
    committed = {job_key(s) for s in read_samples_csv(COMMITTED)}
    added = [j for j in plan.jobs if j.key not in committed]
    assert Counter((j.kind, j.shape.pinned) for j in added) == {
        ("prefill_attn", True): 20,
        ("h2d", False): 18,
        ("d2h", False): 18,
        ("duplex", True): 10,
        ("lm_head", True): 7,
    }
    assert sum(len(j.terms) for j in plan.jobs) == 1281 + 73
    assert plan.estimate_s == pytest.approx(GPU_CALL_S * (965 + 73 + 316))  # 372 s
    assert plan.estimate_s < SHARDED_BUDGET_S  # the 70B shards' default budget trims nothing
    # The LM head through the GEMM's turn from weight-bound to compute-bound.
    rows = sorted(j.shape.tokens for j in plan.jobs if j.kind == "lm_head")
    assert rows == [1, 8, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 2048]
    # Appends of 2..64 tokens over 8k..64k cached tokens, one sequence (16 and 64 were there).
    appends = {
        (j.shape.n_new, j.shape.n_ctx)
        for j in plan.jobs
        if j.kind == "prefill_attn" and j.shape.seqs == 1
    }
    assert {(a, c) for a in LONG_APPEND_N_NEW for c in LONG_APPEND_N_CTX} <= appends
    # Decode at batch 1 over long contexts was in the grid already.
    batch1 = {j.shape.n_ctx for j in plan.jobs if j.kind == "decode_attn" and j.shape.seqs == 1}
    assert {8192, 16384, 32768, 65536, 131072} <= batch1
    # Duplex pairs from 2 MiB per direction; pageable copies over every copy size.
    duplex = [j.shape for j in plan.jobs if j.kind == "duplex"]
    assert min(s.nbytes for s in duplex) >= 2 << 20 and {s.copies for s in duplex} == {1, 16}
    assert all(s.pinned for s in duplex)
    pageable = {(j.shape.nbytes, j.shape.copies) for j in added if j.kind == "h2d"}
    assert pageable == set(full_grid().pageable_shapes())


def test_long_appends_respect_the_grids_memory_bound() -> None:
    import dataclasses

    small = dataclasses.replace(full_grid(), max_kv_tokens=40_000).filtered()
    assert max(s * (a + c) for a, c, s in small.prefill) <= 40_000
    assert (48, 32768, 1) in small.prefill and (2, 65536, 1) not in small.prefill


def test_a_cpu_plan_leaves_out_the_copy_engine_shapes_and_says_why() -> None:
    plan = plan_sweep(quick_grid(), get_model("llama-3-8b"), device="cpu")
    assert all(j.shape.pinned and j.kind != "duplex" for j in plan.jobs)
    assert any(s.startswith("pageable: no copy engines") for s in plan.skipped)
    assert any(s.startswith("duplex: no copy engines") for s in plan.skipped)
    gpu = plan_sweep(quick_grid(), get_model("llama-3-8b"), device="cuda")
    assert gpu.count("duplex") == 2 and not gpu.skipped
    assert sum(not j.shape.pinned for j in gpu.jobs) == 6  # 3 sizes x 2 directions
    # Asked for neither: planned for neither, nothing said.
    none = plan_sweep(quick_grid(), get_model("llama-3-8b"), terms=OLD_TERMS, device="cpu")
    assert not none.skipped


def test_a_tp_shard_is_measured_with_narrower_shards_of_the_full_model() -> None:
    plan = plan_sweep(full_grid(), get_model("llama-3-70b"), tp=4, device="cuda")
    shards = {j.model.name for j in plan.jobs if j.kind == "token"}
    assert shards == {f"Llama-3-70B/tp{k}" for k in (4, 8, 16, 32)}
    layer = {j.model for j in plan.jobs if j.kind != "token"}
    assert len(layer) == 1
    (m,) = layer
    assert (m.name, m.num_heads, m.num_kv_heads, m.intermediate_size) == (
        "Llama-3-70B/tp4",
        16,
        2,
        7168,
    )


def test_the_plan_depends_on_the_seed_only_through_the_order() -> None:
    model = get_model("llama-3-8b")
    a = plan_sweep(quick_grid(), model, seed=0)
    b = plan_sweep(quick_grid(), model, seed=1)
    assert [j.key for j in a.jobs] != [j.key for j in b.jobs]
    assert sorted(map(repr, (j.key for j in a.jobs))) == sorted(map(repr, (j.key for j in b.jobs)))
    assert [j.key for j in a.jobs] == [j.key for j in plan_sweep(quick_grid(), model, seed=0).jobs]


def test_a_budget_thins_gemm_tokens_first_and_keeps_both_ends() -> None:
    model = get_model("llama-3-70b")
    full = plan_sweep(full_grid(), model, tp=8, device="cuda", call_s=GPU_CALL_S)
    plan, what = plan_within_budget(
        full_grid(), 0.8 * full.estimate_s, GPU_CALL_S, model=model, tp=8, device="cuda"
    )
    assert plan.estimate_s <= 0.8 * full.estimate_s < full.estimate_s
    assert "gemm_tokens x1" in what and "decode" not in what
    g = plan.grid
    assert g.decode == full_grid().decode and g.prefill == full_grid().prefill
    assert min(g.gemm_tokens) == 1 and max(g.gemm_tokens) == 8192
    assert set(g.gemm_tokens) < set(full_grid().gemm_tokens)
    assert g.name == "full/budget-" + f"{0.8 * full.estimate_s:g}s"


def test_the_trim_is_deterministic_and_follows_the_documented_order() -> None:
    model = get_model("llama-3-8b")
    runs = [
        plan_within_budget(full_grid(), 60, GPU_CALL_S, model=model, device="cuda")
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    plan, what = runs[0]
    assert plan.estimate_s <= 60
    order = [part.split(" x")[0] for part in what.split("by halving ")[1].split(", ")]
    assert order == [a for a in TRIM_ORDER if a in order]  # first halvings in TRIM_ORDER
    assert {s for _, _, s in plan.grid.prefill} == {1, 4}  # batch sizes never thinned
    assert set(plan.grid.copy_counts) == {1, 16, 256}
    assert plan.grid.gemm_shards == (1, 2, 4, 8)


def test_a_budget_too_small_measures_the_smallest_grid_instead_of_failing() -> None:
    plan, what = plan_within_budget(
        quick_grid(), 1e-3, GPU_CALL_S, model=get_model("llama-3-8b"), device="cuda"
    )
    assert plan.jobs and "nothing left to thin" in what
    for kind in ("token", "prefill_attn", "decode_attn", "h2d", "d2h"):
        assert len({j.shape for j in plan.jobs if j.kind == kind}) >= 3, kind
    with pytest.raises(ValueError, match="budget"):
        plan_within_budget(quick_grid(), 0, GPU_CALL_S, model=get_model("llama-3-8b"))


def test_a_budget_that_fits_changes_nothing() -> None:
    model = get_model("llama-3-8b")
    plan, what = plan_within_budget(quick_grid(), 1e6, GPU_CALL_S, model=model)
    assert what == "" and plan == plan_sweep(quick_grid(), model, call_s=GPU_CALL_S)
