"""KV units: the things that live in exactly one tier and that policies evict.

A unit is a span of a session's pages, of all layers or of one layer. With ``evict_unit=session`` a
session has one unit that grows with it; with ``block`` one unit per page; ``layer_block`` (one page
of one layer) is the checkerboard a later issue adds. Units are never re-created: a dropped unit
stays in its session's list as DROPPED, so its key is a stable identity for policies (ghost lists).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Tier(IntEnum):
    GPU = 0
    CPU = 1
    DROPPED = 2


@dataclass(slots=True, eq=False)
class Unit:
    key: int                      # stable, unique within a run
    session: "SessionKV"
    first_page: int               # pages [first_page, first_page + pages)
    pages: int
    size: int                     # bytes held in its tier (whole pages: fragmentation is real)
    tier: Tier = Tier.DROPPED
    pinned: bool = False          # used by a running turn: never evicted
    layer: int = -1               # -1: all layers
    created_s: float = 0.0        # when first computed
    tier_since_s: float = 0.0     # when it entered its current tier
    tier_seq: int = 0             # global order of entries into a tier (FIFO order, tie-breaks)
    last_access_s: float = 0.0    # last use by a turn (LRU order)
    hits: int = 0                 # uses since it was last brought in (LFU)
    next_access_s: float = float("inf")  # the session's next use, when known (Belady)

    def tokens(self, context_tokens: int, block_tokens: int) -> int:
        """Tokens of the first ``context_tokens`` of the session that this unit holds."""
        lo = self.first_page * block_tokens
        hi = min(context_tokens, (self.first_page + self.pages) * block_tokens)
        return max(0, hi - lo)


@dataclass(slots=True, eq=False)
class SessionKV:
    """The KV state of one session: its tokens and the units that hold them, in page order."""

    index: int                    # position in the trace (deterministic tie-break)
    session_id: str
    priority: int
    tokens: int = 0               # tokens whose KV exists (in some tier, or dropped)
    units: list[Unit] = field(default_factory=list)
    tier_pages: list[int] = field(default_factory=lambda: [0, 0, 0])  # pages per Tier
    next_turn: int = 0            # index of the next turn to arrive
    done: bool = False            # all turns finished (its KV may still be cached)

    def pages(self, block_tokens: int) -> int:
        return -(-self.tokens // block_tokens)

    def tokens_in(self, tier: Tier, block_tokens: int) -> int:
        """Tokens held in ``tier``: whole pages, less the unfilled tail of the last page."""
        n = self.tier_pages[tier] * block_tokens
        if self.units and self.units[-1].tier == tier:
            n -= sum(self.tier_pages) * block_tokens - self.tokens
        return n
