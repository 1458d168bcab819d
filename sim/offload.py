"""Sparse decode from CPU memory: which decoding sequences read pages from the CPU, and the price
of a decode step that does (docs/semantics.md, section 9).

The scheduler offloads a session's full pages after its prefill and each page that fills during
decode; this module keeps what the price needs as running totals, never per step per sequence:
how many sequences select each number of pages (the ring's rounds follow from it), the CPU pages
whose metadata selection scans, and a cache of the ring's timeline per round shape.

A step's attention part per layer is ``max(local_s + a, b)``: the dense attention over the tokens
still on the GPU (``local_s``) runs first and delays the ring's attention by as much, so by the
max-plus form of the ring recurrence the end is ``local_s + a`` (the longest path through the
compute stream) or ``b`` (the end the copies alone allow), with ``a`` and ``b`` fixed for a round
shape (``_ring_ab``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from costmodels import CostModel
from costmodels.ring_buffer import ring_buffer_timeline
from costmodels.sparse_decode import (
    layer_page_bytes,
    metadata_bytes,
    metadata_bytes_per_page_layer,
    ring_buffer_bytes,
    round_counts,
)
from sim.config import SparseConfig


class SparseOffload:
    def __init__(self, cfg: SparseConfig, cost: CostModel, block_tokens: int) -> None:
        self.cfg, self.cost, self.bt = cfg, cost, block_tokens
        self.selector = cfg.selector()
        model = cost.model
        self.layers = model.num_layers
        self.layer_page = layer_page_bytes(model, block_tokens)
        self.meta_page = metadata_bytes(model, 1)  # GPU bytes per CPU page
        self.ring_bytes = ring_buffer_bytes(model, block_tokens, cfg.ring_slots, 1)  # per sequence
        self._scan_s_per_page = (
            metadata_bytes_per_page_layer(model) / cost.profile.decode_attn.kv_bw_Bps
        )
        self.by_selected: Counter[int] = Counter()  # selected pages -> decoding sequences
        self.cpu_pages = 0  # CPU pages of the offloaded decoding sequences
        self.selected_pages = 0  # pages read per layer per step, all sequences
        self.h2d_bytes = 0.0  # decode-time page loads, the whole run
        self._ring: dict[tuple[int, ...], tuple[float, float]] = {}
        self._ab: tuple[float, float] | None = None  # the current round shape's (a, b)
        self._per_seqs: dict[int, Callable[[int], float]] = {}  # batch size -> its dense pricer

    # -- the decoding sequences that read from the CPU -------------------------------------------
    def add(self, pages: int) -> None:
        k = self.selector.count(pages)
        self.by_selected[k] += 1
        self.cpu_pages += pages
        self.selected_pages += k
        self._ab = None

    def remove(self, pages: int) -> None:
        k = self.selector.count(pages)
        self.by_selected[k] -= 1
        if not self.by_selected[k]:
            del self.by_selected[k]
        self.cpu_pages -= pages
        self.selected_pages -= k
        self._ab = None

    def grow(self, pages: int) -> None:
        """A sequence with ``pages`` CPU pages offloads one more."""
        if self.selector.count(pages + 1) == self.selector.count(pages):  # top-K already full
            self.cpu_pages += 1
            return
        self.remove(pages)
        self.add(pages + 1)

    def reserve_bytes(self, pages: int) -> int:
        """GPU bytes a decoding sequence with ``pages`` CPU pages holds: its ring slots and the
        min/max-key metadata of those pages (every layer)."""
        return self.ring_bytes + pages * self.meta_page

    # -- prices ----------------------------------------------------------------------------------
    def _rounds(self) -> tuple[int, ...]:
        """Sequences in round j: those that select more than j pages."""
        selected = np.repeat(
            np.fromiter(self.by_selected, dtype=np.int64),
            np.fromiter(self.by_selected.values(), dtype=np.int64),
        )
        return tuple(round_counts(selected).tolist())

    def _ring_ab(self) -> tuple[float, float]:
        if self._ab is not None:
            return self._ab
        rounds = self._rounds()
        got = self._ring.get(rounds)
        if got is None:
            if not rounds:
                got = (0.0, -np.inf)
            else:
                cost, bt = self.cost, self.bt
                # One copy per round: a gather of the round's pages from pinned host memory.
                copies = [cost.copy_s("h2d", c * self.layer_page, 1) for c in rounds]
                attns = [cost.decode_attn_s(c, c * bt) for c in rounds]
                slots = self.cfg.ring_slots
                # A compute start later than every path without it: the end is start + a.
                far = 2.0 * (sum(copies) + sum(attns)) + 1e-3
                late = ring_buffer_timeline(copies, attns, slots, compute_start_s=far).end_s - far
                free = ring_buffer_timeline(copies, attns, slots, compute_start_s=0.0).end_s
                got = (late, free)
            self._ring[rounds] = got
        self._ab = got
        return got

    def extra_s(self, seqs: int, local_ctx: int) -> float:
        """What the offload adds to an iteration whose decode part is priced densely over the
        ``local_ctx`` tokens on the GPU: per layer, the metadata scan and the ring's attention
        beyond the local attention."""
        if not self.by_selected:
            return 0.0
        a, b = self._ring_ab()
        local = self.cost.decode_attn_s(seqs, local_ctx)
        per_layer = self.cpu_pages * self._scan_s_per_page + max(local + a, b) - local
        return self.layers * per_layer

    def step_s(self, seqs: int, ctx: int) -> float:
        """``steps_s`` of one step, to the last bit (the same operations in the same order)."""
        local = ctx - self.bt * self.cpu_pages
        got = self._per_seqs.get(seqs)
        if got is None:  # decode_step_s with the batch's terms done once
            got = self._per_seqs[seqs] = self.cost.decode_pricer(seqs)
        dense = got(local)
        if not self.by_selected:
            return dense
        a, b = self._ring_ab()
        local_s = self.cost.decode_attn_s(seqs, local)
        per_layer = self.cpu_pages * self._scan_s_per_page + max(local_s + a, b) - local_s
        return dense + self.layers * per_layer

    def steps_s(self, seqs: int, ctx: np.ndarray) -> np.ndarray:
        """Decode-only steps of ``seqs`` sequences over total contexts ``ctx``, pages unchanged."""
        local = np.asarray(ctx, dtype=np.int64) - self.bt * self.cpu_pages
        dense = self.cost.decode_steps_s(seqs, local)
        if not self.by_selected:
            return dense
        a, b = self._ring_ab()
        local_s = self.cost.decode_attn_many_s(seqs, local)
        per_layer = self.cpu_pages * self._scan_s_per_page + np.maximum(local_s + a, b) - local_s
        return dense + self.layers * per_layer

    def loaded_bytes(self, steps: int) -> float:
        """Host-to-device bytes of ``steps`` decode steps: every selected page of every layer."""
        return float(steps) * self.selected_pages * self.layers * self.layer_page
