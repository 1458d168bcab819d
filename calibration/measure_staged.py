"""KV staged through host memory on a GPU: a device-to-host copy of every layer's pages, then a
host-to-device copy of them into another paged KV, timed layer by layer with CUDA events.

This is the transfer ``sim.pricing.HostStagedLink`` prices (``link: pcie-host``): layer i's
second copy starts after its first copy and after layer i-1's second copy (``layerwise``), or the
two whole copies run one after the other. ``calibration.validate_staged`` compares the file this
writes with that price.

    python -m calibration.measure_staged --device cuda --out staged.csv [--model llama-3-8b]

The KV layout is the model's (``ModelSpec.kv_bytes_per_token_layer``) in pages of ``--page-size``
tokens, one tensor per layer as in vLLM and FlashInfer ([pages, K and V, page tokens, KV heads,
head dim], here as raw bytes: a page of one layer is one contiguous block, 64 KiB for Llama-3-8B).
Each layer's source and destination pools hold twice the largest context's pages, and a context
takes a random set of them (the same block table for every layer, a different one on each side),
so per-page copies read and write scattered pages. The host staging buffer is pinned, one region
per layer.

Variants (``VARIANTS``):

- ``layerwise-page``: one ``cudaMemcpyAsync`` per page per layer (``copy_`` of one page, as the
  profile's copies were timed). The D2H of layer i runs on stream A, which records an event; the
  H2D of layer i runs on stream B after waiting on that event. One host thread issues both, layer
  by layer (D2H of layer i, then its H2D, then layer i+1).
- ``layerwise-page-2threads``: the same copies, with the D2H issued by one host thread and the
  H2D by another (the receiver waits on a host flag that the event is recorded): the sender and
  receiver of a real pcie-host transfer are two hosts, each issuing its own copies.
- ``layerwise-layer``: one copy per layer per direction, from a contiguous per-layer region
  (pages 0..P-1 of the pool) into the host and from there into the destination's contiguous
  region: the calls ``per_layer_copies`` prices (a gather kernel or batched copy), without timing
  a gather.
- ``whole-layer``: every layer's D2H (one call per layer), then, after an event recorded on stream
  A after the last, every layer's H2D on stream B: no overlap.
- ``whole-page``: the same with one call per page per layer.

Every repetition starts with both streams idle (a device synchronise) and records a start event on
stream A right before the first copy is issued; a layer's ready time is the event after its H2D
(stream B), its ``d2h_end`` the event after its D2H (stream A), both relative to the start. The
total is the last layer's ready time (stream B runs the layers in order). The host's issue time
(wall clock from the start event to the last call issued) is recorded too. Each case is run
``--warmup`` times (the first of them is checked: the destination pages of the first and last
layer must equal the source's), then ``--reps`` times; the CSV has one row per (variant, size,
layer) with the min, median and max over repetitions.

Without CUDA ``main`` exits with status 2 and says so. ``CpuStandIn`` runs the same issue order
on host tensors, synchronously (its streams and events are stand-ins): it is how the tests
exercise the planning, the issue order, the check and the CSV without a GPU.

torch is imported lazily: importing this module needs only numpy and ``costmodels``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costmodels import ModelSpec, get_model

SIZES = (256, 1024, 4096, 16384, 32768)
PAGE_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    layerwise: bool
    per_page: bool  # one call per page of one layer (else one per layer)
    threads: int = 1  # host threads issuing the copies (2: one per direction)

    @property
    def per_layer_copies(self) -> bool:
        """The ``Pricer`` option that prices this variant's calls."""
        return not self.per_page


VARIANTS = (
    Variant("layerwise-page", layerwise=True, per_page=True),
    Variant("layerwise-page-2threads", layerwise=True, per_page=True, threads=2),
    Variant("layerwise-layer", layerwise=True, per_page=False),
    Variant("whole-layer", layerwise=False, per_page=False),
    Variant("whole-page", layerwise=False, per_page=True),
)
VARIANT_BY_NAME = {v.name: v for v in VARIANTS}


