"""SmartKV-style learned token budgets, token level: which tokens of each layer stay cached.

Every layer of a session keeps S sink tokens (the first S), a window of the W most recent tokens
and the B highest-scoring other tokens: min(n, S+W+B) tokens per layer, different ones per layer.
Prefill runs unpruned, one bulk prune follows it; in decode the token leaving the window competes
with the lowest-scoring budget token and the loser is pruned for good. Scores are static per
(layer, token), so the kept budget after n tokens is the top-B by score among tokens S..n-W-1
(every token that has left the window), however the pruning was split: ``kept_set`` uses that
fact, ``stream_prunes`` replays the pruning one token at a time and the tests prove them equal.
Ties: on equal score the newer token is kept (the order is by (score, index)).

The simulator models no accuracy. The relevance model below only makes the quality risk visible:
each (layer, token) has a lifespan in tokens and is attention-relevant while the position of the
attending query is < its position + lifespan; ``quality_report`` estimates the share of relevant
tokens a budget prunes, under that model's and the scorer's assumptions (docs/semantics.md, section 8).
"""

from __future__ import annotations

import csv
import itertools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np


# --- the budget -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TokenBudget:
    """S sink tokens, a window of W recent tokens and B scored tokens per layer."""

    sink: int
    window: int
    budget: int

    def __post_init__(self) -> None:
        for name in ("sink", "window", "budget"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"budget.{name} must be a non-negative integer, got {v!r}")
        if self.capacity < 1:
            raise ValueError("budget.sink + budget.window + budget.budget must be >= 1, got 0")

    @property
    def capacity(self) -> int:
        """Tokens per layer once the session is longer than S+W+B."""
        return self.sink + self.window + self.budget

    def kept(self, n: int) -> int:
        """Tokens each layer holds after n tokens (the same for every layer)."""
        if n < 0:
            raise ValueError(f"token count must be >= 0, got {n}")
        return min(n, self.capacity)


# --- which tokens stay ----------------------------------------------------------------------------
def _top_b_mask(cand: np.ndarray, b: int, scratch: np.ndarray | None = None) -> np.ndarray:
    """(rows, m) bool: per row the top-b by (score, index), so a tie keeps the newer token.

    One partition finds each row's b-th largest score (in ``scratch``, at least (rows, m), when
    given: fresh large arrays cost page faults, ~1/3 of the estimate's time on a VM); only when
    a row has more tokens at that score than places left are its oldest tied tokens dropped."""
    rows, m = cand.shape
    if b >= m:
        return np.ones((rows, m), dtype=bool)
    if b == 0:
        return np.zeros((rows, m), dtype=bool)
    work = np.empty_like(cand) if scratch is None else scratch[:, :m]
    work[...] = cand
    work.partition(m - b, axis=1)
    thr = work[:, m - b : m - b + 1]
    kept = cand >= thr
    extra = np.count_nonzero(kept, axis=1) - b  # tied tokens beyond the places left
    if extra.any():
        # Drop the ``extra`` oldest tokens at the threshold score of each row: work on the
        # (row, column) list of tied tokens, ordered by row then column, not on whole rows.
        r, c = np.divmod(np.flatnonzero(cand == thr), m)  # 10x faster than 2-D np.nonzero
        rank = np.arange(len(r)) - np.searchsorted(r, r)  # position among its row's ties
        drop = rank < extra[r]
        kept[r[drop], c[drop]] = False
    return kept


def _row(scores_row: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"token count must be a non-negative integer, got {n!r}")
    row = np.asarray(scores_row, dtype=float)
    if row.ndim != 1 or len(row) < n:
        raise ValueError(f"need a 1-D row of at least {n} scores, got shape {row.shape}")
    row = row[:n]
    if np.isnan(row).any():
        raise ValueError("scores must not be NaN")
    return row


