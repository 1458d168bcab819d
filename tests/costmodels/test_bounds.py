"""Physical lower bounds: no priced operation is faster than its GPU's datasheet limits allow.

Every profile the project ships (the analytic profile of each GPU in hardware.yaml and every
committed profile), every registered model, and a grid of prefill, decode and mixed shapes: each
priced term must be >= max(FLOPs / dense BF16 peak, bytes certain to cross HBM / HBM peak), and
each copy >= bytes / nominal host-link rate. No slack: the peaks are physical ceilings, not fits.

Models whose weights exceed one GPU (the 66-70B ones) are kept: the bounds are arithmetic on the
shapes, and the simulator prices such models with the same formulas.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import (
    BatchShape,
    CostModel,
    HardwareSpec,
    ModelSpec,
    attention_pairs,
    available_hardware,
    available_models,
    get_hardware,
    get_model,
    load_profile,
)
from costmodels.hardware import find_hardware
from costmodels.profile import committed_profiles

# The GPU each committed profile was fitted or measured on. The measured profile names its GPU as
# nvidia-smi does: "H100 80GB HBM3" is the SXM5 board (the PCIe card is "H100 PCIe", HBM2e).
COMMITTED_GPU = {
    "a100-vidur": "a100-sxm",
    "h100-public": "h100-sxm",
    "h100-sxm-llama3-8b": "h100-sxm",
    "h100-sxm-llama3-70b-tp4": "h100-sxm",
    "h100-sxm-llama3-70b-tp8": "h100-sxm",
    "h200-llama3-8b": "h200",
}
NVIDIA_SMI_NAMES = {"NVIDIA H100 80GB HBM3": "h100-sxm"}
PROFILES = sorted([(g, g) for g in available_hardware()] + list(COMMITTED_GPU.items()))
PROFILE_IDS = [p for p, _ in PROFILES]
MODELS = available_models()

# Grids: prefill N = 1..32768 with cached context, decode batch 1..256 with per-sequence context to
# 32k, and mixed batches. Short appends (a few new tokens over a long cached context) are where the
# KV-read floor, not the FLOPs, sets the price of prefill attention.
PREFILL_N = (1, 2, 3, 8, 16, 31, 64, 100, 127, 128, 129, 256, 512, 1000, 2048, 4096, 8192, 16384)
PREFILL_N += (32768,)
PREFILL_CTX = (0, 1, 16, 100, 1024, 4096, 8192, 16384, 32768)
DECODE_B = (1, 2, 3, 4, 8, 16, 32, 64, 128, 256)
DECODE_CTX = (1, 16, 128, 1000, 1024, 4096, 8192, 16384, 32768)  # per sequence
MIXED = [
    ((n, c), (b, b * k))
    for n, c in ((1, 4096), (128, 0), (512, 2048), (2048, 0), (8192, 16384))
    for b, k in ((1, 1), (8, 4096), (64, 2000), (256, 32768))
]
COPY_BYTES = (0, 4096, 65536, 2**20, 2**27, 2**30, 8 * 2**30)
COPY_COUNTS = (0, 1, 32, 1024, 100_000)


@dataclass(frozen=True)
class Bounds:
    """Datasheet lower bounds of one model's operations on one GPU, per layer unless stated."""

    m: ModelSpec
    hw: HardwareSpec

    def _roof(self, flops: float, nbytes: float) -> float:
        return max(flops / self.hw.dense_bf16_flops, nbytes / self.hw.hbm_bw_Bps)

    def gemm(self, tokens: int) -> float:
        # Each weight is read at least once; 2 FLOPs per weight per token.
        p = self.m.linear_params_per_layer
        return self._roof(2.0 * tokens * p, p * self.m.dtype_bytes) if tokens > 0 else 0.0

    def elementwise(self, tokens: int) -> float:
        # The term's own byte count at HBM peak: the bound says its bandwidth is physical.
        return tokens * self.m.elementwise_bytes_per_token_layer / self.hw.hbm_bw_Bps

    def prefill_attn_flops(self, pairs: float) -> float:
        return 4.0 * self.m.num_heads * self.m.head_dim * pairs / self.hw.dense_bf16_flops

    def prefill_attn_kv(self, ctx_tokens: int) -> float:
        # Certain HBM bytes: the cached context's K and V, last touched in an earlier iteration and
        # evicted from L2 since by the other layers' weights (test_cached_kv_is_evicted_from_l2).
        # Q and the new tokens' K/V are written by the kernels just before and can be L2 hits, so
        # they are left out: a weaker bound, but a certain one.
        return ctx_tokens * self.m.kv_bytes_per_token_layer / self.hw.hbm_bw_Bps

    def decode_attn(self, ctx_tokens: int) -> float:
        return ctx_tokens * self.m.kv_bytes_per_token_layer / self.hw.hbm_bw_Bps

    def lm_head(self, rows: int) -> float:
        p = self.m.lm_head_params
        return self._roof(2.0 * rows * p, p * self.m.dtype_bytes) if rows > 0 else 0.0

    def copy(self, nbytes: float) -> float:
        return nbytes / self.hw.host_link_Bps

    def layer(self, prefills, decode_seqs: int, decode_ctx: int) -> float:
        """Kernels of one layer run one after another, so their bounds add."""
        tokens = sum(n for n, _ in prefills) + decode_seqs
        t = self.gemm(tokens) + self.elementwise(tokens) + self.decode_attn(decode_ctx)
        if prefills:
            pairs = sum(attention_pairs(n, c) for n, c in prefills)
            kv = sum(c for _, c in prefills)
            t += max(self.prefill_attn_flops(pairs), self.prefill_attn_kv(kv))
        return t

    def compute(self, prefills, decode_seqs: int, decode_ctx: int) -> float:
        rows = len(prefills) + decode_seqs
        return self.m.num_layers * self.layer(prefills, decode_seqs, decode_ctx) + self.lm_head(
            rows
        )


