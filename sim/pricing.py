"""Iteration pricing: what the scheduler's iterations cost, from the cost model.

Plain functions and one small class over ``costmodels.CostModel``; no scheduler state. A run of
decode-only iterations of an unchanged batch is priced in closed form (all steps at once, bit for
bit what pricing them one by one gives: the same operations in the same order, and sums taken in
order), and cut at a time horizon.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from costmodels import BatchShape, CostModel

_SCALAR_RUN = 16  # runs shorter than this are priced in a loop: numpy's call overhead loses


def running_sum(first: float, values: np.ndarray) -> np.ndarray:
    """[first, first + v0, first + v0 + v1, ...]: the sums a loop adding in order gives (cumsum adds
    in order), without building a concatenated array through numpy's Python wrappers."""
    out = np.empty(len(values) + 1)
    out[0] = first
    out[1:] = values
    return out.cumsum(out=out)


# Below this many tokens of history every term and partial sum of ``recompute_pairs`` is a
# multiple of 1/2 under 2^52 (the sum is at most old_tokens^2): exact in a double, so a run of
# units summed in closed form, in integers, gives the loop's sum to the bit.
_EXACT_TOKENS = 1 << 26


def recompute_pairs(units, pages_per_unit: int, block_tokens: int, old_tokens: int) -> float:
    """Query-key pairs of recomputing these units (indices, in page order) of a session that held
    ``old_tokens``: each unit's n tokens starting at position a attend to the n*(a + n/2) keys
    before and among them (every earlier token is resident or recomputed first in the same pass).
    Summed in page order, sequentially (numpy's cumsum adds in order, as the scalar loop does);
    consecutive units below ``old_tokens`` (a session's dropped run: the common case) in closed
    form, which is that sum exactly."""
    span = pages_per_unit * block_tokens
    idx = units.tolist() if isinstance(units, np.ndarray) else units
    count = len(idx)
    if count and old_tokens < _EXACT_TOKENS and idx[-1] * span < old_tokens:
        first = int(idx[0])
        if int(idx[-1]) - first == count - 1 and list(idx) == list(range(first, first + count)):
            return _run_pairs(first, first + count, span, old_tokens)
    if count < 32:
        pairs = 0.0
        for i in idx:  # (Python ints)
            a = int(i) * span
            n = min(old_tokens, a + span) - a
            pairs += n * (a + n / 2.0)
        return pairs
    a_all = np.asarray(units, dtype=np.int64) * span
    n_all = np.minimum(old_tokens, a_all + span) - a_all
    return float((n_all * (a_all + n_all / 2.0)).cumsum()[-1])


