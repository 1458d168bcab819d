"""Turn fitted terms into a ``costmodels.Profile`` (and a YAML file), with validation and provenance.

Terms the measurements did not cover (e.g. PCIe copies in the public tables, step overhead in a
microbenchmark sweep) come from a base profile, normally the GPU's analytic Level-0 one, and the
profile's notes name every such term. The validation block holds the random-split held-out error
of each term; extrapolation-split errors and fit notes go into ``meta.notes`` (the block has one
entry per term).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

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
    TermValidation,
)

from .fit import ElementwiseFit, GemmFit
from .validate import TermReport


@dataclass(frozen=True, slots=True)
class ProfileFits:
    """The fitted constants available for one profile; None = take the base profile's term."""

    gemm: GemmFit | None = None
    elementwise: ElementwiseFit | None = None
    prefill_attn: PrefillAttnTerm | None = None
    decode_attn: DecodeAttnTerm | None = None
    h2d: CopyTerm | None = None
    d2h: CopyTerm | None = None
    overlap: OverlapTerm | None = None
    step_overhead_s: float | None = None


def _f(x: float) -> float:
    """Plain Python float with 6 significant digits (numpy scalars do not belong in YAML)."""
    return float(f"{float(x):.6g}")


def _round_term(obj):
    return dataclasses.replace(
        obj,
        **{
            f.name: _f(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if isinstance(getattr(obj, f.name), float)
            and not isinstance(getattr(obj, f.name), bool)
        },
    )


def _with_per_op(linear: LinearTerm, ew: ElementwiseFit) -> LinearTerm:
    """The linear term with the per-op elementwise constants (rounded as the rest), if fitted."""
    return dataclasses.replace(
        linear,
        elementwise_ops=tuple(_round_term(op) for op in ew.elementwise_ops),
        elementwise_sm_count=ew.elementwise_sm_count,
        elementwise_l2_bytes=ew.elementwise_l2_bytes,
    )


def build_profile(
    name: str,
    fits: ProfileFits,
    base: Profile,
    meta: ProfileMeta,
    validation: dict[str, TermValidation] | None = None,
) -> tuple[Profile, tuple[str, ...]]:
    """The profile, and the names of the terms taken from ``base`` (not measured)."""
    from_base: list[str] = []
    if fits.gemm is not None:
        ew_bw = fits.elementwise.bw_Bps if fits.elementwise else base.linear.elementwise_bw_Bps
        ew_tau = fits.elementwise.tau_s if fits.elementwise else 0.0
        # The profile's linear term carries one fixed cost for all token-level kernels of a layer.
        g = fits.gemm
        linear = LinearTerm(
            tau_s=g.tau_s + ew_tau,
            weight_bw_Bps=g.weight_bw_Bps,
            flops=g.flops,
            elementwise_bw_Bps=ew_bw,
            gemm_knee_p=g.gemm_knee_p,
            gemm_activation_bytes=g.gemm_activation_bytes,
            gemm_tiles=g.gemm_tiles,
            gemm_tile_overhead=g.gemm_tile_overhead,
            gemm_wave_tail=g.gemm_wave_tail,
            gemm_sm_count=g.gemm_sm_count,
        )
        if fits.elementwise is not None:
            linear = _with_per_op(linear, fits.elementwise)
        else:
            from_base.append("linear.elementwise_bw_Bps")
    else:
        linear = base.linear
        from_base.append("linear")
    terms = {}
    for term in ("prefill_attn", "decode_attn", "h2d", "d2h", "overlap"):
        got = getattr(fits, term)
        if got is None:
            from_base.append(term)
        terms[term] = got if got is not None else getattr(base, term)
    step = fits.step_overhead_s
    if step is None:
        from_base.append("step_overhead_s")
        step = base.step_overhead_s
    profile = Profile(
        name=name,
        linear=_round_term(linear),
        prefill_attn=_round_term(terms["prefill_attn"]),
        decode_attn=_round_term(terms["decode_attn"]),
        h2d=_round_term(terms["h2d"]),
        d2h=_round_term(terms["d2h"]),
        overlap=_round_term(terms["overlap"]),
        step_overhead_s=_f(step),
        meta=meta,
        validation=dict(validation or {}),
    )
    return profile, tuple(from_base)


def validation_entry(report: TermReport) -> TermValidation:
    t = report.test
    return TermValidation(
        mape=round(t.mape, 4),
        max_ape=round(t.max_ape, 4),
        n=t.n,
        split=f"{report.source}: {report.split.description}",
    )


def pensieve_lines(cm: CostModel, n_news: Sequence[int] = (1, 128, 2048)) -> list[str]:
    """Pensieve's per-layer constants (alpha*ctx + beta + non_attention) derived from the profile."""
    lines = []
    for n in n_news:
        c = cm.pensieve_constants(n)
        lines.append(
            f"pensieve {cm.model.name} n_new={n}: alpha={c.alpha:.4g} s/ctx-token/layer, "
            f"beta={c.beta:.4g} s/layer, non_attention={c.non_attention:.4g} s/layer"
        )
    return lines


def report_lines(reports: Sequence[TermReport]) -> list[str]:
    """One line per report: the held-out figures of every split (the validation block has one)."""
    out = []
    for r in reports:
        t = r.test
        out.append(
            f"{r.term} [{r.source}; {r.split.description}]: MAPE {t.mape:.1%}, p95 {t.p95_ape:.1%}, "
            f"max {t.max_ape:.1%}, n={t.n}"
        )
    return out


def model_note(model: ModelSpec) -> str:
    return (
        f"{model.name}: L={model.num_layers} h={model.hidden_size} Hq={model.num_heads} "
        f"K={model.num_kv_heads} d={model.head_dim} I={model.intermediate_size} b={model.dtype_bytes}"
    )
