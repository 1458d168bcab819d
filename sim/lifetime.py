"""Session lifetime predictor: will an idle session come back, and when?

The model, per *turn bucket* c (c = turns the session has completed, ``SessionKV.next_turn``;
buckets 1..K-1 one each, bucket K pools every c >= K):

* continuation  p_c = P(turn c exists | turns 0..c-1 happened)  -- an empirical hazard of ending:
  p_c = (sessions with more than c turns) / (sessions with at least c turns);
* think time    T_c ~ lognormal(mu_c, sigma_c): the time between turn c-1 completing and turn c
  arriving, fitted by maximum likelihood (mean and population std of ln T).

From these, for a session idle for e seconds after completing c turns:

    P(next turn | c, e)        = p S(e) / (1 - p + p S(e))        S(e) = P(T_c > e)  (Bayes)
    P(next turn within h | c, e) = p (S(e) - S(e + h)) / (1 - p + p S(e))
    expected think time          = exp(mu + sigma^2 / 2)
    mean residual                = E[T_c - e | T_c > e]

``P(next turn | c, e)`` is non-increasing in e for any think-time law (S is), which is what lets the
``predictive`` policy rank exactly (see its module).

Fit and split (``fit_lifetime``): sessions are ordered by start time (then id, the loaders' order) and
the first ``train_frac`` (default 30 %) of them train the model; the rest are the evaluation split
(``LifetimePredictor.train_ids`` names the training sessions so results can be filtered). Think times
are ``Turn.think_s`` where present (closed loop), else the gap between the two turns' ``arrival_s``
(open-loop traces: that gap also holds the previous turn's service time, so it over-estimates the
think time). Think times are floored at ``MIN_THINK_S`` (the lognormal has no mass at 0). A bucket
with fewer than ``min_count`` observations borrows the pooled estimate of all buckets >= it, and, if
those are still too few, of all buckets (``BucketFit.pooled`` says so).

Without a fitted predictor policies use ``LifetimePredictor.prior()``: continuation from the ShareGPT
turn-count fit that drives the synthetic generator and a lognormal think time of median 30 s, sigma 1
(the generator's documented assumption).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

if TYPE_CHECKING:  # for annotations only: importing the traces package costs a tenth of a second
    from traces.records import Session

MIN_THINK_S = 1e-3
_SQRT2 = math.sqrt(2.0)


def _certain(idle_s: float) -> float:
    return 1.0


def _never(idle_s: float) -> float:
    return 0.0


def _return_score(p: float, mu: float, sigma: float) -> Callable[[float], float]:
    """``p_return`` of one bucket (continuation p, lognormal think time mu, sigma) as a function
    of the idle time: the bucket's constants bound once, as a policy scores one head after
    another. 1 / (1 + (1-p) / (p S)) with S as ``LifetimePredictor.survival`` computes it."""
    if p >= 1.0:
        return _certain
    if p <= 0.0:
        return _never
    q, scale = 1.0 - p, sigma * _SQRT2
    log, erfc = math.log, math.erfc

    def score(idle_s: float) -> float:
        # p * S(idle_s), S = 1 at no idle time
        ps = p if idle_s <= 0 else p * (0.5 * erfc((log(idle_s) - mu) / scale))
        return 0.0 if ps <= 0.0 else 1.0 / (1.0 + q / ps)

    return score


@dataclass(frozen=True, slots=True)
class BucketFit:
    """The fitted law of one turn bucket."""

    c: int  # completed turns (the last bucket pools c >= this)
    at_risk: int  # training sessions that completed c turns (observations of p)
    continued: int  # of those, the ones with a further turn
    p_next: float  # continuation probability
    think_n: int  # think times observed for the turn after
    mu: float  # mean of ln(think_s)
    sigma: float  # population std of ln(think_s) (> 0)
    pooled: bool = False  # the estimate borrows from other buckets (too few observations)

    @property
    def expected_think_s(self) -> float:
        return math.exp(self.mu + 0.5 * self.sigma * self.sigma)

    @property
    def median_think_s(self) -> float:
        return math.exp(self.mu)


@dataclass(frozen=True)
class LifetimePredictor:
    """P(next turn | completed turns, idle time) and think-time expectations (module docstring)."""

    buckets: tuple[BucketFit, ...]  # buckets[i] is bucket c = i + 1
    source: str = ""
    train_ids: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.buckets:
            raise ValueError("LifetimePredictor needs at least one bucket")
        for i, b in enumerate(self.buckets):
            if b.c != i + 1:
                raise ValueError(f"bucket {i} has c = {b.c}, expected {i + 1}")
            if not (0.0 <= b.p_next <= 1.0) or not (b.sigma > 0) or not math.isfinite(b.mu):
                raise ValueError(
                    f"bucket c={b.c}: need 0 <= p_next <= 1, sigma > 0, finite mu; got {b}"
                )

    @property
    def num_buckets(self) -> int:
        return len(self.buckets)

    def bucket_index(self, completed: int) -> int:
        """0 for a session that has completed no turn yet (it is mid-turn-0: it will be back),
        else min(completed, K)."""
        return 0 if completed <= 0 else min(completed, len(self.buckets))

    def bucket(self, completed: int) -> BucketFit:
        return self.buckets[max(1, min(completed, len(self.buckets))) - 1]

    # -- the quantities ---------------------------------------------------------------------------
    def survival(self, completed: int, idle_s: float) -> float:
        """P(T_c > idle_s): the next turn's think time exceeds the idle time so far."""
        if idle_s <= 0:
            return 1.0
        b = self.bucket(completed)
        return 0.5 * math.erfc((math.log(idle_s) - b.mu) / (b.sigma * _SQRT2))

    def p_next(self, completed: int) -> float:
        return 1.0 if completed <= 0 else self.bucket(completed).p_next

    def p_return(self, completed: int, idle_s: float) -> float:
        """P(the session has a next turn | it completed ``completed`` turns, idle for idle_s).

        Evaluated as 1 / (1 + (1-p) / (p S)), each step a monotone float operation, so the computed
        value is non-increasing in idle_s exactly as the real one is.
        """
        return self.return_score(completed)(idle_s)

    def return_score(self, completed: int) -> Callable[[float], float]:
        """``p_return(completed, idle_s)`` as a function of idle_s alone, the same floats."""
        if completed <= 0:
            return _certain
        b = self.bucket(completed)
        return _return_score(b.p_next, b.mu, b.sigma)

    def p_return_within(self, completed: int, idle_s: float, horizon_s: float) -> float:
        """P(the next turn arrives within ``horizon_s`` from now | completed, idle_s)."""
        if completed <= 0:
            return 1.0
        p = self.p_next(completed)
        s_now = self.survival(completed, idle_s)
        s_later = self.survival(completed, idle_s + horizon_s)
        den = 1.0 - p + p * s_now
        return 0.0 if den <= 0 else p * (s_now - s_later) / den

    def expected_think_s(self, completed: int) -> float:
        return self.bucket(completed).expected_think_s

    def mean_residual_s(self, completed: int, idle_s: float) -> float:
        """E[T_c - idle_s | T_c > idle_s] under the lognormal (inf where S underflows)."""
        b = self.bucket(completed)
        if idle_s <= 0:
            return b.expected_think_s
        z = (math.log(idle_s) - b.mu) / b.sigma
        s = 0.5 * math.erfc(z / _SQRT2)
        if s <= 0.0:
            return math.inf
        upper = b.expected_think_s * 0.5 * math.erfc((z - b.sigma) / _SQRT2)  # E[T 1{T > e}]
        return max(0.0, upper / s - idle_s)

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def prior(
        cls, buckets: int = 16, median_think_s: float = 30.0, sigma: float = 1.0
    ) -> "LifetimePredictor":
        """The default without a fit: ShareGPT turn counts (``traces.synthetic``'s fit) and the
        synthetic generator's think-time assumption."""
        from traces.synthetic import SyntheticConfig

        pmf = SyntheticConfig().turns_pmf  # P(turns = i + 1)
        n = max(len(pmf), buckets) + 1
        tail = [sum(pmf[i:]) for i in range(n)]  # tail[c] = P(turns > c)
        fits = []
        for c in range(1, buckets + 1):
            if c < buckets:  # P(turns > c | turns >= c)
                at, more = tail[c - 1], tail[c]
            else:  # pooled over c' >= K, weighted by the at-risk mass, as a fit pools them
                at, more = sum(tail[c - 1 : n - 1]), sum(tail[c:n])
            p = more / at if at > 0 else 0.0
            fits.append(
                BucketFit(c, 0, 0, min(1.0, p), 0, math.log(median_think_s), sigma, pooled=True)
            )
        return cls(
            tuple(fits),
            source=f"prior: ShareGPT turn-count fit, lognormal think "
            f"median {median_think_s} s sigma {sigma}",
        )


