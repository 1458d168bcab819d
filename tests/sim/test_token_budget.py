"""Learned token budgets, token level: prune order worked by hand, the top-B fact (bulk prune ==
one-at-a-time pruning) as a property, the relevance count by hand, and the lifespan CSV reader."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.token_budget import (
    SCORERS,
    LifespanDistribution,
    TokenBudget,
    count_relevant_pruned,
    kept_set,
    kept_set_streaming,
    quality_report,
    register_scorer,
    relevant_pruned_share,
    scores,
    stream_prunes,
)

# Token:      0  1  2  3  4  5  6  7
HAND_SCORES = [9, 5, 1, 7, 3, 8, 2, 6]


# --- the budget ----------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["sink", "window", "budget"])
@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_budget_fields_must_be_non_negative_ints(field, bad) -> None:
    kw = {"sink": 1, "window": 1, "budget": 1, field: bad}
    with pytest.raises(ValueError, match=rf"budget\.{field} must be a non-negative integer"):
        TokenBudget(**kw)


def test_budget_needs_room_for_one_token() -> None:
    with pytest.raises(
        ValueError, match=r"budget\.sink \+ budget\.window \+ budget\.budget must be >= 1"
    ):
        TokenBudget(0, 0, 0)


def test_capacity_and_kept_count() -> None:
    tb = TokenBudget(4, 16, 32)
    assert tb.capacity == 52
    assert [tb.kept(n) for n in (0, 1, 51, 52, 53, 10_000)] == [0, 1, 51, 52, 52, 52]


# --- prune order, by hand --------------------------------------------------------------------------
def test_prune_order_by_hand_prefill_5() -> None:
    """S=1, W=2, B=2 (capacity 5), prefill of 5 tokens: nothing to prune yet. Then each decode
    token pushes one token out of the window into the budget; the lowest score there loses:
      n=6: token 3 (7) leaves the window; budget {1:5, 2:1, 3:7} -> prune 2 (score 1)
      n=7: token 4 (3) leaves;            budget {1:5, 3:7, 4:3} -> prune 4 (it loses at once)
      n=8: token 5 (8) leaves;            budget {1:5, 3:7, 5:8} -> prune 1 (score 5)"""
    tb = TokenBudget(1, 2, 2)
    steps = [(s.n, s.pruned, s.kept) for s in stream_prunes(HAND_SCORES, 8, tb, prefill=5)]
    assert steps == [
        (5, (), (0, 1, 2, 3, 4)),
        (6, (2,), (0, 1, 3, 4, 5)),
        (7, (4,), (0, 1, 3, 5, 6)),
        (8, (1,), (0, 3, 5, 6, 7)),
    ]
    for n, _, kept in steps:
        assert kept_set(HAND_SCORES, n, tb).tolist() == list(kept)


def test_bulk_prune_by_hand_prefill_7() -> None:
    """Prefill of 7: candidates are tokens 1..4 (scores 5, 1, 7, 3); the top 2 are 3 and 1, so the
    bulk prune drops 2 and 4 at once, lowest score first -- the same set as pruning one at a time."""
    tb = TokenBudget(1, 2, 2)
    steps = [(s.n, s.pruned, s.kept) for s in stream_prunes(HAND_SCORES, 8, tb, prefill=7)]
    assert steps == [(7, (2, 4), (0, 1, 3, 5, 6)), (8, (1,), (0, 3, 5, 6, 7))]


def test_ties_keep_the_newer_token() -> None:
    """S=0, W=1, B=1, all scores equal: each token leaving the window ties with the budget token
    and the older one is pruned, so the budget holds the newest token that left the window."""
    tb = TokenBudget(0, 1, 1)
    steps = [(s.n, s.pruned) for s in stream_prunes([1.0] * 5, 5, tb, prefill=1)]
    assert steps == [(1, ()), (2, ()), (3, (0,)), (4, (1,)), (5, (2,))]
    assert kept_set([1.0] * 5, 5, tb).tolist() == [3, 4]
    # Bulk: four tied candidates 0..3 for two places (B=2): the two newest stay.
    assert kept_set([2.0, 2.0, 2.0, 2.0, 0.0], 5, TokenBudget(0, 1, 2)).tolist() == [2, 3, 4]


def test_short_sessions_keep_everything() -> None:
    tb = TokenBudget(2, 3, 1)
    for n in range(7):
        assert kept_set(np.arange(10.0)[::-1], n, tb).tolist() == list(range(n))


def test_window_zero_puts_each_new_token_in_the_competition() -> None:
    tb = TokenBudget(0, 0, 2)
    assert kept_set([3, 9, 1, 8, 2], 5, tb).tolist() == [1, 3]
    assert kept_set_streaming([3, 9, 1, 8, 2], 5, tb, prefill=0).tolist() == [1, 3]


def test_bad_inputs() -> None:
    tb = TokenBudget(1, 1, 1)
    with pytest.raises(ValueError, match="at least 5 scores"):
        kept_set([1.0, 2.0], 5, tb)
    with pytest.raises(ValueError, match="NaN"):
        kept_set([1.0, math.nan, 2.0], 3, tb)
    with pytest.raises(ValueError, match=r"prefill must be an integer in 0\.\.3"):
        kept_set_streaming([1.0, 2.0, 3.0], 3, tb, prefill=4)


# --- the top-B fact ---------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    sink=st.integers(0, 4),
    window=st.integers(0, 4),
    budget=st.integers(0, 5),
    raw=st.lists(st.integers(0, 4), min_size=1, max_size=40),
    data=st.data(),
)
def test_bulk_prune_equals_one_at_a_time(sink, window, budget, raw, data) -> None:
    """Few distinct scores, so ties are common and the tie rule is exercised."""
    if sink + window + budget == 0:
        sink = 1
    tb = TokenBudget(sink, window, budget)
    n = len(raw)
    prefill = data.draw(st.integers(0, n))
    bulk = kept_set(raw, n, tb)
    assert bulk.tolist() == kept_set_streaming(raw, n, tb, prefill).tolist()
    assert len(bulk) == tb.kept(n)


def test_bulk_prune_equals_one_at_a_time_seeded_sweep() -> None:
    """Longer sessions than the property test, float scores with some ties, every prefill point."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        tb = TokenBudget(
            int(rng.integers(0, 5)), int(rng.integers(0, 20)), int(rng.integers(1, 30))
        )
        n = int(rng.integers(1, 150))
        row = np.round(rng.random(n), 1)
        prefill = int(rng.integers(0, n + 1))
        assert kept_set(row, n, tb).tolist() == kept_set_streaming(row, n, tb, prefill).tolist()


