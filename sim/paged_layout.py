"""The simulator's memory state as FlashInfer's paged KV layout, for any iteration.

A ``PagedLayout`` is what FlashInfer's batch attention wrappers ``plan`` takes: a page table in CSR
form (``kv_indptr`` over ``kv_page_indices``, with ``kv_last_page_len``) into a pool of
``max_num_pages`` pages, and, for a batch with prefills, the ragged query layout ``qo_indptr``.
Exported iterations can be replayed through real kernels (``calibration.replay_layout``) and set
next to what the cost model charged for them.

The simulator tracks which pages a session has and where they live, not which physical slot of
the GPU pool holds each one: ``LayoutExporter`` assigns slots, and keeps them stable while it
follows a run (docs/semantics.md, "The paged layout (FlashInfer)").
"""

from __future__ import annotations

import heapq
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.units import SessionKV, Tier

if TYPE_CHECKING:
    from sim.scheduler import Scheduler
    from sim.turns import Step, TurnRun

KV_LAYOUTS = ("NHD", "HND")
_ARRAYS = ("kv_indptr", "kv_page_indices", "kv_last_page_len", "qo_indptr")
_SCALARS = ("page_size", "num_kv_heads", "head_dim", "max_num_pages")
GPU, CPU, DROPPED = int(Tier.GPU), int(Tier.CPU), int(Tier.DROPPED)


