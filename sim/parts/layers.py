"""Layer-wise units (``memory.evict_unit: layer_block``): a unit is one page of one layer, so a
session's pages can be partly on the GPU, partly on the CPU and partly dropped, layer by layer.
Its recovery at admission swaps in the CPU layers and recomputes from the shallowest dropped
layer of each page up (docs/semantics.md, section 3); this part says what that costs and adds it
to the iteration's prefill."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.memory import DROPPED
from sim.pricing import Prefill
from sim.units import SessionKV, layer_codes, layer_split

if TYPE_CHECKING:
    from sim.scheduler import Scheduler


class LayerRecovery:
    def __init__(self, core: Scheduler) -> None:
        self.core = core
        self.layers = core.layers
        # session -> ((dropped units, tokens), dropped tokens): see dropped_tokens
        self.dropped_memo: dict[int, tuple[tuple[int, int], int]] = {}

    def prefill(self) -> Prefill:
        """An iteration's empty prefill, with the per-layer arrays recovery adds to."""
        pf = Prefill()
        pf.deep_tokens = np.zeros(self.layers, dtype=np.int64)
        pf.deep_pairs = np.zeros(self.layers)
        pf.h2d_units = np.zeros(self.layers, dtype=np.int64)
        return pf

    def split(self, sess: SessionKV) -> tuple[int, int, int]:
        """The session's tokens by where their page's layers are: (all on the GPU, to swap in,
        to recompute: any layer dropped)."""
        return layer_split(layer_codes(sess, self.layers), sess.tokens, self.core.bt)

    def dropped_tokens(self, sess: SessionKV) -> int:
        """Tokens of pages with a dropped layer. The head of the queue is asked every iteration;
        until its admission a session's dropped units only grow (eviction never brings one back),
        so an unchanged count of dropped units is an unchanged set: the answer is remembered by
        that count (and the tokens) until the session is admitted."""
        key = (sess.tier_pages[DROPPED], sess.tokens)
        got = self.dropped_memo.get(sess.index)
        if got is None or got[0] != key:
            got = self.dropped_memo[sess.index] = (key, self.split(sess)[DROPPED])
        return got[1]

    def bring_in(self, sess: SessionKV, old_tokens: int, now: float, pf: Prefill) -> int:
        """At admission: swap in the session's CPU layers and recompute its dropped ones, adding
        the work per layer to ``pf``; the bytes swapped in."""
        self.dropped_memo.pop(sess.index, None)  # recovery brings dropped units back
        got = self.core.mem.bring_layers_to_gpu(sess, now)
        if got is None:
            return 0
        assert pf.h2d_units is not None and pf.deep_tokens is not None
        assert pf.deep_pairs is not None
        pf.h2d_units += got.swapped_per_layer
        if len(got.recomputed_pages):
            bt = self.core.bt
            a = got.recomputed_pages * bt
            n = np.minimum(old_tokens, a + bt) - a
            np.add.at(pf.deep_tokens, got.depth, n)
            np.add.at(pf.deep_pairs, got.depth, n * (a + n / 2.0))
            pf.recompute_seqs += 1
        return got.swapped_units * self.core.unit_bytes
