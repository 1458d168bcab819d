"""Block selectors of sparse attention with CPU offload (docs/semantics.md, section 9).

Each decode step, in every layer, a selector picks which of a sequence's CPU-held pages the
attention reads; those pages stream to the GPU (``costmodels.sparse_decode``). The time depends on
how many pages are picked, not which, so the engine prices with ``selected_count`` (O(1)) and
calls ``select_blocks`` only where the identity of the pages matters (traces of the selection,
accuracy studies).

``quest`` is a top-K selector: K pages ranked by a pluggable scorer. Quest proper ranks pages by an
upper bound of the query-key product from each page's min and max keys; a trace has no keys, so
the scorers here are stand-ins with the same interface: ``recency``, ``random``, ``sink-recency``.
It supports decode only (a prefill's queries span the whole prompt: no single top-K exists).
``full`` picks every page, in either phase.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class SelectionContext:
    """What a selector may know about one selection: whose, when, where, and its random stream."""

    session: int  # session index
    step: int  # decode position (index of the token being generated)
    layer: int = 0
    seed: int = 0  # the run's seed
    phase: str = "decode"

    def __post_init__(self) -> None:
        for name in ("session", "step", "layer", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"SelectionContext.{name} must be an integer >= 0, got {v!r}")
        if self.phase not in PHASES:
            raise ValueError(f"SelectionContext.phase must be one of {PHASES}, got {self.phase!r}")

    @cached_property
    def rng(self) -> np.random.Generator:
        """Seeded by (seed, session, step, layer): a random choice does not depend on the order
        in which selections are made, and a run is reproducible."""
        return np.random.default_rng(
            (int(self.seed), int(self.session), int(self.step), int(self.layer))
        )


# --- scorers: higher score = more worth reading -----------------------------------------------------
Scorer = Callable[[np.ndarray, SelectionContext], np.ndarray]


def recency_scores(available: np.ndarray, context: SelectionContext) -> np.ndarray:
    """Later pages first."""
    return available.astype(np.float64)


def random_scores(available: np.ndarray, context: SelectionContext) -> np.ndarray:
    """A uniform draw per page from the context's stream."""
    return context.rng.random(len(available))


def sink_recency_scores(available: np.ndarray, context: SelectionContext) -> np.ndarray:
    """Page 0 (the attention sink) always, then later pages first."""
    scores = available.astype(np.float64)
    scores[available == 0] = np.inf
    return scores


SCORERS: dict[str, Scorer] = {
    "recency": recency_scores,
    "random": random_scores,
    "sink-recency": sink_recency_scores,
}


# --- selectors ---------------------------------------------------------------------------------------
class BlockSelector(ABC):
    """Chooses, from the CPU-held pages of a sequence, the pages one layer's attention reads."""

    name: ClassVar[str] = ""
    supports_prefill: ClassVar[bool] = False
    supports_decode: ClassVar[bool] = True

    @abstractmethod
    def select_blocks(self, available: np.ndarray, context: SelectionContext) -> np.ndarray:
        """The chosen page indices, sorted: a subset of ``available`` (page indices held on the
        CPU, ascending)."""

    def count(self, available_pages: int) -> int:
        """How many pages ``select_blocks`` picks out of ``available_pages``. Subclasses answer in
        O(1); this fallback runs a selection."""
        return len(self.select_blocks(np.arange(available_pages), SelectionContext(0, 0)))

    def counts(self, available_pages: np.ndarray) -> np.ndarray:
        """``count`` for every sequence of a batch."""
        return np.array([self.count(int(n)) for n in available_pages], dtype=np.int64)


class TopKSelector(BlockSelector):
    """The K best pages by ``scorer`` (a name of ``SCORERS`` or a callable); ties go to the later
    page. All of them when there are at most K."""

    supports_prefill = False
    supports_decode = True

    def __init__(self, k: int, scorer: str | Scorer = "recency") -> None:
        self.k = _check_k(k)
        if callable(scorer):
            self.scorer_name = getattr(scorer, "__name__", repr(scorer))
            self._score = scorer
        elif scorer in SCORERS:
            self.scorer_name, self._score = scorer, SCORERS[scorer]
        else:
            raise ValueError(
                f"sparse.scorer must be one of {', '.join(map(repr, sorted(SCORERS)))} "
                f"(or a callable), got {scorer!r}"
            )

    def __repr__(self) -> str:
        return f"TopKSelector(k={self.k}, scorer={self.scorer_name!r})"

    def select_blocks(self, available: np.ndarray, context: SelectionContext) -> np.ndarray:
        check_phase(self, context.phase)
        pages = _check_available(available)
        if len(pages) <= self.k:
            return pages.copy()
        scores = np.asarray(self._score(pages, context), dtype=np.float64)
        if scores.shape != pages.shape:
            raise ValueError(
                f"scorer {self.scorer_name!r} returned {scores.shape[0] if scores.ndim else 0} "
                f"scores for {len(pages)} pages"
            )
        best = np.lexsort((-pages, -scores))[: self.k]  # by score, then by page, both descending
        return np.sort(pages[best])

    def count(self, available_pages: int) -> int:
        return min(self.k, available_pages)

    def counts(self, available_pages: np.ndarray) -> np.ndarray:
        return np.minimum(np.asarray(available_pages, dtype=np.int64), self.k)


