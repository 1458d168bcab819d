"""A decode part preempted on its decode replica and admitted again pulls, over the link, what its
prefill replica still holds on its GPU or its CPU of the context it handed off; the rest is
recomputed. Over a `network` link both come over the network; over `pcie-host` a page on the
prefill replica's CPU is already in its host's memory: only the host-to-device copy is priced.
By hand, and on random traces against a plain model of each readmission's pull (spans on and
off giving the same run)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import EngineConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster.disagg import DecodeRecovery, DisaggConfig
from sim.config import GIB
from sim.memory import CPU, GPU
from sim.pricing import HostStagedLink
from tests.sim.test_cluster import BT, COST, PAGE, mem
from tests.sim.trace_strategies import traces
from traces.records import Session, Turn


def run(sessions, prefill_pages, decode_pages, decodes=1, prefill_cpu=0, link="network", **kw):
    """One prefill replica of ``prefill_pages`` pages of GPU KV and ``prefill_cpu`` of CPU KV,
    ``decodes`` decode replicas of ``decode_pages`` each and no CPU tier, over ``link``."""
    groups = [
        {
            "replicas": 1,
            "gpu_kv_gb": prefill_pages * PAGE / GIB,
            "cpu_kv_gb": prefill_cpu * PAGE / GIB,
        },
        {"replicas": decodes, "gpu_kv_gb": decode_pages * PAGE / GIB},
    ]
    disagg = DisaggConfig(1, link=link)
    cfg = ClusterConfig(1 + decodes, "round-robin", disaggregation=disagg, groups=groups)
    return simulate_cluster(
        sessions, COST, mem(decode_pages), EngineConfig(), "lru", 0, cfg, debug=True, **kw
    )


# -- by hand ----------------------------------------------------------------------------------------
# A and B: one turn each of 64 prompt tokens (4 pages of 16) and 200 output tokens, B 1 ms after A.
# The decode replica has 20 pages, the prefill replica 100 (it keeps both contexts on its GPU).
# Both decode parts hold 10 pages when A, a step ahead, needs its 11th: the newest, B, is
# preempted. B keeps its 4 history pages (released) and loses the 6 past them (its own tokens and
# the partial page where they start). A grows to 17 pages (64 + 200 tokens): 6 from the free room
# (20 - 10 - 4), the 7th evicts one of B's history pages. When A completes, B is admitted again:
# that page is pulled from the prefill replica (16 tokens, 1 page over the link), B's own 94
# tokens are recomputed (before: 110, the pulled page's 16 tokens too).
HAND = [
    Session("A", (Turn(64, 200, arrival_s=0.0),)),
    Session("B", (Turn(64, 200, arrival_s=0.001),)),
]


def test_a_readmitted_decode_part_pulls_what_its_prefill_replica_still_holds():
    res = run(HAND, 100, 20)
    t = res.turns.set_index("session_id")
    assert t.loc["A", "preemptions"] == 0 and t.loc["B", "preemptions"] == 1
    assert t.loc["A", "transfer_bytes"] == 4 * PAGE  # its hand-off
    # B's hand-off (4 pages), then the page its readmission pulled
    assert t.loc["B", "transfer_tokens"] == 64
    assert t.loc["B", "transfer_bytes"] == (4 + 1) * PAGE
    assert t.loc["B", "preempt_recompute_tokens"] == 94
    decode = res.replicas[1].stats
    assert (decode.preemptions, decode.preempt_recompute_tokens) == (1, 94)


@pytest.mark.parametrize(("prompt", "pulled"), [(96, 0), (32, 1)])
def test_a_page_its_prefill_replica_lost_is_recomputed(prompt, pulled):
    # A prefill replica of 10 pages holds A's and B's contexts (5 pages each, with the first
    # output token's slot), freed when their decode parts pulled them (A's first). C, a turn of
    # one output token, arrives there at 0.5 s, while B waits preempted: 96 prompt tokens take 7
    # pages, evicting A's 5 and B's first 2 (LRU), page 0 among them, the page B's decode
    # replica lost: B recomputes it (110 tokens, nothing more crosses). 32 take 3 pages, A's
    # alone: B pulls its page as above.
    sessions = [*HAND, Session("C", (Turn(prompt, 1, arrival_s=0.5),))]
    res = run(sessions, 10, 20)
    t = res.turns.set_index("session_id")
    assert t.loc["B", "preemptions"] == 1
    assert t.loc["B", "transfer_bytes"] == (4 + pulled) * PAGE
    assert t.loc["B", "preempt_recompute_tokens"] == 110 - 16 * pulled


@pytest.mark.parametrize("link", ["network", "pcie-host"])
def test_a_page_its_prefill_replica_moved_to_its_cpu_is_pulled(monkeypatch, link):
    # As above with 96 prompt tokens, but the prefill replica has 10 pages of CPU KV: C's pages
    # demote A's 5 and B's first 2 there, so B's readmission pulls page 0 from the prefill
    # replica's CPU (94 tokens recomputed, as when it was on its GPU). Over the network it is
    # priced as a GPU page is; over pcie-host it is in the host's memory already, so it is the
    # staged link's host-to-device copy alone: a swap-in's copy into the decode replica's GPU.
    sessions = [*HAND, Session("C", (Turn(96, 1, arrival_s=0.5),))]
    seen = watch_pulls(monkeypatch)
    res = run(sessions, 10, 20, prefill_cpu=10, link=link)
    t = res.turns.set_index("session_id")
    assert res.replicas[0].stats.swap_out_bytes == 7 * PAGE
    assert t.loc["B", "preemptions"] == 1
    assert t.loc["B", "transfer_bytes"] == (4 + 1) * PAGE
    assert t.loc["B", "preempt_recompute_tokens"] == 94
    if link == "network":
        assert seen[1:] == [(PAGE, 0)]
    else:
        assert seen[1:] == [(0, PAGE)]


# -- against a plain model --------------------------------------------------------------------------
def watch_pulls(monkeypatch) -> list:
    """Each readmission's pull, checked against a plain model as it happens: of the dropped pages
    it recovers, those below the handed-off context's whole pages that the prefill replica holds
    on its GPU or its CPU right then are pulled, the rest recomputed; a page from its GPU comes
    over the link (``remote_bytes``), one from its CPU too over a network link, and as a
    host-to-device copy (``h2d_bytes``, ``h2d_pages``) over pcie-host. Returns the count of pulled
    pages, then each pull's (link bytes, host-to-device bytes)."""
    seen: list = [0]
    original = DecodeRecovery.fetch_dropped

    def fetch_dropped(self, run, dropped_units, now, pf):
        pending = run.sess.index in self.pending
        source = self.sources.get(run.sess.index)
        units = [int(u) for u in dropped_units]
        before = pf.remote_bytes, pf.h2d_bytes, pf.h2d_pages
        rest = [int(u) for u in original(self, run, dropped_units, now, pf)]
        if pending:
            return rest
        on_gpu, on_cpu = [], []
        if source is not None:
            kv, context = source
            # a page past the prefill replica's units (it no longer has them) is not held there
            held = min(context // BT, len(kv.tier))
            on_gpu = [u for u in units if u < held and kv.tier[u] == GPU]
            on_cpu = [u for u in units if u < held and kv.tier[u] == CPU]
        assert rest == [u for u in units if u not in on_gpu and u not in on_cpu]
        page = self.core.page_bytes
        staged = isinstance(self.core.pricer.remote_link, HostStagedLink)
        link = len(on_gpu) + (0 if staged else len(on_cpu))
        h2d = len(on_cpu) if staged else 0
        got = (pf.remote_bytes - before[0], pf.h2d_bytes - before[1], pf.h2d_pages - before[2])
        assert got == (link * page, h2d * page, h2d)
        seen[0] += len(on_gpu) + len(on_cpu)
        if on_gpu or on_cpu:
            seen.append(got[:2])
        return rest

    monkeypatch.setattr(DecodeRecovery, "fetch_dropped", fetch_dropped)
    return seen


@pytest.fixture
def pulls(monkeypatch):
    return watch_pulls(monkeypatch)


def examples(n: int):
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


RANDOM_READMISSIONS = given(
    traces(),
    st.sampled_from([(12, 24), (40, 20), (200, 30)]),
    st.sampled_from([0, 8, 40]),
    st.sampled_from(["network", "pcie-host"]),
)


@examples(10)
@RANDOM_READMISSIONS
def test_readmissions_pull_as_the_plain_model_on_random_traces(pulls, sessions, pages, cpu, link):
    readmissions_pull_as_the_plain_model(sessions, pages, cpu, link)


@pytest.mark.slow
@examples(40)
@RANDOM_READMISSIONS
def test_readmissions_pull_as_the_plain_model_on_more_random_traces(
    pulls, sessions, pages, cpu, link
):
    readmissions_pull_as_the_plain_model(sessions, pages, cpu, link)


def readmissions_pull_as_the_plain_model(sessions, pages, cpu, link) -> None:
    res = run(sessions, *pages, decodes=2, prefill_cpu=cpu, link=link)
    strict = run(sessions, *pages, decodes=2, prefill_cpu=cpu, link=link, decode_spans=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    # every decode replica's history is H + p of its parts: hits plus what crossed at first
    for r in res.replicas[1:]:
        d = r.turns
        assert (d.gpu_hit_tokens + d.cpu_hit_tokens + d.recomputed_tokens <= d.history_tokens).all()


def test_the_plain_model_sees_pulls(monkeypatch):
    # its check is not vacuous: the hand-worked trace pulls through it
    seen = watch_pulls(monkeypatch)
    run(HAND, 100, 20)
    assert seen[0] == 1
