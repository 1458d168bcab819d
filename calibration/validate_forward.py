"""Replay the batch shapes a simulation produced as real forwards of one decoder layer, and compare
the measured time with the profile's prediction (``CostModel.layer_s``).

Meant for a GPU (run it on the machine the profile was calibrated on, `kvsim calibrate forward
--device cuda ...`); it also runs on a CPU with a small model, which is how the tests exercise it.

Shapes: ``RecordingCostModel`` is a ``CostModel`` that remembers every ``BatchShape`` it prices;
pass it to ``sim.simulate`` and read ``.shapes`` afterwards (the iteration shapes, plus the lone
prefills the scheduler prices for its ideal-TTFT baseline). The simulator fills every sequence's
lengths for a recording model, so a replay rebuilds the batch exactly (``replay_batch``); a shape
without them is rebuilt from its sums: the prefill tokens split as evenly as possible with one
common cached context solved from the pair count, the decode context split evenly.

One replayed layer = the GEMMs and elementwise ops at N = prefill tokens + decoding sequences, the
prefill attention of each group of equal (n_new, n_ctx), and the paged decode attention of each
group of equal context, back to back on one stream, timed as one closure. With FlashInfer on a GPU
the attention goes through its paged wrappers (plan outside the timed region).
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costmodels import BatchShape, CostModel, ModelSpec, Profile

from .measure_attention import (
    AttentionBackend,
    flashinfer_decode_closure,
    flashinfer_prefill_closure,
    gather_decode_closure,
    sdpa_decode_closure,
    sdpa_prefill_closure,
)
from .measure_gemm import LayerWeights, elementwise_closure, gemm_closure
from .validate import ErrorStats


class RecordingCostModel(CostModel):
    """A CostModel that records the shape of every iteration it prices (a hook for the simulator),
    with every sequence's lengths."""

    wants_decode_lens = True

    def __init__(self, model: ModelSpec, profile: Profile) -> None:
        super().__init__(model, profile)
        self.shapes: list[BatchShape] = []

    def iteration(self, shape: BatchShape, *args, **kwargs):
        self.shapes.append(shape)
        return super().iteration(shape, *args, **kwargs)


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    """Per-sequence lengths with the sums of one BatchShape."""

    prefill: tuple[tuple[int, int, int], ...]  # (n_new, n_ctx, count)
    decode: tuple[tuple[int, int], ...]  # (ctx per sequence, count)

    @property
    def tokens(self) -> int:
        return sum(n * c for n, _, c in self.prefill) + sum(c for _, c in self.decode)


def _split(total: int, parts: int) -> list[tuple[int, int]]:
    """``total`` over ``parts`` as evenly as possible: [(value, count), ...]."""
    q, r = divmod(total, parts)
    return [(v, c) for v, c in ((q + 1, r), (q, parts - r)) if c > 0]


def replay_batch(shape: BatchShape) -> ReplayBatch:
    """The shape's sequences grouped by equal lengths: its own lengths when it carries them, else
    an even split of its sums (``BatchShape.prefill_lens_or_even``)."""
    prefill = Counter(shape.prefill_lens_or_even())
    if shape.decode_lens is not None:
        decode = sorted(Counter(shape.decode_lens).items(), reverse=True)
    else:
        decode = _split(shape.decode_ctx_tokens, shape.decode_seqs) if shape.decode_seqs else []
    return ReplayBatch(
        tuple((n, ctx, c) for (n, ctx), c in sorted(prefill.items(), reverse=True)), tuple(decode)
    )


@dataclass(frozen=True, slots=True)
class ForwardPoint:
    shape: BatchShape
    kind: str  # "prefill" | "decode" | "mixed"
    measured_s: float
    predicted_s: float

    @property
    def ape(self) -> float:
        return abs(self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True, slots=True)
class ForwardReport:
    points: tuple[ForwardPoint, ...]
    overall: ErrorStats
    by_kind: tuple[tuple[str, ErrorStats], ...]
    backend: str
    device: str
    skipped: int  # recorded shapes left out (over the size caps, or duplicates)


