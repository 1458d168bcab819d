"""Iteration pricing: what the scheduler's iterations cost, from the cost model.

Plain functions and one small class over ``costmodels.CostModel``; no scheduler state. A run of
decode-only iterations of an unchanged batch is priced in closed form (all steps at once, bit for
bit what pricing them one by one gives: the same operations in the same order, and sums taken in
order), and cut at a time horizon.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels import BatchShape, CostModel, attention_pairs

_SCALAR_RUN = 16      # runs shorter than this are priced in a loop: numpy's call overhead loses


def running_sum(first: float, values: np.ndarray) -> np.ndarray:
    """[first, first + v0, first + v0 + v1, ...]: the sums a loop adding in order gives (cumsum adds
    in order), without building a concatenated array through numpy's Python wrappers."""
    out = np.empty(len(values) + 1)
    out[0] = first
    out[1:] = values
    return out.cumsum(out=out)


def recompute_pairs(units, pages_per_unit: int, block_tokens: int, old_tokens: int) -> float:
    """Query-key pairs of recomputing these units (indices, in page order) of a session that held
    ``old_tokens``: each unit's n tokens starting at position a attend to the n*(a + n/2) keys
    before and among them (every earlier token is resident or recomputed first in the same pass).
    Summed in page order, sequentially (numpy's cumsum adds in order, as the scalar loop does)."""
    span = pages_per_unit * block_tokens
    if len(units) < 32:
        pairs = 0.0
        for i in units:
            a = int(i) * span
            n = min(old_tokens, a + span) - a
            pairs += n * (a + n / 2.0)
        return pairs
    a = np.asarray(units, dtype=np.int64) * span
    n = np.minimum(old_tokens, a + span) - a
    return float((n * (a + n / 2.0)).cumsum()[-1])


@dataclass(slots=True)
class DecodeRun:
    """Decode-only steps priced together: their count, durations, end time and the running
    integral of GPU occupancy over them."""

    steps: int
    durations: list[float]
    end_s: float
    gpu_byte_seconds: float


class Pricer:
    """Prices the scheduler's iterations for one cost model, page size and pipelining choice."""

    def __init__(self, cost: CostModel, page_bytes: int, pipelining: bool) -> None:
        self.cost = cost
        self.page_bytes = page_bytes
        self.layers = cost.model.num_layers
        self.pipelining = pipelining

    def iteration_s(self, prefill: BatchShape, dec_seqs: int, dec_ctx: int, h2d_bytes: int = 0,
                    h2d_pages: int = 0, d2h_bytes: int = 0) -> float:
        """One mixed iteration; with per-layer KV tensors a page of all layers is L copies."""
        return self.cost.iteration(
            prefill + BatchShape.decode(dec_seqs, dec_ctx), h2d_bytes=h2d_bytes,
            h2d_copies=h2d_pages * self.layers, d2h_bytes=d2h_bytes,
            d2h_copies=d2h_bytes // self.page_bytes * self.layers, pipelining=self.pipelining).total_s

    def decode_with_d2h_s(self, seqs: int, ctx: int, d2h_bytes: int) -> float:
        """A decode-only iteration that also carries a demotion's device-to-host copy on its own
        stream: ``iteration_s`` of that shape, to the bit, without building shapes (the iteration
        ends when both the compute and the copy are done)."""
        copy = self.cost.copy_s("d2h", d2h_bytes, d2h_bytes // self.page_bytes * self.layers)
        return max(self.cost.decode_step_s(seqs, ctx), copy)

    def ideal_ttft_s(self, prompt: int, history: int) -> float:
        """TTFT with the whole history on the GPU and an empty queue."""
        return self.cost.iteration(BatchShape.prefill(max(prompt, 1), history)).total_s

    def prefill_pairs(self, recomputed, pages_per_unit: int, block_tokens: int,
                      old_tokens: int, new_tokens: int) -> float:
        """Attention pairs of one admission: recomputed units first, then the new tokens over the
        whole context before them."""
        pairs = recompute_pairs(recomputed, pages_per_unit, block_tokens, old_tokens)
        return pairs + attention_pairs(new_tokens, old_tokens)

    def decode_run(self, seqs: int, ctx: int, steps: int, start_s: float, horizon_s: float,
                   used_bytes: float, gpu_byte_seconds: float) -> DecodeRun:
        """Up to ``steps`` decode-only iterations of ``seqs`` sequences from total context ``ctx``
        (growing by ``seqs`` a step), starting at ``start_s``: the first always runs, later ones
        only if they start before ``horizon_s``. GPU occupancy is ``used_bytes`` throughout."""
        if steps < _SCALAR_RUN:
            price = self.cost.decode_pricer(seqs)
            t, gbs, n = start_s, gpu_byte_seconds, 0
            durations: list[float] = []
            while n < steps and (n == 0 or t < horizon_s):
                d = price(ctx)
                gbs += used_bytes * d
                t += d
                durations.append(d)
                ctx += seqs
                n += 1
            return DecodeRun(n, durations, t, gbs)
        d_all = self.cost.decode_steps_s(seqs, ctx + seqs * np.arange(steps))
        starts = running_sum(start_s, d_all)
        n = max(1, int(np.searchsorted(starts[:steps], horizon_s, side="left")))
        gbs = running_sum(gpu_byte_seconds, used_bytes * d_all[:n])
        return DecodeRun(n, d_all[:n].tolist(), float(starts[n]), float(gbs[-1]))
