"""Prefill/decode disaggregation: a pool of prefill replicas and a pool of decode replicas, and the
KV transfer between them (DistServe, Splitwise, Mooncake; vLLM's disaggregated proxy).

A turn runs twice. Its *prefill part* runs on a prefill replica as a turn of one output token:
the history is found or recomputed there and the prompt computed. Its *decode part* then goes to
a decode replica (the decode pool's router picks it) as a turn of no prompt and the turn's output
tokens, whose history is the whole context so far: the pages the decode replica lacks come over
the link from the prefill replica when the decode replica admits it (it pulls them into the pages
it allocates), then its first iteration computes one token and emits the user's first token, and
decoding goes on there (docs/semantics.md, "Prefill/decode disaggregation"). A turn of one output
token has no decode part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sim.cluster.outside import OutsideRecovery, dropped_pages, layer_bring_in, page_tiers
from sim.cluster.store import check_number
from sim.memory import CPU, GPU
from sim.pricing import HostStagedLink, NetworkLink, Prefill
from sim.recovery import LayerRecovery
from traces.records import Session

if TYPE_CHECKING:
    from sim.parts.sharing import PrefixSharing
    from sim.scheduler import Scheduler
    from sim.turns import TurnRun
    from sim.units import SessionKV


LINKS = ("network", "pcie-host")


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    prefill_replicas: int  # the first replicas; the rest decode
    bandwidth_gb_s: float = 50.0  # a network link's bandwidth: a 400 Gb/s RDMA NIC
    latency_us: float = 20.0  # ... and its latency, before a transfer's first byte arrives
    layerwise: bool = True  # layer l may run once its KV is in (else: once all of it is)
    # the link between a prefill and a decode replica: network (RDMA, NVLink: bandwidth_gb_s and
    # latency_us), or pcie-host (a copy to the sender's host memory, then one to the receiving
    # GPU, each priced by the cost model's copy terms; bandwidth_gb_s and latency_us unused)
    link: str = "network"

    def __post_init__(self) -> None:
        n = self.prefill_replicas
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(
                f"cluster.disaggregation.prefill_replicas: must be an integer >= 1, got {n!r}"
            )
        if self.link not in LINKS:
            raise ValueError(
                f"cluster.disaggregation.link: must be one of {', '.join(LINKS)}, got {self.link!r}"
            )
        check_number("cluster.disaggregation.bandwidth_gb_s", self.bandwidth_gb_s, above=0)
        check_number("cluster.disaggregation.latency_us", self.latency_us, at_least=0)
        if not isinstance(self.layerwise, bool):
            raise ValueError(
                f"cluster.disaggregation.layerwise: must be true or false, got {self.layerwise!r}"
            )

    def check(self, replicas: int) -> None:
        if self.prefill_replicas >= replicas:
            raise ValueError(
                f"cluster.disaggregation.prefill_replicas: {self.prefill_replicas} of "
                f"{replicas} replicas leaves no decode replica"
            )

    @property
    def remote_link(self) -> NetworkLink | HostStagedLink:
        """A decode replica's link (``sim.pricing.Pricer.remote_link``)."""
        if self.link == "pcie-host":
            return HostStagedLink(self.layerwise)
        return NetworkLink(self.latency_us * 1e-6, self.bandwidth_gb_s * 1e9, self.layerwise)


def prefill_part(session: Session) -> Session:
    """The session as a prefill replica runs it: each turn stops at its first output token."""
    return replace(session, turns=tuple(replace(t, output_tokens=1) for t in session.turns))


def decode_part(session: Session) -> Session:
    """The session as a decode replica runs it: each turn brings no prompt (its KV arrives with the
    history) and generates all its output. No shared-prefix keys: the decode replica receives the
    prefix's pages as the session's own."""
    turns = tuple(replace(t, prompt_tokens=0, prefix_hashes=()) for t in session.turns)
    return replace(session, turns=turns, block_tokens=None)


