"""KV units as integers: per-session residency arrays, and the view policies read them through.

A unit is one span of a session's KV that lives in exactly one tier. With ``evict_unit=session`` a
session has one unit that grows with it; with ``block`` one unit per page (all layers); with
``layer_block`` one unit per page and layer (unit index ``page * layers + (layers - 1 - layer)``:
within a page the last layer comes first, so uid order is the documented tie-break of policies that
know nothing of layers, and a page's units stay one extent). A unit is named
by an integer id, ``uid = session_index << UNIT_BITS | unit_index``: stable for the whole run (a
dropped unit keeps its id, so ghost lists can remember it), and never backed by an object. Each
session holds the tier of each of its units in one byte array; the arrays are freed when a
finished session has nothing left in any tier, so memory follows the live state.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

UNIT_BITS = 24  # up to 16.7M units per session (128k pages x 128 layers)
UNIT_MASK = (1 << UNIT_BITS) - 1


class Tier(IntEnum):
    GPU = 0
    CPU = 1
    DROPPED = 2
    SHARED = 3  # a session's page that lives in the shared-prefix pool (``sim.prefix``)


def uid_of(session_index: int, unit_index: int) -> int:
    return (session_index << UNIT_BITS) | unit_index


@dataclass(slots=True, eq=False)
class SessionKV:
    """The KV state of one session: its tokens and the tier of each of its units, in page order.

    ``tier[i]`` is unit i's Tier; ``tier_pages`` counts unit pages per tier: pages for ``block``
    (a ``session`` unit counts all its pages), page-layers for ``layer_block`` (so bytes per tier are
    always ``tier_pages * view.page_bytes``). ``pinned``: a running turn holds every unit of the
    session. A SHARED unit is a placeholder: the page lives in the shared-prefix pool, which
    counts its bytes; the session's own units follow its shared pages.
    """

    index: int  # position in the trace (deterministic tie-break, uid prefix)
    session_id: str
    priority: int
    tokens: int = 0  # tokens whose KV exists (in some tier, or dropped)
    pruned: int = 0  # tokens pruned for good by a token budget (not in ``tokens``)
    tier: bytearray = field(default_factory=bytearray)
    unit_pages: int = 0  # session granularity: pages of its one unit
    tier_pages: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # pages per Tier
    pinned: bool = False
    next_turn: int = 0  # index of the next turn to arrive
    done: bool = False  # all turns finished (its KV may still be cached)
    last_access_s: float = 0.0  # last use by a turn: admission and completion (LRU keys)
    next_access_s: float = float("inf")  # the next turn's arrival, when known (Belady)
    refs: array | None = None  # a pool of shared pages: running turns holding each unit

    @property
    def units(self) -> int:
        return len(self.tier)

    def held(self, idx: int) -> bool:
        """Is unit ``idx`` held by a running turn (the session's own, or a shared page's holder)?"""
        return self.pinned or (self.refs is not None and self.refs[idx] > 0)

    def pages(self, block_tokens: int) -> int:
        return -(-self.tokens // block_tokens)

    def tokens_in(self, tier: Tier, block_tokens: int) -> int:
        """Tokens held in ``tier``: whole pages, less the unfilled tail of the last page (units of
        all layers; ``layer_split`` classifies the pages of per-layer units)."""
        n = self.tier_pages[tier] * block_tokens
        if self.tier and self.tier[-1] == tier:
            n -= sum(self.tier_pages) * block_tokens - self.tokens
        return n

    def uids(self, tier: Tier | None = None, count: int | None = None) -> list[int] | range:
        """The uids of the units in ``tier`` (all units when None), in page order: a range when
        they are all of the session's units. ``count``: how many units are in ``tier``, where the
        caller knows it (``tier_pages[tier]`` when a unit is one page), else counted here."""
        base = self.index << UNIT_BITS
        n = len(self.tier)
        if tier is None:
            return range(base, base + n)
        if count is None:
            count = self.tier.count(int(tier))  # C speed; a whole session is the common case
        if count == n:
            return range(base, base + n)
        if count == 0:
            return []
        codes = np.frombuffer(self.tier, dtype=np.uint8)
        return (np.flatnonzero(codes == int(tier)) + base).tolist()


def extents_of(uids) -> list[tuple[int, int]]:
    """Increasing-run extents (first, stop) of a list of uids, in order: consecutive uids share one."""
    if len(uids) > 2048:  # numpy's fixed cost (tens of microseconds) pays off only on long lists
        a = np.asarray(uids, dtype=np.int64)
        breaks = np.flatnonzero(np.diff(a) != 1) + 1
        starts = a[np.r_[0, breaks]]
        stops = a[np.r_[breaks - 1, len(a) - 1]] + 1
        return list(zip(starts.tolist(), stops.tolist(), strict=True))
    out: list[tuple[int, int]] = []
    it = iter(uids.tolist() if isinstance(uids, np.ndarray) else uids)
    first = next(it, None)
    if first is None:
        return out
    prev = first
    for uid in it:
        if uid != prev + 1:
            out.append((first, prev + 1))
            first = uid
        prev = uid
    out.append((first, prev + 1))
    return out


def join_extents(extents) -> list[tuple[int, int]]:
    """Extents in order, each one that starts where the one before stops joined to it."""
    out: list[tuple[int, int]] = []
    for a, s in extents:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], s)
        else:
            out.append((a, s))
    return out


def layer_codes(sess: SessionKV, layers: int) -> np.ndarray:
    """The tiers of a ``layer_block`` session's units as a (pages, layers) array indexed by layer
    (column l is layer l): a read-only view of the session's byte array, columns reversed."""
    return np.frombuffer(sess.tier, dtype=np.uint8).reshape(-1, layers)[:, ::-1]


