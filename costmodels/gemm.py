"""The per-GEMM form of a layer's four GEMMs: memory and tile-quantised compute, joined smoothly.

For each GEMM g of a layer (``ModelSpec.gemm_shapes``: reduction size K, output width NO) at N
tokens, with b bytes per element:

    t_g = smax(M_g / weight_bw, C_g; p),       smax(a, c; p) = (a^p + c^p)^(1/p)  (p = 0: max)
    M_g = b * K * NO  (+ b * (N*K + N*NO) with activation bytes: the input read, the output write)
    C_g = 2 * N * K * NO / flops                                        without tiles, else
    C_g = min over tiles (tm, tn) of w(T) * SMs * 2*tm*tn*K / flops * (1 + c_tile*(1/tm + 1/tn - 3/256))
          T = ceil(N/tm) * ceil(NO/tn) output tiles,  w(T) = T/SMs + tail * (ceil(T/SMs) - T/SMs)

Why tiles: cuBLAS computes whole output tiles, so the compute of a skinny GEMM is that of N
rounded up to the tile; why waves: tiles run in waves over the SMs and a partial last wave costs
``tail`` of a full one (0: stream-K-like balancing, 1: full wave quantisation); c_tile is the cost
of a smaller tile's lower reuse, relative to the largest (128x256). The layer's GEMM time is the
sum over its GEMMs; the fixed costs (a tau per GEMM) live in ``LinearTerm.tau_s``.
"""

from __future__ import annotations

import functools
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

# c_tile's reference tile: 1/tm + 1/tn of a 128x256 tile, so the largest tile has no overhead.
_REFERENCE_TILE_EDGES = 3.0 / 256.0


class GemmForm(Protocol):
    """The constants the per-GEMM form reads (``LinearTerm`` and ``calibration.fit.GemmFit``);
    read-only, as those frozen dataclasses hold them."""

    @property
    def weight_bw_Bps(self) -> float: ...
    @property
    def flops(self) -> float: ...
    @property
    def gemm_knee_p(self) -> float: ...
    @property
    def gemm_activation_bytes(self) -> bool: ...
    @property
    def gemm_tiles(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def gemm_tile_overhead(self) -> float: ...
    @property
    def gemm_wave_tail(self) -> float: ...
    @property
    def gemm_sm_count(self) -> int: ...


def uses_per_gemm_form(form: GemmForm) -> bool:
    """False when every optional field has its default: the layer form tau + max(W/bw, F/flops)."""
    return bool(form.gemm_knee_p or form.gemm_activation_bytes or form.gemm_tiles)


def soft_max(a: np.ndarray, c: np.ndarray, p: float) -> np.ndarray:
    """(a^p + c^p)^(1/p), computed on the larger of the two (no overflow); p = 0 is max(a, c)."""
    m = np.maximum(a, c)
    if not p:
        return m
    safe = np.where(m > 0, m, 1.0)
    return m * ((a / safe) ** p + (c / safe) ** p) ** (1.0 / p)


def _tile_compute_s(form: GemmForm, n: np.ndarray, k: np.ndarray, no: np.ndarray) -> np.ndarray:
    """C_g: the fastest tile's waves of whole output tiles."""
    sms = form.gemm_sm_count

    def tile_s(tm: int, tn: int) -> np.ndarray:
        tiles = np.ceil(n / tm) * np.ceil(no / tn)
        full = tiles / sms
        waves = full + form.gemm_wave_tail * (np.ceil(full) - full)
        reuse = 1.0 + form.gemm_tile_overhead * (1.0 / tm + 1.0 / tn - _REFERENCE_TILE_EDGES)
        return waves * sms * (2.0 * tm * tn) * k / form.flops * reuse

    return functools.reduce(np.minimum, (tile_s(tm, tn) for tm, tn in form.gemm_tiles))


def per_gemm_s(
    form: GemmForm, tokens: ArrayLike, k: np.ndarray, no: np.ndarray, dtype_bytes: ArrayLike
) -> np.ndarray:
    """t_g of every GEMM (no tau); arrays broadcast, e.g. tokens (rows, 1) against k (rows, 4)."""
    n = np.asarray(tokens, dtype=float)
    moved = k * no
    if form.gemm_activation_bytes:
        moved = moved + n * (k + no)
    memory = dtype_bytes * moved / form.weight_bw_Bps
    if form.gemm_tiles:
        compute = _tile_compute_s(form, n, k, no)
    else:
        compute = 2.0 * n * k * no / form.flops
    return soft_max(memory, compute, form.gemm_knee_p)


def layer_gemms_s(form: GemmForm, tokens: int, shapes, dtype_bytes: int) -> float:
    """The layer's GEMMs at ``tokens`` tokens (no tau): the sum of ``per_gemm_s`` over ``shapes``,
    the (K, NO) of each GEMM."""
    kn = np.asarray(shapes, dtype=float)
    return float(per_gemm_s(form, float(tokens), kn[:, 0], kn[:, 1], float(dtype_bytes)).sum())
