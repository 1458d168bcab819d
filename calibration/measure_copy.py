"""Host<->device copies by size and by number of copies, and copy/compute overlap.

GPU (GPU-only code, needs CUDA): host buffers pinned once at allocation (pinning on the fly is up to
2x slower: PyTorch tutorial "A guide on good usage of non_blocking and pin_memory()"),
``dst.copy_(src, non_blocking=True)`` on a dedicated stream per direction,
timed with events recorded on that stream. A measurement of ``copies`` copies moving ``nbytes``
in total splits one buffer into equal contiguous chunks: fitting copies*latency + bytes/bw on the
(size, count) grid separates the per-copy latency from the bandwidth. With ``pinned=False`` the
host buffer is pageable (plain ``torch.empty``): the driver stages such a copy through a pinned
buffer of its own and the host waits for it, which is what an engine that never pins its host KV
would pay (the samples carry ``Shape.pinned``).

Duplex (``duplex_closure``): an H2D and a D2H copy of the same shape issued together on two
streams, so the two copy engines run at once; the time is until both have ended (both streams
joined back into the timer's stream). With the two directions alone it fits the profile's duplex
rate (``fit.fit_duplex``).

CPU stand-in: there is no device, so "h2d" and "d2h" are host memcpy between two host tensors
(``copy_`` of uint8 buffers). This exercises the whole pipeline and its fit; the constants describe
memcpy, not PCIe, and the profile says so.

Copies and overlap are timed with eager launches (``graph=False``): a copy's per-call latency is
part of what is measured, and the overlap runs several streams.

Overlap (GPU-only): compute (the layer's GEMMs) alone t_c, an H2D copy alone t_x, both on two
streams t_both; compute timed while a longer copy runs gives the slowdown epsilon; the overlap
efficiency eta = (t_c + t_x - t_both) / min(t_c, t_x). Then the L-layer pipeline the
simulator assumes (the copy stream loads layer l and records ev[l]; the compute stream waits on
ev[l], runs layer l) is timed at several t_x/t_c ratios and compared with
``costmodels.pipelined_time_uniform``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from costmodels import ModelSpec, pipelined_time_uniform

from .samples import Sample, Shape


@dataclass(frozen=True, slots=True)
class PipelinePoint:
    layers: int
    t_copy_layer_s: float
    t_compute_layer_s: float
    measured_s: float
    predicted_s: float  # pipelined_time_uniform(layers, t_copy, t_compute, epsilon)


@dataclass(frozen=True, slots=True)
class OverlapResult:
    t_compute_s: float
    t_copy_s: float
    t_both_s: float
    t_compute_during_copy_s: float
    eta: float  # 1 = the shorter of the two fully hidden
    epsilon: float  # compute slowdown while a copy is in flight
    pipeline: tuple[PipelinePoint, ...]


def _chunks(buf, copies: int):
    n = buf.numel() // copies
    return [buf[i * n : (i + 1) * n] for i in range(copies)]


def copy_closure(
    direction: str, nbytes: int, copies: int, device: str, pinned: bool = True
) -> Callable[[], object]:
    """The copies of one measurement; on CUDA they go on the current stream (the caller's copy
    stream). ``pinned``: the host buffer is page-locked (else pageable; a CPU ignores it)."""
    import torch

    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be h2d or d2h, got {direction!r}")
    if device == "cpu":
        src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
        dst = torch.empty(nbytes, dtype=torch.uint8)
        pairs = list(zip(_chunks(dst, copies), _chunks(src, copies)))

        def run_cpu():
            for d_, s_ in pairs:
                d_.copy_(s_)

        return run_cpu
    # GPU-only
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst, src = (dev, host) if direction == "h2d" else (host, dev)
    pairs = list(zip(_chunks(dst, copies), _chunks(src, copies)))

    def run_gpu():
        for d_, s_ in pairs:
            d_.copy_(s_, non_blocking=True)

    return run_gpu


def measure_copy(
    direction: str,
    nbytes: int,
    copies: int,
    timer,
    device: str,
    model: ModelSpec,
    pinned: bool = True,
) -> Sample:
    fn = copy_closure(direction, nbytes, copies, device, pinned)
    if device == "cpu":
        t = timer.measure(fn)
        kernel = "host memcpy (CPU stand-in for PCIe)"
    else:  # GPU-only: a dedicated stream per direction, events recorded on it
        import torch

        stream = torch.cuda.Stream(device=device)
        with torch.cuda.stream(stream):
            t = timer.measure(fn, graph=False)
        kernel = f"cudaMemcpyAsync {'pinned' if pinned else 'pageable'}, dedicated stream"
    # The bytes do not depend on the model; it rides along so every sample has one.
    shape = Shape(nbytes=(nbytes // copies) * copies, copies=copies, pinned=pinned)
    group = f"x{copies}" + ("" if pinned else " pageable")
    return Sample(direction, shape, t, model, group, kernel)


def duplex_closure(nbytes: int, copies: int, device: str) -> Callable[[], object]:
    """``copies`` H2D and ``copies`` D2H copies of ``nbytes`` each way (pinned), issued together:
    on CUDA each direction on a stream of its own, both waiting for the caller's stream and
    joined back into it, so events on the caller's stream time the pair. A CPU (tests) runs the
    two host memcpy one after the other."""
    up = copy_closure("h2d", nbytes, copies, device)
    down = copy_closure("d2h", nbytes, copies, device)
    if device == "cpu":

        def run_cpu():
            up()
            down()

        return run_cpu
    import torch  # GPU-only

    h2d, d2h = torch.cuda.Stream(device=device), torch.cuda.Stream(device=device)

    def run_gpu():
        caller = torch.cuda.current_stream(device)
        for stream, copy in ((h2d, up), (d2h, down)):
            stream.wait_stream(caller)
            with torch.cuda.stream(stream):
                copy()
        caller.wait_stream(h2d)
        caller.wait_stream(d2h)

    return run_gpu


def measure_duplex(nbytes: int, copies: int, timer, device: str, model: ModelSpec) -> Sample:
    """One "duplex" sample: the pair of ``duplex_closure``, eager launches (several streams)."""
    fn = duplex_closure(nbytes, copies, device)
    t = timer.measure(fn, graph=False)
    kernel = (
        "host memcpy h2d then d2h (CPU stand-in)"
        if device == "cpu"
        else "cudaMemcpyAsync pinned, H2D and D2H on two streams at once"
    )
    shape = Shape(nbytes=(nbytes // copies) * copies, copies=copies)
    return Sample("duplex", shape, t, model, f"x{copies}", kernel)


def measure_overlap(
    compute: Callable[[], object],
    bw_Bps: float,
    timer,
    device: str,
    layers: int = 8,
    ratios: tuple[float, ...] = (0.25, 1.0, 4.0),
) -> OverlapResult:
    """GPU-only: eta, epsilon and the layer-wise pipeline against the simulator's formula."""
    import torch

    cs = torch.cuda.Stream(device=device)
    xs = torch.cuda.Stream(device=device)
    with torch.cuda.stream(cs):
        t_c = timer.measure(compute, graph=False).median_s
    nbytes = max(4096, int(t_c * bw_Bps))
    copy = copy_closure("h2d", nbytes, 1, device)
    with torch.cuda.stream(xs):
        t_x = timer.measure(copy, graph=False).median_s

    def both():
        xs.wait_stream(cs)  # both start together
        with torch.cuda.stream(xs):
            copy()
        compute()
        cs.wait_stream(xs)  # the end event (on cs) waits for the copy too

    with torch.cuda.stream(cs):
        t_both = timer.measure(both, graph=False).median_s
    # Compute while a copy ~3x longer is in flight: events on the compute stream only.
    long_copy = copy_closure("h2d", 3 * nbytes, 1, device)
    during = []
    for _ in range(max(5, timer.cfg.min_reps)):
        torch.cuda.synchronize(device)
        xs.wait_stream(cs)
        with torch.cuda.stream(xs):
            long_copy()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(cs):
            s.record()
            compute()
            e.record()
        torch.cuda.synchronize(device)
        during.append(s.elapsed_time(e) * 1e-3)
    t_during = float(np.median(during))
    eps = max(0.0, t_during / t_c - 1.0)
    eta = (t_c + t_x - t_both) / min(t_c, t_x)
    points = []
    for r in ratios:
        layer_bytes = max(4096, int(r * t_c * bw_Bps))
        host = torch.empty(layers * layer_bytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty_like(host, device=device)
        hs, ds = _chunks(host, layers), _chunks(dev, layers)
        evs = [torch.cuda.Event() for _ in range(layers)]

        def pipeline():
            xs.wait_stream(cs)
            for i in range(layers):
                with torch.cuda.stream(xs):
                    ds[i].copy_(hs[i], non_blocking=True)
                    evs[i].record(xs)
                cs.wait_event(evs[i])
                compute()

        with torch.cuda.stream(cs):
            measured = timer.measure(pipeline, graph=False).median_s
        with torch.cuda.stream(xs):
            t_xl = timer.measure(
                lambda: ds[0].copy_(hs[0], non_blocking=True), graph=False
            ).median_s
        points.append(
            PipelinePoint(
                layers, t_xl, t_c, measured, pipelined_time_uniform(layers, t_xl, t_c, eps)
            )
        )
    return OverlapResult(t_c, t_x, t_both, t_during, eta, eps, tuple(points))
