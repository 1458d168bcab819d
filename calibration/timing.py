"""Timers for microbenchmarks: CUDA events on a GPU, perf_counter on a CPU.

Both warm up by time, not count (the first calls pay JIT, cuBLAS heuristics and allocator growth;
Triton's ``do_bench`` in triton/testing.py and FlashInfer's ``bench_gpu_time`` in
flashinfer/testing/utils.py do the same), then time each repetition separately and report the
median with p20/p80 (Triton ``do_bench``).

GPU (``CudaTimer``, needs CUDA): start/end events recorded on the current stream around every
repetition, one synchronise at the end; before every repetition a 256 MB buffer is zeroed (outside
the timed span) so each run starts with a cold L2, as serving reads weights and KV once per step.
By default (``cuda_graph``) the closure is captured once into a CUDA graph after the warm-up and
each repetition replays the graph. Why: a closure of many small kernels (the ~30 eager
elementwise ops of a layer, a whole replayed layer) launched from Python is bound by the host's
launch rate, not by the GPU. Measured on an H100 with eager launches: the elementwise ops of one
Llama-3-8B layer took 90-260 us at N = 1..1024 in no order of the shard width (the host, not the
kernels; 45-65 us at N <= 64 as graph replays), and one-layer forwards took a median 1.58x the sum
of their separately timed parts (0.98x as graph replays); calibration/measured/README.md.
Serving engines replay decode steps as CUDA graphs and keep the host's work apart
(``step_overhead_s``), so the per-layer terms are fitted to graph replays. A closure that cannot be
captured is timed eagerly and counted in ``CudaTimer.eager_fallbacks``; copies and the overlap
measurements (several streams) pass ``graph=False``.

CPU (``CpuTimer``): wall clock around each repetition. The cache-flush stand-in
(``cpu_flush_bytes``, `kvsim calibrate --cpu-flush-mb`, 64 MB by default there) rewrites a buffer
larger than the last-level cache before every repetition, outside the timed span. Why: without it a
small model's weights stay in the LLC across repetitions, the kernels look ~3x faster than inside
a real layer, and one-layer forwards replayed by ``validate_forward`` came out 38 % MAPE against
the profile instead of 9 % with it (tiny model, this repository's CPU, see calibration/README.md).

torch is imported lazily: ``import calibration`` must work without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .samples import Timing

L2_FLUSH_BYTES = 256 * 2**20  # Triton's cache-clear buffer; > 2x the L2 of A100/H100/H200


@dataclass(frozen=True, slots=True)
class TimingConfig:
    warmup_s: float = 0.025  # Triton/FlashInfer: 25 ms of warm-up
    rep_s: float = 0.1  # and ~100 ms of timed repetitions
    min_reps: int = 5
    max_reps: int = 200
    flush_l2: bool = True  # GPU: zero a 256 MB buffer before every repetition
    cpu_flush_bytes: int = 0  # CPU: bytes rewritten before each repetition (0 = no stand-in)
    cuda_graph: bool = True  # GPU: time replays of a CUDA graph of the closure (see above)

    @classmethod
    def quick(cls) -> "TimingConfig":
        return cls(warmup_s=0.01, rep_s=0.05, min_reps=5, max_reps=50)


def summarize(times_s: list[float] | np.ndarray) -> Timing:
    t = np.asarray(times_s, dtype=float)
    if len(t) == 0:
        raise ValueError("no repetitions were timed")
    med = float(np.median(t))
    return Timing(max(med, 1e-12), float(np.percentile(t, 20)), float(np.percentile(t, 80)), len(t))


class CpuTimer:
    """perf_counter around each call (torch on CPU runs synchronously)."""

    kind = "cpu"
    eager_fallbacks: tuple[str, ...] = ()

    def describe(self) -> str:
        return "perf_counter" + (
            f", {self.cfg.cpu_flush_bytes >> 20} MB flush" if self.cfg.cpu_flush_bytes else ""
        )

    def __init__(self, cfg: TimingConfig) -> None:
        self.cfg = cfg
        self._flush = None
        if cfg.cpu_flush_bytes > 0:
            import torch

            self._flush = torch.empty(cfg.cpu_flush_bytes // 4, dtype=torch.float32)

    def _reps(self, one_s: float) -> int:
        return int(
            min(self.cfg.max_reps, max(self.cfg.min_reps, self.cfg.rep_s / max(one_s, 1e-9)))
        )

    def measure(self, fn: Callable[[], object], graph: bool | None = None) -> Timing:
        # ``graph`` is accepted for the CudaTimer interface; a CPU has no graphs.
        t0 = time.perf_counter()
        fn()
        first = time.perf_counter() - t0
        while time.perf_counter() - t0 < self.cfg.warmup_s:
            fn()
        times = []
        for _ in range(self._reps(first)):
            if self._flush is not None:
                self._flush.fill_(1.0)
            s = time.perf_counter()
            fn()
            times.append(time.perf_counter() - s)
        return summarize(times)


class CudaTimer:  # GPU-only: needs torch with CUDA (skipped cleanly without it)
    """CUDA events per repetition on the current stream, cold L2, warm-up by time."""

    kind = "cuda"

    def __init__(self, cfg: TimingConfig, device: str = "cuda") -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("CudaTimer needs CUDA (torch.cuda.is_available() is False)")
        self.cfg = cfg
        self.torch = torch
        self.device = torch.device(device)
        self._flush = (
            torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=self.device)
            if cfg.flush_l2
            else None
        )
        self.eager_fallbacks: list[str] = []  # closures that could not be captured, and why

    def describe(self) -> str:
        return "CUDA events, cold L2" + (
            ", CUDA-graph replays" if self.cfg.cuda_graph else ", eager launches"
        )

    def _capture(self, fn: Callable[[], object]):
        """``fn`` as a CUDA graph, or None (and the reason kept) when it cannot be captured."""
        torch = self.torch
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                fn()
        except RuntimeError as exc:  # torch errors: a host sync or an uncapturable op inside fn
            torch.cuda.synchronize(self.device)
            self.eager_fallbacks.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            return None
        return g

    def measure(self, fn: Callable[[], object], graph: bool | None = None) -> Timing:
        torch = self.torch
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(self.device)
        while time.perf_counter() - t0 < self.cfg.warmup_s:
            fn()
        torch.cuda.synchronize(self.device)
        run = fn
        if self.cfg.cuda_graph if graph is None else graph:
            g = self._capture(fn)
            if g is not None:
                run = g.replay
                for _ in range(3):  # the first replays upload the graph
                    run()
                torch.cuda.synchronize(self.device)
        # One timed call sizes the repetition count for ~rep_s of measurement.
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        torch.cuda.synchronize(self.device)
        one = max(s.elapsed_time(e) * 1e-3, 1e-7)
        reps = int(min(self.cfg.max_reps, max(self.cfg.min_reps, self.cfg.rep_s / one)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if self._flush is not None:
                self._flush.zero_()  # cold L2, outside the timed span
            starts[i].record()
            run()
            ends[i].record()
        torch.cuda.synchronize(self.device)
        return summarize([a.elapsed_time(b) * 1e-3 for a, b in zip(starts, ends)])


def make_timer(device: str, cfg: TimingConfig) -> CpuTimer | CudaTimer:
    if device == "cpu":
        return CpuTimer(cfg)
    if device.startswith("cuda"):
        return CudaTimer(cfg, device)
    raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