class Pulls:
    """What a decode replica's recovery knows of the transfers into it, at any eviction unit: a
    decode part's pages that the replica lacks at its first admission come over the link (all of
    them: the prefill replica has just computed the whole context); ``transfers`` records (tokens,
    bytes) per (session, turn). A decode part preempted and admitted again pulls again what its
    prefill replica still holds (on its GPU or its CPU, every layer) of the context it handed off
    (whole pages), over the same link at the same price; the rest of what it lost (its own output
    tokens' pages, and what the prefill replica no longer holds) is recomputed, as any turn's is.
    Those pulls' bytes join the turn's ``transfers`` bytes."""

    core: Scheduler

    def __init__(self, core: Scheduler, transfers: dict) -> None:
        super().__init__(core)  # type: ignore[call-arg]  # the recovery beside it in the MRO
        self.transfers = transfers
        self.pending: set[int] = set()  # sessions whose decode part awaits its first admission
        # session -> (its prefill replica's KV of it, the context handed off), while its decode
        # part is here: what a readmission may pull again
        self.sources: dict[int, tuple[SessionKV, int]] = {}
        # session -> its prefill replica's tp, where it differs from this replica's
        self.sender_tp: dict[int, int] = {}
        # hears that session i's pages were pulled at ``now`` (the sender frees them)
        self.pulled: Callable[[int, float], None] = lambda i, now: None

    def split(self, sess: SessionKV) -> tuple[int, int, int]:
        """The recovery's split, less the dropped pages that cross (all, at a first admission)."""
        g, c, d = super().split(sess)  # type: ignore[misc]
        if sess.index in self.pending:
            return g, c, 0
        return g, c, d - self.core.bt * len(self.held_there(sess, self.dropped_pages(sess)))

    def outside_tokens(self, sess: SessionKV) -> int:
        if sess.index in self.pending:  # every dropped page crosses
            return super().split(sess)[2]  # type: ignore[misc]
        return self.core.bt * len(self.held_there(sess, self.dropped_pages(sess)))

    def dropped_pages(self, sess: SessionKV) -> np.ndarray:
        """The session's dropped pages here (none unless its prefill replica is known)."""
        if sess.index not in self.sources:
            return _NO_PAGES
        return dropped_pages(self.core, sess)

    def held_there(self, sess: SessionKV, pages: np.ndarray) -> np.ndarray:
        """Of the session's ``pages``, those its prefill replica holds now, on its GPU or its
        CPU: whole pages of the context it handed off (not a shared prefix's pool pages)."""
        return self.there(sess, pages)[0]

    def there(self, sess: SessionKV, pages: np.ndarray) -> tuple[np.ndarray, int]:
        """``held_there``'s pages, and how many of them are on the prefill replica's CPU (at
        ``layer_block``: every layer of them)."""
        source = self.sources.get(sess.index)
        if source is None or not len(pages):
            return _NO_PAGES, 0
        kv, context = source
        there = page_tiers(self.core, kv, context // self.core.bt)
        pages = pages[pages < len(there)]
        if not len(pages):
            return _NO_PAGES, 0
        tiers = there[pages]
        on_cpu = tiers == CPU
        return pages[(tiers == GPU) | on_cpu], int(on_cpu.sum())

    def link_page_bytes(self, i: int) -> int:
        """A page's bytes as the link prices them: each GPU has its own link, so a transfer takes
        as long as its busiest GPU's shard, sent or received. This replica's shard, unless
        session i's prefill replica splits the page over fewer GPUs (its shards are bigger)."""
        page, tp = self.core.page_bytes, self.core.cost.tp
        sender = self.sender_tp.get(i, tp)
        return page if sender >= tp else page * tp // sender

    def pull(self, run: TurnRun, pages: np.ndarray, now: float, pf: Prefill) -> np.ndarray:
        """The session's dropped ``pages`` (session page indices, in order) as its admission finds
        them: at a decode part's first admission all of them cross (recorded in ``transfers``);
        at a readmission those its prefill replica still holds. Returns the pages that came."""
        sess = run.sess
        if sess.index not in self.pending:  # a readmission: pull what the sender still holds
            pulled, on_cpu = self.there(sess, pages)
            if not len(pulled):
                return _NO_PAGES
            page, link = self.core.page_bytes, self.link_page_bytes(sess.index)
            nbytes = len(pulled) * page
            if on_cpu and isinstance(self.core.pricer.remote_link, HostStagedLink):
                # pages in the sender's host memory: the staged link's second copy alone (each
                # GPU here copies its own shard in)
                pf.remote_bytes += (len(pulled) - on_cpu) * link
                pf.h2d_bytes += on_cpu * page
                pf.h2d_pages += on_cpu
                if pf.h2d_units is not None:  # layer_block: every layer of each page
                    pf.h2d_units += on_cpu
            else:
                pf.remote_bytes += len(pulled) * link
            tokens, sent = self.transfers.get((sess.index, run.k), (0, 0))
            self.transfers[sess.index, run.k] = (tokens, sent + nbytes * self.core.cost.tp)
            return pulled
        self.pending.discard(sess.index)
        self.pulled(sess.index, now)
        bt = self.core.bt
        tokens = len(pages) * bt  # whole pages, less the unfilled tail of the session's last
        if len(pages) and pages[-1] == (sess.tokens - 1) // bt and sess.tokens % bt:
            tokens -= bt - sess.tokens % bt
        nbytes = len(pages) * self.core.page_bytes  # one GPU's shard, over its own link
        pf.remote_bytes += len(pages) * self.link_page_bytes(sess.index)
        self.transfers[sess.index, run.k] = (tokens, nbytes * self.core.cost.tp)
        return pages


class DecodeRecovery(Pulls, OutsideRecovery):
    """A decode replica's recovery at ``block`` and ``session`` units (``Pulls``): the pages that
    cross are not recomputed (at ``session`` units the dropped unit's pages: ``OutsideRecovery``)."""

    def dropped_tokens(self, sess: SessionKV) -> int:
        if sess.index in self.pending:
            return 0
        dropped = super().dropped_tokens(sess)
        return dropped - self.core.bt * len(self.held_there(sess, self.dropped_pages(sess)))

    def fetch_dropped(self, run: TurnRun, dropped_units, now: float, pf: Prefill):
        units = np.asarray(dropped_units, dtype=np.int64)
        if run.sess.index not in self.pending:
            came = self.pull(run, units, now, pf)
            return units[~np.isin(units, came)] if len(came) else dropped_units
        self.pull(run, units, now, pf)
        return np.empty(0, dtype=np.int64)


class DecodeLayerRecovery(Pulls, LayerRecovery):
    """A decode replica's recovery at ``layer_block`` units (``Pulls``): a page with a dropped
    layer that crosses comes whole, every layer of it at once (none recomputed, none of its CPU
    layers swapped in); the rest are recomputed through their deepest dropped layer."""

    def dropped_tokens(self, sess: SessionKV) -> int:
        # not LayerRecovery's memo: what the prefill replica holds changes with the session's
        # dropped units here unchanged, and its memo is of ``split``, which already leaves the
        # pages that cross out
        return self.split(sess)[2]

    def bring_in(
        self,
        run: TurnRun,
        share: PrefixSharing | None,
        dropped: int,
        new: int,
        old_tokens: int,
        now: float,
        pf: Prefill,
    ) -> tuple[int, int]:
        came = self.pull(run, dropped_pages(self.core, run.sess), now, pf)
        return layer_bring_in(self, run, new, old_tokens, now, pf, came), 0


_NO_PAGES = np.empty(0, dtype=np.int64)


def merge_parts(
    prefill: pd.DataFrame,
    decode: pd.DataFrame,
    sessions: list[Session],
    transfers: dict[tuple[int, int], tuple[int, int]],
) -> tuple[pd.DataFrame, int]:
    """One ledger row per turn from its prefill part's row and its decode part's (a turn of one
    output token has only the first): arrival, admission, history split and queueing from the
    prefill part; first token, finish and TBT from the decode part (so TTFT is prefill, transfer
    and the first decode step); swap-ins and preemptions of both. Also the count of prefill parts
    whose decode part was rejected (those turns are not served: no row)."""
    index = {s.session_id: i for i, s in enumerate(sessions)}
    out_tokens = np.fromiter(
        (
            sessions[index[sid]].turns[k].output_tokens
            for sid, k in zip(prefill.session_id, prefill.turn)
        ),
        dtype=np.int64,
        count=len(prefill),
    )
    keys = ["session_id", "turn"]
    d = decode.set_index(keys)
    p = prefill.assign(output_tokens=out_tokens).set_index(keys)
    has_decode = p.index.isin(d.index)
    lost = int(((out_tokens > 1) & ~has_decode).sum())
    p = p[(out_tokens == 1) | has_decode]
    both = p.index.isin(d.index)
    dd = d.loc[p.index[both]]
    merged = p.copy()
    merged["decode_replica"] = np.int64(-1)
    merged["transfer_tokens"] = np.int64(0)
    merged["transfer_bytes"] = np.int64(0)
    merged["transfer_stall_s"] = 0.0
    if both.any():
        rows = merged.index[both]
        for col in ("first_token_s", "finish_s", "tbt_mean_s"):
            merged.loc[rows, col] = dd[col].to_numpy()
        for col in ("swap_in_bytes", "preemptions", "preempt_recompute_tokens"):
            merged.loc[rows, col] = merged.loc[rows, col].to_numpy() + dd[col].to_numpy()
        merged.loc[rows, "decode_replica"] = dd["replica"].to_numpy()
        merged.loc[rows, "transfer_stall_s"] = dd["copy_stall_s"].to_numpy()
        sent = [transfers.get((index[sid], k), (0, 0)) for sid, k in rows]
        merged.loc[rows, "transfer_tokens"] = np.array([t for t, _ in sent], dtype=np.int64)
        merged.loc[rows, "transfer_bytes"] = np.array([b for _, b in sent], dtype=np.int64)
    merged["ttft_s"] = merged["first_token_s"] - merged["arrival_s"]
    merged["e2e_s"] = merged["finish_s"] - merged["arrival_s"]
    merged = merged.reset_index()
    return merged, lost