def test_recency_budget_is_a_longer_window() -> None:
    rng = np.random.default_rng(0)
    row = scores("recency", 1, 50, rng)[0]
    for n in (10, 30, 50):
        assert (
            kept_set(row, n, TokenBudget(2, 5, 7)).tolist()
            == kept_set(row, n, TokenBudget(2, 12, 0)).tolist()
        )


# --- scorers ---------------------------------------------------------------------------------------
def test_scorers() -> None:
    rng = np.random.default_rng(0)
    life = np.array([[1.0, 5.0, math.inf], [2.0, 2.0, 2.0]])
    assert scores("lifespan", 2, 3, rng, life).tolist() == [[1.0, 6.0, math.inf], [2.0, 3.0, 4.0]]
    assert scores("recency", 2, 3, rng).tolist() == [[0.0, 1.0, 2.0]] * 2
    r = scores("random", 2, 3, np.random.default_rng(5))
    assert r.shape == (2, 3) and np.all((r >= 0) & (r < 1))
    assert np.array_equal(r, scores("random", 2, 3, np.random.default_rng(5)))
    with pytest.raises(ValueError, match="unknown scorer 'oracle'"):
        scores("oracle", 1, 3, rng)
    with pytest.raises(ValueError, match="needs the lifespans"):
        scores("lifespan", 1, 3, rng)


def test_a_registered_scorer_is_used_by_name() -> None:
    """A scorer that keeps the oldest candidates (score = -position)."""
    name = "oldest-first-test"
    if name not in SCORERS:
        register_scorer(
            name,
            lambda layers, n, rng, life: np.broadcast_to(-np.arange(n, dtype=float), (layers, n)),
        )
    with pytest.raises(ValueError, match="taken"):
        register_scorer(name, SCORERS["random"])
    row = scores(name, 1, 10, np.random.default_rng(0))[0]
    assert kept_set(row, 10, TokenBudget(1, 2, 3)).tolist() == [0, 1, 2, 3, 8, 9]