def _shape(prefills, decode_seqs: int, decode_ctx: int) -> BatchShape:
    s = BatchShape.decode(decode_seqs, decode_ctx) if decode_seqs else BatchShape()
    for n, c in prefills:
        s = s + BatchShape.prefill(n, c)
    return s


def _setup(profile_name: str, gpu: str, model: str) -> tuple[CostModel, Bounds]:
    m = get_model(model)
    return CostModel(m, load_profile(profile_name)), Bounds(m, get_hardware(gpu))


def _fmt(v: list) -> str:
    return f"{len(v)} violations, e.g. " + "; ".join(v[:3])


def _grid_shapes():
    for n in PREFILL_N:
        for c in PREFILL_CTX:
            yield ((n, c),), 0, 0
    for b in DECODE_B:
        for k in DECODE_CTX:
            yield (), b, b * k
    for pf, (b, ctx) in MIXED:
        yield (pf,), b, ctx
        yield (pf, (300, 100)), b, ctx  # two prefilling sequences


L2_BYTES = 50e6  # largest L2 of these GPUs (H100/H200 50 MB, A100 40 MB)


def test_cached_kv_is_evicted_from_l2() -> None:
    # Between two visits to a layer the other layers' weights stream through L2 (at least one
    # layer's worth, and every model's layer is several times L2), so its cached KV is cold.
    for model in MODELS:
        assert get_model(model).linear_weight_bytes_per_layer > 4 * L2_BYTES, model


# --- the profiles and their GPUs -------------------------------------------------------------------
def test_every_committed_profile_has_its_gpu() -> None:
    assert set(committed_profiles()) == set(COMMITTED_GPU), "map a new profile to its GPU here"
    for name, gpu in COMMITTED_GPU.items():
        meta_gpu = load_profile(name).meta.gpu
        hw = find_hardware(meta_gpu)
        assert (hw.name if hw else NVIDIA_SMI_NAMES.get(meta_gpu)) == gpu, (name, meta_gpu)