@dataclass(frozen=True, eq=False)
class PagedLayout:
    """One batch's page table in FlashInfer's form; request i is row i of the batch.

    Request i's KV is pages ``kv_page_indices[kv_indptr[i]:kv_indptr[i + 1]]`` of the pool, in
    token order, the last holding ``kv_last_page_len[i]`` tokens. ``qo_indptr`` (optional) packs
    the query tokens: request i computes ``qo_indptr[i + 1] - qo_indptr[i]`` new tokens, the last
    ones of its sequence (a decode computes 1); without it every request decodes one token.
    """

    kv_indptr: np.ndarray
    kv_page_indices: np.ndarray
    kv_last_page_len: np.ndarray
    page_size: int
    num_kv_heads: int
    head_dim: int
    max_num_pages: int
    kv_layout: str = "NHD"
    qo_indptr: np.ndarray | None = None

    @property
    def num_requests(self) -> int:
        return len(self.kv_last_page_len)

    @property
    def pages_per_request(self) -> np.ndarray:
        return np.diff(self.kv_indptr)

    @property
    def seq_lens(self) -> np.ndarray:
        """KV tokens per request: ``page_size * (pages - 1) + last_page_len``."""
        pages = self.pages_per_request.astype(np.int64)
        return self.page_size * (pages - 1) + self.kv_last_page_len.astype(np.int64)

    @property
    def qo_lens(self) -> np.ndarray:
        """Query tokens per request (1 each without ``qo_indptr``)."""
        if self.qo_indptr is None:
            return np.ones(self.num_requests, dtype=np.int64)
        return np.diff(self.qo_indptr).astype(np.int64)

    @property
    def pool_shape(self) -> tuple[int, int, int, int, int]:
        """One layer's KV pool, K and V stacked on axis 1 (FlashInfer's single-tensor cache)."""
        p, k, d = self.page_size, self.num_kv_heads, self.head_dim
        if self.kv_layout == "NHD":
            return (self.max_num_pages, 2, p, k, d)
        return (self.max_num_pages, 2, k, p, d)

    def check(self) -> None:
        """Raise ValueError naming the first invariant the layout breaks (FlashInfer assumes them
        all and does not check them itself)."""
        if self.kv_layout not in KV_LAYOUTS:
            raise ValueError(f"kv_layout must be one of {KV_LAYOUTS}, got {self.kv_layout!r}")
        for name in _SCALARS:
            v = getattr(self, name)
            low = 0 if name == "max_num_pages" else 1
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        for name in _ARRAYS:
            a = getattr(self, name)
            if a is None:
                continue
            if not isinstance(a, np.ndarray) or a.ndim != 1:
                raise ValueError(f"{name} must be a 1-D numpy array")
            if a.dtype != np.int32:
                raise ValueError(f"{name} must be int32, got {a.dtype}")
        n = self.num_requests
        indptr = self.kv_indptr
        if len(indptr) != n + 1:
            raise ValueError(
                f"kv_indptr must have num_requests + 1 = {n + 1} entries, got {len(indptr)}"
            )
        if indptr[0] != 0:
            raise ValueError(f"kv_indptr must start at 0, got {indptr[0]}")
        if (np.diff(indptr) < 0).any():
            raise ValueError("kv_indptr must be non-decreasing")
        if (np.diff(indptr) == 0).any():
            raise ValueError(
                "every request needs at least one page (kv_indptr strictly increasing)"
            )
        if indptr[-1] != len(self.kv_page_indices):
            raise ValueError(
                f"kv_indptr must end at len(kv_page_indices) = "
                f"{len(self.kv_page_indices)}, got {indptr[-1]}"
            )
        pages = self.kv_page_indices
        if len(pages) and (pages.min() < 0 or pages.max() >= self.max_num_pages):
            raise ValueError(
                f"kv_page_indices must lie in [0, max_num_pages = {self.max_num_pages})"
            )
        if len(np.unique(pages)) != len(pages):
            raise ValueError("kv_page_indices must not use a page twice")
        last = self.kv_last_page_len
        if n and (last.min() < 1 or last.max() > self.page_size):
            raise ValueError(f"kv_last_page_len must lie in [1, page_size = {self.page_size}]")
        qo = self.qo_indptr
        if qo is None:
            return
        if len(qo) != n + 1:
            raise ValueError(
                f"qo_indptr must have num_requests + 1 = {n + 1} entries, got {len(qo)}"
            )
        if qo[0] != 0:
            raise ValueError(f"qo_indptr must start at 0, got {qo[0]}")
        if (np.diff(qo) < 1).any():
            raise ValueError("qo_indptr must give every request at least one query token")
        if (self.qo_lens > self.seq_lens).any():
            raise ValueError(
                "a request cannot have more query tokens than KV tokens (qo_len <= seq_len)"
            )

    def select(self, requests) -> PagedLayout:
        """The sub-batch of these requests (indices, in the order given), over the same pool."""
        rows = np.asarray(requests, dtype=np.int64)
        starts, stops = self.kv_indptr[rows], self.kv_indptr[rows + 1]
        counts = (stops - starts).astype(np.int64)
        pages = (
            np.concatenate([self.kv_page_indices[a:b] for a, b in zip(starts, stops)])
            if len(rows)
            else np.zeros(0, dtype=np.int32)
        )
        qo = None
        if self.qo_indptr is not None:
            qo = _indptr(self.qo_lens[rows])
        return PagedLayout(
            _indptr(counts),
            pages.astype(np.int32),
            self.kv_last_page_len[rows].astype(np.int32),
            self.page_size,
            self.num_kv_heads,
            self.head_dim,
            self.max_num_pages,
            self.kv_layout,
            qo,
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Write an .npz atomically: a temporary file in the same folder, then a rename, so a
        reader never sees half a file."""
        self.check()
        path = Path(path)
        data = {name: getattr(self, name) for name in _ARRAYS if getattr(self, name) is not None}
        data.update({name: np.int64(getattr(self, name)) for name in _SCALARS})
        data["kv_layout"] = np.array(self.kv_layout)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> PagedLayout:
        """Read a file ``save`` wrote; the layout is checked."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in _ARRAYS if name in z.files}
            scalars: dict[str, Any] = {name: int(z[name]) for name in _SCALARS}
            layout = cls(**arrays, **scalars, kv_layout=str(z["kv_layout"]))
        layout.check()
        return layout


def _indptr(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return out


class LayoutExporter:
    """Gives the paged layout of the iteration a scheduler has just planned, assigning pool slots.

    Slots are stable: page p of session s keeps the slot it got while it stays wholly on the GPU
    (every unit of the page, so at ``layer_block`` every layer). A page that leaves it (evicted,
    dropped, pruned, or its session's KV freed) gives its slot back, and new pages take the lowest
    free slot, so the slots in use never exceed the GPU's page capacity. The exporter learns what
    left at each call: let it follow every iteration (it is an ``on_iteration`` hook) for the
    layout an engine that never moves a page would have, and ask ``layout`` where wanted.
    """

    def __init__(self, kv_layout: str = "NHD") -> None:
        if kv_layout not in KV_LAYOUTS:
            raise ValueError(f"kv_layout must be one of {KV_LAYOUTS}, got {kv_layout!r}")
        self.kv_layout = kv_layout
        self._slots: dict[int, np.ndarray] = {}  # session index -> slot of each page, -1: none
        self._tiers: dict[int, tuple[bytes, int]] = {}  # session index -> its units when last seen
        self._free: list[int] = []  # heap of slots given back
        self.high_water = 0  # slots ever needed at once (0..high_water-1)
        # (session, turn) -> its preempt_recompute when last seen running: a re-admission's
        # recompute is the increase (see _query_tokens)
        self._recompute_seen: dict[tuple[int, int], int] = {}

    def __call__(self, scheduler: Scheduler, step: Step, now: float) -> None:
        """The engine hook: follow this iteration (slots only, no arrays built)."""
        self._batch(scheduler, step)

    def layout(self, scheduler: Scheduler, step: Step | None = None) -> PagedLayout:
        """The batch of ``scheduler``'s current iteration: every running turn, in admission order.

        With ``step`` (what ``plan`` returned), the turns it admitted are prefills: their KV is the
        context after the prefill and ``qo_indptr`` counts the tokens they compute. Without it,
        every running turn is taken to be decoding, which is right between iterations (after
        ``finish``, before the next ``plan``) or after a plan that admitted nothing.
        """
        sched = scheduler
        if getattr(sched, "offload", None) is not None:
            raise ValueError(
                "sparse offload decodes from pages on the CPU (streamed through a "
                "ring buffer): the paged layout covers GPU-resident batches only"
            )
        bt = sched.bt
        seq_lens, qo_lens, tables = self._batch(sched, step)
        counts = np.fromiter((len(t) for t in tables), dtype=np.int64, count=len(tables))
        seq = np.asarray(seq_lens, dtype=np.int64)
        capacity = sched.mem.capacity[GPU]
        max_pages = self.high_water if np.isinf(capacity) else int(capacity // sched.page_bytes)
        if self.high_water > max_pages:
            raise AssertionError(
                f"{self.high_water} page slots in use exceed the GPU's {max_pages} pages"
            )
        model = sched.cost.model
        layout = PagedLayout(
            kv_indptr=_indptr(counts),
            kv_page_indices=(np.concatenate(tables) if tables else np.zeros(0)).astype(np.int32),
            kv_last_page_len=(seq - bt * (counts - 1)).astype(np.int32),
            page_size=bt,
            num_kv_heads=model.num_kv_heads,
            head_dim=model.head_dim,
            max_num_pages=max_pages,
            kv_layout=self.kv_layout,
            qo_indptr=_indptr(np.asarray(qo_lens, dtype=np.int64)) if step is not None else None,
        )
        layout.check()
        return layout

    def _batch(
        self, sched: Scheduler, step: Step | None
    ) -> tuple[list[int], list[int], list[np.ndarray]]:
        """(KV tokens, query tokens, page slots) of every running turn, in admission order."""
        bt = sched.bt
        self._free_pages_that_left(sched)
        admitted = {id(run) for run in step.admitted} if step is not None else set()
        seq_lens, qo_lens, tables = [], [], []
        for run in sched.running.values():
            sess = run.sess
            if id(run) in admitted:
                # A prefill: sess.tokens already counts the token it samples (its KV is written by
                # the next step), so the KV it attends to is one less; an empty prompt on an
                # empty session still computes one token, as the scheduler prices it.
                target = sess.tokens
                seq_len = max(1, target - 1)
                qo_lens.append(self._query_tokens(run, target, bt))
            else:
                # A decode at step s: its input is the token sampled by step s - 1, whose KV this
                # step writes and attends to: tokens_at(s) tokens, the context the scheduler prices
                # (dec_ctx). sess.tokens is not that: it moves only when a page is added (then one
                # ahead, for the token this step samples).
                seq_len = run.tokens_at(sched.step)
                if run.base_tokens == 0 or seq_len < 1:
                    raise ValueError(
                        f"{sess.session_id} turn {run.k} was admitted in this "
                        f"iteration: pass the Step that plan returned"
                    )
                qo_lens.append(1)
            tables.append(self._table(sched, sess, -(-seq_len // bt)))
            seq_lens.append(seq_len)
        self._remember_recompute(sched)
        return seq_lens, qo_lens, tables

    # -- slots -----------------------------------------------------------------------------------
    def _take(self) -> int:
        if self._free:
            return heapq.heappop(self._free)
        self.high_water += 1
        return self.high_water - 1

    def _free_pages_that_left(self, sched: Scheduler) -> None:
        """Give back the slots of pages no longer wholly on the GPU (sessions whose units changed
        since the last call: a byte comparison skips the others)."""
        for index, slots in list(self._slots.items()):
            sess = sched.kv[index]
            if self._tiers.get(index) == (sess.tier, sess.unit_pages):
                continue
            self._tiers[index] = (bytes(sess.tier), sess.unit_pages)
            resident = _resident_pages(sched, sess)
            keep = np.zeros(len(slots), dtype=bool)
            m = min(len(slots), len(resident))
            keep[:m] = resident[:m]
            gone = (slots >= 0) & ~keep
            for slot in slots[gone].tolist():
                heapq.heappush(self._free, slot)
            slots[gone] = -1
            if not (slots >= 0).any():
                del self._slots[index], self._tiers[index]

    def _table(self, sched: Scheduler, sess: SessionKV, pages: int) -> np.ndarray:
        """The slots of the running session's first ``pages`` pages, giving slots to those without."""
        if sess.tier_pages[CPU] or sess.tier_pages[DROPPED]:
            raise AssertionError(
                f"running session {sess.session_id} is not wholly on the GPU: "
                f"{sess.tier_pages} pages per tier"
            )
        held = sess.unit_pages if sched.per_session_unit else len(sess.tier) // sched.upp
        if held < pages:
            raise AssertionError(
                f"running session {sess.session_id}: {pages} pages attended, {held} held"
            )
        slots = self._slots.get(sess.index)
        if slots is None or len(slots) < pages:
            grown = np.full(pages, -1, dtype=np.int64)
            if slots is not None:
                grown[: len(slots)] = slots
            slots = self._slots[sess.index] = grown
            self._tiers.pop(sess.index, None)  # look at it again at the next call
        for p in np.flatnonzero(slots[:pages] < 0).tolist():
            slots[p] = self._take()
        return slots[:pages]

    # -- query tokens of a prefill ---------------------------------------------------------------
    def _query_tokens(self, run: TurnRun, target: int, bt: int) -> int:
        """Tokens the admission computes, as the scheduler prices them (``Prefill.tokens``, with the
        recomputed pages of ``layer_block``): the recomputed (dropped) tokens plus max(1, new
        tokens), where new = target - 1 - the tokens the session held. FlashInfer's causal mask
        puts them at the tail of the sequence; recomputed pages in the middle are counted there.
        Capped at the sequence (when everything is recomputed the last token is among them).
        Exact for a first admission and a first re-admission; a later re-admission needs the
        exporter to have seen the turn since its previous one (else: the pages its preemption
        dropped, a lower bound)."""
        seq_len = max(1, target - 1)
        if run.preemptions == 0:  # first admission: the session held the history
            dropped, new = run.recomputed, target - 1 - run.history
        else:
            # A re-admission: the session holds what the preempted turn had, capped by a token
            # budget if any; its recompute is the increase of preempt_recompute (dropped + new).
            held = min(getattr(run, "cap", target - 1), target - 1)
            new = target - 1 - held
            before = self._recompute_seen.get((run.sess.index, run.k))
            if before is None and run.preemptions == 1:
                before = 0
            if before is None:  # not followed: the turn's own pages, which the preemption dropped
                dropped = held - (run.history // bt) * bt
            else:
                dropped = run.preempt_recompute - before - new
        return min(seq_len, dropped + max(1, new))

    def _remember_recompute(self, sched: Scheduler) -> None:
        """Keep preempt_recompute for the running turns and the preempted ones still waiting (the
        head of the queue: a preempted turn goes back to its front)."""
        seen = {(run.sess.index, run.k): run.preempt_recompute for run in sched.running.values()}
        for run in sched.waiting:
            if not run.admitted_once:
                break
            key = (run.sess.index, run.k)
            if key in self._recompute_seen:
                seen[key] = self._recompute_seen[key]
        self._recompute_seen = seen


def _resident_pages(sched: Scheduler, sess: SessionKV) -> np.ndarray:
    """Per page of the session: is all of it (every unit covering it) on the GPU?"""
    if not sess.tier:
        return np.zeros(0, dtype=bool)
    if sched.per_session_unit:
        return np.full(sess.unit_pages, sess.tier[0] == GPU)
    codes = np.frombuffer(sess.tier, dtype=np.uint8).reshape(-1, sched.upp)
    out = (codes == GPU).all(axis=1)
    del codes  # a live view would stop the scheduler resizing the bytearray
    return out


def layout_of(
    scheduler: Scheduler, step: Step | None = None, kv_layout: str = "NHD"
) -> PagedLayout:
    """The paged layout of ``scheduler``'s current iteration, with slots numbered afresh (a new
    ``LayoutExporter``: pages take slots 0, 1, ... in batch order). Follow a whole run with one
    ``LayoutExporter`` for slots that stay put across iterations."""
    return LayoutExporter(kv_layout).layout(scheduler, step)