def _run_pairs(first: int, stop: int, span: int, old_tokens: int) -> float:
    """``recompute_pairs`` of units ``first..stop-1``, each starting below ``old_tokens``: twice
    the sum in integers (a whole unit i adds span^2 (2i + 1), so whole units i0..i1-1 add
    span^2 (i1^2 - i0^2)), then halved (exact below ``_EXACT_TOKENS``)."""
    whole = min(stop, old_tokens // span)  # units before this one hold span tokens each
    twice = span * span * (whole * whole - first * first) if whole > first else 0
    for i in range(max(first, whole), stop):  # (one at most: the unit old_tokens ends in)
        a = i * span
        n = old_tokens - a
        twice += n * (2 * a + n)
    return twice / 2


@dataclass(slots=True, eq=False)
class Prefill:
    """The prefill work and swap-ins of one iteration's admissions.

    ``tokens``/``pairs`` run through every layer: the new tokens, and recomputed pages of all
    layers; ``recompute_*`` is the recomputed part of them. At ``layer_block`` a recomputed page
    runs only through its deepest dropped layer: ``deep_tokens[l]``/``deep_pairs[l]`` hold the
    pages recomputed through layers 0..l, and ``h2d_units[l]`` the units of layer l swapped in.
    ``ready_s[l]``: layer l may not start before (an admitted turn's ahead-of-time swap-in still in
    flight: it copies layer by layer), relative to the iteration's start; None when none is.
    ``lens``/``recomputed``: each admitted sequence's (new tokens, cached tokens) and, of its new
    tokens, those recomputed (at ``layer_block`` the per-layer recomputes are not in ``lens``).
    ``remote_bytes``: KV that comes from outside the replica over its remote link (a shared store),
    from the iteration's start, layer by layer (``Pricer.remote_link``).
    """

    tokens: int = 0
    pairs: float = 0.0
    seqs: int = 0
    h2d_bytes: int = 0
    h2d_pages: int = 0  # pages of all layers swapped in (block, session)
    recompute_tokens: int = 0
    recompute_pairs: float = 0.0
    recompute_seqs: int = 0
    deep_tokens: np.ndarray | None = None
    deep_pairs: np.ndarray | None = None
    h2d_units: np.ndarray | None = None
    ready_s: np.ndarray | None = None  # per layer: when an in-flight prefetch has it in
    remote_bytes: int = 0
    lens: list[tuple[int, int]] = field(default_factory=list)
    recomputed: list[int] = field(default_factory=list)

    @property
    def shape(self) -> BatchShape:
        return BatchShape(
            prefill_tokens=self.tokens,
            prefill_pairs=self.pairs,
            prefill_seqs=self.seqs,
            prefill_lens=tuple(self.lens) if self.lens else None,  # None: not recorded
        )

    def with_decode(
        self, dec_seqs: int, dec_ctx: int, dec_lens: tuple[int, ...] | None
    ) -> BatchShape:
        """``self.shape + BatchShape.decode(dec_seqs, dec_ctx, dec_lens)``, field for field (the
        same additions), built as one shape instead of three: lengths are known only where a group
        has sequences and lists them."""
        return BatchShape(
            self.tokens + 0,
            self.pairs + 0.0,
            self.seqs + 0,
            0 + dec_seqs,
            0 + dec_ctx,
            tuple(self.lens) if self.seqs and self.lens else None,
            dec_lens if dec_seqs and dec_lens else None,
        )

    def without_recompute(self) -> Prefill:
        """The same admissions with the recomputed history already in (a pass of its own ran)."""
        return Prefill(
            self.tokens - self.recompute_tokens,
            self.pairs - self.recompute_pairs,
            self.seqs,
            self.h2d_bytes,
            self.h2d_pages,
            h2d_units=self.h2d_units,
            ready_s=self.ready_s,
            remote_bytes=self.remote_bytes,
            lens=[(n - r, c + r) for (n, c), r in zip(self.lens, self.recomputed, strict=True)],
            recomputed=[0] * len(self.lens),
        )

    @property
    def layered(self) -> bool:
        return self.deep_tokens is not None


@dataclass(slots=True)
class DecodeRun:
    """Decode-only steps priced together: their count, durations, end time and the running
    integral of GPU occupancy over them."""

    steps: int
    durations: list[float]
    end_s: float
    gpu_byte_seconds: float


@dataclass(frozen=True, slots=True)
class NetworkLink:
    """A link of ``bytes_per_s`` after ``latency_s`` (RDMA, NVLink): layer by layer, layer l of
    B bytes is in at latency + (l + 1) B / (L x bandwidth); else every layer at latency + B /
    bandwidth."""

    latency_s: float
    bytes_per_s: float
    layerwise: bool = True

    def ready_s(self, pricer: Pricer, nbytes: int) -> np.ndarray:
        layers = pricer.layers
        if not self.layerwise:
            return np.full(layers, self.latency_s + nbytes / self.bytes_per_s)
        per_layer = nbytes / layers / self.bytes_per_s
        return self.latency_s + per_layer * np.arange(1, layers + 1)


@dataclass(frozen=True, slots=True)
class HostStagedLink:
    """KV staged through the sender's host memory: a device-to-host copy there, then a
    host-to-device one here, each priced by the cost model's copy terms. Layer by layer, a layer's
    second copy follows its first and the layer before's second; else the two whole copies, one
    after the other."""

    layerwise: bool = True

    def ready_s(self, pricer: Pricer, nbytes: int) -> np.ndarray:
        layers = pricer.layers
        if not self.layerwise:
            return np.full(layers, pricer.copy_s("d2h", nbytes) + pricer.copy_s("h2d", nbytes))
        layer = nbytes // layers  # whole pages of one layer each
        return staged_layers_s(
            pricer.layer_copy_s("d2h", layer), pricer.layer_copy_s("h2d", layer), layers
        )


def staged_layers_s(t_out: float, t_in: float, layers: int) -> np.ndarray:
    """When each layer is in, staged layer by layer: a layer's copy out takes ``t_out`` after the
    one before it, its copy in ``t_in`` after both its copy out and the layer before's copy in."""
    out = np.empty(layers)
    sent = done = 0.0
    for i in range(layers):
        sent += t_out
        done = max(sent, done) + t_in
        out[i] = done
    return out


class Pricer:
    """Prices the scheduler's iterations for one cost model, page size and engine options.

    KV tensors are per layer (vLLM, FlashInfer): a page of all layers is L copies, a page of one
    layer one copy, so a copy of n bytes is n / (page_bytes / L) copies in either case; with
    ``per_layer_copies`` (a gather kernel or batched copy) a layer's pages move in one call, so a
    copy spanning the layers is at most L calls.
    """

    def __init__(
        self,
        cost: CostModel,
        page_bytes: int,
        pipelining: bool,
        async_save: bool = True,
        fused_recompute: bool = True,
        per_layer_copies: bool = False,
    ) -> None:
        self.cost = cost
        self.page_bytes = page_bytes
        self.layers = cost.model.num_layers
        self.layer_page_bytes = page_bytes // self.layers
        self.pipelining = pipelining
        self.async_save = async_save
        self.fused_recompute = fused_recompute
        self.per_layer_copies = per_layer_copies
        # the link KV from outside the replica arrives on (a store's, a prefill replica's)
        self.remote_link: NetworkLink | HostStagedLink | None = None
        # The shape-free prices bypass ``iteration`` and ``layer_s``: only where a subclass (a
        # recording model) does not override them.
        self._shape_free = (
            type(cost).iteration is CostModel.iteration and type(cost).layer_s is CostModel.layer_s
        )
        self._decode_pricers: dict[int, Callable[[int], float]] = {}
        # ideal TTFTs of a first turn (no history) by prompt length: a trace's prompts repeat
        # lengths (896 of 10,000 single-turn requests are distinct), and the lengths are bounded
        self._first_ttfts: dict[int, float] = {}

    def decode_pricer(self, seqs: int) -> Callable[[int], float]:
        """The cost model's ``decode_pricer(seqs)``, built once a batch size: a run of decode
        spans prices the same few batch sizes over and over."""
        price = self._decode_pricers.get(seqs)
        if price is None:
            price = self._decode_pricers[seqs] = self.cost.decode_pricer(seqs)
        return price

    def copy_calls(self, layer_pages: int) -> int:
        """Copy calls moving ``layer_pages`` pages of one layer each (spread over the layers)."""
        return min(layer_pages, self.layers) if self.per_layer_copies else layer_pages

    def copy_s(self, direction: str, nbytes: int) -> float:
        """A copy of ``nbytes`` of whole pages of one layer each, with this engine's calls."""
        return self.cost.copy_s(direction, nbytes, self.copy_calls(nbytes // self.layer_page_bytes))

    def layer_copy_s(self, direction: str, nbytes: int) -> float:
        """A copy of ``nbytes`` of whole pages of *one* layer: one call with per-layer copies, else
        a call per page (``copy_s`` spreads its pages over the layers)."""
        pages = nbytes // self.layer_page_bytes
        return self.cost.copy_s(
            direction, nbytes, min(pages, 1) if self.per_layer_copies else pages
        )

    def iteration_s(
        self,
        prefill: BatchShape,
        dec_seqs: int,
        dec_ctx: int,
        h2d_bytes: int = 0,
        h2d_pages: int = 0,
        d2h_bytes: int = 0,
        dec_lens: tuple[int, ...] | None = None,
    ) -> float:
        """One mixed iteration whose layers are alike."""
        if self._shape_free and prefill.is_empty and not (h2d_bytes or h2d_pages):
            return self.cost.decode_iteration_s(
                dec_seqs,
                dec_ctx,
                dec_lens,
                d2h_bytes,
                self.copy_calls(d2h_bytes // self.layer_page_bytes),
                self.async_save,
            )
        return self.cost.iteration(
            prefill + BatchShape.decode(dec_seqs, dec_ctx, dec_lens),
            h2d_bytes=h2d_bytes,
            h2d_copies=self.copy_calls(h2d_pages * self.layers),
            d2h_bytes=d2h_bytes,
            d2h_copies=self.copy_calls(d2h_bytes // self.layer_page_bytes),
            pipelining=self.pipelining,
            async_save=self.async_save,
        ).total_s

    def admission_s(
        self,
        pf: Prefill,
        dec_seqs: int,
        dec_ctx: int,
        d2h_bytes: int = 0,
        copy_start_s: float = 0.0,
        dec_lens: tuple[int, ...] | None = None,
    ) -> tuple[float, float]:
        """(duration, copy stall) of an iteration with admissions. ``copy_start_s``: the H2D stream
        is busy with earlier copies until then; ``dec_lens``: each decoder's context, if known. Without the engine's fused recompute, the dropped
        history is recomputed in a pass of its own (no LM head) before the iteration."""
        head_pass = 0.0
        if not self.fused_recompute and pf.recompute_seqs:
            head_pass = self._recompute_pass_s(pf)
            pf = pf.without_recompute()
        shape = pf.with_decode(dec_seqs, dec_ctx, dec_lens)
        ready = pf.ready_s
        if pf.remote_bytes:
            arrive = self.remote_ready_s(pf.remote_bytes)
            ready = arrive if ready is None else np.maximum(ready, arrive)
        if not pf.layered and pf.h2d_units is None and not copy_start_s and ready is None:
            it = self.cost.iteration(
                shape,
                h2d_bytes=pf.h2d_bytes,
                h2d_copies=self.copy_calls(pf.h2d_pages * self.layers),
                d2h_bytes=d2h_bytes,
                d2h_copies=self.copy_calls(d2h_bytes // self.layer_page_bytes),
                pipelining=self.pipelining,
                async_save=self.async_save,
            )
            return head_pass + it.total_s, it.stall_s
        it = self.cost.layered_iteration(
            self._layer_compute(shape, pf),
            pf.seqs + dec_seqs,
            self._layer_copies(pf),
            d2h_bytes,
            self.copy_calls(d2h_bytes // self.layer_page_bytes),
            self.pipelining,
            self.async_save,
            copy_start_s,
            0.0,
            None if ready is None else ready.tolist(),
        )
        return head_pass + it.total_s, it.stall_s

    def remote_ready_s(self, nbytes: int) -> np.ndarray:
        """When each layer of ``nbytes`` of KV sent over the remote link from the iteration's start
        is in (``NetworkLink``, ``HostStagedLink``)."""
        if self.remote_link is None:
            raise ValueError("KV from outside the replica, but it has no remote link")
        return self.remote_link.ready_s(self, nbytes)

    def _layer_compute(self, base: BatchShape, pf: Prefill) -> list[float]:
        """Each layer's compute: the base shape plus the pages recomputed through that layer."""
        layer_s, L = self.cost.layer_s, self.layers
        if pf.deep_tokens is None:
            return [layer_s(base)] * L
        assert pf.deep_pairs is not None  # set with deep_tokens
        out = [0.0] * L
        tokens, pairs, t = 0, 0.0, None
        deep_tokens, deep_pairs = pf.deep_tokens.tolist(), pf.deep_pairs.tolist()
        for layer in range(L - 1, -1, -1):  # suffix sums: pages recomputed through >= l
            dt = deep_tokens[layer]
            if dt or t is None:
                tokens += dt
                pairs += deep_pairs[layer]
                t = layer_s(
                    BatchShape(
                        base.prefill_tokens + tokens,
                        base.prefill_pairs + pairs,
                        base.prefill_seqs,
                        base.decode_seqs,
                        base.decode_ctx_tokens,
                        # a layer's recomputed pages are not split by sequence: even split then
                        base.prefill_lens if tokens == 0 else None,
                        base.decode_lens,
                    )
                )
            out[layer] = t
        return out

    def _layer_copies(self, pf: Prefill) -> list[float]:
        copy_s = self.cost.copy_s
        if pf.h2d_units is None:
            per = (
                copy_s("h2d", pf.h2d_bytes, self.copy_calls(pf.h2d_pages * self.layers))
                / self.layers
                if pf.h2d_bytes
                else 0.0
            )
            return [per] * self.layers
        unit = self.layer_page_bytes
        calls = (lambda n: 1) if self.per_layer_copies else int  # noqa: E731
        return [copy_s("h2d", n * unit, calls(n)) if n else 0.0 for n in pf.h2d_units.tolist()]

    def _recompute_pass_s(self, pf: Prefill) -> float:
        """A forward pass of the recomputed history alone (its KV only: no LM head)."""
        layer_s = self.cost.layer_s
        tokens, pairs, total = pf.recompute_tokens, pf.recompute_pairs, 0.0
        deep_pairs = cast(np.ndarray, pf.deep_pairs)  # set with deep_tokens
        for layer in range(self.layers - 1, -1, -1):
            if pf.deep_tokens is not None:
                tokens += int(pf.deep_tokens[layer])
                pairs += float(deep_pairs[layer])
            if tokens:
                total += layer_s(BatchShape(tokens, pairs, pf.recompute_seqs))
        return total + self.cost.profile.step_overhead_s

    def decode_with_d2h_s(self, seqs: int, ctx: int, d2h_bytes: int) -> float:
        """A decode-only iteration that also carries a demotion's device-to-host copy on its own
        stream: ``iteration_s`` of that shape, to the bit, without building shapes (the iteration
        ends when both the compute and the copy are done; without async saves, the copy first)."""
        copy = self.copy_s("d2h", d2h_bytes)
        if not self.async_save:
            return copy + self.cost.decode_step_s(seqs, ctx)
        return max(self.cost.decode_step_s(seqs, ctx), copy)

    def ideal_ttft_s(self, prompt: int, history: int) -> float:
        """TTFT with the whole history on the GPU and an empty queue."""
        if self._shape_free:
            if history:
                return self.cost.lone_prefill_s(max(prompt, 1), history)
            ttft = self._first_ttfts.get(prompt)
            if ttft is None:
                ttft = self._first_ttfts[prompt] = self.cost.lone_prefill_s(max(prompt, 1), 0)
            return ttft
        return self.cost.iteration(BatchShape.prefill(max(prompt, 1), history)).total_s

    def with_d2h_s(self, compute_s: float, d2h_bytes: int) -> float:
        """An iteration of ``compute_s`` that also carries a device-to-host save on its own stream
        (after it, without async saves)."""
        if not d2h_bytes:
            return compute_s
        copy = self.copy_s("d2h", d2h_bytes)
        return max(compute_s, copy) if self.async_save else copy + compute_s

    def decode_run(
        self,
        seqs: int,
        ctx: int,
        steps: int,
        start_s: float,
        horizon_s: float,
        used_bytes: float,
        gpu_byte_seconds: float,
        growth: int | None = None,
        sparse=None,
    ) -> DecodeRun:
        """Up to ``steps`` decode-only iterations of ``seqs`` sequences from total context ``ctx``
        (growing by ``growth`` a step: ``seqs`` unless token budgets cap some), starting at
        ``start_s``: the first always runs, later ones only if they start before ``horizon_s``.
        GPU occupancy is ``used_bytes`` throughout. ``sparse`` (a ``sim.offload.SparseOffload``)
        prices the steps of decode from CPU memory instead of dense decode."""
        growth = seqs if growth is None else growth
        if steps < _SCALAR_RUN:
            price = (
                self.decode_pricer(seqs) if sparse is None else (lambda c: sparse.step_s(seqs, c))
            )
            t, gbs, n = start_s, gpu_byte_seconds, 0
            durations: list[float] = []
            while n < steps and (n == 0 or t < horizon_s):
                d = price(ctx)
                gbs += used_bytes * d
                t += d
                durations.append(d)
                ctx += growth
                n += 1
            return DecodeRun(n, durations, t, gbs)
        many = self.cost.decode_steps_s if sparse is None else sparse.steps_s
        d_all = many(seqs, ctx + growth * np.arange(steps))
        starts = running_sum(start_s, d_all)
        n = max(1, int(np.searchsorted(starts[:steps], horizon_s, side="left")))
        gbs_all = running_sum(gpu_byte_seconds, used_bytes * d_all[:n])
        return DecodeRun(n, d_all[:n].tolist(), float(starts[n]), float(gbs_all[-1]))