@dataclass(frozen=True, slots=True)
class Case:
    variant: Variant
    tokens: int
    layers: int
    page_tokens: int
    layer_page_bytes: int  # one page of one layer

    @property
    def pages(self) -> int:
        """Pages per layer."""
        return self.tokens // self.page_tokens

    @property
    def layer_bytes(self) -> int:
        return self.pages * self.layer_page_bytes

    @property
    def calls_per_layer(self) -> int:
        """Copy calls per layer per direction."""
        return self.pages if self.variant.per_page else 1


def plan(
    model: ModelSpec,
    sizes: Sequence[int] = SIZES,
    variants: Sequence[Variant] = VARIANTS,
    page_tokens: int = PAGE_TOKENS,
) -> list[Case]:
    """Every (size, variant) case, smallest size first."""
    for t in sizes:
        if t <= 0 or t % page_tokens:
            raise ValueError(f"context {t} is not a positive multiple of the page ({page_tokens})")
    page = page_tokens * model.kv_bytes_per_token_layer
    return [
        Case(v, t, model.num_layers, page_tokens, page) for t in sorted(sizes) for v in variants
    ]


# --- streams and events: CUDA, or a synchronous stand-in on the host -----------------------------
class CudaBackend:  # GPU-only
    """torch's CUDA streams and timing events on one device; pinned host memory."""

    pinned = True

    def __init__(self, device: str = "cuda") -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("measure_staged needs CUDA (torch.cuda.is_available() is False)")
        self.torch = torch
        dev = torch.device(device)
        index = torch.cuda.current_device() if dev.index is None else dev.index
        self.device = f"cuda:{index}"  # "cuda" alone names no index, which set_device refuses
        torch.cuda.set_device(index)

    def stream(self):
        return self.torch.cuda.Stream(device=self.device)

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def on(self, stream):
        return self.torch.cuda.stream(stream)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)


class _StandInEvent:
    def __init__(self) -> None:
        self.t: float | None = None

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: _StandInEvent) -> float:
        """Milliseconds, as torch.cuda.Event.elapsed_time."""
        if self.t is None or end.t is None:
            raise RuntimeError("elapsed_time of an event that was not recorded")
        return (end.t - self.t) * 1e3


class _StandInStream:
    def wait_event(self, event: _StandInEvent) -> None:
        if event.t is None:  # a CUDA wait on an unrecorded event is a silent no-op: catch it here
            raise RuntimeError("stream waits on an event that was not recorded yet")


class CpuStandIn:
    """Host tensors and synchronous copies in the CUDA backend's issue order (tests only): the
    events read the wall clock when recorded, a wait checks its event was recorded first."""

    pinned = False
    device = "cpu"

    def stream(self) -> _StandInStream:
        return _StandInStream()

    def event(self) -> _StandInEvent:
        return _StandInEvent()

    def on(self, stream):
        return contextlib.nullcontext()

    def synchronize(self) -> None:
        pass


# --- buffers --------------------------------------------------------------------------------------
class StagedBuffers:
    """Per-layer source and destination page pools on the device (twice the largest context's
    pages each) and a pinned host staging buffer, one region per layer."""

    def __init__(self, backend, layers: int, max_pages: int, page_bytes: int, seed: int = 0):
        import torch

        self.layers, self.max_pages, self.page_bytes = layers, max_pages, page_bytes
        self.pool_pages = 2 * max_pages
        dev = backend.device
        gen = torch.Generator(device=dev).manual_seed(seed)
        self.src = [
            torch.randint(
                0, 256, (self.pool_pages, page_bytes), dtype=torch.uint8, device=dev, generator=gen
            )
            for _ in range(layers)
        ]
        self.dst = [
            torch.zeros(self.pool_pages, page_bytes, dtype=torch.uint8, device=dev)
            for _ in range(layers)
        ]
        self.host = torch.empty(
            (layers, max_pages, page_bytes), dtype=torch.uint8, pin_memory=backend.pinned
        )
        self.rng = np.random.default_rng(seed)

    def block_tables(self, pages: int) -> tuple[list[int], list[int]]:
        """Scattered pages of one context on each side (the same for every layer)."""
        src = self.rng.permutation(self.pool_pages)[:pages].tolist()
        dst = self.rng.permutation(self.pool_pages)[:pages].tolist()
        return src, dst


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """The (destination, source) views each call copies: per layer, per direction."""

    d2h: tuple[tuple[tuple[object, object], ...], ...]
    h2d: tuple[tuple[tuple[object, object], ...], ...]
    check: Callable[[], bool]  # the first and last layer's destination equals the source
    reset: Callable[[], None]  # zero those destination pages