def kept_set(scores_row: Sequence[float] | np.ndarray, n: int, tb: TokenBudget) -> np.ndarray:
    """Sorted indices of the tokens one layer keeps after n tokens: sinks, window, and the top-B
    by score among tokens S..n-W-1 (the top-B fact; see the module docstring)."""
    row = _row(scores_row, n)
    s = min(tb.sink, n)
    w0 = max(s, n - tb.window)  # first window token
    mid = np.flatnonzero(_top_b_mask(row[None, s:w0], tb.budget)[0]) + s
    return np.concatenate([np.arange(s), mid, np.arange(w0, n)]).astype(np.int64)


@dataclass(frozen=True, slots=True)
class PruneStep:
    """State after a bulk prune (end of prefill) or after one decode token."""

    n: int  # tokens processed so far
    pruned: tuple[int, ...]  # tokens pruned at this step, lowest (score, index) first
    kept: tuple[int, ...]  # sorted kept tokens after the step


def stream_prunes(
    scores_row: Sequence[float] | np.ndarray, n: int, tb: TokenBudget, prefill: int
) -> Iterator[PruneStep]:
    """Reference replay, one step at a time: prefill ``prefill`` tokens unpruned, bulk-prune, then
    decode tokens prefill..n-1, each pushing one token out of the window into the budget, where
    the lowest (score, index) loses. Slow on purpose (plain Python): the tests' oracle."""
    row = _row(scores_row, n)
    if (
        isinstance(prefill, bool)
        or not isinstance(prefill, (int, np.integer))
        or not 0 <= prefill <= n
    ):
        raise ValueError(f"prefill must be an integer in 0..{n}, got {prefill!r}")

    def key(i: int) -> tuple[float, int]:
        return (float(row[i]), i)

    kept = set(range(prefill))
    budget = list(range(tb.sink, max(tb.sink, prefill - tb.window)))
    budget.sort(key=key)
    bulk = budget[: max(0, len(budget) - tb.budget)]
    budget = budget[len(bulk) :]
    kept.difference_update(bulk)
    yield PruneStep(prefill, tuple(bulk), tuple(sorted(kept)))
    for t in range(prefill, n):
        kept.add(t)
        pruned: tuple[int, ...] = ()
        leaving = t - tb.window  # window after t+1 tokens is t-W+1..t
        if leaving >= tb.sink:
            budget.append(leaving)
            if len(budget) > tb.budget:
                loser = min(budget, key=key)
                budget.remove(loser)
                kept.discard(loser)
                pruned = (loser,)
        yield PruneStep(t + 1, pruned, tuple(sorted(kept)))


def kept_set_streaming(
    scores_row: Sequence[float] | np.ndarray, n: int, tb: TokenBudget, prefill: int
) -> np.ndarray:
    """The kept set after ``stream_prunes`` has run to n tokens."""
    *_, last = stream_prunes(scores_row, n, tb, prefill)
    return np.asarray(last.kept, dtype=np.int64)


# --- scorers ---------------------------------------------------------------------------------------
ScorerFn = Callable[[int, int, np.random.Generator, "np.ndarray | None"], np.ndarray]


def _random(
    layers: int, n: int, rng: np.random.Generator, lifespans: np.ndarray | None
) -> np.ndarray:
    return rng.random((layers, n), dtype=np.float32)


def _recency(
    layers: int, n: int, rng: np.random.Generator, lifespans: np.ndarray | None
) -> np.ndarray:
    return np.broadcast_to(np.arange(n, dtype=np.float32), (layers, n))


def _lifespan(
    layers: int, n: int, rng: np.random.Generator, lifespans: np.ndarray | None
) -> np.ndarray:
    if lifespans is None:
        raise ValueError("scorer 'lifespan' needs the lifespans of the relevance model")
    life = np.asarray(lifespans)
    return np.arange(n, dtype=life.dtype) + life


SCORERS: dict[str, ScorerFn] = {
    "random": _random,  # a scorer that knows nothing: the floor a learned one must beat
    "recency": _recency,  # score = position: the budget becomes a longer window
    "lifespan": _lifespan,  # score = expiry (position + lifespan): a perfect predictor, an upper bound
}


