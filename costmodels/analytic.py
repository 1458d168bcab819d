"""Level-0 (no GPU) profiles: datasheet peaks times default efficiencies.

Every efficiency and fixed cost used below is stated once, in ``LEVEL0``, with its reason and
source (fits to public profiles: ../shared/data/PROVENANCE.md s2.4). A calibrated profile
(Level 1) replaces all of them with fitted values.

Citation keys: [R2] cli99/llm-analysis README; [R3] llm-analysis constants FLOPS_EFFICIENCY and
HBM_MEMORY_EFFICIENCY; [P3] FlashAttention-3 (arXiv 2407.08608); [X4] kernelbench-hard-problems
03_paged_attention/problem.yaml (third-party, weak); [F7] flashinfer.ai blog "Accelerating
Self-Attentions for LLM Serving with FlashInfer"; [N4] github.com/ZaidQureshi/bam/issues/54;
[X3] CachedAttention/AttentionStore (ATC'24, arXiv 2403.19708); [L1], [L4]: NCCL all-reduce
figures, listed in costmodels/data/hardware.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hardware import HardwareSpec
from .profile import (
    AllReduceTerm,
    CopyTerm,
    DecodeAttnTerm,
    LinearTerm,
    OverlapTerm,
    PrefillAttnTerm,
    Profile,
    ProfileMeta,
)


@dataclass(frozen=True, slots=True)
class Assumption:
    value: float
    why: str


LEVEL0: dict[str, Assumption] = {
    # --- fractions of a datasheet peak ---
    "gemm_flops_eff": Assumption(
        0.70,
        (
            "GEMMs reach 70-86 % of dense BF16 at N=4096 on H100 (Vidur mlp.csv, Llama-2-7B; "
            "microsoft/vidur data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv); "
            "llm-analysis suggests <= 0.7 for inference [R2, R3]"
        ),
    ),
    "weight_bw_eff": Assumption(
        0.80,
        (
            "GEMMs at N=1 read weights at 63-84 % of HBM peak on H100 (the same Vidur mlp.csv); "
            "llm-analysis' aggressive memory-efficiency target is 0.9 [R2, R3]"
        ),
    ),
    "elementwise_bw_eff": Assumption(
        0.50,
        (
            "our reading of Vidur H100 Llama-2-7B mlp.csv at N=4096: norms + RoPE + activation + adds move "
            "~0.74 GB in ~0.42 ms = 1.8 TB/s = 53 % of 3.35 TB/s (A100 Llama-3-8B: 30-50 %)"
        ),
    ),
    "prefill_attn_flops_eff": Assumption(
        0.40,
        (
            "FlashAttention-2 reaches ~35 % of H100 peak [P3], 50-73 % on A100 (recalled, FA2 paper); "
            "quadratic-term fits give 27 % (H100, LLMServingSim Llama-3.1-8B) and 62 % (A100, Vidur "
            "FlashInfer Llama-3-8B) (PROVENANCE s2.4); 0.4 is one middle value for FA2-class kernels"
        ),
    ),
    "decode_kv_bw_eff": Assumption(
        0.75,
        (
            "paged decode reaches ~70-85 % of H100 HBM [X4] (FlashInfer: close to 100 % for long single "
            "sequences [F7]); A100 FlashInfer fit alpha = 2.62 ns per 4 KiB token-layer = 1.56 TB/s = "
            "77 % of 2.039 TB/s (PROVENANCE s2.4)"
        ),
    ),
    "allreduce_bw_eff": Assumption(
        0.82,
        (
            "NCCL's ring all-reduce reaches a bus bandwidth of ~370 GB/s on H100's 450 GB/s per "
            "direction NVLink4, ~20 % protocol overhead [L1]; 8x A100 reach ~200 of 300 GB/s [L4]; "
            "used only for tensor parallelism (tp > 1)"
        ),
    ),
    "host_link_eff": Assumption(
        0.80,
        (
            "judgment: B_pcie_eff = 0.8 x link per direction (A100: 25 measured / 32 nominal = 0.78 "
            "[N4]); used only for a direction with no measured figure in the hardware spec"
        ),
    ),
    # --- fixed costs (seconds) ---
    "linear_tau_s": Assumption(
        10e-6,
        (
            "judgment (beta = 10 us): per-layer tails/launches of ~10 token-level "
            "kernels under CUDA graphs; H100 Llama-3.1-8B GEMMs at N=1 sum to 173 us (LLMServingSim) "
            "against a 163 us weight-read floor at 0.8 x 3.35 TB/s"
        ),
    ),
    "prefill_attn_tau_s": Assumption(
        10e-6,
        (
            "judgment (beta = 10 us); the H100 quadratic prefill fit has intercept 12 us "
            "(LLMServingSim, PROVENANCE s2.4)"
        ),
    ),
    "prefill_attn_per_seq_s": Assumption(
        0.0, ("no Level-0 basis: the public fits are single-sequence; a calibrated profile fits it")
    ),
    "decode_attn_tau_s": Assumption(
        10e-6,
        (
            "judgment: fixed costs dominate short decodes, beta_dec ~ 5-15 us; A100 FlashInfer decode fit "
            "beta = 13.5 us (PROVENANCE s2.4)"
        ),
    ),
    "decode_attn_per_seq_s": Assumption(
        0.0, ("A100 FlashInfer decode fit with a batch term gives b ~ 0 (PROVENANCE s2.4)")
    ),
    "step_overhead_s": Assumption(
        0.5e-3,
        (
            "judgment: scheduler + input preparation + sampler per iteration, partly hidden by CUDA graphs "
            "and async scheduling; synchronous engine loops are reported at 1-5 ms per step and vLLM's "
            "scheduling overhead can exceed half the time for small models (mlsys.wuklab.io "
            "scheduling_overhead); calibrate by wall clock"
        ),
    ),
}
# Not a fraction of a peak, so stated here rather than in LEVEL0: the copy-compute slowdown.
EPSILON_WHY = (
    "epsilon = (H2D rate) / (HBM bandwidth): a DMA writing HBM at the link rate takes at most that share "
    "of HBM bandwidth from memory-bound kernels (judgment; to be measured by the calibration run)"
)


def _notes() -> str:
    lines = [f"{k} = {a.value:g}: {a.why}" for k, a in LEVEL0.items()]
    lines.append(f"compute_slowdown: {EPSILON_WHY}")
    lines.append(
        "copy latency: HardwareSpec.copy_latency_s (see its source); layerwise_h2d: true "
        "(layer-wise pre-loading, CachedAttention [X3])"
    )
    return "\n".join(lines)


def analytic_profile(hardware: HardwareSpec) -> Profile:
    """The Level-0 profile of a GPU: datasheet peaks x LEVEL0 efficiencies, no measurement."""
    e = {k: a.value for k, a in LEVEL0.items()}
    link = hardware.host_link_Bps * e["host_link_eff"]
    h2d_bw = hardware.h2d_measured_Bps or link  # a measured figure is already an achieved rate
    d2h_bw = hardware.d2h_measured_Bps or link
    return Profile(
        name=f"analytic-{hardware.name}",
        linear=LinearTerm(
            tau_s=e["linear_tau_s"],
            weight_bw_Bps=e["weight_bw_eff"] * hardware.hbm_bw_Bps,
            flops=e["gemm_flops_eff"] * hardware.dense_bf16_flops,
            elementwise_bw_Bps=e["elementwise_bw_eff"] * hardware.hbm_bw_Bps,
        ),
        prefill_attn=PrefillAttnTerm(
            tau_s=e["prefill_attn_tau_s"],
            flops=e["prefill_attn_flops_eff"] * hardware.dense_bf16_flops,
            per_seq_s=e["prefill_attn_per_seq_s"],
        ),
        decode_attn=DecodeAttnTerm(
            tau_s=e["decode_attn_tau_s"],
            per_seq_s=e["decode_attn_per_seq_s"],
            kv_bw_Bps=e["decode_kv_bw_eff"] * hardware.hbm_bw_Bps,
        ),
        h2d=CopyTerm(latency_s=hardware.copy_latency_s, bw_Bps=h2d_bw),
        d2h=CopyTerm(latency_s=hardware.copy_latency_s, bw_Bps=d2h_bw),
        overlap=OverlapTerm(compute_slowdown=h2d_bw / hardware.hbm_bw_Bps, layerwise_h2d=True),
        step_overhead_s=e["step_overhead_s"],
        meta=ProfileMeta(
            gpu=hardware.name,
            backend="analytic (FlashInfer/FA2-class paged attention, cuBLAS GEMMs, CUDA graphs assumed)",
            dtype="bf16",
            source="analytic: datasheet x Level-0 efficiencies (costmodels/analytic.py, "
            "costmodels/data/hardware.yaml)",
            notes=_notes(),
        ),
        validation={},
        allreduce=analytic_allreduce(hardware),
    )


def analytic_allreduce(hardware: HardwareSpec) -> AllReduceTerm | None:
    """The Level-0 all-reduce of a GPU's NVLink group, or None where its spec has no NVLink."""
    if hardware.nvlink_per_direction_Bps is None or hardware.allreduce_latency_s is None:
        return None
    return AllReduceTerm(
        latency_s=hardware.allreduce_latency_s,
        bw_Bps=LEVEL0["allreduce_bw_eff"].value * hardware.nvlink_per_direction_Bps,
    )