@pytest.mark.parametrize("name, gpu", PROFILES, ids=PROFILE_IDS)
def test_profile_rates_within_datasheet_peaks(name, gpu) -> None:
    p, hw = load_profile(name), get_hardware(gpu)
    # <=, not <: h100-public holds its GEMM weight-read rate at exactly the HBM peak (its unbounded
    # fit went above it), so its floor is defined as the bound itself.
    assert p.linear.weight_bw_Bps <= hw.hbm_bw_Bps
    assert p.linear.elementwise_bw_Bps <= hw.hbm_bw_Bps
    assert all(op.bw_Bps <= hw.hbm_bw_Bps for op in p.linear.elementwise_ops)
    assert p.decode_attn.kv_bw_Bps <= hw.hbm_bw_Bps
    assert p.linear.flops <= hw.dense_bf16_flops
    assert p.prefill_attn.flops <= hw.dense_bf16_flops
    assert p.h2d.bw_Bps <= hw.host_link_Bps and p.d2h.bw_Bps <= hw.host_link_Bps


# --- each term on the grid ---------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name, gpu", PROFILES, ids=PROFILE_IDS)
def test_token_level_terms(name, gpu, model) -> None:
    cm, bd = _setup(name, gpu, model)
    bad = []
    for n in sorted({*PREFILL_N, *DECODE_B, 5000, 65536}):
        for term, priced, bound in (
            ("linear", cm.linear_s(n), bd.gemm(n)),
            ("elementwise", cm.elementwise_s(n), bd.elementwise(n)),
            ("lm_head", cm.lm_head_s(n), bd.lm_head(n)),
        ):
            if not priced >= bound:
                bad.append(f"{term}({n}) {priced:.4g} < {bound:.4g} s")
    assert not bad, _fmt(bad)


def _prefill_attn(cm: CostModel, n: int, c: int, lens: bool = True) -> float:
    """One sequence's prefill/append attention as ``layer_s`` prices it (its lengths known), or
    from the sums alone (``lens=False``; exact for one sequence)."""
    return cm.prefill_attn_s(attention_pairs(n, c), 1, n, ((n, c),) if lens else None)


def _prefill_attn_violations(cm: CostModel, bd: Bounds, bound: str) -> list[str]:
    bad = []
    for n in PREFILL_N:
        for c in PREFILL_CTX:
            if bound == "flops":
                b = bd.prefill_attn_flops(attention_pairs(n, c))
            else:
                b = bd.prefill_attn_kv(c)
            for lens in (True, False):
                priced = _prefill_attn(cm, n, c, lens)
                if not priced >= b:
                    bad.append(f"n_new={n} n_ctx={c} lens={lens}: {priced:.4g} < {b:.4g} s")
    return bad


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name, gpu", PROFILES, ids=PROFILE_IDS)
def test_prefill_attention_flop_bound(name, gpu, model) -> None:
    cm, bd = _setup(name, gpu, model)
    bad = _prefill_attn_violations(cm, bd, "flops")
    assert not bad, _fmt(bad)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name, gpu", PROFILES, ids=PROFILE_IDS)
def test_prefill_attention_kv_read_bound(name, gpu, model) -> None:
    # Every append, short ones included: 1 new token over 32k cached tokens must cost at least the
    # time to read those 32k tokens' K and V once at HBM peak, however few its FLOPs.
    cm, bd = _setup(name, gpu, model)
    bad = _prefill_attn_violations(cm, bd, "kv")
    assert not bad, _fmt(bad)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name, gpu", PROFILES, ids=PROFILE_IDS)
def test_decode_attention_reads_its_context(name, gpu, model) -> None:
    cm, bd = _setup(name, gpu, model)
    bad = []
    for b in DECODE_B:
        for k in DECODE_CTX:
            priced, bound = cm.decode_attn_s(b, b * k), bd.decode_attn(b * k)
            if not priced >= bound:
                bad.append(f"B={b} ctx={k}: {priced:.4g} < {bound:.4g} s")
    assert not bad, _fmt(bad)


@pytest.mark.parametrize("name, gpu", PROFILES, ids=PROFILE_IDS)
def test_copies_within_host_link(name, gpu) -> None:
    cm, bd = _setup(name, gpu, "llama-3-8b")  # copy terms do not depend on the model
    for direction in ("h2d", "d2h"):
        for nbytes in COPY_BYTES:
            for copies in COPY_COUNTS:
                assert cm.copy_s(direction, nbytes, copies) >= bd.copy(nbytes), (
                    direction,
                    nbytes,
                    copies,
                )


