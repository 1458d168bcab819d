"""Seconds per key of the learned token scorer, measured: the MLP of costmodels/scorer_mlp.py
(key_dim -> hidden -> ... -> 1, ReLU between layers) timed on batches of keys.

Why measure: the analytic ``scoring_s`` prices the MLP at the profile's large-GEMM FLOP rate, which
a 256-wide MLP does not reach; the fit t(keys) = intercept + keys * s_per_key, passed to
``scoring_s(..., s_per_key=fit.s_per_key, tau_s=fit.intercept_s)``, replaces that guess.

Timing uses calibration.timing (CUDA events and graph replays on a GPU, perf_counter on a CPU);
inputs are built outside the timed closure. torch is imported lazily.

    python -m calibration.measure_scorer --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .measure_gemm import torch_dtype
from .samples import Timing
from .timing import TimingConfig, make_timer

DEFAULT_BATCHES = (256, 1024, 4096, 16384, 65536)


@dataclass(frozen=True, slots=True)
class ScorerFit:
    """t(keys) = intercept_s + keys * s_per_key, fitted on the medians of ``points``."""

    s_per_key: float
    intercept_s: float
    points: tuple[tuple[int, Timing], ...]  # (keys in the batch, its timing)
    device: str
    dtype: str
    shape: tuple[int, int, int]  # (key_dim, hidden, depth)

    def predict(self, keys: int) -> float:
        return self.intercept_s + keys * self.s_per_key


def build_scorer(
    key_dim: int = 128,
    hidden: int = 256,
    depth: int = 4,
    device: str = "cpu",
    dtype: str = "fp32",
    seed: int = 0,
):
    """The scorer MLP as a torch.nn.Sequential (random weights: values do not change the time)."""
    import torch

    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    torch.manual_seed(seed)
    dims = [key_dim] + [hidden] * (depth - 1) + [1]
    layers: list = []
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        layers.append(torch.nn.Linear(a, b))
        if i < depth - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device=device, dtype=torch_dtype(dtype)).eval()


def scorer_closure(mlp, keys: int, seed: int = 0) -> Callable[[], object]:
    """A closure scoring ``keys`` random keys (allocated here, outside the timed span)."""
    import torch

    first = mlp[0]
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(keys, first.in_features, generator=g).to(
        device=first.weight.device, dtype=first.weight.dtype
    )

    def run():
        with torch.inference_mode():
            return mlp(x)

    return run


def fit_seconds_per_key(keys: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """(s_per_key, intercept_s) by least squares in relative error (small batches count as much
    as large ones); a negative intercept is refitted through the origin."""
    k = np.asarray(keys, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(k) != len(t) or len(k) < 2 or len(set(k.tolist())) < 2:
        raise ValueError("need timings at two or more distinct batch sizes")
    a = np.stack([np.ones_like(k), k], axis=1) / t[:, None]
    (intercept, slope), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if intercept < 0:
        intercept, slope = 0.0, float(np.sum(k / t) / np.sum((k / t) ** 2))
    if not slope > 0:
        raise ValueError(
            f"time does not grow with the batch (slope {slope:.3g} s/key): measure larger batches"
        )
    return float(slope), float(intercept)


def measure_scorer(
    batches: Sequence[int] = DEFAULT_BATCHES,
    *,
    key_dim: int = 128,
    hidden: int = 256,
    depth: int = 4,
    device: str = "cpu",
    dtype: str = "fp32",
    cfg: TimingConfig | None = None,
    timer=None,
    cpu_threads: int = 1,
) -> ScorerFit:
    """Time the scorer on each batch of keys and fit seconds per key. ``timer`` (anything with
    ``measure(fn) -> Timing``) defaults to calibration.timing's timer for ``device``.
    ``cpu_threads``: torch intra-op threads on a CPU during the run (0 leaves torch's setting).
    One by default, as in ``kvsim calibrate``: on a busy host, OpenMP barriers turned a 0.1 ms
    batch into 16 ms of scheduler waits here."""
    import torch

    if any(b < 1 for b in batches):
        raise ValueError(f"batch sizes must be >= 1, got {list(batches)}")
    timer = timer or make_timer(device, cfg or TimingConfig())
    mlp = build_scorer(key_dim, hidden, depth, device, dtype)
    threads = torch.get_num_threads()
    if device == "cpu" and cpu_threads > 0:
        torch.set_num_threads(cpu_threads)
    try:
        points = tuple((int(b), timer.measure(scorer_closure(mlp, int(b)))) for b in batches)
    finally:
        torch.set_num_threads(threads)
    slope, intercept = fit_seconds_per_key([p[0] for p in points], [p[1].median_s for p in points])
    return ScorerFit(slope, intercept, points, device, dtype, (key_dim, hidden, depth))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--batches", type=int, nargs="+", default=list(DEFAULT_BATCHES))
    ap.add_argument("--key-dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument(
        "--cpu-threads", type=int, default=1, help="torch threads on a CPU (0: torch's default)"
    )
    ap.add_argument("--quick", action="store_true", help="shorter warm-up and repetitions")
    a = ap.parse_args(argv)
    cfg = TimingConfig.quick() if a.quick else TimingConfig()
    fit = measure_scorer(
        a.batches,
        key_dim=a.key_dim,
        hidden=a.hidden,
        depth=a.depth,
        device=a.device,
        dtype=a.dtype,
        cfg=cfg,
        cpu_threads=a.cpu_threads,
    )
    print(f"{'keys':>8} {'median_us':>10} {'fit_us':>10}")
    for keys, t in fit.points:
        print(f"{keys:>8} {t.median_s * 1e6:>10.2f} {fit.predict(keys) * 1e6:>10.2f}")
    print(
        f"s_per_key={fit.s_per_key:.4g} intercept_s={fit.intercept_s:.4g} "
        f"({a.device}, {a.dtype}, {a.key_dim}->{a.hidden}x{a.depth - 1}->1)"
    )
    print(
        f"for an experiment: budgets: [{{kind: smartkv, ..., scorer_s_per_key: "
        f"{fit.s_per_key:.4g}, scorer_launch_s: {fit.intercept_s:.4g}}}]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
