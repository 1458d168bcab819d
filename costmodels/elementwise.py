"""The per-op form of a layer's elementwise kernels: a latency floor in CTA waves against streaming.

For each kernel o of a layer (``ModelSpec.elementwise_ops``: its kind k, row bytes r per token,
CTA width) at N tokens, with the constants of its kind:

    t_o = smax(waves * (floor_k + r / row_bw_k),  tau_k + B / bw_k + max(B - L2/2, 0) / spill_bw_k; p_k)
    B = N * r,   waves = ceil(N / (SMs * floor(2048 / block_threads)))   (1 for grid-stride kernels)

Why a floor in waves: norms, RoPE and the activation run one CTA per token, and at most 2048
threads fit on an SM (sm_80, sm_90), so a batch of tokens runs in waves, each at least as long as
one CTA streaming its row. Why the spill term: below about half the L2 the inputs (just written by
the previous kernel) are still in it; past that the bytes come from HBM. The layer's elementwise
time is the sum over its kernels; each kind's fixed cost is its tau_k, inside the smooth max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

ELEMENTWISE_KINDS = ("norm", "rope", "act", "add")
THREADS_PER_SM = 2048  # resident threads per SM on A100 (sm_80) and H100 (sm_90)


@dataclass(frozen=True, slots=True)
class ElementwiseOp:
    """The fitted constants of one kind of elementwise kernel."""

    kind: str  # one of ELEMENTWISE_KINDS
    floor_s: float  # one CTA's fixed time (a wave's floor before its row)
    tau_s: float  # the kernel's fixed cost when it streams
    bw_Bps: float  # streaming bandwidth (inputs still in L2)
    spill_bw_Bps: float  # the extra cost of the bytes past half the L2, as a bandwidth
    row_bw_Bps: float  # one CTA's rate through its token's row
    knee_p: float  # p of the smooth max between the floor and streaming (>= 1)


class ElementwiseForm(Protocol):
    """What the per-op form reads (``LinearTerm`` and ``calibration.fit.ElementwiseFit``);
    read-only, as those frozen dataclasses hold them."""

    @property
    def elementwise_ops(self) -> tuple[ElementwiseOp, ...]: ...
    @property
    def elementwise_sm_count(self) -> int: ...
    @property
    def elementwise_l2_bytes(self) -> int: ...


def uses_per_op_form(form: ElementwiseForm) -> bool:
    """False at the defaults: the layer form N * ew_bytes / elementwise_bw_Bps."""
    return bool(form.elementwise_ops)


def per_op_problem(form: ElementwiseForm) -> str | None:
    """Why the per-op fields do not make a form, or None."""
    if not form.elementwise_ops:
        return None
    kinds = [op.kind for op in form.elementwise_ops]
    if sorted(kinds) != sorted(ELEMENTWISE_KINDS):
        return f"elementwise_ops must give each kind once ({', '.join(ELEMENTWISE_KINDS)}), got {kinds}"
    if any(op.knee_p < 1 for op in form.elementwise_ops):
        return "elementwise_ops knee_p must be >= 1"
    if form.elementwise_sm_count < 1 or form.elementwise_l2_bytes < 1:
        return "elementwise_ops need elementwise_sm_count and elementwise_l2_bytes >= 1"
    return None


class KernelTable(NamedTuple):
    """Each kernel's constants (its kind's) and shape, one array entry per kernel."""

    floor_s: np.ndarray
    tau_s: np.ndarray
    bw_Bps: np.ndarray
    spill_bw_Bps: np.ndarray
    row_bw_Bps: np.ndarray
    knee_p: np.ndarray
    row_bytes: np.ndarray
    block_threads: np.ndarray


def kernel_table(form: ElementwiseForm, shapes) -> KernelTable:
    """The table of ``shapes`` (``ElementwiseOpShape``s) priced with ``form``'s constants."""
    by_kind = {op.kind: op for op in form.elementwise_ops}
    ops = [by_kind[s.kind] for s in shapes]

    def column(values) -> np.ndarray:
        return np.array(list(values), dtype=float)

    constants = [column(getattr(op, f) for op in ops) for f in KernelTable._fields[:6]]
    return KernelTable._make(
        [*constants, column(s.row_bytes for s in shapes), column(s.block_threads for s in shapes)]
    )


def _smooth_max(a: np.ndarray, c: np.ndarray, p) -> np.ndarray:
    """(a^p + c^p)^(1/p) for p >= 1, computed on the larger of the two (no overflow)."""
    m = np.maximum(a, c)
    safe = np.where(m > 0, m, 1.0)
    return m * ((a / safe) ** p + (c / safe) ** p) ** (1.0 / p)


def op_s(op, tokens, row_bytes, block_threads, sm_count: int, l2_bytes: int) -> np.ndarray:
    """t_o with the constants of ``op`` (an ``ElementwiseOp``, or a ``KernelTable`` for one
    entry per kernel); arrays broadcast."""
    n = np.asarray(tokens, dtype=float)
    r = np.asarray(row_bytes, dtype=float)
    threads = np.asarray(block_threads, dtype=float)
    waved = threads > 0
    per_wave = sm_count * np.floor(THREADS_PER_SM / np.where(waved, threads, 1.0))
    waves = np.where(waved, np.ceil(n / per_wave), 1.0)
    floor = waves * (op.floor_s + r / op.row_bw_Bps)
    moved = n * r
    spill = np.maximum(moved - l2_bytes / 2.0, 0.0)
    stream = op.tau_s + moved / op.bw_Bps + spill / op.spill_bw_Bps
    return _smooth_max(floor, stream, op.knee_p)


def table_s(form: ElementwiseForm, table: KernelTable, tokens) -> np.ndarray:
    """t_o of each kernel of ``table`` at ``tokens`` (a number, or one per kernel)."""
    return op_s(
        table,
        tokens,
        table.row_bytes,
        table.block_threads,
        form.elementwise_sm_count,
        form.elementwise_l2_bytes,
    )


def ops_s(form: ElementwiseForm, tokens: np.ndarray, shapes) -> np.ndarray:
    """t_o of each kernel in ``shapes`` (``ElementwiseOpShape``s) at ``tokens`` (same length)."""
    return table_s(form, kernel_table(form, shapes), tokens)


def layer_elementwise_s(form: ElementwiseForm, tokens: int, table: KernelTable) -> float:
    """The layer's elementwise kernels at ``tokens`` tokens: the sum of ``op_s`` over ``table``."""
    return float(table_s(form, table, float(tokens)).sum())