# --- the relevance count ---------------------------------------------------------------------------
def test_relevance_count_by_hand() -> None:
    """S=1, W=1, B=1. Expiry = position + lifespan; token i is relevant at n when n < expiry.
    Layer 0, scores [0, 4, 2, 5, 1, 3]:
      n=4: relevant 0 (inf) and 2 (12) -> 2; candidates 1, 2 keep 1 (score 4): 2 pruned, relevant -> 1
      n=6: relevant 0, 2, 4 (8)        -> 3; candidates 1..4 keep 3 (score 5): 1, 2, 4 pruned,
           relevant 2 and 4 -> 2                                          layer 0: (5, 3)
    Layer 1, same expiry, scores [0, 1, 9, 0, 8, 0]:
      n=4: keep 2 -> 1 pruned (expiry 3, not relevant) -> 0
      n=6: keep 2 -> 1, 3, 4 pruned, relevant 4 -> 1                      layer 1: (5, 1)"""
    life = [math.inf, 2, 10, 1, 4, 1]
    expiry = np.arange(6.0) + np.array([life, life])
    score = np.array([[0, 4, 2, 5, 1, 3], [0, 1, 9, 0, 8, 0]], dtype=float)
    assert count_relevant_pruned(score[:1], expiry[:1], [4, 6], TokenBudget(1, 1, 1)) == (5, 3)
    assert count_relevant_pruned(score[1:], expiry[1:], [4, 6], TokenBudget(1, 1, 1)) == (5, 1)
    assert count_relevant_pruned(score, expiry, [4, 6], TokenBudget(1, 1, 1)) == (10, 4)


@settings(max_examples=100, deadline=None)
@given(
    sink=st.integers(0, 3),
    window=st.integers(0, 5),
    budget=st.integers(0, 6),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
)
def test_vectorised_count_matches_kept_set(sink, window, budget, seed, n) -> None:
    if sink + window + budget == 0:
        budget = 1
    tb = TokenBudget(sink, window, budget)
    rng = np.random.default_rng(seed)
    score = rng.integers(0, 4, (3, n)).astype(float)
    expiry = np.arange(n) + rng.integers(1, 12, (3, n)).astype(float)
    ends = sorted(set(rng.integers(1, n + 1, 3).tolist()))
    total = pruned = 0
    for ne in ends:
        for layer in range(3):
            relevant = set(np.flatnonzero(expiry[layer, :ne] > ne).tolist())
            total += len(relevant)
            pruned += len(relevant - set(kept_set(score[layer], ne, tb).tolist()))
    assert count_relevant_pruned(score, expiry, ends, tb) == (total, pruned)


def test_streaming_llm_by_hand(tmp_path) -> None:
    """B=0 is StreamingLLM (sinks + window). Every lifespan is 3, so at n=6 tokens 4 and 5 are
    relevant (6 < i+3). S=1, W=1: kept {0, 5}; token 4 is relevant and pruned. Two layers."""
    p = tmp_path / "three.csv"
    p.write_text("lifespan_tokens,probability\n3,1\n")
    dist = LifespanDistribution.from_csv(p)
    for scorer in ("random", "recency", "lifespan"):
        got = relevant_pruned_share(
            [6], TokenBudget(1, 1, 0), scorer, 2, np.random.default_rng(0), dist
        )
        assert got == (4, 2)
    # With B=1 the recency and lifespan scorers keep token 4 (newest, latest expiry): nothing lost.
    for scorer in ("recency", "lifespan"):
        got = relevant_pruned_share(
            [6], TokenBudget(1, 1, 1), scorer, 2, np.random.default_rng(0), dist
        )
        assert got == (4, 0)


def test_turn_ends_are_checked() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        relevant_pruned_share([5, 3], TokenBudget(1, 1, 1), "random", 2, np.random.default_rng(0))
    assert relevant_pruned_share(
        [], TokenBudget(1, 1, 1), "random", 2, np.random.default_rng(0)
    ) == (0, 0)


# --- lifespan distributions ------------------------------------------------------------------------
def test_builtin_distribution_matches_its_description() -> None:
    d = LifespanDistribution.builtin()
    for dtype in (np.float64, np.float32):
        x = d.sample(np.random.default_rng(1), (1000, 1000), dtype)
        assert x.dtype == dtype
        heavy = np.isinf(x)
        assert heavy.mean() == pytest.approx(0.05, abs=0.002)
        finite = x[~heavy]
        assert finite.min() == 1 and np.all(finite == np.round(finite))
        assert finite.mean() == pytest.approx(64.0, rel=0.01)


def test_csv_histogram_round_trip(tmp_path) -> None:
    p = tmp_path / "life.csv"
    p.write_text(
        "# measured on nothing: a test\nlifespan_tokens,probability\n\n10,0.2\ninf,0.3\n100,0.5\n"
    )
    d = LifespanDistribution.from_csv(p)
    assert d.lifespans == (10.0, math.inf, 100.0) and d.probabilities == pytest.approx(
        (0.2, 0.3, 0.5)
    )
    x = d.sample(np.random.default_rng(3), (200_000,))
    assert set(np.unique(x).tolist()) == {10.0, 100.0, math.inf}
    assert [(x == v).mean() for v in (10.0, math.inf, 100.0)] == pytest.approx(
        [0.2, 0.3, 0.5], abs=0.005
    )