def copy_plan(case: Case, buf: StagedBuffers) -> CopyPlan:
    p = case.pages
    if p > buf.max_pages:
        raise ValueError(f"{case.tokens} tokens need {p} pages, the buffers hold {buf.max_pages}")
    checked = sorted({0, case.layers - 1})
    if case.variant.per_page:
        s_ids, d_ids = buf.block_tables(p)
        d2h = tuple(
            tuple((buf.host[i, j], buf.src[i][s]) for j, s in enumerate(s_ids))
            for i in range(case.layers)
        )
        h2d = tuple(
            tuple((buf.dst[i][d], buf.host[i, j]) for j, d in enumerate(d_ids))
            for i in range(case.layers)
        )

        def check() -> bool:
            return all(bool((buf.dst[i][d_ids] == buf.src[i][s_ids]).all()) for i in checked)

        def reset() -> None:
            for i in checked:
                buf.dst[i][d_ids] = 0

    else:
        d2h = tuple(((buf.host[i, :p], buf.src[i][:p]),) for i in range(case.layers))
        h2d = tuple(((buf.dst[i][:p], buf.host[i, :p]),) for i in range(case.layers))

        def check() -> bool:
            return all(bool((buf.dst[i][:p] == buf.src[i][:p]).all()) for i in checked)

        def reset() -> None:
            for i in checked:
                buf.dst[i][:p].zero_()

    return CopyPlan(d2h, h2d, check, reset)


# --- one repetition -------------------------------------------------------------------------------
def _copy(pairs) -> None:
    for d, s in pairs:
        d.copy_(s, non_blocking=True)


