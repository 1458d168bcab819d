"""sim.samples: exact percentiles up to the limit, within the stated relative error past it, and
a long run's TBT and eviction records folded without changing anything else."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import sim.samples
from costmodels import cost_model
from sim import MemoryConfig, simulate
from sim.metrics import summarize
from sim.samples import REL_ACCURACY, Samples, weighted_percentile, weighted_percentiles
from traces.synthetic import SyntheticConfig, generate_synthetic

QS = (0, 1, 10, 25, 50, 75, 90, 99, 99.9, 100)


def _fill(samples: Samples, values, weights=None, every: int = 37) -> None:
    """Append as an engine does, compacting every ``every`` values."""
    for i, v in enumerate(values):
        samples.values.append(v)
        if weights is not None:
            samples.weights.append(int(weights[i]))
        if i % every == 0:
            samples.compact()


def test_exact_below_the_limit_is_the_exact_percentile():
    rng = np.random.default_rng(3)
    v, w = rng.lognormal(-4, 1, 500), rng.integers(0, 9, 500)
    weighted = Samples(weighted=True)
    _fill(weighted, v, w)
    plain = Samples()
    _fill(plain, v)
    assert weighted.exact and plain.exact and len(weighted) == 500
    assert weighted.nbytes == 16 * 500 and plain.nbytes == 8 * 500  # float64 values, int64 weights
    for q in QS:
        assert weighted.percentile(q) == weighted_percentile(v, w, q)
        assert plain.percentile(q) == np.percentile(v, q)


@pytest.mark.parametrize("seed", range(6))
def test_folded_percentiles_are_within_the_relative_accuracy(seed):
    rng = np.random.default_rng(seed)
    n = 5_000
    v = rng.lognormal(rng.uniform(-6, 2), rng.uniform(0.1, 3), n)
    w = rng.integers(0, 40, n)
    s = Samples(weighted=True, limit=100)
    _fill(s, v, w)
    assert not s.exact and len(s) == n
    for q in QS:
        exact = weighted_percentile(v, w, q)
        # the exact value's bucket is found; its representative is within a of every value in it
        assert abs(s.percentile(q) - exact) <= REL_ACCURACY * exact * (1 + 1e-9), q


def test_folded_unweighted_ints_and_nonpositive_values():
    rng = np.random.default_rng(7)
    ns = rng.integers(0, 50_000, 3_000)  # eviction timings in ns; some are 0
    ns[:40] = 0
    s = Samples(typecode="q", limit=64)
    _fill(s, ns.tolist())
    assert not s.exact and len(s) == 3_000
    for q in (1, 50, 90, 99):
        exact = float(np.percentile(ns, q, method="inverted_cdf"))
        assert abs(s.percentile(q) - exact) <= REL_ACCURACY * exact * (1 + 1e-9)
    assert s.percentile(0) == 0.0  # the values <= 0 sit below every bucket


def test_merge_equals_one_record_of_all_values():
    rng = np.random.default_rng(11)
    v, w = rng.lognormal(-3, 2, 2_000), rng.integers(1, 5, 2_000)
    one, a, b = (Samples(weighted=True, limit=50) for _ in range(3))
    _fill(one, v, w)
    _fill(a, v[:700], w[:700])
    _fill(b, v[700:], w[700:])
    a.merge(b)
    assert len(a) == len(one) == 2_000
    for q in QS:
        assert a.percentile(q) == one.percentile(q)
    with pytest.raises(ValueError, match="same accuracy and weighting"):
        a.merge(Samples())


def test_a_folded_record_keeps_no_arrays_and_memory_follows_the_range():
    s = Samples(weighted=True, limit=1_000)
    for _ in range(50):  # 50,000 samples between 10 ms and 20 ms
        s.values.extend(np.linspace(0.01, 0.02, 1_000).tolist())
        s.weights.extend([3] * 1_000)
        s.compact()
        s.values.append(0.015)
        s.weights.append(1)
    s.compact()
    assert len(s.values) <= s.limit + 1_000
    # log(2) / log(gamma) buckets cover a factor of two
    assert s._hist.size <= math.log(2) / s._log_gamma + 2
    with pytest.raises(ValueError, match="only percentiles are kept"):
        s.arrays()
    assert math.isnan(Samples(weighted=True).percentile(50))


def test_bad_arguments():
    with pytest.raises(ValueError, match="limit"):
        Samples(limit=0)
    with pytest.raises(ValueError, match="rel_accuracy"):
        Samples(rel_accuracy=0.0)


def test_a_run_past_the_limit_changes_only_the_tbt_percentiles_within_the_accuracy(monkeypatch):
    cost = cost_model("llama-3-8b", "h100-sxm")
    sessions = generate_synthetic(SyntheticConfig(sessions=60, seed=2)).sessions
    memory = MemoryConfig(gpu_kv_gb=0.5, cpu_kv_gb=0.0, block_tokens=16, evict_unit="block")
    exact = simulate(sessions, cost, memory, policy="fifo", seed=2)
    monkeypatch.setattr(sim.samples, "EXACT_LIMIT", 200)
    folded = simulate(sessions, cost, memory, policy="fifo", seed=2)
    assert exact.stats.tbt.exact and len(exact.stats.step_s) > 2_000
    assert not folded.stats.tbt.exact and not folded.stats.evict_ns.exact
    assert len(folded.stats.tbt) == len(exact.stats.tbt)
    assert len(folded.stats.evict_ns) == len(exact.stats.evict_ns)
    assert folded.turns.equals(exact.turns)
    a, b = summarize(exact), summarize(folded)
    folded_cols = {"tbt_p50_s", "tbt_p90_s", "tbt_p99_s"}  # the per-step record's percentiles
    for col in sorted(folded_cols):
        assert b[col] != a[col] and abs(b[col] - a[col]) <= REL_ACCURACY * a[col] * (1 + 1e-9)
    same = set(a) - folded_cols - {"wall_s", "evict_us_p50", "evict_us_p99"}
    assert {k: b[k] for k in same} == pytest.approx({k: a[k] for k in same}, nan_ok=True)


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("limit", [10**6, 500], ids=["exact", "folded"])
def test_percentiles_at_once_are_each_percentile(weighted, limit):
    rng = np.random.default_rng(3)
    values = rng.lognormal(-4, 1, 2000)
    weights = rng.integers(0, 5, 2000) if weighted else None
    samples = Samples(weighted=weighted, limit=limit)
    _fill(samples, values, weights)
    assert samples.exact == (limit > 2000)
    one_by_one = [samples.percentile(q) for q in QS]
    assert samples.percentiles(QS) == one_by_one  # the same numbers, to the bit
    assert not any(math.isnan(p) for p in one_by_one)
    assert all(math.isnan(p) for p in Samples(weighted=weighted).percentiles((50, 99)))


def _stable_weighted_percentiles(values, weights, qs):
    """The plain model: a stable sort of the positive-weight values (NaN last, as numpy sorts),
    then the first place whose cumulative weight reaches q % of the total."""
    pairs = sorted(
        ((float(v), float(w)) for v, w in zip(values, weights) if w > 0),
        key=lambda p: (math.isnan(p[0]), p[0]),
    )
    if not pairs:
        return [math.nan] * len(qs)
    cum, total = [], 0.0
    for _, w in pairs:
        total += w
        cum.append(total)
    out = []
    for q in qs:
        target = q / 100.0 * total
        i = next((k for k, c in enumerate(cum) if c >= target), len(cum) - 1)
        out.append(pairs[i][0])
    return out


_TIE_VALUES = (0.0, -0.0, 1e-3, 2.5e-3, 2.5e-3 + 2**-60, 7.0, math.inf, math.nan)
_ODD_WEIGHTS = (0.1, 1 / 3, 0.7, 2.0**53, 3.0)


@given(
    st.integers(0, 400),  # numpy sorts 16 or fewer by insertion, stably: longer ones reorder ties
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(0, len(_TIE_VALUES) - 1), min_size=1, max_size=4, unique=True),
    st.sampled_from(["few", "small", "odd"]),
    st.booleans(),
    st.lists(st.sampled_from([0.0, 1.0, 33.3, 50.0, 90.0, 99.0, 99.9, 100.0]), min_size=1),
)
@example(400, 0, [0, 1, 5], "few", False, [10.0, 50.0, 90.0])  # signed zeros, repeated
@example(400, 0, [0, 1, 5], "small", False, [10.0, 50.0, 90.0])  # signed zeros, sorted
@settings(max_examples=300, deadline=None)
def test_weighted_percentiles_equal_the_stable_sorts(n, seed, pool, weights_kind, spread, qs):
    """Many equal values (a few of ``_TIE_VALUES``, indices ``pool``: 0.0 and -0.0 are equal to
    hypothesis), with ``spread`` half of them eighths, integer weights (0-3: the values repeated by their weights; 0-200: a sort) or
    some fractional
    and some 2^53 (sums no longer exact), signed zeros, inf and NaN: the same value, bit for bit
    (the sign of a zero too), as a stable sort."""
    rng = np.random.default_rng(seed)
    values = [_TIE_VALUES[pool[k]] for k in rng.integers(0, len(pool), n)]
    if spread:  # also many distinct values (eighths), where a place one off reads another
        values = [
            v if k else x / 8
            for v, k, x in zip(values, rng.integers(0, 2, n), rng.integers(1, 80, n))
        ]
    weights = rng.integers(0, 4 if weights_kind == "few" else 201, n).astype(float)
    if weights_kind == "odd":
        odd = rng.random(n) < 0.2
        weights[odd] = rng.choice(_ODD_WEIGHTS, int(odd.sum()))
    got = weighted_percentiles(values, weights, qs)
    want = _stable_weighted_percentiles(values, weights, qs)
    assert [struct.pack("<d", g) for g in got] == [struct.pack("<d", x) for x in want]
