"""The scorer microbenchmark: the torch MLP is the one the FLOP counter describes, the fit recovers
a known line, a measured fit feeds ``scoring_s``, and a tiny real CPU run gives a positive fit."""

from __future__ import annotations

import pytest

from calibration.measure_scorer import (
    build_scorer,
    fit_seconds_per_key,
    main,
    measure_scorer,
    scorer_closure,
)
from calibration.samples import Timing
from calibration.timing import TimingConfig
from costmodels import cost_model
from costmodels.token_scoring import scorer_params, scoring_s

torch = pytest.importorskip("torch")  # measure_scorer imports torch only when it runs


class LineTimer:
    """A timer whose 'measurement' of the i-th closure is a + b * batches[i]; it also runs the
    closure once and records the output shape."""

    def __init__(self, a: float, b: float, batches: list[int]) -> None:
        self.a, self.b, self.batches, self.shapes = a, b, list(batches), []

    def measure(self, fn, graph=None) -> Timing:
        self.shapes.append(tuple(fn().shape))
        keys = self.batches[len(self.shapes) - 1]
        return Timing.published(self.a + self.b * keys)


@pytest.mark.parametrize("shape", [(128, 256, 4), (16, 8, 1), (8, 4, 2)])
def test_torch_mlp_matches_the_counted_parameters(shape) -> None:
    mlp = build_scorer(*shape)
    assert sum(p.numel() for p in mlp.parameters()) == scorer_params(*shape)
    assert sum(isinstance(m, torch.nn.ReLU) for m in mlp) == shape[2] - 1


def test_fit_recovers_a_known_line_and_scoring_s_returns_it() -> None:
    batches = [64, 512, 4096, 32768]
    timer = LineTimer(a=5e-6, b=2e-9, batches=batches)
    fit = measure_scorer(batches, key_dim=8, hidden=16, depth=3, timer=timer)
    assert timer.shapes == [(b, 1) for b in batches]
    assert fit.s_per_key == pytest.approx(2e-9, rel=1e-9) and fit.intercept_s == pytest.approx(
        5e-6, rel=1e-9
    )
    assert [k for k, _ in fit.points] == batches
    # Llama-3-8B has 8 KV heads: 512 tokens at one layer are 4096 keys, as timed above.
    cm = cost_model("llama-3-8b", "h100-sxm")
    t = scoring_s(cm, 512, s_per_key=fit.s_per_key, tau_s=fit.intercept_s)
    assert t == pytest.approx(dict(fit.points)[4096].median_s, rel=1e-9)


def test_fit_edge_cases() -> None:
    # Through the origin when the free fit's intercept is negative: t = 1e-9 * k exactly, except
    # one point that drags the intercept below zero.
    slope, intercept = fit_seconds_per_key([100, 1000, 10000], [0.5e-7, 1e-6, 1e-5])
    assert intercept == 0.0 and slope > 0
    with pytest.raises(ValueError, match="does not grow"):
        fit_seconds_per_key([100, 1000], [2e-6, 1e-6])
    with pytest.raises(ValueError, match="two or more distinct"):
        fit_seconds_per_key([100, 100], [1e-6, 1e-6])


def test_tiny_cpu_run_gives_a_positive_fit() -> None:
    """Real timings on a shared CPU are too noisy for a tolerance on the fit; the exact path from
    measurement to ``scoring_s`` is the LineTimer test above."""
    batches = [64, 1024, 8192]
    threads = torch.get_num_threads()
    fit = measure_scorer(
        batches, key_dim=16, hidden=32, depth=3, device="cpu", cfg=TimingConfig.quick()
    )
    assert fit.s_per_key > 0 and fit.intercept_s >= 0
    assert [k for k, _ in fit.points] == batches
    assert all(0 < t.p20_s <= t.median_s <= t.p80_s and t.reps >= 5 for _, t in fit.points)
    assert torch.get_num_threads() == threads  # the one-thread setting is undone


def test_closure_scores_every_key() -> None:
    mlp = build_scorer(8, 4, 2)
    assert tuple(scorer_closure(mlp, 10)().shape) == (10, 1)


def test_cli_prints_the_fit(capsys) -> None:
    rc = main(
        ["--batches", "32", "2048", "--key-dim", "8", "--hidden", "16", "--depth", "2", "--quick"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "s_per_key=" in out and "8->16x1->1" in out
