"""KV that arrives on a replica from outside it (a shared store's load, a prefill replica's
transfer) at every eviction unit.

A source outside the replica sends whole pages of every layer. At ``block`` units a page is a unit;
at ``session`` units the session's one unit is all or nothing, so a dropped unit is recovered page
by page: the pages a source sends arrive, the rest is recomputed, and the unit is on the GPU whole
again (``OutsideRecovery``); at ``layer_block`` a page with any dropped layer is what the split
counts as recomputed, and one that a source sends arrives with all its layers (its units of every
layer at once, as an admission's new pages are placed), so neither its dropped layers are
recomputed nor its layers on the CPU swapped in (``layer_bring_in``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from costmodels import attention_pairs
from sim.memory import CPU, DROPPED, GPU
from sim.pricing import Prefill, recompute_pairs
from sim.recovery import LayerRecovery, PageRecovery
from sim.units import layer_codes

if TYPE_CHECKING:
    from sim.parts.sharing import PrefixSharing
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun
    from sim.units import SessionKV

NO_PAGES = np.empty(0, dtype=np.int64)


def dropped_pages(core: Scheduler, sess: SessionKV) -> np.ndarray:
    """The session's pages that a recovery would recompute, in order: its dropped pages (a
    session unit's every page when it is dropped; at ``layer_block`` every page with a dropped
    layer)."""
    if not sess.tier_pages[DROPPED]:
        return NO_PAGES
    if core.per_session_unit:
        return np.arange(sess.unit_pages, dtype=np.int64)
    codes = np.frombuffer(sess.tier, dtype=np.uint8)
    if core.upp > 1:
        return np.flatnonzero((codes.reshape(-1, core.upp) == DROPPED).any(axis=1))
    return np.flatnonzero(codes == DROPPED)


def dropped_pages_below(core: Scheduler, sess: SessionKV, n: int) -> int:
    """How many of the session's pages ``0 .. n-1`` a recovery would recompute."""
    if not n or not sess.tier_pages[DROPPED]:
        return 0
    if core.per_session_unit:
        return n  # the one unit is dropped: every page of it
    if core.upp > 1:
        codes = np.frombuffer(sess.tier, dtype=np.uint8, count=n * core.upp)
        return int(np.count_nonzero((codes.reshape(n, core.upp) == DROPPED).any(axis=1)))
    return sess.tier.count(DROPPED, 0, n)


def page_tiers(core: Scheduler, kv: SessionKV, n: int) -> np.ndarray:
    """The tier each of the session's first ``n`` pages is on, as a sender reads it (its replica
    has ``core``'s unit): a session unit's pages are all where the unit is; at ``layer_block`` a
    page is GPU or CPU when every layer of it is there, DROPPED when any layer is, and GPU when
    its layers are on both (it crosses as a page on the GPU does)."""
    if core.per_session_unit:
        n = min(n, kv.unit_pages if kv.tier else 0)
        return np.full(n, kv.tier[0] if n else DROPPED, dtype=np.uint8)
    upp = core.upp
    n = min(n, len(kv.tier) // upp)
    codes = np.frombuffer(kv.tier, dtype=np.uint8, count=n * upp)
    if upp == 1:
        return codes.copy()  # (no buffer of the tier array left behind: it must stay growable)
    rows = codes.reshape(n, upp)
    high, low = rows.max(axis=1), rows.min(axis=1)
    return np.where((high == CPU) & (low == GPU), np.uint8(GPU), high).astype(np.uint8)


class OutsideRecovery(PageRecovery):
    """A replica's ``PageRecovery`` where a source outside it sends pages (``fetch_dropped``,
    session page indices). At ``session`` units the dropped unit is handed to ``fetch_dropped``
    as its pages, and the pages it leaves are recomputed, priced page by page; with nothing sent
    the unit is priced as the single engine prices it (the same bits)."""

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
        core = self.core
        if not core.per_session_unit:
            return super().bring_in(run, share, dropped, new, old_tokens, now, pf)
        assert share is None, "a shared prefix at session units"
        sess, bt = run.sess, core.bt
        swapped, swapped_pages, units = core.mem.bring_to_gpu(sess, now)
        pages = np.arange(sess.unit_pages, dtype=np.int64) if len(units) else NO_PAGES
        rest = self.fetch_dropped(run, pages, now, pf)
        if len(rest) == len(pages):  # nothing sent: the unit, as PageRecovery prices it
            redo = recompute_pairs(units, sess.unit_pages, bt, old_tokens)
        else:
            redo = recompute_pairs(rest, 1, bt, old_tokens)
        computed_now = dropped + new
        pf.tokens += computed_now
        pf.pairs += redo + attention_pairs(new, old_tokens) + 0.0  # (PageRecovery's sum)
        pf.lens.append((computed_now, old_tokens + new - computed_now))
        pf.recomputed.append(dropped)
        pf.h2d_pages += swapped_pages
        if dropped:
            pf.recompute_tokens += dropped
            pf.recompute_pairs += redo
            pf.recompute_seqs += 1
        return swapped, 0


def layer_bring_in(
    recovery: LayerRecovery,
    run: TurnRun,
    new: int,
    old_tokens: int,
    now: float,
    pf: Prefill,
    arriving: np.ndarray,
) -> int:
    """``LayerRecovery.bring_in`` where the pages ``arriving`` (in order, each with a dropped
    layer) come whole from outside the replica: every layer of them at once, so none of them is
    recomputed and none of their CPU layers swapped in. Returns the bytes swapped in. With no
    page arriving, ``LayerRecovery.bring_in`` itself."""
    if not len(arriving):
        return LayerRecovery.bring_in(recovery, run, None, 0, new, old_tokens, now, pf)[0]
    core, sess, layers = recovery.core, run.sess, recovery.layers
    recovery.dropped_memo.pop(sess.index, None)
    superseded = None  # per layer: the arriving pages' CPU units a recompute would not regenerate
    if sess.tier_pages[CPU]:
        codes = layer_codes(sess, layers)[arriving]  # (pages, layer), a copy
        depth = layers - 1 - np.argmax((codes == DROPPED)[:, ::-1], axis=1)
        superseded = ((codes == CPU) & (np.arange(layers) > depth[:, None])).sum(axis=0)
    got = core.mem.bring_layers_to_gpu(sess, now)
    assert got is not None, "pages arrive where none was dropped"
    assert pf.h2d_units is not None and pf.deep_tokens is not None and pf.deep_pairs is not None
    per_layer = got.swapped_per_layer
    if superseded is not None:
        per_layer = per_layer - superseded
    swapped = int(per_layer.sum()) * core.unit_bytes
    pf.h2d_units += per_layer
    if got.run is not None:  # pages p0..p1-1, the first through layer d0, the rest all layers
        p0, p1, d0 = got.run
        pages = np.arange(p0, p1, dtype=np.int64)
        depth = np.full(p1 - p0, layers - 1, dtype=np.intp)
        depth[0] = d0
    else:
        pages, depth = got.recomputed_pages, got.depth
    keep = ~np.isin(pages, arriving)
    pages, depth = pages[keep], depth[keep]
    if len(pages):
        bt = core.bt
        a = pages * bt
        n = np.minimum(old_tokens, a + bt) - a
        np.add.at(pf.deep_tokens, depth, n)
        np.add.at(pf.deep_pairs, depth, n * (a + n / 2.0))
        pf.recompute_seqs += 1
    pf.tokens += new
    pf.pairs += attention_pairs(new, old_tokens)
    pf.lens.append((new, old_tokens))
    pf.recomputed.append(0)
    return swapped