class FullSelector(BlockSelector):
    """Every page: dense attention over the offloaded KV, paid in copies."""

    supports_prefill = True
    supports_decode = True

    def __repr__(self) -> str:
        return "FullSelector()"

    def select_blocks(self, available: np.ndarray, context: SelectionContext) -> np.ndarray:
        check_phase(self, context.phase)
        return _check_available(available).copy()

    def count(self, available_pages: int) -> int:
        return available_pages

    def counts(self, available_pages: np.ndarray) -> np.ndarray:
        return np.asarray(available_pages, dtype=np.int64).copy()


# --- registry and configuration checks ------------------------------------------------------------
_SELECTORS: dict[str, type[BlockSelector]] = {}


def register(name: str):
    def deco(cls: type[BlockSelector]) -> type[BlockSelector]:
        if name in _SELECTORS and _SELECTORS[name] is not cls:
            raise ValueError(f"sparse selector {name!r} is registered twice")
        cls.name = name
        _SELECTORS[name] = cls
        return cls

    return deco


register("quest")(TopKSelector)
register("full")(FullSelector)


def available_selectors() -> list[str]:
    return sorted(_SELECTORS)


def make_selector(
    name: str, k: int | None = None, scorer: str | Scorer = "recency"
) -> BlockSelector:
    """A registered selector: ``quest`` needs ``k`` (and takes ``scorer``); ``full`` ignores both."""
    cls = _SELECTORS.get(name)
    if cls is None:
        raise ValueError(
            f"sparse.selector must be one of {', '.join(map(repr, available_selectors()))}, "
            f"got {name!r}"
        )
    if issubclass(cls, TopKSelector):
        if k is None:
            raise ValueError(f"sparse.k is required by sparse selector {name!r}")
        return cls(k, scorer)
    return cls()


def validate_sparse(k: int | None, ring_slots: int) -> None:
    """Configuration check: the K pages one layer selects must fit the ring of ``ring_slots`` page
    slots (``k`` None: a full selector, which has no K)."""
    if (
        isinstance(ring_slots, bool)
        or not isinstance(ring_slots, (int, np.integer))
        or ring_slots < 1
    ):
        raise ValueError(f"sparse.ring_slots must be an integer >= 1, got {ring_slots!r}")
    if k is None:
        return
    _check_k(k)
    if k > ring_slots:
        raise ValueError(
            f"sparse.k ({k}) must not exceed sparse.ring_slots ({ring_slots}): a layer's "
            f"selected pages must fit the GPU ring buffer; lower sparse.k or raise "
            f"sparse.ring_slots"
        )


def check_phase(selector: BlockSelector, phase: str) -> None:
    """Raise unless ``selector`` can run in ``phase`` ('prefill' or 'decode')."""
    if phase not in PHASES:
        raise ValueError(f"sparse.phases entries must be one of {PHASES}, got {phase!r}")
    if getattr(selector, f"supports_{phase}"):
        return
    can = [p for p in PHASES if getattr(selector, f"supports_{p}")]
    supported = f"supports only {' and '.join(can)}" if can else "supports no phase"
    raise ValueError(
        f"sparse selector {selector.name!r} {supported}; it cannot run {phase} (sparse.phases)"
    )


def selected_count(selector: BlockSelector, available_pages: int) -> int:
    """How many pages ``selector`` reads of a sequence with ``available_pages`` CPU-held pages: all
    the time model needs (O(1) for the registered selectors)."""
    if (
        isinstance(available_pages, bool)
        or not isinstance(available_pages, (int, np.integer))
        or available_pages < 0
    ):
        raise ValueError(f"available_pages must be an integer >= 0, got {available_pages!r}")
    return int(selector.count(int(available_pages)))


def selected_counts(selector: BlockSelector, available_pages: np.ndarray) -> np.ndarray:
    """``selected_count`` for every sequence of a batch at once."""
    pages = np.asarray(available_pages)
    if (
        pages.ndim != 1
        or not (pages.size == 0 or np.issubdtype(pages.dtype, np.integer))
        or (pages.size and pages.min() < 0)
    ):
        raise ValueError("available_pages must be a 1-D array of integers >= 0")
    return selector.counts(pages.astype(np.int64, copy=False))


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"sparse.k must be an integer >= 1, got {k!r}")
    return int(k)


def _check_available(available: np.ndarray) -> np.ndarray:
    pages = np.asarray(available)
    if pages.ndim != 1 or not (pages.size == 0 or np.issubdtype(pages.dtype, np.integer)):
        raise ValueError(
            f"available must be a 1-D array of page indices, got {pages.dtype} of "
            f"shape {pages.shape}"
        )
    pages = pages.astype(np.int64, copy=False)
    if pages.size and (pages[0] < 0 or np.any(np.diff(pages) <= 0)):
        raise ValueError("available must hold distinct page indices >= 0 in ascending order")
    return pages