def select_shapes(
    shapes: Sequence[BatchShape], n: int, max_tokens: int, max_kv_tokens: int
) -> tuple[list[BatchShape], int]:
    """Up to ``n`` distinct shapes within the caps, spread evenly over the sorted recorded shapes."""
    distinct = sorted(
        {s for s in shapes if not s.is_empty},
        key=lambda s: (s.tokens, s.decode_ctx_tokens, s.prefill_pairs, s.prefill_seqs),
    )
    ok = [
        s
        for s in distinct
        if s.tokens <= max_tokens
        and s.decode_ctx_tokens + s.prefill_tokens + _ctx(s) <= max_kv_tokens
    ]
    if len(ok) > n:
        idx = np.unique(np.linspace(0, len(ok) - 1, n).round().astype(int))
        ok = [ok[i] for i in idx]
    return ok, len(shapes) - len(ok)


def _ctx(s: BatchShape) -> int:
    rb = replay_batch(s)
    return sum(ctx * c for _, ctx, c in rb.prefill)


def _kind(s: BatchShape) -> str:
    if s.prefill_seqs and s.decode_seqs:
        return "mixed"
    return "prefill" if s.prefill_seqs else "decode"


def layer_closure(
    model: ModelSpec,
    lw: LayerWeights,
    shape: BatchShape,
    be: AttentionBackend,
    device: str,
    dtype: str,
) -> Callable[[], object]:
    rb = replay_batch(shape)
    parts = [gemm_closure(lw, shape.tokens), elementwise_closure(lw, shape.tokens, be.page_size)]
    for n_new, n_ctx, count in rb.prefill:
        if be.name == "flashinfer":  # GPU-only
            parts.append(flashinfer_prefill_closure(model, n_new, n_ctx, count, be, device, dtype))
        else:
            parts.append(sdpa_prefill_closure(model, n_new, n_ctx, count, device, dtype))
    for ctx, count in rb.decode:
        if ctx == 0:
            continue
        if be.name == "flashinfer":  # GPU-only
            parts.append(flashinfer_decode_closure(model, count, ctx, be, device, dtype))
        elif be.decode_impl == "gather":
            parts.append(gather_decode_closure(model, count, ctx, be.page_size, device, dtype))
        else:
            parts.append(sdpa_decode_closure(model, count, ctx, device, dtype))

    def run():
        for p in parts:
            p()

    return run


def replay(
    shapes: Sequence[BatchShape],
    model: ModelSpec,
    profile: Profile,
    device: str,
    dtype: str,
    timer,
    be: AttentionBackend,
    n: int = 60,
    max_tokens: int = 8192,
    max_kv_tokens: int = 1 << 20,
    log: Callable[[str], None] = lambda _: None,
) -> ForwardReport:
    """Measure up to ``n`` recorded shapes as one-layer forwards; predicted = CostModel.layer_s."""
    import torch

    chosen, skipped = select_shapes(shapes, n, max_tokens, max_kv_tokens)
    if not chosen:
        raise ValueError("no recorded shape fits the size caps; raise max_tokens / max_kv_tokens")
    cm = CostModel(model, profile)
    lw = LayerWeights(model, device, dtype)
    points = []
    with torch.inference_mode():
        for i, s in enumerate(chosen):
            t = timer.measure(layer_closure(model, lw, s, be, device, dtype))
            points.append(ForwardPoint(s, _kind(s), t.median_s, cm.layer_s(s)))
            if (i + 1) % 10 == 0:
                log(f"  replayed {i + 1}/{len(chosen)} shapes")
    return _report(points, be.describe(), device, skipped)


def _report(
    points: Sequence[ForwardPoint], backend: str, device: str, skipped: int = 0
) -> ForwardReport:
    meas = np.array([p.measured_s for p in points])
    pred = np.array([p.predicted_s for p in points])
    kinds = Counter(p.kind for p in points)
    by_kind = tuple(
        (k, ErrorStats.of(pred[[p.kind == k for p in points]], meas[[p.kind == k for p in points]]))
        for k in sorted(kinds)
    )
    return ForwardReport(
        tuple(points), ErrorStats.of(pred, meas), by_kind, backend, device, skipped
    )


POINT_COLUMNS = (
    "kind",
    "tokens",
    "prefill_tokens",
    "prefill_seqs",
    "prefill_pairs",
    "decode_seqs",
    "decode_ctx_tokens",
    "measured_s",
    "predicted_s",
    "pred_linear_s",
    "pred_elementwise_s",
    "pred_prefill_attn_s",
    "pred_decode_attn_s",
    "ape",
)