def register_scorer(name: str, fn: ScorerFn) -> None:
    """Add a scorer: fn(layers, n, rng, lifespans) -> (layers, n) scores, higher = keep."""
    if not name or name in SCORERS:
        raise ValueError(f"scorer name {name!r} is empty or taken ({', '.join(SCORERS)})")
    SCORERS[name] = fn


def scores(
    scorer: str, layers: int, n: int, rng: np.random.Generator, lifespans: np.ndarray | None = None
) -> np.ndarray:
    """(layers, n) static token scores from the scorer named ``scorer``."""
    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r} (known: {', '.join(SCORERS)})")
    if lifespans is not None and np.shape(lifespans) != (layers, n):
        raise ValueError(f"lifespans must have shape {(layers, n)}, got {np.shape(lifespans)}")
    out = np.asarray(SCORERS[scorer](layers, n, rng, lifespans))
    if not np.issubdtype(out.dtype, np.floating):
        out = out.astype(float)
    if out.shape != (layers, n) or np.isnan(out).any():
        raise ValueError(
            f"scorer {scorer!r} must return finite-or-inf scores of shape {(layers, n)}"
        )
    return out


# --- the relevance model ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LifespanDistribution:
    """Lifespans in tokens: point masses (``inf`` = relevant forever) plus an optional geometric
    part (support 1, 2, ...) with weight ``geometric_share`` and mean ``geometric_mean``."""

    lifespans: tuple[float, ...]
    probabilities: tuple[float, ...]
    geometric_share: float = 0.0
    geometric_mean: float = 64.0
    source: str = "<code>"

    def __post_init__(self) -> None:
        if len(self.lifespans) != len(self.probabilities):
            raise ValueError(
                f"{self.source}: {len(self.lifespans)} lifespans but "
                f"{len(self.probabilities)} probabilities"
            )
        if any(not (v >= 1) for v in self.lifespans):
            raise ValueError(f"{self.source}: lifespans must be >= 1 token (or inf)")
        if any(not (0 <= p <= 1) for p in (*self.probabilities, self.geometric_share)):
            raise ValueError(f"{self.source}: probabilities must lie in [0, 1]")
        if self.geometric_share > 0 and not (
            math.isfinite(self.geometric_mean) and self.geometric_mean >= 1
        ):
            raise ValueError(f"{self.source}: geometric_mean must be finite and >= 1")
        total = sum(self.probabilities) + self.geometric_share
        if abs(total - 1.0) > 1e-3:
            raise ValueError(f"{self.source}: probabilities sum to {total:.6g}, not 1")

    @classmethod
    def builtin(cls) -> LifespanDistribution:
        """Illustrative default, not measured: 5 % heavy hitters relevant forever, the rest
        geometric with a mean of 64 tokens."""
        return cls(
            (math.inf,),
            (0.05,),
            geometric_share=0.95,
            geometric_mean=64.0,
            source="builtin (illustrative)",
        )

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str]) -> LifespanDistribution:
        """A histogram: header ``lifespan_tokens,probability``, one row per lifespan (``inf``
        allowed), probabilities summing to 1 (within 0.001; then normalised). Blank lines and
        lines starting with ``#`` are skipped. Errors name the file and line."""
        name = os.fspath(path)
        values: list[float] = []
        probs: list[float] = []
        header_seen = False
        with open(name, newline="") as fh:
            reader = csv.reader(fh)
            for cells in reader:
                where = f"{name}:{reader.line_num}"
                if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
                    continue
                cells = [c.strip() for c in cells]
                if not header_seen:
                    if cells != ["lifespan_tokens", "probability"]:
                        raise ValueError(
                            f"{where}: header must be 'lifespan_tokens,probability', "
                            f"got {','.join(cells)!r}"
                        )
                    header_seen = True
                    continue
                if len(cells) != 2:
                    raise ValueError(f"{where}: expected 2 columns, got {len(cells)}")
                life, prob = (
                    _number(cells[0], where, "lifespan_tokens"),
                    _number(cells[1], where, "probability"),
                )
                if not (life >= 1):
                    raise ValueError(
                        f"{where}: lifespan_tokens must be >= 1 or inf, got {cells[0]!r}"
                    )
                if not (math.isfinite(prob) and 0 <= prob <= 1):
                    raise ValueError(f"{where}: probability must lie in [0, 1], got {cells[1]!r}")
                if life in values:
                    raise ValueError(f"{where}: lifespan_tokens {cells[0]} repeats an earlier row")
                values.append(life)
                probs.append(prob)
        if not values:
            raise ValueError(
                f"{name}: no rows (need the header 'lifespan_tokens,probability' and data)"
            )
        total = sum(probs)
        if abs(total - 1.0) > 1e-3:
            raise ValueError(f"{name}: probabilities sum to {total:.6g}, not 1 (tolerance 0.001)")
        return cls(tuple(values), tuple(p / total for p in probs), source=name)

    def sample(
        self, rng: np.random.Generator, shape: tuple[int, ...], dtype: type = np.float64
    ) -> np.ndarray:
        """Lifespans (inf allowed) from one uniform draw u per element: u below the point masses'
        total picks a mass, the rest goes through the geometric inverse CDF. float32 halves the
        memory traffic and is exact for integer lifespans; its 24-bit u cuts the geometric tail
        at ~17 means (a 6e-8 chance)."""
        u = rng.random(shape, dtype=dtype)
        atoms: np.ndarray = np.asarray(self.lifespans, dtype=dtype)
        cum = np.cumsum(self.probabilities)
        if self.geometric_share == 0:
            idx = np.searchsorted(cum / cum[-1], u, side="right")
            return atoms[np.minimum(idx, len(atoms) - 1)]
        atom_total = float(cum[-1]) if len(cum) else 0.0
        # For u >= atom_total, w = (1-u)/(1-atom_total) is uniform on (0, 1] and
        # ceil(log w / log(1-p)) is geometric on 1, 2, ... with mean 1/p. Elements with
        # u < atom_total are overwritten with their point mass at the end.
        p = 1.0 / self.geometric_mean
        in_atoms = u < atom_total
        if len(atoms) > 1:
            picked = atoms[
                np.minimum(np.searchsorted(cum, u[in_atoms], side="right"), len(atoms) - 1)
            ]
        out = u  # transformed in place: no fresh array, no page faults
        if p < 1:
            np.subtract(dtype(1), out, out=out)
            out *= dtype(1.0 / (1.0 - atom_total))
            np.log(out, out=out)
            out *= dtype(1.0 / math.log1p(-p))
            np.ceil(out, out=out)
            np.maximum(out, dtype(1), out=out)
        else:
            out.fill(1)
        if len(atoms) == 1:
            np.putmask(out, in_atoms, atoms[0])
        elif len(atoms):
            out[in_atoms] = picked
        return out