# --- whole iterations --------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name, gpu", PROFILES, ids=PROFILE_IDS)
def test_iteration_above_sum_of_layer_bounds(name, gpu, model) -> None:
    """Iterations (with and without copies) against L * (sum of per-layer bounds) + LM head."""
    cm, bd = _setup(name, gpu, model)
    bad = []
    for prefills, b, ctx in _grid_shapes():
        shape, compute = _shape(prefills, b, ctx), bd.compute(prefills, b, ctx)
        for xb, db in ((0, 0), (2**27, 0), (0, 2**27), (2**30, 2**30)):
            x, d = bd.copy(xb), bd.copy(db)
            for pipe, async_save in ((True, True), (False, True), (True, False)):
                total = cm.iteration(
                    shape,
                    h2d_bytes=xb,
                    h2d_copies=32 if xb else 0,
                    d2h_bytes=db,
                    d2h_copies=32 if db else 0,
                    pipelining=pipe,
                    async_save=async_save,
                ).total_s
                bound = max(compute, x, d)
                if not pipe:
                    bound = max(bound, x + compute)  # every swap-in lands before layer 0
                if not async_save:
                    bound = max(bound, d + compute)  # the saves finish first
                if not total >= bound:
                    mode = f"pipelining={pipe} async_save={async_save}"
                    bad.append(
                        f"{prefills} B={b} ctx={ctx} h2d={xb} d2h={db} {mode}: "
                        f"{total:.4g} < {bound:.4g} s"
                    )
    assert not bad, _fmt(bad)


# --- random shapes -----------------------------------------------------------------------------------
prefill_runs = st.lists(
    st.tuples(st.integers(1, 32768), st.integers(0, 32768)), min_size=0, max_size=3
)


@settings(max_examples=300, deadline=None)
@given(
    prof=st.sampled_from(PROFILES),
    model=st.sampled_from(MODELS),
    prefills=prefill_runs,
    decode=st.lists(st.integers(1, 32768), min_size=0, max_size=256),
    h2d=st.integers(0, 2**33),
    d2h=st.integers(0, 2**33),
    copies=st.integers(0, 10_000),
    pipe=st.booleans(),
    async_save=st.booleans(),
)
def test_random_shapes_respect_every_bound(
    prof, model, prefills, decode, h2d, d2h, copies, pipe, async_save
) -> None:
    name, gpu = prof
    cm, bd = _setup(name, gpu, model)
    b, ctx = len(decode), sum(decode)
    shape = _shape(prefills, b, ctx)
    tokens = shape.tokens
    assert cm.linear_s(tokens) >= bd.gemm(tokens)
    assert cm.elementwise_s(tokens) >= bd.elementwise(tokens)
    assert cm.lm_head_s(shape.rows) >= bd.lm_head(shape.rows)
    assert cm.decode_attn_s(b, ctx) >= bd.decode_attn(ctx)
    assert cm.copy_s("h2d", h2d, copies) >= bd.copy(h2d)
    assert cm.copy_s("d2h", d2h, copies) >= bd.copy(d2h)
    if prefills:
        pairs, kv = shape.prefill_pairs, sum(c for _, c in prefills)
        priced = cm.prefill_attn_s(
            pairs, shape.prefill_seqs, shape.prefill_tokens, shape.prefill_lens
        )
        assert priced >= bd.prefill_attn_flops(pairs)
        assert priced >= bd.prefill_attn_kv(kv)
    if shape.is_empty:
        return
    total = cm.iteration(
        shape,
        h2d_bytes=h2d,
        h2d_copies=copies,
        d2h_bytes=d2h,
        d2h_copies=copies,
        pipelining=pipe,
        async_save=async_save,
    ).total_s
    compute = bd.compute(prefills, b, ctx)
    bound = max(compute, bd.copy(h2d), bd.copy(d2h))
    if not pipe:
        bound = max(bound, bd.copy(h2d) + compute)
    if not async_save:
        bound = max(bound, bd.copy(d2h) + compute)
    assert total >= bound