def run_once(case: Case, cp: CopyPlan, backend, streams) -> tuple[np.ndarray, np.ndarray, float]:
    """One transfer: (ready_s per layer, d2h_end_s per layer, host issue seconds)."""
    a, b = streams
    layers = case.layers
    start = backend.event()
    sent = [backend.event() for _ in range(layers)]
    ready = [backend.event() for _ in range(layers)]
    backend.synchronize()
    if case.variant.threads == 2 and case.variant.layerwise:
        # Both threads are up before the start event: their start-up is not timed.
        both_up = threading.Barrier(2)
        flags = [threading.Event() for _ in range(layers)]
        errors: list[BaseException] = []
        began: list[float] = []

        def sender() -> None:
            try:
                both_up.wait(timeout=60)
                began.append(time.perf_counter())
                start.record(a)
                with backend.on(a):
                    for i in range(layers):
                        _copy(cp.d2h[i])
                        sent[i].record(a)
                        flags[i].set()
            except BaseException as exc:  # noqa: BLE001 (re-raised below)
                errors.append(exc)
                for f in flags:
                    f.set()

        def receiver() -> None:
            try:
                both_up.wait(timeout=60)
                with backend.on(b):
                    for i in range(layers):
                        flags[i].wait()
                        if errors:
                            return
                        b.wait_event(sent[i])
                        _copy(cp.h2d[i])
                        ready[i].record(b)
            except BaseException as exc:  # noqa: BLE001 (re-raised below)
                errors.append(exc)

        threads = [threading.Thread(target=sender), threading.Thread(target=receiver)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        t0 = began[0]
    elif case.variant.layerwise:
        t0 = time.perf_counter()
        start.record(a)
        for i in range(layers):
            with backend.on(a):
                _copy(cp.d2h[i])
            sent[i].record(a)
            b.wait_event(sent[i])
            with backend.on(b):
                _copy(cp.h2d[i])
            ready[i].record(b)
    else:
        t0 = time.perf_counter()
        start.record(a)
        with backend.on(a):
            for i in range(layers):
                _copy(cp.d2h[i])
                sent[i].record(a)
        b.wait_event(sent[-1])
        with backend.on(b):
            for i in range(layers):
                _copy(cp.h2d[i])
                ready[i].record(b)
    issue_s = time.perf_counter() - t0
    backend.synchronize()
    r = np.array([start.elapsed_time(e) * 1e-3 for e in ready])
    s = np.array([start.elapsed_time(e) * 1e-3 for e in sent])
    return r, s, issue_s


@dataclass(frozen=True, slots=True)
class CaseResult:
    case: Case
    ready_s: np.ndarray  # [reps, layers]
    d2h_end_s: np.ndarray  # [reps, layers]
    issue_s: np.ndarray  # [reps]

    @property
    def total_s(self) -> np.ndarray:
        return self.ready_s.max(axis=1)


def measure_case(
    case: Case, buf: StagedBuffers, backend, streams, reps: int, warmup: int
) -> CaseResult:
    cp = copy_plan(case, buf)
    cp.reset()
    backend.synchronize()
    for w in range(max(1, warmup)):
        run_once(case, cp, backend, streams)
        if w == 0 and not cp.check():
            raise RuntimeError(f"{case.variant.name} {case.tokens}: destination != source")
    runs = [run_once(case, cp, backend, streams) for _ in range(reps)]
    return CaseResult(
        case,
        np.array([r[0] for r in runs]),
        np.array([r[1] for r in runs]),
        np.array([r[2] for r in runs]),
    )


def measure(
    cases: Sequence[Case],
    backend,
    reps: int = 10,
    warmup: int = 2,
    seed: int = 0,
    log: Callable[[str], None] = lambda _: None,
    done: Callable[[list[CaseResult]], object] = lambda _: None,
    failed: list[str] | None = None,
) -> list[CaseResult]:
    """Every case on one set of buffers; ``done`` hears the results so far after each case. A
    case that raises is left out and named in ``failed`` (raised at once when none is given)."""
    if not cases:
        return []
    layers = {c.layers for c in cases}
    pages = {c.layer_page_bytes for c in cases}
    if len(layers) != 1 or len(pages) != 1:
        raise ValueError("the cases of one run share the model's layers and page size")
    t0 = time.perf_counter()
    buf = StagedBuffers(backend, layers.pop(), max(c.pages for c in cases), pages.pop(), seed)
    streams = (backend.stream(), backend.stream())
    log(
        f"buffers: 2 x {buf.layers} pools of {buf.pool_pages} pages of {buf.page_bytes} B on "
        f"{backend.device}, {buf.host.numel() / 2**30:.2f} GiB host staging "
        f"({'pinned' if backend.pinned else 'pageable'}) in {time.perf_counter() - t0:.1f} s"
    )
    out: list[CaseResult] = []
    for k, c in enumerate(cases):
        t = time.perf_counter()
        try:
            r = measure_case(c, buf, backend, streams, reps, warmup)
        except Exception as exc:  # one variant failing leaves the others' timings
            if failed is None:
                raise
            failed.append(f"{c.variant.name} {c.tokens}: {type(exc).__name__}: {exc}")
            log(f"[{k + 1}/{len(cases)}] FAILED {failed[-1]}")
            continue
        out.append(r)
        done(out)
        med = np.median(r.total_s)
        log(
            f"[{k + 1}/{len(cases)}] {c.variant.name:<24} {c.tokens:>6} tokens: total median "
            f"{med * 1e6:10.1f} us (min {r.total_s.min() * 1e6:.1f}), first layer "
            f"{np.median(r.ready_s[:, 0]) * 1e6:.1f} us, host issue "
            f"{np.median(r.issue_s) * 1e6:.1f} us; {time.perf_counter() - t:.1f} s, "
            f"elapsed {time.perf_counter() - t0:.0f} s"
        )
    return out


# --- CSV -----------------------------------------------------------------------------------------
COLUMNS = (
    "variant",
    "layerwise",
    "per_layer_copies",
    "threads",
    "tokens",
    "layers",
    "page_tokens",
    "layer_page_bytes",
    "pages_per_layer",
    "layer_bytes",
    "calls_per_layer",
    "layer",
    "ready_min_s",
    "ready_median_s",
    "ready_max_s",
    "d2h_end_median_s",
    "total_min_s",
    "total_median_s",
    "total_max_s",
    "host_issue_median_s",
    "reps",
    "model",
    "device_name",
    "torch",
    "cuda",
    "driver",
    "date",
)


def write_csv(
    results: Sequence[CaseResult], path: str | Path, model: ModelSpec, env: dict[str, str]
) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in results:
            c, v = r.case, r.case.variant
            tot = r.total_s
            for i in range(c.layers):
                col = r.ready_s[:, i]
                w.writerow(
                    [v.name, int(v.layerwise), int(v.per_layer_copies), v.threads, c.tokens]
                    + [c.layers, c.page_tokens, c.layer_page_bytes, c.pages, c.layer_bytes]
                    + [c.calls_per_layer, i]
                    + [f"{x:.6e}" for x in (col.min(), np.median(col), col.max())]
                    + [f"{np.median(r.d2h_end_s[:, i]):.6e}"]
                    + [f"{x:.6e}" for x in (tot.min(), np.median(tot), tot.max())]
                    + [f"{np.median(r.issue_s):.6e}", len(tot), model.name]
                    + [env.get(k, "") for k in ("device_name", "torch", "cuda", "driver", "date")]
                )
    return p


def _env(device: str) -> dict[str, str]:
    from .env import collect

    e = collect(device)
    return {
        "device_name": e.device_name,
        "torch": e.torch or "",
        "cuda": e.cuda or "",
        "driver": e.driver or "",
        "date": e.date,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m calibration.measure_staged",
        description="Time KV staged through pinned host memory (D2H then H2D), layer by layer.",
    )
    ap.add_argument("--device", default="cuda", help="a CUDA device (cuda, cuda:1, ...)")
    ap.add_argument("--out", required=True, help="the CSV to write")
    ap.add_argument("--model", default="llama-3-8b", help="a registered model or a model YAML")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="contexts, in tokens")
    ap.add_argument(
        "--variants", default=",".join(v.name for v in VARIANTS), help="which variants to time"
    )
    ap.add_argument("--page-size", type=int, default=PAGE_TOKENS, help="tokens per page")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    if not args.device.startswith("cuda"):
        print(f"measure_staged needs a CUDA device, got --device {args.device}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("measure_staged needs torch with CUDA; torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(
            "measure_staged needs CUDA: torch.cuda.is_available() is False "
            f"(torch {torch.__version__})",
            file=sys.stderr,
        )
        return 2
    try:
        variants = [VARIANT_BY_NAME[n.strip()] for n in args.variants.split(",") if n.strip()]
    except KeyError as exc:
        ap.error(f"unknown variant {exc}; known: {', '.join(VARIANT_BY_NAME)}")
    model = get_model(args.model)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    cases = plan(model, sizes, variants, args.page_size)
    backend = CudaBackend(args.device)
    env = _env(backend.device)
    log(
        f"{env['device_name']} (torch {env['torch']}, CUDA {env['cuda']}, driver "
        f"{env['driver']}): {model.name}, {model.num_layers} layers, "
        f"{cases[0].layer_page_bytes} B a page of one layer; {len(cases)} cases, "
        f"{args.warmup} warm-up + {args.reps} repetitions each"
    )
    # The file is written again after every case: a run cut short keeps what it measured.
    failed: list[str] = []
    results = measure(
        cases,
        backend,
        args.reps,
        args.warmup,
        args.seed,
        log,
        lambda so_far: write_csv(so_far, args.out, model, env),
        failed,
    )
    log(f"wrote {args.out} ({sum(r.case.layers for r in results)} rows)")
    for f in failed:
        print(f"failed: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