def write_points_csv(
    r: ForwardReport, profile: Profile, model: ModelSpec, path: str | Path
) -> Path:
    """One row per replayed shape: the shape's sums, measured and predicted time, and the prediction
    split into the cost model's terms (they add up to ``predicted_s``)."""
    cm = CostModel(model, profile)
    p = Path(path)
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(POINT_COLUMNS)
        for pt in sorted(
            r.points, key=lambda q: (q.kind, q.shape.tokens, q.shape.decode_ctx_tokens)
        ):
            s = pt.shape
            parts = (
                cm.linear_s(s.tokens),
                cm.elementwise_s(s.tokens),
                cm.prefill_attn_s(s.prefill_pairs, s.prefill_seqs, s.prefill_tokens, s.prefill_lens)
                if s.prefill_tokens
                else 0.0,
                cm.decode_attn_s(s.decode_seqs, s.decode_ctx_tokens),
            )
            w.writerow(
                [
                    pt.kind,
                    s.tokens,
                    s.prefill_tokens,
                    s.prefill_seqs,
                    repr(float(s.prefill_pairs)),
                    s.decode_seqs,
                    s.decode_ctx_tokens,
                    f"{pt.measured_s:.6e}",
                    f"{pt.predicted_s:.6e}",
                ]
                + [f"{x:.6e}" for x in parts]
                + [f"{pt.ape:.4f}"]
            )
    return p


def repredict_points_csv(
    path: str | Path, profile: Profile, model: ModelSpec, out: str | Path | None = None
) -> ForwardReport:
    """Reprice the shapes of a ``write_points_csv`` file with ``profile`` and write it again
    (to ``out``, default in place): the measured column is kept as recorded, the predicted time,
    its terms and the error are the profile's. Needs no GPU: the prediction is
    ``CostModel.layer_s`` of each recorded shape. ``python -m calibration.validate_forward
    POINTS.csv PROFILE [MODEL]``."""
    cm = CostModel(model, profile)
    points = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            shape = BatchShape(
                prefill_tokens=int(r["prefill_tokens"]),
                prefill_pairs=float(r["prefill_pairs"]),
                prefill_seqs=int(r["prefill_seqs"]),
                decode_seqs=int(r["decode_seqs"]),
                decode_ctx_tokens=int(r["decode_ctx_tokens"]),
            )
            points.append(ForwardPoint(shape, r["kind"], float(r["measured_s"]), cm.layer_s(shape)))
    rep = _report(points, "as recorded", "as recorded")
    write_points_csv(rep, profile, model, out or path)
    return rep


def format_report(r: ForwardReport, rows: int = 15) -> str:
    lines = [
        f"one-layer forwards on {r.device} ({r.backend}): {r.overall.n} shapes, MAPE {r.overall.mape:.1%}, "
        f"p95 {r.overall.p95_ape:.1%}, max {r.overall.max_ape:.1%} ({r.skipped} recorded shapes not replayed)"
    ]
    for k, e in r.by_kind:
        lines.append(f"  {k:<8} n={e.n:<4} MAPE {e.mape:.1%}  max {e.max_ape:.1%}")
    lines.append(
        f"  {'tokens':>7} {'pf seqs':>7} {'dec seqs':>8} {'dec ctx':>9} {'measured':>10} {'predicted':>10} {'APE':>7}"
    )
    pts = sorted(r.points, key=lambda p: -p.ape)[:rows]
    for p in pts:
        s = p.shape
        lines.append(
            f"  {s.tokens:>7} {s.prefill_seqs:>7} {s.decode_seqs:>8} {s.decode_ctx_tokens:>9} "
            f"{p.measured_s * 1e6:>8.1f}us {p.predicted_s * 1e6:>8.1f}us {p.ape:>6.1%}"
        )
    return "\n".join(lines)


if __name__ == "__main__":  # reprice a committed replay with a (refitted) profile, no GPU needed
    import sys

    from costmodels import get_model, load_profile

    _rep = repredict_points_csv(
        sys.argv[1],
        load_profile(sys.argv[2]),
        get_model(sys.argv[3] if len(sys.argv) > 3 else "llama-3-8b"),
    )
    print(format_report(_rep))
