"""Chunked prefill in kvsim's engine (``engine.chunked_prefill``): a turn's prefill that does not fit
in an iteration's token budget is cut into chunks over several iterations, as vLLM does, instead
of running alone.

A turn is admitted whole: its units are made resident, its pages reserved and its swap-ins copied
in the first chunk's iteration (docs/semantics.md, "Chunked prefill"). Only its compute is cut: each
chunk is the next ``n`` of its prefill tokens, priced as ``n`` tokens after all that precede them.
A turn in the middle of its prefill decodes nothing and is not preempted; its last chunk's
iteration samples its first token, as an unchunked prefill's does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from costmodels import attention_pairs
from sim.pricing import Prefill

if TYPE_CHECKING:
    from sim.turns import TurnRun


@dataclass(slots=True, eq=False)
class PrefillJob:
    """A turn admitted with prefill work left for later iterations."""

    run: TurnRun
    rest: Prefill  # the work not yet scheduled: one sequence


def first_chunk(pf: Prefill, n: int) -> tuple[Prefill, Prefill]:
    """(the first ``n`` tokens of one sequence's prefill ``pf``, the rest).

    The chunk's attention pairs are the sequence's pairs in proportion to what ``n`` tokens after
    the cached ones would cost alone, so the chunks add up to the whole exactly (and a contiguous
    prefill's chunks are exact). Recomputed history comes first in the sequence; copies (swap-ins,
    a prefetch still in flight) all belong to the first chunk."""
    ((total, cached),) = pf.lens
    if not 0 < n < total:
        raise ValueError(f"a chunk of {n} tokens out of {total}")
    whole = attention_pairs(total, cached)
    pairs = pf.pairs * attention_pairs(n, cached) / whole if whole else 0.0
    redo = min(n, pf.recompute_tokens)
    redo_pairs = pf.recompute_pairs * redo / pf.recompute_tokens if pf.recompute_tokens else 0.0
    chunk = replace(
        pf,
        tokens=n,
        pairs=pairs,
        recompute_tokens=redo,
        recompute_pairs=redo_pairs,
        recompute_seqs=1 if redo else 0,
        lens=[(n, cached)],
        recomputed=[redo],
    )
    rest = Prefill(
        tokens=total - n,
        pairs=pf.pairs - pairs,
        seqs=1,
        recompute_tokens=pf.recompute_tokens - redo,
        recompute_pairs=pf.recompute_pairs - redo_pairs,
        recompute_seqs=1 if pf.recompute_tokens > redo else 0,
        lens=[(total - n, cached + n)],
        recomputed=[pf.recompute_tokens - redo],
    )
    return chunk, rest


def add_into(acc: Prefill, pf: Prefill) -> None:
    """Add one sequence's work ``pf`` to the iteration's ``acc`` (per-layer arrays excepted: chunked
    prefill is not combined with layer-wise units)."""
    acc.tokens += pf.tokens
    acc.pairs += pf.pairs
    acc.h2d_bytes += pf.h2d_bytes
    acc.h2d_pages += pf.h2d_pages
    acc.remote_bytes += pf.remote_bytes
    acc.recompute_tokens += pf.recompute_tokens
    acc.recompute_pairs += pf.recompute_pairs
    acc.recompute_seqs += pf.recompute_seqs
    if pf.ready_s is not None:
        acc.ready_s = pf.ready_s if acc.ready_s is None else np.maximum(acc.ready_s, pf.ready_s)
    acc.lens.extend(pf.lens)
    acc.recomputed.extend(pf.recomputed)
