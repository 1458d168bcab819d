"""A session's recovery at admission: where its history is, and the work of bringing it back.

Every run has one of two, by its eviction unit. ``PageRecovery`` (``memory.evict_unit`` block or
session): a page is wholly on one tier; its CPU pages are swapped in and its dropped pages
recomputed with the prompt (and a shared prefix's pages likewise). ``LayerRecovery``
(``layer_block``): a unit is one page of one layer, so a page can be partly on the GPU, partly on
the CPU and partly dropped, layer by layer; the CPU layers are swapped in and each page is
recomputed from its shallowest dropped layer up (docs/semantics.md, section 3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from costmodels import attention_pairs
from sim.memory import CPU, DROPPED, GPU
from sim.pricing import Prefill, recompute_pairs
from sim.units import SessionKV, session_layer_split

if TYPE_CHECKING:
    from sim.parts.sharing import PrefixSharing
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun


class PageRecovery:
    def __init__(self, core: Scheduler) -> None:
        self.core = core

    def prefill(self) -> Prefill:
        """An iteration's empty prefill."""
        return Prefill()

    def split(self, sess: SessionKV) -> tuple[int, int, int]:
        """The session's tokens by where they are: (GPU hits, to swap in, to recompute)."""
        bt = self.core.bt
        return sess.tokens_in(GPU, bt), sess.tokens_in(CPU, bt), sess.tokens_in(DROPPED, bt)

    def dropped_tokens(self, sess: SessionKV) -> int:
        return sess.tokens_in(DROPPED, self.core.bt)

    def bring_in(
        self,
        run: TurnRun,
        share: PrefixSharing | None,
        dropped: int,
        new: int,
        old_tokens: int,
        now: float,
        pf: Prefill,
    ) -> tuple[int, int]:
        """Swap in the session's CPU units and recompute its ``dropped`` tokens (and its shared
        prefix's pages) with its ``new`` ones, adding the work to ``pf``: (bytes swapped in,
        prompt tokens of the shared prefix computed now)."""
        core = self.core
        sess, bt = run.sess, core.bt
        swapped, swapped_pages, recomputed = core.mem.bring_to_gpu(sess, now)
        recomputed = self.fetch_dropped(run, recomputed, now, pf)
        redo = recompute_pairs(
            recomputed, sess.unit_pages if core.per_session_unit else 1, bt, old_tokens
        )
        prompt_redo, prompt_pairs = 0, 0.0
        if share is not None:
            # The prefix's pages from the CPU are swapped in; dropped ones (or never computed)
            # are computed: history at a later turn, prompt at the first.
            p_swapped, computed = share.fetch(sess.index, now)
            computed = self.fetch_shared(run, computed, now, pf)
            swapped += p_swapped * core.page_bytes
            swapped_pages += p_swapped
            if len(computed):
                pairs = recompute_pairs(computed, 1, bt, old_tokens)
                if run.k > 0:
                    redo += pairs
                else:
                    prompt_redo, prompt_pairs = len(computed) * bt, pairs
        computed_now = dropped + new + prompt_redo
        pf.tokens += computed_now
        pf.pairs += redo + attention_pairs(new, old_tokens) + prompt_pairs
        pf.lens.append((computed_now, old_tokens + new - computed_now))
        pf.recomputed.append(dropped)
        pf.h2d_pages += swapped_pages
        if dropped:
            pf.recompute_tokens += dropped
            pf.recompute_pairs += redo
            pf.recompute_seqs += 1
        return swapped, prompt_redo

    def fetch_dropped(self, run: TurnRun, dropped_units, now: float, pf: Prefill):
        """Of the session's dropped units (indices, in page order) now on the GPU, those to
        recompute: all of them, unless a source outside the replica sends some (its bytes go to
        ``pf.remote_bytes``)."""
        return dropped_units

    def shared_from_outside(self, sess: SessionKV) -> int:
        """Dropped pages of the session's shared prefix that a source outside the replica would
        send now (none: the pool's dropped pages are computed)."""
        return 0

    def outside_tokens(self, sess: SessionKV) -> int:
        """Tokens of the session's dropped history (its own pages) that a source outside the
        replica would send now (none: every dropped page is recomputed). ``split`` leaves them
        out of its third part; a prefetched session's split (``Prefetch.split_before``) does not
        ask the recovery, so its admission takes them off (``Admission._history_where``)."""
        return 0

    def fetch_shared(self, run: TurnRun, computed, now: float, pf: Prefill):
        """``fetch_dropped`` for the shared prefix's dropped pages (session page indices)."""
        return computed


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
        return session_layer_split(sess, self.layers, self.core.bt)

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

    def bring_in(
        self,
        run: TurnRun,
        share: PrefixSharing | None,
        dropped: int,
        new: int,
        old_tokens: int,
        now: float,
        pf: Prefill,
    ) -> tuple[int, int]:
        """Swap in the session's CPU layers and recompute its dropped ones, adding the work per
        layer to ``pf``, and its ``new`` tokens through every layer: (bytes swapped in, 0). No
        shared prefix at this unit (``share`` is None)."""
        sess = run.sess
        self.dropped_memo.pop(sess.index, None)  # recovery brings dropped units back
        got = self.core.mem.bring_layers_to_gpu(sess, now)
        swapped = 0
        if got is not None:
            assert pf.h2d_units is not None and pf.deep_tokens is not None
            assert pf.deep_pairs is not None
            swapped = got.swapped_units * self.core.unit_bytes
            pf.h2d_units += got.swapped_per_layer
            if got.run is not None:  # one run of pages: its first page, then the rest at once
                p0, p1, d0 = got.run
                bt, last = self.core.bt, self.layers - 1
                n, twice = run_work(p0, p0 + 1, old_tokens, bt)
                pf.deep_tokens[d0] += n
                pf.deep_pairs[d0] += twice / 2  # (exact: a sum of halves, far below 2**53)
                n, twice = run_work(p0 + 1, p1, old_tokens, bt)
                pf.deep_tokens[last] += n
                pf.deep_pairs[last] += twice / 2
                pf.recompute_seqs += 1
            elif len(got.recomputed_pages):
                bt = self.core.bt
                a = got.recomputed_pages * bt
                n = np.minimum(old_tokens, a + bt) - a
                np.add.at(pf.deep_tokens, got.depth, n)
                np.add.at(pf.deep_pairs, got.depth, n * (a + n / 2.0))
                pf.recompute_seqs += 1
        pf.tokens += new
        pf.pairs += attention_pairs(new, old_tokens)
        pf.lens.append((new, old_tokens))
        pf.recomputed.append(0)
        return swapped, 0

    def shared_from_outside(self, sess: SessionKV) -> int:
        return 0  # no shared prefixes at this unit

    def outside_tokens(self, sess: SessionKV) -> int:
        """``PageRecovery.outside_tokens``: tokens of pages with a dropped layer that a source
        outside the replica would send now (none)."""
        return 0


def run_work(first: int, stop: int, tokens: int, bt: int) -> tuple[int, int]:
    """(tokens, twice the attention pairs) of recomputing pages ``first..stop-1`` of a history of
    ``tokens``: page p holds n = min(tokens, (p + 1) * bt) - p * bt tokens and costs
    n * (p * bt + n / 2) pairs, as ``bring_in`` prices a page. Integers, so exact: the pages
    before ``tokens // bt`` are full (a closed form), the rest one by one."""
    if stop <= first:
        return 0, 0
    full = min(max(tokens // bt, first), stop)  # pages first..full-1 hold bt tokens each
    count = full - first
    n = count * bt
    twice = bt * bt * ((first + full - 1) * count + count)  # 2 bt^2 sum(p) + count bt^2
    for p in range(full, stop):
        a = p * bt
        k = tokens - a
        n += k
        twice += 2 * k * a + k * k
    return n, twice