@pytest.mark.parametrize(
    "body, line, message",
    [
        ("lifespan,probability\n10,1\n", 1, "header must be 'lifespan_tokens,probability'"),
        ("lifespan_tokens,probability\n10,1,3\n", 2, "expected 2 columns"),
        ("lifespan_tokens,probability\nten,1\n", 2, "lifespan_tokens must be a number"),
        ("lifespan_tokens,probability\n10,half\n", 2, "probability must be a number"),
        ("lifespan_tokens,probability\n10,0.5\n0,0.5\n", 3, "lifespan_tokens must be >= 1 or inf"),
        ("lifespan_tokens,probability\n10,-0.5\n", 2, r"probability must lie in \[0, 1\]"),
        ("lifespan_tokens,probability\n10,0.5\n10.0,0.5\n", 3, "repeats an earlier row"),
        ("lifespan_tokens,probability\nnan,1\n", 2, "must not be NaN"),
    ],
)
def test_csv_errors_name_file_and_line(tmp_path, body, line, message) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ValueError, match=message) as e:
        LifespanDistribution.from_csv(p)
    assert str(e.value).startswith(f"{p}:{line}: ")


@pytest.mark.parametrize(
    "body, message",
    [
        ("lifespan_tokens,probability\n", "no rows"),
        ("", "no rows"),
        ("lifespan_tokens,probability\n10,0.5\n20,0.4\n", "probabilities sum to 0.9, not 1"),
    ],
)
def test_csv_file_level_errors_name_the_file(tmp_path, body, message) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ValueError, match=message) as e:
        LifespanDistribution.from_csv(p)
    assert str(e.value).startswith(f"{p}: ")


# --- the quality report ----------------------------------------------------------------------------
def _sessions(k: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [np.cumsum(rng.integers(50, 400, int(rng.integers(1, 6)))).tolist() for _ in range(k)]


def test_report_samples_deterministically_and_says_how_many() -> None:
    tb = TokenBudget(4, 64, 128)
    big, small = _sessions(300), _sessions(50)
    a = quality_report(big, tb, "random", 8, seed=1, sample_sessions=200)
    assert (a.sessions_sampled, a.sessions_total) == (200, 300)
    assert a == quality_report(big, tb, "random", 8, seed=1, sample_sessions=200)
    assert a != quality_report(big, tb, "random", 8, seed=2, sample_sessions=200)
    b = quality_report(small, tb, "random", 8, seed=1, sample_sessions=200)
    assert (b.sessions_sampled, b.sessions_total) == (50, 50)
    assert 0 < a.pruned_share < 1 and 0 < a.share_stderr < a.pruned_share


def test_report_sessions_do_not_depend_on_the_rest_of_the_sample() -> None:
    """Each session draws from (seed, its index): one session alone gives the numbers it adds to
    the full report."""
    tb = TokenBudget(4, 64, 128)
    sess = _sessions(5)
    full = quality_report(sess, tb, "random", 4, seed=9)
    parts = [
        relevant_pruned_share(s, tb, "random", 4, np.random.default_rng([9, i]))
        for i, s in enumerate(sess)
    ]
    assert (full.relevant_total, full.relevant_pruned) == (
        sum(p[0] for p in parts),
        sum(p[1] for p in parts),
    )
    one = quality_report(sess[:1], tb, "random", 4, seed=9)
    assert (one.relevant_total, one.relevant_pruned) == parts[0] and math.isnan(one.share_stderr)


def test_streaming_llm_does_not_depend_on_the_scorer() -> None:
    tb = TokenBudget(4, 64, 0)
    sess = _sessions(30)
    shares = {
        s: quality_report(sess, tb, s, 8, seed=3).pruned_share
        for s in ("random", "recency", "lifespan")
    }
    assert len(set(shares.values())) == 1 and next(iter(shares.values())) > 0


def test_scorers_rank_as_expected_and_a_big_budget_prunes_nothing() -> None:
    sess = _sessions(60)
    tb = TokenBudget(4, 64, 64)
    share = {
        s: quality_report(sess, tb, s, 8, seed=4).pruned_share
        for s in ("random", "recency", "lifespan")
    }
    assert share["lifespan"] < share["recency"] < share["random"]
    longest = max(s[-1] for s in sess)
    assert (
        quality_report(sess, TokenBudget(4, 64, longest), "random", 8, seed=4).relevant_pruned == 0
    )