def layer_split(codes: np.ndarray, tokens: int, block_tokens: int) -> tuple[int, int, int]:
    """(g, c, d) tokens of pages of per-layer units: a page is recomputed (d) if any of its layers
    is DROPPED, else swapped in (c) if any is on the CPU, else a GPU hit (g). The last page counts
    only the tokens it holds."""
    pages = len(codes)
    if pages == 0:
        return 0, 0, 0
    # Each page's highest tier code names its class (DROPPED over CPU over GPU): one reduction
    # and two byte counts, where a SHARED code (3, above all) does not hide one.
    worst = codes.max(axis=1).astype(np.uint8, copy=False).tobytes()
    if 3 in worst:
        return _layer_split_masks(codes, tokens, block_tokens)
    tail = pages * block_tokens - tokens  # the tokens the last page does not hold
    d = worst.count(2) * block_tokens
    c = worst.count(1) * block_tokens
    if worst[-1] == 2:
        d -= tail
    elif worst[-1] == 1:
        c -= tail
    return tokens - c - d, c, d


def _layer_split_masks(codes: np.ndarray, tokens: int, block_tokens: int) -> tuple[int, int, int]:
    """``layer_split`` by a mask per tier (any codes: a SHARED one counts as on the GPU)."""
    pages = len(codes)
    dropped = (codes == 2).any(axis=1)
    on_cpu = (codes == 1).any(axis=1) & ~dropped
    per_page = np.full(pages, block_tokens, dtype=np.int64)
    per_page[-1] = tokens - (pages - 1) * block_tokens
    d = int(per_page[dropped].sum())
    c = int(per_page[on_cpu].sum())
    return tokens - c - d, c, d


def dropped_run(sess: SessionKV) -> tuple[int, int] | None:
    """(first, stop) of the session's units off the GPU where they are all dropped and
    consecutive (none on the CPU or shared), for units that ``tier_pages`` counts one by one (a
    page, or a page's layer): the common case, as a policy takes a session's oldest units first.
    None otherwise (or when none is off the GPU)."""
    counts = sess.tier_pages
    if counts[Tier.CPU] or counts[Tier.SHARED] or not counts[Tier.DROPPED]:
        return None
    tier = sess.tier
    first, stop = tier.find(Tier.DROPPED), tier.rfind(Tier.DROPPED) + 1
    return (first, stop) if stop - first == counts[Tier.DROPPED] else None


def session_layer_split(sess: SessionKV, layers: int, block_tokens: int) -> tuple[int, int, int]:
    """``layer_split`` of the session's units, read from its byte array: with no unit off the
    GPU, or its dropped units one run (``dropped_run``), from counts alone."""
    tokens = sess.tokens
    pages = sess.tier_pages
    if not (pages[1] or pages[2] or pages[3]):
        return tokens, 0, 0
    run = dropped_run(sess)
    if run is None:
        return layer_split(layer_codes(sess, layers), tokens, block_tokens)
    n_pages = len(sess.tier) // layers
    p0, p1 = run[0] // layers, (run[1] - 1) // layers + 1  # the pages with a dropped layer
    d = (p1 - p0) * block_tokens
    if p1 == n_pages:
        d -= n_pages * block_tokens - tokens
    return tokens - d, 0, d


class UnitView:
    """What a policy may read about a unit (by uid) and its session; the engine keeps it current.

    Policies never hold unit objects: they key their own structures by uid and read sizes,
    positions and the session's timing here.
    """

    __slots__ = ("layers", "page_bytes", "per_session", "sessions", "unit_bytes")

    def __init__(
        self,
        sessions: list[SessionKV] | SessionTable,
        page_bytes: int,
        layers: int = 1,
        per_session: bool = False,
    ) -> None:
        self.sessions = sessions
        self.page_bytes = page_bytes  # bytes of one page of the units' layers (one unit)
        self.layers = layers  # units per page: 1, or the model's layers (layer_block)
        self.per_session = per_session
        # every unit's size when they are all equal (block, layer_block); None when they vary
        self.unit_bytes: int | None = None if per_session else page_bytes

    def session(self, uid: int) -> SessionKV:
        return self.sessions[uid >> UNIT_BITS]

    def size(self, uid: int) -> int:
        if self.per_session:
            return self.sessions[uid >> UNIT_BITS].unit_pages * self.page_bytes
        return self.page_bytes

    def first_page(self, uid: int) -> int:
        return 0 if self.per_session else (uid & UNIT_MASK) // self.layers

    def pages(self, uid: int) -> int:
        return self.sessions[uid >> UNIT_BITS].unit_pages if self.per_session else 1

    def layer(self, uid: int) -> int:
        """The unit's layer, or -1 for a unit of all layers (the last layer comes first in a page)."""
        return self.layers - 1 - (uid & UNIT_MASK) % self.layers if self.layers > 1 else -1

    def last_access_s(self, uid: int) -> float:
        return self.sessions[uid >> UNIT_BITS].last_access_s

    def next_access_s(self, uid: int) -> float:
        return self.sessions[uid >> UNIT_BITS].next_access_s


class SessionTable(dict):
    """Session index -> SessionKV: the scheduler's ``kv`` and the view's ``sessions``. Indexed like
    the list it stands for (``table[uid >> UNIT_BITS]``), iterated over its SessionKVs; the sessions
    in trace order, the shared-prefix pool at ``sim.parts.sharing.POOL_INDEX``."""

    __slots__ = ()

    def __iter__(self) -> Iterator[SessionKV]:
        return iter(self.values())