def train_split(
    sessions: Iterable[Session], train_frac: float = 0.3
) -> tuple[list[Session], list[Session]]:
    """(train, evaluate): the first ``train_frac`` of sessions by (start time, id), then the rest."""
    if not 0.0 < train_frac <= 1.0:
        raise ValueError(f"train_frac must be in (0, 1], got {train_frac}")
    ordered = sorted(sessions, key=lambda s: (s.start_s, s.session_id))
    n_train = math.ceil(train_frac * len(ordered))
    return ordered[:n_train], ordered[n_train:]


def think_times(session: Session) -> list[float | None]:
    """Think time before each turn k >= 1 (None where the trace gives no way to tell)."""
    out: list[float | None] = []
    turns = session.turns
    for k in range(1, len(turns)):
        t = turns[k]
        if t.think_s is not None:
            out.append(t.think_s)
        elif t.arrival_s is not None and (prev_s := turns[k - 1].arrival_s) is not None:
            out.append(max(0.0, t.arrival_s - prev_s))
        else:
            out.append(None)
    return out


def fit_buckets(
    sessions: Sequence[Session], buckets: int = 16, min_count: int = 10
) -> tuple[BucketFit, ...]:
    """Per-bucket continuation and lognormal think-time MLE from ``sessions`` (all of them)."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    at_risk = [0] * (buckets + 1)
    cont = [0] * (buckets + 1)
    logs: list[list[float]] = [[] for _ in range(buckets + 1)]
    for s in sessions:
        n = len(s.turns)
        thinks = think_times(s)
        for c in range(1, n + 1):
            b = min(c, buckets)
            at_risk[b] += 1
            if c < n:
                cont[b] += 1
                x = thinks[c - 1]
                if x is not None:
                    logs[b].append(math.log(max(x, MIN_THINK_S)))

    def pool_p(lo: int) -> tuple[int, int]:
        return sum(at_risk[lo:]), sum(cont[lo:])

    def pool_logs(lo: int) -> list[float]:
        return [v for b in range(lo, buckets + 1) for v in logs[b]]

    all_logs = pool_logs(1)
    fits = []
    for b in range(1, buckets + 1):
        n_at, n_cont, pooled = at_risk[b], cont[b], False
        if n_at < min_count:
            n_at, n_cont = pool_p(b)
            pooled = True
            if n_at < min_count:
                n_at, n_cont = pool_p(1)
        p = n_cont / n_at if n_at else 0.0
        xs = logs[b]
        if len(xs) < min_count:
            xs, pooled = pool_logs(b), True
            if len(xs) < min_count:
                xs = all_logs
        if xs:
            mu = sum(xs) / len(xs)
            var = sum((v - mu) ** 2 for v in xs) / len(xs)
            sigma = math.sqrt(var) if var > 0 else 1e-6
        else:  # no think time anywhere in the data: the prior's
            mu, sigma = math.log(30.0), 1.0
        fits.append(BucketFit(b, at_risk[b], cont[b], p, len(logs[b]), mu, sigma, pooled))
    return tuple(fits)


def fit_lifetime(
    sessions: Iterable[Session], train_frac: float = 0.3, buckets: int = 16, min_count: int = 10
) -> LifetimePredictor:
    """Fit on the training split of ``sessions`` (the first ``train_frac`` by start time)."""
    train, _ = train_split(sessions, train_frac)
    fits = fit_buckets(train, buckets, min_count)
    return LifetimePredictor(
        fits,
        source=f"fit on {len(train)} sessions (first {train_frac:.0%} by start)",
        train_ids=frozenset(s.session_id for s in train),
    )
