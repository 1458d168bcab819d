"""Decode from CPU memory, Quest-style (``sparse.kind`` quest or full), as a part of the engine:
after its prefill a decoding sequence's full pages move to the CPU and every page it fills later
follows; the GPU keeps its last page, its ring slots and the pages' metadata. Each decode step is
priced by ``sim.offload.SparseOffload`` from the pages its selector reads (docs/semantics.md,
section 9)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.config import SparseConfig
from sim.memory import GPU
from sim.offload import SparseOffload
from sim.pricing import DecodeRun, Prefill

if TYPE_CHECKING:
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun


class OffloadDecode:
    def __init__(self, core: Scheduler, cfg: SparseConfig) -> None:
        self.core = core
        self.sparse = SparseOffload(cfg, core.cost, core.bt)
        self.meta_page = self.sparse.meta_page  # GPU bytes of one offloaded page's metadata

    # -- pages ------------------------------------------------------------------------------------
    def start(self, run: TurnRun, now: float) -> None:
        """After its prefill: a decoding sequence's full pages move to the CPU. When the CPU
        cannot take them, or the GPU cannot hold the ring, it decodes from the GPU as without
        offload."""
        core, off = self.core, self.sparse
        sess, mem = run.sess, core.mem
        full = sess.tokens // core.bt
        reserve = off.reserve_bytes(full)
        if mem.reclaimable(GPU) + full * core.page_bytes < reserve:
            return
        if not mem.offload_pinned(sess, 0, full * core.upp, now):
            return
        if not mem.reserve(reserve, now):
            raise AssertionError(
                f"offload of {sess.session_id}: room was checked but the ring "
                f"and metadata ({reserve} bytes) could not be reserved"
            )
        run.cpu_pages = full
        off.add(full)

    def page_filled(self, run: TurnRun, page: int, now: float) -> None:
        """The page a decoding sequence just filled follows its history to the CPU (in order:
        once one could not go, the rest stay on the GPU)."""
        if page != run.cpu_pages:
            return
        core, off = self.core, self.sparse
        if core.mem.offload_pinned(run.sess, page * core.upp, (page + 1) * core.upp, now):
            if not core.mem.reserve(off.meta_page, now):
                raise AssertionError(
                    f"offload of {run.sess.session_id}: room for the page's "
                    f"metadata was made but could not be reserved"
                )
            off.grow(run.cpu_pages)
            run.cpu_pages += 1

    def end(self, run: TurnRun) -> None:
        """The sequence stops decoding (completion or preemption): its ring and metadata go."""
        if run.cpu_pages >= 0:
            self.sparse.remove(run.cpu_pages)
            self.core.mem.unreserve(self.sparse.reserve_bytes(run.cpu_pages))
            run.cpu_pages = -1

    # -- prices -----------------------------------------------------------------------------------
    def decode_step_s(self, seqs: int, ctx: int, d2h: int) -> float:
        """A decode-only iteration: the selected pages stream through the ring."""
        off = self.sparse
        off.h2d_bytes += off.loaded_bytes(1)
        return self.core.pricer.with_d2h_s(off.step_s(seqs, ctx), d2h)

    def admission_s(
        self, prefill: Prefill, seqs: int, ctx: int, h2d_wait: float
    ) -> tuple[float, float]:
        """An iteration with prefills: the decode part reads its GPU tokens densely and its CPU
        pages through the ring. (duration without the D2H copies, copy stall)"""
        off, pricer = self.sparse, self.core.pricer
        local = ctx - self.core.bt * off.cpu_pages
        off.h2d_bytes += off.loaded_bytes(1)
        duration, stall = pricer.admission_s(prefill, seqs, local, 0, h2d_wait)
        return duration + off.extra_s(seqs, local), stall

    def decode_run(
        self,
        seqs: int,
        ctx: int,
        n: int,
        t: float,
        horizon: float,
        used_gpu: float,
        gpu_byte_seconds: float,
        grow: int,
        d2h: int,
    ) -> DecodeRun:
        """Up to ``n`` decode steps from ``t`` (one when a demotion's copy rides on the first and
        does not hide behind it), priced step by step to the next page."""
        off, pricer = self.sparse, self.core.pricer
        if (
            d2h
            and self.core.cfg.async_save
            and pricer.with_d2h_s(0.0, d2h) <= off.step_s(seqs, ctx)
        ):
            d2h = 0  # the save hides behind the step: a plain run
        run = pricer.decode_run(
            seqs, ctx, 1 if d2h else n, t, horizon, used_gpu, gpu_byte_seconds, grow, sparse=off
        )
        if d2h:
            run.durations[0] = pricer.with_d2h_s(run.durations[0], d2h)
            run.end_s = t + run.durations[0]
            run.gpu_byte_seconds = gpu_byte_seconds + used_gpu * run.durations[0]
        off.h2d_bytes += off.loaded_bytes(run.steps)
        return run