def _number(text: str, where: str, column: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{where}: {column} must be a number, got {text!r}") from None
    if math.isnan(v):
        raise ValueError(f"{where}: {column} must not be NaN")
    return v


# --- the quality estimate ---------------------------------------------------------------------------
# The estimate works in float32 (half the memory traffic of float64): positions and integer
# lifespans are exact below 2**24 tokens.
_F32_EXACT = 2**24


def count_relevant_pruned(
    score: np.ndarray, expiry: np.ndarray, turn_ends: Sequence[int], tb: TokenBudget
) -> tuple[int, int]:
    """(relevant, relevant and pruned), summed over layers and turn ends. Token i of a layer is
    relevant at n when n < expiry = i + lifespan; the kept set at n is ``kept_set``'s."""
    if score.shape != expiry.shape:
        raise ValueError(f"score and expiry shapes differ: {score.shape} vs {expiry.shape}")
    n_max = score.shape[1]
    total = pruned = 0
    scratch = np.empty_like(score)
    for ne in turn_ends:
        if not 0 <= ne <= n_max:
            raise ValueError(f"turn end {ne} outside 0..{n_max}")
        relevant = expiry[:, :ne] > ne
        total += int(np.count_nonzero(relevant))
        c0, c1 = tb.sink, ne - tb.window
        if c1 - c0 <= tb.budget:
            continue
        lost = _top_b_mask(score[:, c0:c1], tb.budget, scratch)
        np.logical_not(lost, out=lost)
        lost &= relevant[:, c0:c1]
        pruned += int(np.count_nonzero(lost))
    return total, pruned


def relevant_pruned_share(
    n_tokens_per_turn_end: Sequence[int],
    tb: TokenBudget,
    scorer: str,
    layers: int,
    rng: np.random.Generator,
    dist: LifespanDistribution | None = None,
) -> tuple[int, int]:
    """One session: (relevant tokens, relevant tokens pruned) over layers at each turn end, the
    token counts at which the next query attends. Draws the lifespans, then the scores, from rng."""
    ends = [int(e) for e in n_tokens_per_turn_end]
    if any(e < 1 for e in ends) or any(b < a for a, b in itertools.pairwise(ends)):
        raise ValueError(f"turn-end token counts must be >= 1 and non-decreasing, got {ends}")
    if not ends:
        return 0, 0
    n = ends[-1]
    if n >= _F32_EXACT:
        raise ValueError(f"sessions of {n} tokens exceed float32's exact integers ({_F32_EXACT})")
    life = (dist or LifespanDistribution.builtin()).sample(rng, (layers, n), np.float32)
    # The lifespan scorer's scores are the expiry times themselves: skip the copy.
    sc = None if scorer == "lifespan" else scores(scorer, layers, n, rng, life)
    if sc is not None and np.shares_memory(sc, life):
        sc = sc.copy()
    expiry = life
    expiry += np.arange(n, dtype=np.float32)  # in place: fresh arrays cost page faults
    return count_relevant_pruned(expiry if sc is None else sc, expiry, ends, tb)


@dataclass(frozen=True, slots=True)
class QualityReport:
    """Share of relevant tokens pruned, estimated on a sample of sessions."""

    relevant_total: int
    relevant_pruned: int
    sessions_sampled: int
    sessions_total: int
    share_stderr: float  # standard error of the share (ratio estimator over sessions); nan if < 2

    @property
    def pruned_share(self) -> float:
        return self.relevant_pruned / self.relevant_total if self.relevant_total else 0.0


def quality_report(
    sessions_token_counts: Sequence[Sequence[int]],
    tb: TokenBudget,
    scorer: str,
    layers: int,
    seed: int,
    dist: LifespanDistribution | None = None,
    sample_sessions: int = 200,
) -> QualityReport:
    """Estimate on the first ``sample_sessions`` sessions of a seeded shuffle (all if fewer). Each
    session draws from its own generator seeded by (seed, session index), so its numbers do not
    depend on which other sessions are in the sample."""
    if sample_sessions < 1:
        raise ValueError(f"sample_sessions must be >= 1, got {sample_sessions}")
    k = len(sessions_token_counts)
    order = np.random.default_rng(seed).permutation(k)[:sample_sessions]
    rel = np.zeros(len(order))
    pru = np.zeros(len(order))
    for j, idx in enumerate(order):
        rng = np.random.default_rng([seed, int(idx)])
        rel[j], pru[j] = relevant_pruned_share(
            sessions_token_counts[idx], tb, scorer, layers, rng, dist
        )
    total, pruned = int(rel.sum()), int(pru.sum())
    stderr = math.nan
    if len(order) >= 2 and total > 0:
        r = pruned / total
        m = len(order)
        stderr = float(np.sqrt(np.sum((pru - r * rel) ** 2) / (m * (m - 1))) / rel.mean())
    return QualityReport(total, pruned, len(order), k, stderr)
