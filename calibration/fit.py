"""Fit the cost model's functional forms to samples, in relative error, with non-negative constants.

The forms are exactly those of ``costmodels.cost``, per decoder layer:

    gemm          tau + max(P*b / weight_bw, 2*N*P / flops)           (linear with a floor), or
                  per GEMM tau_g + smax(memory, tiles in waves; p)     (``costmodels.gemm``)
    elementwise   tau_ew + N * ew_bytes / elementwise_bw, or
                  per kernel smax(floor in CTA waves, streaming; p)   (``costmodels.elementwise``)
    prefill_attn  tau + per_seq * S + 4*H_q*d * pairs / flops,         pairs = S * n_new*(n_ctx + n_new/2)
                  + query_elem * S * n_new * H_q * d                   per query row
                  + wave_key_elem * d * wave_keys                      kernels without split-KV only
    decode_attn   tau + per_seq * B + C * kv_bytes_per_token_layer / kv_bw,   C = total context
                  + wave * waves + d * (wave_key_elem * wave keys          kernels without split-KV
                                        + latency_key_elem * longest)     only (key tile chosen)
    h2d / d2h     copies * latency + bytes / bw, or (the link form, ``fit_term(link=True)``)
                  max(start + copies * latency + bytes / bw, copies * issue)
                  (pinned and pageable host buffers are fitted apart, never together)
    duplex        H2D and D2H of one shape at once (``fit_duplex``): with t_h, t_d each alone
                  (the fitted h2d / d2h terms), short = min, long = max, the pair ends at
                  short / share + long - short, share = min(1, duplex_Bps / (bw_h2d + bw_d2h))

Features come from the sample's model shard, so the constants are physical (bytes/s, FLOP/s,
seconds) and transfer across models. Why relative error: times span four orders of magnitude and
an absolute fit would ignore every small shape. Why bounds at 0: a negative intercept or
rate fits the grid and breaks on extrapolation. The linear forms are solved by bounded least
squares on rows scaled by 1/y (``scipy.optimize.lsq_linear``); the max() floor by
``least_squares`` with bounds from several starts (the max makes the problem non-smooth), and
so is the per-GEMM form (``TileWaveForm``: which tiles, over how many SMs, c_tile fitted or 0)
and the per-op elementwise form (``PerOpForm``: each kind fitted on its own ops' times, which the
samples carry in ``Sample.ew_parts``).
A constant the data cannot separate (e.g. per_seq when every shape has one sequence) is fixed at 0
and said so in ``TermFit.notes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from costmodels import CopyTerm, DecodeAttnTerm, PrefillAttnTerm
from costmodels.cost import copy_time, duplex_times, equal_decode_waves, wave_keys
from costmodels.elementwise import ELEMENTWISE_KINDS, ElementwiseOp, op_s, ops_s, uses_per_op_form
from costmodels.gemm import per_gemm_s, uses_per_gemm_form

from .samples import Sample

# A rate whose inverse the fit drove to 0 (the data never made that resource the bottleneck) is
# written as this cap so the profile stays valid (rates must be finite and > 0).
RATE_CAP = 1e30
FITTED_TERMS = ("gemm", "elementwise", "prefill_attn", "decode_attn", "h2d", "d2h")


@dataclass(frozen=True, slots=True)
class GemmFit:
    """The four GEMMs of a layer: tau_s + max(weight_bytes / weight_bw_Bps, 2*N*P / flops) (the
    layer form), or tau_s + the per-GEMM form of ``costmodels.gemm`` when its fields are set (the
    same fields, with the same meaning, as ``LinearTerm``'s)."""

    tau_s: float  # the layer's GEMM fixed costs (per-GEMM form: one tau per GEMM, summed)
    weight_bw_Bps: float
    flops: float
    gemm_knee_p: float = 0.0
    gemm_activation_bytes: bool = False
    gemm_tiles: tuple[tuple[int, int], ...] = ()
    gemm_tile_overhead: float = 0.0
    gemm_wave_tail: float = 0.0
    gemm_sm_count: int = 0


# Key tiles the decode wave form chooses from (by training error): the steps of common decode
# kernels' key loops (16-token pages; 4 warps of them; FlashAttention's key blocks).
DECODE_KEY_TILES = (16, 32, 64, 128)

# Output tiles the per-GEMM form chooses from: cuBLAS's common 16-bit tensor-core tiles.
CUBLAS_TILES: tuple[tuple[int, int], ...] = ((64, 64), (128, 128), (128, 256))


@dataclass(frozen=True, slots=True)
class TileWaveForm:
    """Fit the per-GEMM form (``costmodels.gemm``) with activation bytes, a smooth knee, output
    tiles in waves over ``sm_count`` SMs; ``fit_tile_overhead`` False fixes c_tile at 0."""

    sm_count: int
    tiles: tuple[tuple[int, int], ...] = CUBLAS_TILES
    fit_tile_overhead: bool = True

    @classmethod
    def of_gpu(cls, name: str, fit_tile_overhead: bool = True) -> "TileWaveForm":
        from costmodels.hardware import get_hardware

        sms = get_hardware(name).sm_count
        if not sms:
            raise ValueError(f"{name}: the per-GEMM form needs the GPU's sm_count")
        return cls(sms, CUBLAS_TILES, fit_tile_overhead)


@dataclass(frozen=True, slots=True)
class ElementwiseFit:
    """Norms, RoPE, activation, adds, KV write: tau_s + N * ew_bytes / bw_Bps (the layer form), or
    the per-op form of ``costmodels.elementwise`` when its fields are set (the same fields, with
    the same meaning, as ``LinearTerm``'s); tau_s is then 0 (each kind has its own) and bw_Bps the
    layer form's fit on the same samples, a summary that prices nothing."""

    tau_s: float
    bw_Bps: float
    elementwise_ops: tuple[ElementwiseOp, ...] = ()
    elementwise_sm_count: int = 0
    elementwise_l2_bytes: int = 0


@dataclass(frozen=True, slots=True)
class PerOpForm:
    """Fit the per-op elementwise form over ``sm_count`` SMs and an L2 of ``l2_bytes``."""

    sm_count: int
    l2_bytes: int

    @classmethod
    def of_gpu(cls, name: str) -> "PerOpForm":
        from costmodels.hardware import get_hardware

        hw = get_hardware(name)
        if not (hw.sm_count and hw.l2_bytes):
            raise ValueError(f"{name}: the per-op elementwise form needs sm_count and l2_bytes")
        return cls(hw.sm_count, hw.l2_bytes)


Params = GemmFit | ElementwiseFit | PrefillAttnTerm | DecodeAttnTerm | CopyTerm
_P = TypeVar("_P", GemmFit, ElementwiseFit, PrefillAttnTerm, DecodeAttnTerm, CopyTerm)


def params_as(kind: type[_P], params: Params, term: str) -> _P:
    """``params`` as the constants ``term`` is fitted to (each term has one kind of them)."""
    if not isinstance(params, kind):
        raise TypeError(f"{term} takes {kind.__name__} constants, got {type(params).__name__}")
    return params


def fitted_params(fits: Mapping[str, TermFit], term: str, kind: type[_P]) -> _P | None:
    """The constants fitted for ``term`` as ``kind``; None where the term was not fitted."""
    return fits[term].params_as(kind) if term in fits else None


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Physical ceilings for fitted rates (datasheet peaks). A fit may not exceed them: e.g. a table
    measured without an L2 flush lets small weight shards (TP8) hit in L2 and would read as a weight
    bandwidth above HBM, which then transfers to no real model."""

    hbm_Bps: float | None = None  # bounds weight_bw, elementwise bw, kv_bw
    flops: float | None = None  # bounds the GEMM and attention FLOP rates
    host_link_Bps: float | None = None  # bounds the copies' rate (the link form)

    @classmethod
    def of_gpu(cls, name: str) -> "RateLimits":
        from costmodels.hardware import find_hardware

        hw = find_hardware(name)
        return cls(hw.hbm_bw_Bps, hw.dense_bf16_flops, hw.host_link_Bps) if hw else cls()


@dataclass(frozen=True, slots=True)
class TermFit:
    term: str
    params: Params
    n: int  # samples fitted
    notes: tuple[str, ...] = ()  # constants fixed or capped, and why
    # Copies (link form): how long the host issued copies before the timer's start event ran (the
    # cold-L2 flush queued ahead of it). A property of the measurement, not of the link: the
    # samples are scored with it, the profile prices copies without it.
    lead_s: float = 0.0
    # Prefill attention: the decode KV rate of its floor (``CostModel.prefill_attn_s``), 0: none.
    kv_floor_Bps: float = 0.0

    def params_as(self, kind: type[_P]) -> _P:
        """The fitted constants as the kind this term fits (a TypeError for any other)."""
        return params_as(kind, self.params, self.term)


# --- features (one row per sample) ------------------------------------------------------------------
def _times(samples: Sequence[Sample]) -> np.ndarray:
    return np.array([s.time.median_s for s in samples], dtype=float)


def _gemm_shapes(samples: Sequence[Sample]) -> tuple[np.ndarray, ...]:
    """Per sample: tokens (rows, 1), K and NO of each GEMM (rows, 4), dtype bytes (rows, 1)."""
    kn = np.array([s.model.gemm_shapes for s in samples], dtype=float)
    n = np.array([[s.shape.tokens] for s in samples], dtype=float)
    b = np.array([[s.model.dtype_bytes] for s in samples], dtype=float)
    return n, kn[:, :, 0], kn[:, :, 1], b


def _gemm_features(samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray]:
    """(weight bytes, FLOPs) of each sample's four GEMMs."""
    w = np.array([s.model.linear_weight_bytes_per_layer for s in samples], dtype=float)
    f = np.array(
        [2.0 * s.shape.tokens * s.model.linear_params_per_layer for s in samples], dtype=float
    )
    return w, f


def _design(
    term: str, samples: Sequence[Sample], wave_sms: int = 0, key_tile: int = 1
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Columns of the linear forms; coefficient j multiplies column j (names say what it becomes).
    ``wave_sms``: attention gets the wave columns over that many SMs (0: none); decode rounds
    each context up to ``key_tile`` keys."""
    rows: list[tuple[float, ...]] = []
    for s in samples:
        m, sh = s.model, s.shape
        if term == "elementwise":
            rows.append((1.0, sh.tokens * m.elementwise_bytes_per_token_layer))
        elif term == "prefill_attn":
            hd = m.num_heads * m.head_dim
            row = [1.0, sh.seqs, sh.seqs * sh.n_new * hd]
            if wave_sms:
                lens = ((sh.n_new, sh.n_ctx),) * sh.seqs
                row.append(wave_keys(lens, m.num_heads, wave_sms) * m.head_dim)
            rows.append((*row, 4.0 * hd * sh.pairs))
        elif term == "decode_attn":
            row = [1.0, sh.seqs]
            if wave_sms:
                waves, longest = equal_decode_waves(
                    sh.seqs, sh.n_ctx, m.num_heads, wave_sms, key_tile
                )
                row += [waves, waves * longest * m.head_dim, longest * m.head_dim]
            rows.append((*row, sh.ctx_tokens * m.kv_bytes_per_token_layer))
        elif term in ("h2d", "d2h"):
            rows.append((sh.copies, sh.nbytes))
        else:
            raise ValueError(f"no linear design for term {term!r}")
    names = {
        "elementwise": ("tau_s", "1/bw_Bps"),
        "prefill_attn": ("tau_s", "per_seq_s", "query_elem_s")
        + (("wave_key_elem_s",) if wave_sms else ())
        + ("1/flops",),
        "decode_attn": ("tau_s", "per_seq_s")
        + (("wave_s", "wave_key_elem_s", "latency_key_elem_s") if wave_sms else ())
        + ("1/kv_bw_Bps",),
        "h2d": ("latency_s", "1/bw_Bps"),
        "d2h": ("latency_s", "1/bw_Bps"),
    }[term]
    return np.array(rows, dtype=float).reshape(len(samples), len(names)), names


# --- predictions (the cost model's formulas, vectorised) ---------------------------------------------
def predict(
    term: str,
    params: Params,
    samples: Sequence[Sample],
    lead_s: float = 0.0,
    kv_floor_Bps: float = 0.0,
) -> np.ndarray:
    """Seconds the form with ``params`` gives for each sample of ``term``. ``lead_s``: copies were
    issued that long before the timer started (``TermFit.lead_s``); ``kv_floor_Bps``: prefill
    attention is at least tau + its keys' KV bytes at this rate, as the cost model prices it."""
    if not samples:
        return np.zeros(0)
    if term in ("h2d", "d2h"):
        copy = params_as(CopyTerm, params, term)
        n = np.array([s.shape.copies for s in samples], dtype=float)
        b = np.array([s.shape.nbytes for s in samples], dtype=float)
        engine = copy.start_s * ((n > 0) | (b > 0)) + n * copy.latency_s + b / copy.bw_Bps
        return np.maximum(engine, n * copy.issue_s - lead_s)
    if term == "prefill_attn" and kv_floor_Bps:
        pf = params_as(PrefillAttnTerm, params, term)
        return np.maximum(
            predict(term, params, samples), pf.tau_s + _kv_read_s(samples, kv_floor_Bps)
        )
    if term == "gemm":
        gemm = params_as(GemmFit, params, term)
        if uses_per_gemm_form(gemm):
            return gemm.tau_s + per_gemm_s(gemm, *_gemm_shapes(samples)).sum(axis=1)
        w, f = _gemm_features(samples)
        return gemm.tau_s + np.maximum(w / gemm.weight_bw_Bps, f / gemm.flops)
    if term == "lm_head":
        # CostModel.lm_head_s: the GEMM form over h x vocab, with no tau (one kernel).
        gemm = params_as(GemmFit, params, term)
        p = np.array([s.model.lm_head_params for s in samples], dtype=float)
        b = np.array([s.model.dtype_bytes for s in samples], dtype=float)
        rows = np.array([s.shape.tokens for s in samples], dtype=float)
        return np.maximum(p * b / gemm.weight_bw_Bps, 2.0 * rows * p / gemm.flops)
    sms, key_tile = 0, 1
    coef: tuple[float, ...]
    if term == "elementwise":
        ew = params_as(ElementwiseFit, params, term)
        if uses_per_op_form(ew):
            return _predict_per_op(ew, samples)
        coef = (ew.tau_s, 1.0 / ew.bw_Bps)
    elif term == "prefill_attn":
        pf = params_as(PrefillAttnTerm, params, term)
        sms = pf.wave_sm_count if pf.wave_key_elem_s else 0
        waves: tuple[float, ...] = (pf.wave_key_elem_s,) if sms else ()
        coef = (pf.tau_s, pf.per_seq_s, pf.query_elem_s, *waves, 1.0 / pf.flops)
    elif term == "decode_attn":
        dec = params_as(DecodeAttnTerm, params, term)
        sms, key_tile = dec.wave_sm_count, dec.key_tile or 1
        waves = (dec.wave_s, dec.wave_key_elem_s, dec.latency_key_elem_s) if sms else ()
        coef = (dec.tau_s, dec.per_seq_s, *waves, 1.0 / dec.kv_bw_Bps)
    elif term in ("h2d", "d2h"):
        copy = params_as(CopyTerm, params, term)
        coef = (copy.latency_s, 1.0 / copy.bw_Bps)
    else:
        raise ValueError(f"no linear design for term {term!r}")
    a, _ = _design(term, samples, sms, key_tile)
    return a @ np.asarray(coef, dtype=float)


def _kv_read_s(samples: Sequence[Sample], kv_bw_Bps: float) -> np.ndarray:
    """Seconds to read every key's K and V of each prefill sample once at ``kv_bw_Bps``."""
    keys = np.array(
        [s.shape.seqs * s.shape.kv_len * s.model.kv_bytes_per_token_layer for s in samples],
        dtype=float,
    )
    return keys / kv_bw_Bps


def _timed_ops(sample: Sample) -> list:
    """The model's elementwise kernels the sample timed (all of them when it names none)."""
    ops = sample.model.elementwise_ops
    if not sample.ew_parts:
        return list(ops)
    by_name = {op.name: op for op in ops}
    return [by_name[name] for name, _ in sample.ew_parts]


def _predict_per_op(params: ElementwiseFit, samples: Sequence[Sample]) -> np.ndarray:
    """The per-op form summed over the kernels each sample timed (``CostModel.elementwise_s`` for
    a sample that names none)."""
    shapes, tokens, owner = [], [], []
    for i, s in enumerate(samples):
        for op in _timed_ops(s):
            shapes.append(op)
            tokens.append(s.shape.tokens)
            owner.append(i)
    per_op = ops_s(params, np.array(tokens, dtype=float), shapes)
    return np.bincount(np.array(owner), weights=per_op, minlength=len(samples))


def predict_linear(gemm: GemmFit, ew: ElementwiseFit, samples: Sequence[Sample]) -> np.ndarray:
    """GEMMs + elementwise of a layer (the profile's linear term; its tau is the sum of both taus)."""
    return predict("gemm", gemm, samples) + predict("elementwise", ew, samples)


# --- fitting ------------------------------------------------------------------------------------------
def _nonneg_rel_lstsq(a: np.ndarray, y: np.ndarray, lower: np.ndarray | None = None) -> np.ndarray:
    """argmin sum(((a x - y) / y)^2) subject to x >= lower (default 0)."""
    from scipy.optimize import lsq_linear

    w = a / y[:, None]
    scale = np.abs(w).max(axis=0)
    scale[scale == 0] = 1.0
    lo = np.zeros(a.shape[1]) if lower is None else np.asarray(lower, dtype=float) * scale
    res = lsq_linear(
        w / scale, np.ones_like(y), bounds=(lo, np.full(a.shape[1], np.inf)), method="bvls"
    )
    return res.x / scale


def _identifiable(col: np.ndarray, intercept: np.ndarray | None) -> bool:
    """False when a column is constant zero or a constant multiple of the intercept column."""
    if not np.any(col):
        return False
    if intercept is None:
        return True
    return bool(np.ptp(col / intercept) > 0)


def _rate(inv: float, what: str, notes: list[str]) -> float:
    if inv <= 1.0 / RATE_CAP:
        notes.append(
            f"{what}: the data never made this rate the bottleneck (coefficient 0); "
            f"written as {RATE_CAP:g}"
        )
        return RATE_CAP
    return 1.0 / inv


# Which limit bounds the inverse-rate column of each linear form.
_LIMIT_OF = {"elementwise": "hbm_Bps", "prefill_attn": "flops", "decode_attn": "hbm_Bps"}


def _bound_note(rate: float, cap: float | None, what: str, notes: list[str]) -> None:
    if cap is not None and rate >= cap * (1 - 1e-6):
        notes.append(
            f"{what} held at its physical ceiling {cap:.4g} (the unbounded fit went above it)"
        )


def _fit_linear_form(
    term: str, samples: Sequence[Sample], limits: RateLimits, wave_sms: int = 0, key_tile: int = 1
) -> TermFit:
    a, names = _design(term, samples, wave_sms, key_tile)
    y = _times(samples)
    has_intercept = names[0] == "tau_s"
    keep = []
    notes: list[str] = []
    for j, name in enumerate(names):
        if j == 0 and has_intercept:
            keep.append(j)
            continue
        if _identifiable(a[:, j], a[:, 0] if has_intercept else None) or j == len(names) - 1:
            keep.append(j)
        else:
            notes.append(
                f"{name} not separable from tau_s by these shapes "
                f"(all have {a[0, j]:g}): fixed at 0"
            )
    x = np.zeros(len(names))
    cap = getattr(limits, _LIMIT_OF[term]) if term in _LIMIT_OF else None
    lower = np.zeros(len(keep))
    if cap:
        lower[-1] = 1.0 / cap  # the last column is always the inverse rate
    x[keep] = _nonneg_rel_lstsq(a[:, keep], y, lower)
    params: Params
    if term == "elementwise":
        params = ElementwiseFit(tau_s=x[0], bw_Bps=_rate(x[1], "elementwise bw", notes))
        _bound_note(params.bw_Bps, cap, "elementwise bw_Bps", notes)
    elif term == "prefill_attn":
        waves = x[3] if wave_sms else 0.0
        params = PrefillAttnTerm(
            tau_s=x[0],
            flops=_rate(x[-1], "prefill flops", notes),
            per_seq_s=x[1],
            query_elem_s=x[2],
            wave_key_elem_s=waves,
            wave_sm_count=wave_sms if waves > 0 else 0,
        )
        _bound_note(params.flops, cap, "prefill flops", notes)
    elif term == "decode_attn" and wave_sms:
        params = DecodeAttnTerm(
            tau_s=x[0],
            per_seq_s=x[1],
            kv_bw_Bps=_rate(x[5], "kv bw", notes),
            wave_s=x[2],
            wave_key_elem_s=x[3],
            latency_key_elem_s=x[4],
            wave_sm_count=wave_sms,
            key_tile=key_tile,
        )
        _bound_note(params.kv_bw_Bps, cap, "decode kv_bw_Bps", notes)
    elif term == "decode_attn":
        params = DecodeAttnTerm(tau_s=x[0], per_seq_s=x[1], kv_bw_Bps=_rate(x[2], "kv bw", notes))
        _bound_note(params.kv_bw_Bps, cap, "decode kv_bw_Bps", notes)
    else:
        params = CopyTerm(latency_s=x[0], bw_Bps=_rate(x[1], f"{term} bw", notes))
    return TermFit(term, params, len(samples), tuple(notes))


def _fit_gemm(samples: Sequence[Sample], limits: RateLimits) -> TermFit:
    """tau + max(W/bw, F/flops): bounded non-linear least squares in relative error.

    Unknowns are scaled to O(1) (us, s/TB, s/PFLOP). When every sample has the same weight bytes
    (one model shard), tau and W/bw are one number to the data: tau is then fixed at 0 and the
    whole floor is read as weight traffic (the physical part that scales with model size).
    """
    from scipy.optimize import least_squares

    w, f = _gemm_features(samples)
    y = _times(samples)
    notes: list[str] = []
    vary_tau = np.ptp(w) > 0
    if not vary_tau:
        notes.append(
            "tau_s not separable from weight_bytes/weight_bw_Bps (one weight size): fixed at 0"
        )
    ws, fs = w * 1e-12, f * 1e-15  # -> x[1] in s/TB, x[2] in s/PFLOP

    def model(x: np.ndarray) -> np.ndarray:
        tau = x[0] * 1e-6 if vary_tau else 0.0
        return tau + np.maximum(ws * x[1], fs * x[2])

    # Starts: the floor from the smallest shapes, the slope from the largest (both seen as bounds).
    small, big = np.argsort(f)[: max(1, len(f) // 10)], np.argsort(f)[-max(1, len(f) // 4) :]
    floor = float(np.median(y[small]))
    slope = float(np.median(y[big] / fs[big]))
    # Ceilings on the rates are floors on their inverses (s/TB, s/PFLOP).
    lo = np.array(
        [
            0.0,
            1e12 / limits.hbm_Bps if limits.hbm_Bps else 0.0,
            1e15 / limits.flops if limits.flops else 0.0,
        ]
    )
    best = None
    for tau_frac in (0.0, 0.1, 0.3, 0.6):
        x0 = np.array(
            [tau_frac * floor * 1e6, (1 - tau_frac) * floor / float(np.median(ws)), slope]
        )
        x0 = np.maximum(np.maximum(x0, 1e-9), lo * (1 + 1e-3))
        res = least_squares(
            lambda x: (model(x) - y) / y,
            x0,
            bounds=(lo, np.inf),
            x_scale=np.maximum(np.abs(x0), 1e-6),
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # one start at least
    x = best.x
    params = GemmFit(
        tau_s=(x[0] * 1e-6) if vary_tau else 0.0,
        weight_bw_Bps=_rate(x[1] * 1e-12, "weight bw", notes),
        flops=_rate(x[2] * 1e-15, "gemm flops", notes),
    )
    _bound_note(params.weight_bw_Bps, limits.hbm_Bps, "gemm weight_bw_Bps", notes)
    _bound_note(params.flops, limits.flops, "gemm flops", notes)
    return TermFit("gemm", params, len(samples), tuple(notes))


def _tile_wave_start(limits: RateLimits, form: TileWaveForm) -> tuple[np.ndarray, ...]:
    """x0 and bounds of [tau per GEMM (us), weight_bw (TB/s), flops (TFLOP/s), p, c_tile?, tail]:
    rates start just under their ceilings, the knee at p = 2, the tail half a wave."""
    if not (limits.hbm_Bps and limits.flops):
        raise ValueError("the per-GEMM form needs the GPU's HBM bandwidth and FLOP peaks")
    hbm, peak = limits.hbm_Bps / 1e12, limits.flops / 1e12
    x0, lo, hi = [4.0, 0.9 * hbm, 0.75 * peak, 2.0], [0.0, 0.1, 1.0, 1.0], [200.0, hbm, peak, 30.0]
    if form.fit_tile_overhead:
        x0, lo, hi = x0 + [10.0], lo + [0.0], hi + [1e3]
    x0, lo, hi = x0 + [0.5], lo + [0.0], hi + [1.0]
    return np.array(x0), np.array(lo), np.array(hi)


def _tile_wave_params(x: np.ndarray, form: TileWaveForm, gemms: int, vary_tau: bool) -> GemmFit:
    """The GemmFit of a parameter vector from ``_tile_wave_start``'s layout."""
    return GemmFit(
        tau_s=gemms * float(x[0]) * 1e-6 if vary_tau else 0.0,
        weight_bw_Bps=float(x[1]) * 1e12,
        flops=float(x[2]) * 1e12,
        gemm_knee_p=float(x[3]),
        gemm_activation_bytes=True,
        gemm_tiles=form.tiles,
        gemm_tile_overhead=float(x[4]) if form.fit_tile_overhead else 0.0,
        gemm_wave_tail=float(x[-1]),
        gemm_sm_count=form.sm_count,
    )


def _fit_tile_waves(samples: Sequence[Sample], limits: RateLimits, form: TileWaveForm) -> TermFit:
    """The per-GEMM form (``costmodels.gemm``): bounded non-linear least squares in relative
    error from three starts (the ceiling-based one and two log-normal jitters of it, seeded)."""
    from scipy.optimize import least_squares

    shapes = _gemm_shapes(samples)
    y = _times(samples)
    notes: list[str] = []
    w, _ = _gemm_features(samples)
    vary_tau = bool(np.ptp(w) > 0)
    if not vary_tau:
        notes.append("tau_s not separable from the weight bytes (one weight size): fixed at 0")
    if not form.fit_tile_overhead:
        notes.append(
            "gemm_tile_overhead fixed at 0 (this source's rule: free, it trades off with flops)"
        )
    gemms = shapes[1].shape[1]
    x0, lo, hi = _tile_wave_start(limits, form)

    def residuals(x: np.ndarray) -> np.ndarray:
        p = _tile_wave_params(x, form, gemms, vary_tau)
        return (p.tau_s + per_gemm_s(p, *shapes).sum(axis=1) - y) / y

    rng = np.random.default_rng(0)
    starts = [x0] + [x0 * np.exp(rng.normal(0.0, 0.5, len(x0))) for _ in range(2)]
    best = None
    for s in starts:
        s = np.clip(s, lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
        res = least_squares(residuals, s, bounds=(lo, hi), x_scale=np.maximum(np.abs(s), 1e-3))
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # one start at least
    params = _tile_wave_params(best.x, form, gemms, vary_tau)
    _bound_note(params.weight_bw_Bps, limits.hbm_Bps, "gemm weight_bw_Bps", notes)
    _bound_note(params.flops, limits.flops, "gemm flops", notes)
    return TermFit("gemm", params, len(samples), tuple(notes))


def _kind_rows(samples: Sequence[Sample], kind: str) -> tuple[np.ndarray, list, np.ndarray]:
    """(tokens, kernel shapes, seconds) of every timed op of ``kind`` in ``samples``."""
    tokens, shapes, y = [], [], []
    for s in samples:
        if not s.ew_parts:
            raise ValueError(
                f"the per-op elementwise form needs each op's time; a {s.model.name} sample has none"
            )
        for op, (_, t) in zip(_timed_ops(s), s.ew_parts, strict=True):
            if op.kind == kind:
                tokens.append(s.shape.tokens)
                shapes.append(op)
                y.append(t)
    return np.array(tokens, dtype=float), shapes, np.array(y, dtype=float)


def _inverse_rate(x: float, per: float) -> float:
    """A rate from its fitted inverse (``per`` bytes/s per unit of x); inf where x is 0."""
    return per / x if x > 0 else np.inf


def _per_op_constants(kind: str, x: np.ndarray) -> ElementwiseOp:
    """The op of a parameter vector [floor (us), tau (us), us/MB, us/MB past L2/2, us/row-KB, p]."""
    return ElementwiseOp(
        kind=kind,
        floor_s=float(x[0]) * 1e-6,
        tau_s=float(x[1]) * 1e-6,
        bw_Bps=_inverse_rate(float(x[2]), 1e12),
        spill_bw_Bps=_inverse_rate(float(x[3]), 1e12),
        row_bw_Bps=_inverse_rate(float(x[4]), 1e9),
        knee_p=float(x[5]),
    )


def _fit_kind(
    kind: str, samples: Sequence[Sample], limits: RateLimits, form: PerOpForm
) -> ElementwiseOp:
    """One kind's constants, in relative error on its ops' own times, from three starts (the
    streaming bandwidth at half, all and a quarter of HBM peak); the bandwidth stays under HBM."""
    from scipy.optimize import least_squares

    tokens, shapes, y = _kind_rows(samples, kind)
    if not len(y):
        raise ValueError(f"no {kind} ops in the samples to fit the per-op form")
    hbm = (limits.hbm_Bps or RATE_CAP) / 1e12  # TB/s = MB/us
    row_bytes = np.array([op.row_bytes for op in shapes], dtype=float)
    threads = np.array([op.block_threads for op in shapes], dtype=float)
    x0 = np.array([0.8 * y.min() * 1e6, 0.5, 1.0 / (0.5 * hbm), 0.1, 0.05, 4.0])
    lo = np.array([0.0, 0.0, 1.0 / hbm, 0.0, 0.0, 1.0])
    hi = np.array([100.0, 100.0, 1e3, 1e3, 1e3, 50.0])

    def residuals(x: np.ndarray) -> np.ndarray:
        op = _per_op_constants(kind, x)
        t = op_s(op, tokens, row_bytes, threads, form.sm_count, form.l2_bytes)
        return (t - y) / y

    best = None
    for scale in (1.0, 0.5, 2.0):
        s = x0.copy()
        s[2] *= scale
        s = np.clip(s, lo + 1e-9, hi - 1e-9)
        res = least_squares(residuals, s, bounds=(lo, hi), x_scale=np.maximum(np.abs(s), 1e-3))
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # one start at least
    return _per_op_constants(kind, best.x)


def _capped(op: ElementwiseOp, notes: list[str]) -> ElementwiseOp:
    """The op with every rate the data never made a bottleneck written as RATE_CAP."""
    rates = {
        name: _rate(1.0 / getattr(op, name), f"elementwise {op.kind} {name}", notes)
        for name in ("bw_Bps", "spill_bw_Bps", "row_bw_Bps")
    }
    return ElementwiseOp(op.kind, op.floor_s, op.tau_s, knee_p=op.knee_p, **rates)


def _fit_per_op_totals(
    samples: Sequence[Sample], limits: RateLimits, form: PerOpForm
) -> tuple[ElementwiseOp, ...]:
    """Every kind's constants at once, in relative error on each sample's summed time (samples
    that time the layer's elementwise ops together, as our own sweeps do), from the three starts
    of ``_fit_kind``; each kind's own constants are then not identified one by one, only their
    sum over the layer's kernels is."""
    from scipy.optimize import least_squares

    y = _times(samples)
    owner, kind_of, tokens, row_bytes, threads = [], [], [], [], []
    for i, s in enumerate(samples):
        for op in _timed_ops(s):
            owner.append(i)
            kind_of.append(ELEMENTWISE_KINDS.index(op.kind))
            tokens.append(s.shape.tokens)
            row_bytes.append(op.row_bytes)
            threads.append(op.block_threads)
    idx, kinds = np.array(owner), np.array(kind_of)
    n, r, th = (np.array(v, dtype=float) for v in (tokens, row_bytes, threads))
    hbm = (limits.hbm_Bps or RATE_CAP) / 1e12
    per = len(ELEMENTWISE_KINDS)
    ops_per_sample = len(idx) / len(samples)
    x0 = np.array([0.8 * y.min() * 1e6 / ops_per_sample, 0.5, 1.0 / (0.5 * hbm), 0.1, 0.05, 4.0])
    lo = np.tile([0.0, 0.0, 1.0 / hbm, 0.0, 0.0, 1.0], per)
    hi = np.tile([100.0, 100.0, 1e3, 1e3, 1e3, 50.0], per)

    def total(x: np.ndarray) -> np.ndarray:
        t = np.zeros(len(idx))
        for k, kind in enumerate(ELEMENTWISE_KINDS):
            m = kinds == k
            op = _per_op_constants(kind, x[6 * k : 6 * k + 6])
            t[m] = op_s(op, n[m], r[m], th[m], form.sm_count, form.l2_bytes)
        return np.bincount(idx, weights=t, minlength=len(samples))

    best = None
    for scale in (1.0, 0.5, 2.0):
        start = np.tile(x0, per)
        start[2::6] *= scale
        start = np.clip(start, lo + 1e-9, hi - 1e-9)
        res = least_squares(
            lambda x: (total(x) - y) / y,
            start,
            bounds=(lo, hi),
            x_scale=np.maximum(np.abs(start), 1e-3),
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # one start at least
    return tuple(
        _per_op_constants(k, best.x[6 * i : 6 * i + 6]) for i, k in enumerate(ELEMENTWISE_KINDS)
    )


def _fit_per_op(samples: Sequence[Sample], limits: RateLimits, form: PerOpForm) -> TermFit:
    """The per-op form: each kind fitted alone on its ops' times (or, where the samples time the
    ops together, all kinds at once on the sums); bw_Bps is the layer form's."""
    layer = _fit_linear_form("elementwise", samples, limits)
    if not any(s.ew_parts for s in samples):
        notes = [
            "per-op form fitted on each sample's summed time (the ops were timed together): "
            "the sum over the layer's kernels is fitted, each kind's own constants are not "
            "identified; elementwise_bw_Bps is the layer form's fit, a summary that prices nothing"
        ]
        ops = tuple(_capped(op, notes) for op in _fit_per_op_totals(samples, limits, form))
        params = ElementwiseFit(
            0.0, layer.params_as(ElementwiseFit).bw_Bps, ops, form.sm_count, form.l2_bytes
        )
        return TermFit("elementwise", params, len(samples), tuple(notes))
    notes = [
        "per-op form: each kind fitted on its own ops' times; elementwise_bw_Bps is the layer "
        "form's fit, a summary that prices nothing"
    ]
    ops = tuple(_capped(_fit_kind(k, samples, limits, form), notes) for k in ELEMENTWISE_KINDS)
    layer_bw = layer.params_as(ElementwiseFit).bw_Bps
    params = ElementwiseFit(0.0, layer_bw, ops, form.sm_count, form.l2_bytes)
    return TermFit("elementwise", params, len(samples), tuple(notes))


def _fit_link(term: str, samples: Sequence[Sample], limits: RateLimits) -> TermFit:
    """The link form of one copy direction, max(start + n*latency + bytes/bw, n*issue - lead), in
    relative error from four starts (the usual three, and the first with no lead: a sweep whose
    best fit prices its short trains on the issue branch with a lead near 0 has a worse local
    optimum that leaves them to the engine, and where the three starts stop depends on the CPU's
    BLAS kernels); ``lead`` (how long the host issued copies before the timer's start event ran)
    is fitted with it and kept apart from the profile's constants. Where the samples do not fix
    issue and lead apart, the fit is moved to the one point ``_ridge_lead`` chooses, at the same
    cost, so the constants do not depend on where the optimiser stopped. Units inside: us, us per
    MB."""
    from scipy.optimize import least_squares

    n = np.array([s.shape.copies for s in samples], dtype=float)
    mb = np.array([s.shape.nbytes for s in samples], dtype=float) / 1e6
    y = _times(samples) * 1e6
    notes: list[str] = []
    link = limits.host_link_Bps
    # Ceilings: fixed costs and the lead under 100 us / 1 ms, the rate under the link's.
    x0 = np.array([5.0, 2.0, 1e6 / (0.85 * link) if link else 18.0, 6.0, PRIOR_LEAD_US])
    lo = np.array([0.0, 0.0, 1e6 / link if link else 0.0, 0.0, 0.0])
    hi = np.array([100.0, 100.0, 1e6, ISSUE_MAX_US, LEAD_MAX_US])

    def model(x: np.ndarray) -> np.ndarray:
        return np.maximum(x[0] + n * x[1] + mb * x[2], n * x[3] - x[4])

    no_lead = x0.copy()
    no_lead[4] = 0.0
    best = None
    for start in (x0, 0.5 * x0, 2.0 * x0, no_lead):
        start = np.clip(start, lo + 1e-9, hi - 1e-9)
        res = least_squares(
            lambda x: (model(x) - y) / y, start, bounds=(lo, hi), x_scale=np.abs(start)
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # one start at least
    x = best.x.copy()
    x[3], x[4] = _ridge_lead(n, x[0] + n * x[1] + mb * x[2], float(x[3]), float(x[4]))
    params = CopyTerm(
        latency_s=float(x[1]) * 1e-6,
        bw_Bps=_rate(float(x[2]) * 1e-6 / 1e6, f"{term} bw", notes),
        start_s=float(x[0]) * 1e-6,
        issue_s=float(x[3]) * 1e-6,
    )
    _bound_note(params.bw_Bps, link, f"{term} bw_Bps", notes)
    notes.append(
        f"link form: the host issued copies {x[4]:.1f} us before the timer's start event ran "
        "(the cold-L2 flush queued ahead of it); scored with it, not in the profile"
    )
    return TermFit(term, params, len(samples), tuple(notes), lead_s=float(x[4]) * 1e-6)


# The host lead a link fit takes where the samples leave it free (``_ridge_lead``): the lead its
# first start has, about the cold-L2 flush the timer's start event waits behind (256 MB at the
# HBM rate: 89 us on an H100, 53 us on an H200).
PRIOR_LEAD_US = 80.0
ISSUE_MAX_US, LEAD_MAX_US = 100.0, 1000.0  # the link fit's bounds on issue and lead


def _ridge_lead(
    n: np.ndarray, engine: np.ndarray, issue: float, lead: float
) -> tuple[float, float]:
    """(issue, lead) of a link fit (us) where the samples fix them; else the point of equal cost
    whose lead is nearest ``PRIOR_LEAD_US``. On the issue branch (n * issue - lead above the
    engine's time ``engine``) the samples of one train length m fix only m * issue - lead = k: a
    line of equal cost, issue = (k + lead) / m for any lead that keeps every other train off the
    branch (and both within the fit's bounds), and least_squares stops on it where the BLAS
    kernels' rounding takes it (4.85 or 6.26 us for the H100 full grid's H2D). The lead is
    taken at the prior, or at the line's nearer end, rounded inwards to 0.1 us as the notes
    write it. Where no sample reaches the branch neither is fitted, and both are 0; trains of
    two or more lengths on the branch fix both, and they are kept."""
    branch = n * issue - lead > engine
    if not branch.any():
        return 0.0, 0.0
    lengths = np.unique(n[branch])
    if len(lengths) > 1:
        return issue, lead
    m = float(lengths[0])
    k = m * issue - lead
    # Another train i stays off the branch while n_i * (k + lead) / m - lead <= engine_i: a floor
    # on the lead for shorter trains, a ceiling for longer ones.
    off = ~branch & (n != m)
    at = (n[off] * k / m - engine[off]) / (1.0 - n[off] / m)
    shorter = n[off] < m
    least = max(0.0, float(at[shorter].max())) if shorter.any() else 0.0
    most = min(
        LEAD_MAX_US, ISSUE_MAX_US * m - k, float(at[~shorter].min()) if (~shorter).any() else 1e300
    )
    chosen = min(max(PRIOR_LEAD_US, math.ceil(least * 10.0) / 10.0), math.floor(most * 10.0) / 10.0)
    if not ((n * (k + chosen) / m - chosen > engine) == branch).all():
        chosen = lead  # the line is narrower than the rounding: keep the fitted point
    return (k + chosen) / m, chosen


def _fit_prefill_floor(
    samples: Sequence[Sample], limits: RateLimits, wave_sms: int, kv_floor_Bps: float
) -> TermFit:
    """Prefill attention under its KV-read floor: the linear form fitted on the shapes where it is
    above the floor, the floor (tau + keys at ``kv_floor_Bps``) taking the rest, repeated until
    the two sets stop changing (at most 8 rounds)."""
    floor_kv = _kv_read_s(samples, kv_floor_Bps)
    keep = np.ones(len(samples), dtype=bool)
    fit = _fit_linear_form("prefill_attn", samples, limits, wave_sms)
    for _ in range(8):
        pf = fit.params_as(PrefillAttnTerm)
        above = predict("prefill_attn", pf, samples) >= pf.tau_s + floor_kv
        if (above == keep).all() or above.sum() < 4:
            break
        keep = above
        fit = _fit_linear_form(
            "prefill_attn", [s for s, k in zip(samples, keep, strict=True) if k], limits, wave_sms
        )
    notes = (
        *fit.notes,
        f"fitted above its KV-read floor (keys at the decode KV rate {kv_floor_Bps:.4g} B/s): "
        f"{int(keep.sum())} of {len(samples)} shapes",
    )
    return TermFit("prefill_attn", fit.params, len(samples), notes, kv_floor_Bps=kv_floor_Bps)


def fit_term(
    term: str,
    samples: Sequence[Sample],
    limits: RateLimits | None = None,
    wave_sms: int = 0,
    gemm_form: TileWaveForm | None = None,
    ew_form: PerOpForm | None = None,
    link: bool = False,
    kv_floor_Bps: float = 0.0,
) -> TermFit:
    """Fit one term's form to its samples (all must be of ``term``); rates stay under ``limits``.
    ``wave_sms``: the attention kernels do not split keys and run their CTAs in waves over this
    many SMs (0: they split them, or the data show no waves), so their forms get the wave terms;
    decode's key tile is the one of ``DECODE_KEY_TILES`` that fits the samples best.
    ``gemm_form``: fit the GEMMs' per-GEMM tile/wave form (None: the layer form).
    ``ew_form``: fit the elementwise per-op form (None: the layer form).
    ``link``: fit copies in the link form (``_fit_link``). ``kv_floor_Bps``: fit and score prefill
    attention under its KV-read floor at this decode KV rate (0: the form alone)."""
    limits = limits or RateLimits()
    if term not in FITTED_TERMS:
        raise ValueError(f"cannot fit {term!r}: fitted terms are {', '.join(FITTED_TERMS)}")
    if not samples:
        raise ValueError(f"no samples to fit {term}")
    wrong = {s.term for s in samples} - {term}
    if wrong:
        raise ValueError(f"fit_term({term!r}) got samples of {sorted(wrong)}")
    if len({s.shape.pinned for s in samples}) > 1:
        raise ValueError(
            f"fit_term({term!r}) got copies from pinned and pageable host buffers: fit them apart"
        )
    if term == "gemm" and gemm_form is not None:
        return _fit_tile_waves(samples, limits, gemm_form)
    if term == "gemm":
        return _fit_gemm(samples, limits)
    if term == "elementwise" and ew_form is not None:
        return _fit_per_op(samples, limits, ew_form)
    if term in ("h2d", "d2h") and link:
        return _fit_link(term, samples, limits)
    if term == "prefill_attn" and kv_floor_Bps:
        return _fit_prefill_floor(samples, limits, wave_sms, kv_floor_Bps)
    if term == "decode_attn" and wave_sms:
        fits = [_fit_linear_form(term, samples, limits, wave_sms, t) for t in DECODE_KEY_TILES]
        return min(fits, key=lambda f: _rel_sse(f, samples))
    return _fit_linear_form(term, samples, limits, wave_sms if term == "prefill_attn" else 0)


def _rel_sse(fit: TermFit, samples: Sequence[Sample]) -> float:
    """The fitted objective: sum of squared relative errors on the samples."""
    y = _times(samples)
    return float((((predict(fit.term, fit.params, samples) - y) / y) ** 2).sum())


# --- H2D and D2H at once ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DuplexFit:
    """The combined H2D + D2H rate while both copy engines run (the profile's
    ``overlap.duplex_Bps``), fitted on "duplex" samples given each direction alone; its error is
    in-sample (one constant)."""

    duplex_Bps: float
    share: float  # duplex_Bps / (bw_h2d + bw_d2h), at most 1: the rate each direction keeps
    n: int  # samples fitted
    mape: float  # in-sample, fractions
    max_ape: float
    notes: tuple[str, ...] = ()


def predict_duplex(
    duplex_Bps: float, h2d: CopyTerm, d2h: CopyTerm, samples: Sequence[Sample]
) -> np.ndarray:
    """Seconds until both copies of each "duplex" sample end, as the cost model prices an H2D and
    a D2H batch started together (``costmodels.cost.duplex_times``); 0 duplex_Bps: no sharing."""
    share = min(1.0, duplex_Bps / (h2d.bw_Bps + d2h.bw_Bps)) if duplex_Bps else 1.0
    out = []
    for s in samples:
        up = copy_time(h2d, s.shape.nbytes, s.shape.copies)
        down = copy_time(d2h, s.shape.nbytes, s.shape.copies)
        out.append(max(duplex_times(up, down, share)))
    return np.array(out, dtype=float)


def fit_duplex(samples: Sequence[Sample], h2d: CopyTerm, d2h: CopyTerm) -> DuplexFit:
    """``overlap.duplex_Bps`` from "duplex" samples, with ``h2d`` and ``d2h`` the (pinned) copy
    terms fitted on the same run. In the cost model's form the pair takes T = a / D + c with
    a = short * (bw_h2d + bw_d2h), c = long - short and D the duplex rate, as long as
    D <= bw_h2d + bw_d2h (else T = long: nothing shared). Linear in x = 1 / D, so the relative
    least squares min sum(((a x + c - y) / y)^2) has the closed form
    x = sum(a (y - c) / y^2) / sum(a^2 / y^2), kept at x >= 1 / (bw_h2d + bw_d2h)."""
    if not samples:
        raise ValueError("no duplex samples to fit")
    if {s.term for s in samples} != {"duplex"}:
        raise ValueError("fit_duplex takes duplex samples only")
    both = h2d.bw_Bps + d2h.bw_Bps
    y = _times(samples)
    alone = np.array(
        [
            sorted(
                (
                    copy_time(h2d, s.shape.nbytes, s.shape.copies),
                    copy_time(d2h, s.shape.nbytes, s.shape.copies),
                )
            )
            for s in samples
        ],
        dtype=float,
    )
    a = alone[:, 0] * both
    c = alone[:, 1] - alone[:, 0]
    x = float(np.sum(a * (y - c) / y**2) / np.sum(a**2 / y**2))
    notes: list[str] = []
    if x <= 1.0 / both:
        x = 1.0 / both
        notes.append(
            "the pairs took no longer than each direction alone: duplex_Bps is the sum of the two "
            "directions' rates (nothing shared)"
        )
    duplex = 1.0 / x
    ape = np.abs(predict_duplex(duplex, h2d, d2h, samples) - y) / y
    return DuplexFit(
        duplex,
        min(1.0, duplex / both),
        len(samples),
        float(ape.mean()),
        float(ape.max()),
        tuple(notes),
    )
