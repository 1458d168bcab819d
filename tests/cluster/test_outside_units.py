"""KV from outside a replica (a shared store's load, a prefill replica's transfer) at ``session``
and ``layer_block`` units (``sim.cluster.outside``): a session unit's dropped pages come from the
source where it sends them and are recomputed past it, the unit then whole on the GPU; at
``layer_block`` a page with a dropped layer that a source sends arrives with every layer (none of
it recomputed, none of its CPU layers swapped in). By hand (a 2-replica store hit at session
units, a transfer and writes at drops at layer_block), against plain models of each admission's
loads and pulls on random traces (spans on and off giving the same run, history conserved on both
pools), and twins: a store that never sends anything is the run without one, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import EngineConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster import disagg as disagg_module
from sim.cluster import store as store_module
from sim.cluster.disagg import DisaggConfig
from sim.cluster.store import DropWriting, StoreConfig
from sim.config import GIB
from sim.memory import CPU, DROPPED, GPU
from sim.pricing import HostStagedLink
from tests.cluster.test_hetero import STATS
from tests.cluster.test_late_kv_disagg import record_kv
from tests.sim.test_cluster import COST, PAGE, THREE, by_turn, conversation, mem, synthetic
from tests.sim.test_cluster_disagg import assert_conserved
from tests.sim.test_cluster_store import assert_conserved_with_store
from tests.sim.trace_strategies import traces
from traces.records import Session, Turn

L = COST.model.num_layers
BT = 16
UNITS = ["session", "layer_block"]


def store(capacity_pages: float = 10_000, **kw) -> StoreConfig:
    return StoreConfig(capacity_gb=capacity_pages * PAGE / 1e9, **kw)


def run(sessions, memory, replicas=2, router="round-robin", **kw):
    keys = ("store", "disaggregation", "groups")
    cfg = ClusterConfig(replicas, router, **{k: kw.pop(k) for k in keys if k in kw})
    engine = kw.pop("engine", EngineConfig())
    policy = kw.pop("policy", "lru")
    return simulate_cluster(
        sessions, COST, memory, engine, policy, 0, cfg, debug=kw.pop("debug", True), **kw
    )


# -- by hand: a 2-replica store hit at session units ------------------------------------------------
# THREE (tests.sim.test_cluster): conversations A, B, C of three turns (100 prompt, 200 output), on
# 2 replicas round robin (turns 0 and 2 on one, turn 1 on the other), unbounded GPUs, a store of
# chunks of one page. Turn 0 completes with 300 tokens and writes its 18 full pages. Turn 1's
# replica never ran the session: its one unit is dropped, 19 pages; the store's run covers the
# first 18 (288 tokens loaded), the partial 19th (12 tokens) is recomputed. Turn 1 completes
# with 600 tokens and writes pages 18..36 (0..17 are hits). Turn 2 is back on turn 0's replica,
# which holds 300 tokens of it: a session unit is all or nothing, so the whole unit (38 pages)
# is dropped on arrival; the store's run covers 37 pages (592 tokens), the partial 38th's 8
# tokens are recomputed (at block units 288 were GPU hits there and only 304 loaded). Turn 2
# writes pages 37..55 of its 900 tokens.
def test_a_store_hit_at_session_units_by_hand():
    res = run(THREE, mem(math.inf, unit="session"), store=store(chunk_tokens=16))
    t = by_turn(res)
    cols = ["gpu_hit_tokens", "cpu_hit_tokens", "store_tokens", "recomputed_tokens"]
    for s in "ABC":
        assert t.loc[(s, 0), cols].tolist() == [0, 0, 0, 0]
        assert t.loc[(s, 1), cols].tolist() == [0, 0, 288, 12]
        assert t.loc[(s, 2), cols].tolist() == [0, 0, 592, 8]
        assert t.loc[(s, 1), "elsewhere_tokens"] == t.loc[(s, 2), "elsewhere_tokens"] == 300
    st_ = res.store
    assert st_.loaded_bytes == 3 * (18 + 37) * PAGE
    assert st_.written_chunks == 3 * 56 and st_.evicted_chunks == 0
    assert_conserved_with_store(res.turns)


def test_a_session_units_load_is_priced_as_the_same_pages_at_block():
    # turn 1 finds the same pages in the same places at both units (18 loaded, the partial 19th
    # recomputed): the session unit's rest is priced page by page, so its TTFT is block's; turn
    # 2 recomputes the same 8 tokens but loads 37 pages, not 19: its load takes longer
    st_ = store(chunk_tokens=16, bandwidth_gb_s=1.0)
    at = {u: by_turn(run(THREE, mem(math.inf, unit=u), store=st_)) for u in ("block", "session")}
    for s in "ABC":
        assert at["session"].loc[(s, 1), "ttft_s"] == at["block"].loc[(s, 1), "ttft_s"]
        assert at["session"].loc[(s, 2), "ttft_s"] > at["block"].loc[(s, 2), "ttft_s"]


# -- by hand: a transfer at layer_block ----------------------------------------------------------
# One conversation (120 prompt, 200 output; then 100, 5 after 100 s), one prefill and one decode
# replica, unbounded GPUs, a link of 0.5 GB/s and 1 ms, whole transfers (the block case of
# tests/sim/test_cluster_disagg.py, at layer_block). Turn 0: the decode replica holds nothing,
# so 8 pages (7 full, one of 8 tokens) cross whole, every layer: 120 tokens, 8 pages' bytes.
# Turn 1 (history 320): the prefill replica holds 121 tokens of turn 0 (7 full pages hit, the
# partial eighth's 9 tokens and the 199 decoded elsewhere recomputed, 208); the decode replica
# holds the 320 tokens (20 full pages): the new prompt's 7 pages (100 tokens) cross.
ONE = [conversation("A", 0.0, [(120, 200), (100, 5)])]


def test_a_transfer_at_layer_block_by_hand():
    link = DisaggConfig(1, bandwidth_gb_s=0.5, latency_us=1000, layerwise=False)
    res = run(ONE, mem(math.inf, unit="layer_block"), disaggregation=link)
    t = res.turns.set_index("turn")
    assert t.decode_replica.tolist() == [1, 1]
    assert t.loc[0, ["transfer_tokens", "transfer_bytes"]].tolist() == [120, 8 * PAGE]
    transfer = 1e-3 + 8 * PAGE / 0.5e9
    assert t.loc[0, "transfer_stall_s"] == pytest.approx(transfer, rel=1e-9)
    ttft = COST.lone_prefill_s(120, 0) + transfer + COST.lone_prefill_s(1, 120)
    assert t.loc[0, "ttft_s"] == pytest.approx(ttft, rel=1e-9)
    assert t.loc[1, ["gpu_hit_tokens", "recomputed_tokens"]].tolist() == [112, 208]
    assert t.loc[1, ["transfer_tokens", "transfer_bytes"]].tolist() == [100, 7 * PAGE]
    assert_conserved(res, 1)


# A decode replica of 23 pages of GPU KV and no CPU tier, LRU at layer_block (a page's layers are
# 32 units). A (64 prompt, 200 output) and B (64 prompt, 40 output, 1 ms later) on one prefill
# replica of 100 pages; their decode parts arrive on the decode replica one after the other, 5
# pages each at admission (65 tokens). B completes with 104 tokens (7 pages, the last holding 8),
# its units released in page order; A then holds 16 pages (256 tokens) when it needs its 17th:
# 16 + 7 = 23 pages are full, so LRU takes one page of units, B's oldest: page 0, all 32 layers.
# B's next turn (16 prompt tokens, 100 s later) reaches the decode replica with 104 + 16 = 120
# tokens of context: its page 0 is dropped, pages 1..5 (80 tokens) are held, page 6 (8 tokens
# computed here) is dropped by the catch-up, page 7 is new. Pages 0, 6 and 7 cross whole: 16 +
# 16 + 8 = 40 tokens, 3 pages' bytes.
def pair() -> list[Session]:
    return [
        Session("A", (Turn(64, 200, arrival_s=0.0),)),
        Session("B", (Turn(64, 40, arrival_s=0.001), Turn(16, 5, think_s=100.0))),
    ]


def test_a_page_with_its_layers_dropped_crosses_whole_at_layer_block():
    groups = [
        {"replicas": 1, "gpu_kv_gb": 100 * PAGE / GIB},
        {"replicas": 1, "gpu_kv_gb": 23 * PAGE / GIB},
    ]
    res = run(
        pair(),
        mem(23, unit="layer_block"),
        disaggregation=DisaggConfig(1),
        groups=groups,
    )
    t = by_turn(res)
    assert t.loc[("B", 1), ["transfer_tokens", "transfer_bytes"]].tolist() == [40, 3 * PAGE]
    decode = res.replicas[1].turns.set_index(["session_id", "turn"])
    assert decode.loc[("B", 1), ["gpu_hit_tokens", "history_tokens"]].tolist() == [80, 120]
    assert_conserved(res, 1)


# -- plain models of what arrives ------------------------------------------------------------------
def plain_dropped_pages(core, sess) -> list[int]:
    """The session's pages a recovery recomputes, read unit by unit: a dropped session unit's
    every page; a dropped page; at layer_block a page with any layer dropped."""
    tier = bytes(sess.tier)
    if core.per_session_unit:
        return list(range(sess.unit_pages)) if tier and tier[0] == DROPPED else []
    upp = core.upp
    return [p for p in range(len(tier) // upp) if DROPPED in tier[p * upp : (p + 1) * upp]]


def plain_sender_page(core, kv, p: int) -> int:
    """Where the sender holds page p: GPU or CPU when every layer of it is there (GPU when on
    both), DROPPED otherwise (or when it has no such page)."""
    tier = bytes(kv.tier)
    if core.per_session_unit:
        return tier[0] if tier and p < kv.unit_pages else DROPPED
    upp = core.upp
    codes = set(tier[p * upp : (p + 1) * upp])
    if not codes or DROPPED in codes or len(tier) < (p + 1) * upp:
        return DROPPED
    return CPU if codes == {CPU} else GPU


def page_tokens(p: int, tokens: int) -> int:
    return min(tokens, (p + 1) * BT) - p * BT


def plain_layer_work(core, sess, arriving: set[int], old_tokens: int):
    """At layer_block: the recompute per layer (tokens through their page's deepest dropped
    layer) and the CPU units swapped in per layer, of the pages that do not arrive."""
    tier, layers = bytes(sess.tier), core.upp
    deep = [0] * layers
    h2d = [0] * layers
    for p in range(len(tier) // layers):
        if p in arriving:
            continue
        codes = tier[p * layers : (p + 1) * layers]  # unit i is layer layers - 1 - i
        dropped = [layers - 1 - i for i, c in enumerate(codes) if c == DROPPED]
        depth = max(dropped) if dropped else -1
        if dropped:
            deep[depth] += page_tokens(p, old_tokens)
        for i, c in enumerate(codes):
            if c == CPU and layers - 1 - i > depth:
                h2d[layers - 1 - i] += 1
    return deep, h2d


def check_admission(self, run, dropped, new, old_tokens, pf, call, arriving, staged_cpu=0):
    """Run the admission's recovery (``call``) and check it against the plain model: the pages
    ``arriving`` come from outside (none recomputed), the rest of the dropped pages are."""
    core, sess = self.core, run.sess
    pages = plain_dropped_pages(core, sess)
    rest = [p for p in pages if p not in arriving]
    tier = bytes(sess.tier)
    assert dropped == sum(page_tokens(p, old_tokens) for p in rest)
    layered = core.upp > 1
    if layered:
        deep, h2d = plain_layer_work(core, sess, set(arriving), old_tokens)
        before = pf.deep_tokens.copy(), pf.h2d_units.copy(), pf.recompute_seqs
    else:
        before = pf.recompute_tokens, pf.recompute_pairs, pf.recompute_seqs
    out = call()
    if layered:
        assert (pf.deep_tokens - before[0]).tolist() == deep
        h2d = np.array(h2d) + staged_cpu  # a staged pull's pages from the sender's CPU: all layers
        assert (pf.h2d_units - before[1]).tolist() == h2d.tolist()
        assert out[0] == (h2d - staged_cpu).sum() * core.unit_bytes  # swapped in, bytes
        assert pf.recompute_seqs - before[2] == (1 if rest else 0)
    else:
        pairs = 0.0
        for p in rest:
            n = page_tokens(p, old_tokens)
            pairs += n * (p * BT + n / 2.0)
        assert pf.recompute_tokens - before[0] == dropped
        assert pf.recompute_pairs - before[1] == pytest.approx(pairs, rel=1e-12)
        assert pf.recompute_seqs - before[2] == (1 if dropped else 0)
        cpu_pages = sess.unit_pages if core.per_session_unit else 1
        assert out[0] == tier.count(CPU) * cpu_pages * core.page_bytes  # swapped in, bytes
    return out


def watch_loads(monkeypatch) -> list[int]:
    """Every admission on a replica with a store behind it, checked against the plain model: the
    dropped pages below the store's unbroken run of chunks (read off its contents) are loaded, a
    page's bytes each over the link, the rest recomputed. Returns [pages loaded, of them those
    partly dropped (at layer_block), those with layers on the CPU]."""
    seen = [0, 0, 0]
    for cls in (store_module.StoreRecovery, store_module.StoreLayerRecovery):
        original = cls.bring_in

        def bring_in(self, run, share, dropped, new, old_tokens, now, pf, _original=original):
            sess, core = run.sess, self.core
            cached = self.store.cache.cached
            chunks = 0
            while (sess.index << 24 | chunks) in cached:
                chunks += 1
            covered = min(chunks * self.store.chunk_pages, sess.tokens // BT)
            arriving = [p for p in plain_dropped_pages(core, sess) if p < covered]
            remote = pf.remote_bytes
            if core.upp > 1:  # (before they arrive)
                for p in arriving:
                    codes = bytes(sess.tier[p * core.upp : (p + 1) * core.upp])
                    seen[1] += codes.count(DROPPED) < core.upp
                    seen[2] += CPU in codes

            def call():
                return _original(self, run, share, dropped, new, old_tokens, now, pf)

            out = check_admission(self, run, dropped, new, old_tokens, pf, call, arriving)
            assert pf.remote_bytes - remote == len(arriving) * core.page_bytes
            seen[0] += len(arriving)
            return out

        monkeypatch.setattr(cls, "bring_in", bring_in)
    return seen


def watch_pulls(monkeypatch) -> list[int]:
    """Every admission on a decode replica, checked against the plain model: at a decode part's
    first admission every dropped page crosses; at a readmission those below the handed-off
    context's whole pages that the prefill replica holds whole (every layer on its GPU or CPU),
    a page from its CPU over pcie-host as a host-to-device copy alone. Returns [pages pulled at
    readmissions, pages sent at first admissions]."""
    seen = [0, 0]
    for cls in (disagg_module.DecodeRecovery, disagg_module.DecodeLayerRecovery):
        original = cls.bring_in

        def bring_in(self, run, share, dropped, new, old_tokens, now, pf, _original=original):
            sess, core = run.sess, self.core
            pages = plain_dropped_pages(core, sess)
            staged = isinstance(core.pricer.remote_link, HostStagedLink)
            before = pf.remote_bytes, pf.h2d_bytes
            link = self.link_page_bytes(sess.index)
            first = sess.index in self.pending
            on_cpu = 0
            if first:
                arriving = pages
                remote = len(pages) * link
            else:
                source = self.sources.get(sess.index)
                arriving = []
                if source is not None:
                    kv, context = source
                    for p in pages:
                        where = plain_sender_page(core, kv, p) if p < context // BT else DROPPED
                        if where != DROPPED:
                            arriving.append(p)
                            on_cpu += where == CPU
                if not staged:
                    on_cpu = 0
                remote = (len(arriving) - on_cpu) * link

            def call():
                return _original(self, run, share, dropped, new, old_tokens, now, pf)

            staged_cpu = on_cpu if core.upp > 1 else 0
            out = check_admission(
                self, run, dropped, new, old_tokens, pf, call, arriving, staged_cpu
            )
            assert pf.remote_bytes - before[0] == remote
            assert pf.h2d_bytes - before[1] == on_cpu * core.page_bytes
            seen[0 if not first else 1] += len(arriving)
            return out

        monkeypatch.setattr(cls, "bring_in", bring_in)
    return seen


def watch_drop_writes(monkeypatch) -> list[int]:
    """Every drop on a replica that writes what it drops, checked against the plain model at
    layer_block and session units: of the chunks whose pages a call's dropped units lie on (full
    chunks only), those the replica holds whole (no unit of their pages dropped before the call;
    a session unit on the GPU or the CPU holds all its pages) are queued for the store, once
    each, in the order the units drop. Returns [chunks queued at layer_block, chunks queued as a
    session unit drops from the GPU (make_room, no CPU room), from the CPU (make_room's CPU
    victim), by a discard (drop_from)]."""
    seen = [0, 0, 0, 0]

    def expect(self, runs):
        layers, cp = self.view.layers, self.store.chunk_pages
        out, done = [], set()
        for sess, first, stop in runs:  # unit indices
            tier = bytes(sess.tier)
            chunks = []
            for p in range(first // layers, (stop - 1) // layers + 1):
                c = p // cp
                if (sess.index, c) in done or (c + 1) * self.store.cfg.chunk_tokens > sess.tokens:
                    continue
                if DROPPED not in tier[c * cp * layers : (c + 1) * cp * layers]:
                    done.add((sess.index, c))
                    chunks.append(c)
            if chunks:
                out.append((sess.index, chunks, self.now))
        return out

    def expect_session(self, sess):
        """A session unit about to drop: its full chunks, in order, if the unit is held."""
        if not sess.tier or sess.tier[0] not in (GPU, CPU):
            return []
        ct, cp = self.store.cfg.chunk_tokens, self.store.chunk_pages
        chunks = [c for c in range(sess.unit_pages // cp) if (c + 1) * ct <= sess.tokens]
        return [(sess.index, chunks, self.now)] if chunks else []

    def check(self, slot, want, call):
        n = len(self.pending)
        call()
        assert self.pending[n:] == want
        seen[slot] += sum(len(c) for _, c, _ in want)

    original_move, original_drop = DropWriting._move_extents, DropWriting.drop_from
    original_gpu, original_cpu = DropWriting._drop_gpu_victim, DropWriting._drop_cpu_victim

    def move(self, extents, frm, to, policy=GPU):
        want = []
        if to == DROPPED and self.view.layers > 1:
            sessions = self.view.sessions
            runs = [(sessions[a >> 24], a & 0xFFFFFF, (a & 0xFFFFFF) + b - a) for a, b in extents]
            want = expect(self, runs)
        if self.view.layers > 1:
            check(self, 0, want, lambda: original_move(self, extents, frm, to, policy))
        else:
            original_move(self, extents, frm, to, policy)

    def drop_from(self, sess, first_unit, now):
        self.now = now
        if self.view.per_session:
            want = expect_session(self, sess) if first_unit == 0 else []
            check(self, 3, want, lambda: original_drop(self, sess, first_unit, now))
            return
        tier = bytes(sess.tier)
        leaving = [i for i in range(first_unit, len(tier)) if tier[i] in (GPU, CPU)]
        runs, want = [], []
        for i in leaving:  # consecutive runs of leaving units
            if runs and runs[-1][2] == i:
                runs[-1] = (sess, runs[-1][1], i + 1)
            else:
                runs.append((sess, i, i + 1))
        if self.view.layers > 1:
            want = expect(self, runs)
            check(self, 0, want, lambda: original_drop(self, sess, first_unit, now))
        else:
            original_drop(self, sess, first_unit, now)

    def gpu_victim(self, sess, idx, size, ppu):
        assert self.view.per_session and idx == 0 and sess.tier[0] == GPU
        want = expect_session(self, sess)
        check(self, 1, want, lambda: original_gpu(self, sess, idx, size, ppu))
        assert not sess.tier or sess.tier[0] == DROPPED  # (a finished session's: let go)

    def cpu_victim(self, uid):
        sess = self.view.sessions[uid >> 24]
        assert self.view.per_session and sess.tier[0] == CPU
        want = expect_session(self, sess)
        check(self, 2, want, lambda: original_cpu(self, uid))

    monkeypatch.setattr(DropWriting, "_move_extents", move)
    monkeypatch.setattr(DropWriting, "drop_from", drop_from)
    monkeypatch.setattr(DropWriting, "_drop_gpu_victim", gpu_victim)
    monkeypatch.setattr(DropWriting, "_drop_cpu_victim", cpu_victim)
    return seen


@pytest.fixture
def drop_writes(monkeypatch):
    return watch_drop_writes(monkeypatch)


@pytest.fixture
def loads(monkeypatch):
    return watch_loads(monkeypatch)


@pytest.fixture
def pulls(monkeypatch):
    return watch_pulls(monkeypatch)


def test_the_plain_models_see_loads_and_pulls(monkeypatch):
    # their checks are not vacuous: the hand-worked runs load and pull through them
    loads, pulls = watch_loads(monkeypatch), watch_pulls(monkeypatch)
    run(THREE, mem(math.inf, unit="session"), store=store(chunk_tokens=16))
    assert loads[0] == 3 * (18 + 37)
    test_a_page_with_its_layers_dropped_crosses_whole_at_layer_block()
    # A's and B's first decode parts (64 tokens: 4 pages each), then B's second (3 pages)
    assert pulls[1] == 4 + 4 + 3


def test_pages_partly_dropped_and_partly_on_the_cpu_load_whole(monkeypatch):
    # pensieve-depth at layer_block drops a page's deepest layers first: some pages the store
    # sends are partly dropped, one with layers on the CPU; the plain model checks each (none of
    # their layers recomputed, none swapped in), and spans stay exact
    loads = watch_loads(monkeypatch)
    cfg = store(200, chunk_tokens=32)
    memory = mem(150, 50, unit="layer_block")
    sessions = synthetic(12)
    res = run(sessions, memory, 3, store=cfg, policy="pensieve-depth")
    assert loads[1] > 0 and loads[2] > 0
    assert_conserved_with_store(res.turns)
    strict = run(
        sessions, memory, 3, store=cfg, policy="pensieve-depth", decode_spans=False, debug=False
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)


# -- random traces: conservation, exact spans, the plain models --------------------------------------
SETTINGS = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# pensieve-depth evicts a page's deepest layers first: at layer_block it leaves pages partly
# dropped, some with layers on the CPU (LRU takes a page's 32 units together)
POLICIES = st.sampled_from(["lru", "pensieve-depth"])


@SETTINGS
@given(traces(), st.sampled_from(UNITS), st.sampled_from([(120, 40), (60, 0)]), POLICIES)
def test_store_loads_as_the_plain_model_on_random_traces(loads, sessions, unit, pages, policy):
    st_ = store(80, chunk_tokens=32, policy="s3fifo")
    memory = mem(*pages, unit=unit)
    res = run(sessions, memory, 3, store=st_, policy=policy)
    assert_conserved_with_store(res.turns)
    strict = run(sessions, memory, 3, store=st_, policy=policy, decode_spans=False, debug=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert res.store == strict.store


@SETTINGS
@given(traces(), st.sampled_from(UNITS), st.sampled_from([(120, 40), (60, 0)]), POLICIES)
def test_writes_at_drops_on_random_traces(loads, drop_writes, sessions, unit, pages, policy):
    st_ = store(80, chunk_tokens=32, policy="lru", write="both")
    memory = mem(*pages, unit=unit)
    res = run(sessions, memory, 3, store=st_, policy=policy)
    assert_conserved_with_store(res.turns)
    strict = run(sessions, memory, 3, store=st_, policy=policy, decode_spans=False, debug=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert res.store == strict.store


def disagg_run(sessions, unit, prefill_pages, decode_pages, cpu, link, **kw):
    """One prefill replica (``prefill_pages`` of GPU KV, ``cpu`` of CPU KV) and two decode
    replicas of ``decode_pages`` and no CPU tier."""
    groups = [
        {"replicas": 1, "gpu_kv_gb": prefill_pages * PAGE / GIB, "cpu_kv_gb": cpu * PAGE / GIB},
        {"replicas": 2, "gpu_kv_gb": decode_pages * PAGE / GIB},
    ]
    return run(
        sessions,
        mem(decode_pages, unit=unit),
        3,
        disaggregation=DisaggConfig(1, link=link),
        groups=groups,
        **kw,
    )


@SETTINGS
@given(
    traces(),
    st.sampled_from(UNITS),
    st.sampled_from([(12, 24), (40, 20), (200, 30)]),
    st.sampled_from([0, 8, 40]),
    st.sampled_from(["network", "pcie-host"]),
    POLICIES,
)
def test_transfers_and_pulls_as_the_plain_model_on_random_traces(
    pulls, sessions, unit, pages, cpu, link, policy
):
    res = disagg_run(sessions, unit, *pages, cpu, link, policy=policy)
    assert_conserved(res, 1)
    strict = disagg_run(
        sessions, unit, *pages, cpu, link, policy=policy, decode_spans=False, debug=False
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)


@SETTINGS
@given(traces(), st.sampled_from(UNITS))
def test_a_store_and_a_prefill_pool_conserve_on_both_pools_on_random_traces(
    loads, pulls, sessions, unit
):
    st_ = store(60, chunk_tokens=32)
    kw = {"store": st_, "disaggregation": DisaggConfig(1)}
    res = run(sessions, mem(120, 40, unit=unit), 3, **kw)
    assert_conserved(res, 1)
    strict = run(sessions, mem(120, 40, unit=unit), 3, decode_spans=False, debug=False, **kw)
    pd.testing.assert_frame_equal(res.turns, strict.turns)


# -- twins: a store that sends nothing is the run without one --------------------------------------
@SETTINGS
@given(traces(), st.sampled_from(UNITS))
def test_a_store_that_sends_nothing_is_the_run_without_one(sessions, unit):
    # chunks longer than any context: none is ever full, so none is written and none loaded;
    # every admission takes the unit's own recovery, to the bit
    memory = mem(60, 20, unit=unit)
    plain = run(sessions, memory, 3)
    never = run(sessions, memory, 3, store=store(chunk_tokens=BT * 1024))
    assert never.store.written_chunks == 0 and never.store.loaded_bytes == 0
    assert (never.turns.store_tokens == 0).all()
    pd.testing.assert_frame_equal(plain.turns, never.turns.drop(columns="store_tokens"))
    for a, b in zip(plain.replicas, never.replicas, strict=True):
        pd.testing.assert_frame_equal(a.turns, b.turns)
        for name in STATS:
            x, y = getattr(a.stats, name), getattr(b.stats, name)
            assert x == y or (math.isnan(x) and math.isnan(y)), name
        assert list(a.stats.tbt.values) == list(b.stats.tbt.values)
    assert plain.active == never.active


# -- every combination runs ----------------------------------------------------------------------
@pytest.mark.parametrize("unit", ["session", "layer_block", "block"])
@pytest.mark.parametrize("prefetch", ["off", "queue", "think"])
def test_every_unit_runs_with_a_store_and_a_prefill_pool(unit, prefetch):
    res = run(
        ONE,
        mem(math.inf, unit=unit),
        disaggregation=DisaggConfig(1),
        store=store(write="both"),
        engine=EngineConfig(prefetch=prefetch),
    )
    assert len(res.turns) == 2
    assert_conserved(res, 1)


# -- by hand: writes at drops at layer_block --------------------------------------------------------
# tests/sim/test_cluster_store_write.py's hand-worked case (one replica of 12 pages, no CPU tier,
# LRU; a store of 4 chunks of 2 pages, LRU; A and B of two turns each, far apart) at layer_block:
# every room made there is whole pages, and LRU takes a released page's 32 units together, in
# page order, so the same pages drop at the same moments and the same chunks are written, a chunk
# when the first unit of it drops while the replica holds every layer of it.
@pytest.mark.parametrize("write", ["eviction", "completion"])
def test_writes_at_drops_at_layer_block_by_hand(drop_writes, write):
    from tests.sim.test_cluster_store_write import TWO

    res = run(TWO, mem(12, unit="layer_block"), 1, store=store(8, chunk_tokens=32, write=write))
    t = by_turn(res)
    cols = ["gpu_hit_tokens", "store_tokens", "recomputed_tokens"]
    st_ = res.store
    if write == "eviction":
        assert t.loc[("A", 1), cols].tolist() == [64, 64, 0]
        assert t.loc[("B", 1), cols].tolist() == [0, 128, 0]
        assert (st_.written_chunks, st_.drop_written_chunks, st_.evicted_chunks) == (12, 12, 8)
        assert st_.loaded_bytes == (64 + 128) // BT * PAGE
        assert drop_writes[0] == 12  # each through the plain model
    else:
        assert t.loc[("A", 1), cols].tolist() == [64, 0, 64]
        assert t.loc[("B", 1), cols].tolist() == [0, 0, 128]
        assert (st_.written_chunks, st_.drop_written_chunks, st_.evicted_chunks) == (20, 0, 16)
    assert_conserved_with_store(res.turns)


# -- the sender's pages, unit by unit -------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([("block", 1), ("session", 1), ("layer_block", 4)]),
    st.lists(st.sampled_from([GPU, CPU, DROPPED]), min_size=1, max_size=24),
    st.integers(0, 30),
)
def test_the_senders_pages_are_where_every_layer_of_them_is(unit, codes, asked):
    # page_tiers against the plain model: a page is on the GPU or the CPU when every unit of it
    # is (GPU when on both: it crosses as a GPU page), dropped when any unit is; a session
    # unit's pages are all where the unit is
    from types import SimpleNamespace

    from sim.cluster.outside import page_tiers
    from sim.units import SessionKV

    name, upp = unit
    core = SimpleNamespace(per_session_unit=name == "session", upp=upp)
    if name == "session":
        kv = SessionKV(0, "s", 0, tier=bytearray(codes[:1]), unit_pages=len(codes))
    else:
        kv = SessionKV(0, "s", 0, tier=bytearray(codes[: len(codes) // upp * upp]))
    got = page_tiers(core, kv, asked).tolist()
    pages = len(codes) if name == "session" else len(codes) // upp
    want = [plain_sender_page(core, kv, p) for p in range(min(asked, pages))]
    assert got == want


# -- late KV events with a prefill pool, at both units --------------------------------------------
@SETTINGS
@given(traces(), st.sampled_from(UNITS))
def test_each_pool_routes_on_its_kv_a_delay_ago_at_both_units(late_kv_log, sessions, unit):
    # tests/cluster/test_late_kv_disagg.py's plain model of the views (every replica's KV noted
    # after each change in a run that steps every iteration), at session and layer_block units
    from tests.cluster.test_late_kv_disagg import spans_on_and_off

    spans_on_and_off(sessions, mem(30, 20, unit=unit), 1000.0, late_kv_log)


@pytest.fixture
def late_kv_log(monkeypatch):
    """test_late_kv_disagg.py's ``kv_log``: every replica's KV noted after each change."""
    return record_kv(monkeypatch)


def test_chunked_prefills_load_from_the_store_at_session_units(monkeypatch):
    # a session unit's loaded and recomputed pages go through chunked prefill's cut of the work
    # (chunked prefill is not combined with layer_block)
    loads = watch_loads(monkeypatch)
    engine = EngineConfig(max_batch_tokens=512, chunked_prefill=True)
    memory = mem(150, 50, unit="session")
    sessions = synthetic(20, seed=4)
    cfg = store(200, chunk_tokens=32, policy="arc")
    res = run(sessions, memory, 3, "kv-aware", store=cfg, engine=engine)
    assert loads[0] > 0 and res.turns.store_tokens.sum() > 0
    assert_conserved_with_store(res.turns)
    strict = run(
        sessions, memory, 3, "kv-aware", store=cfg, engine=engine, decode_spans=False, debug=False
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)


# -- by hand: writes at drops at session units -----------------------------------------------------
# tests/sim/test_cluster_store_write.py's hand-worked case (one replica of 12 pages, no CPU tier,
# LRU; a store of 4 chunks of 2 pages, LRU; A and B of two turns each: 128 tokens after turn 0,
# 192 after turn 1) at session units, where a session's one unit drops whole (make_room's GPU
# victim) and every full chunk of it is written if the store lacks it:
# B0 (7 pages at admission, 4 free) drops A's unit: A's chunks 0..3 are written. A1 (11 pages)
#   drops B's unit (B's 0..3 queued); its lookup finds A's four chunks first (128 tokens load),
#   then the flush writes B's four, evicting A's. B1 (11 pages) drops A's unit of 12 pages (A's
#   six chunks queued), loads B's four (128 tokens), then A's six are written, evicting B's four
#   and A's own 0 and 1. Written 4 + 4 + 6 = 14, all at drops, evicted 14 - 4 = 10.
# With completion writes alone, A0's chunks are evicted by B0's and B0's by A1's: each second
# turn recomputes its 128 tokens (test_cluster_store_write's completion case, at block units).
@pytest.mark.parametrize("write", ["eviction", "completion"])
def test_writes_at_drops_at_session_units_by_hand(drop_writes, write):
    from tests.sim.test_cluster_store_write import TWO

    res = run(TWO, mem(12, unit="session"), 1, store=store(8, chunk_tokens=32, write=write))
    t = by_turn(res)
    cols = ["gpu_hit_tokens", "store_tokens", "recomputed_tokens"]
    st_ = res.store
    if write == "eviction":
        for s in "AB":
            assert t.loc[(s, 1), cols].tolist() == [0, 128, 0]
        assert (st_.written_chunks, st_.drop_written_chunks, st_.evicted_chunks) == (14, 14, 10)
        assert st_.loaded_bytes == 2 * 8 * PAGE
        assert drop_writes[1] == 14 and drop_writes[2] == drop_writes[3] == 0  # the plain model's
    else:
        for s in "AB":
            assert t.loc[(s, 1), cols].tolist() == [0, 0, 128]
        assert (st_.written_chunks, st_.drop_written_chunks, st_.evicted_chunks) == (20, 0, 16)
    assert_conserved_with_store(res.turns)


def test_the_plain_model_sees_every_kind_of_drop_at_session_units(drop_writes):
    # a CPU tier and a tight GPU at session units: units drop from the GPU, from the CPU, and by
    # the catch-up's discard of a unit that ran elsewhere; each path's writes are checked
    cfg = store(200, chunk_tokens=32, write="eviction")
    res = run(synthetic(20, seed=4), mem(100, 40, unit="session"), 3, store=cfg)
    assert drop_writes[1] > 0 and drop_writes[2] > 0 and drop_writes[3] > 0
    # (a queued chunk that the store holds is not written again)
    assert 0 < res.store.drop_written_chunks <= sum(drop_writes[1:])
    assert_conserved_with_store(res.turns)


# -- by hand: a prefetched turn with a store hit --------------------------------------------------
# TWO again at block units: one replica of 12 pages of GPU KV and 2 of CPU KV, LRU; a store of
# chunks of 2 pages that holds everything; completions write. A0 writes A's chunks 0..3 (128
# tokens). B0 (7 pages at admission) demotes A's pages 0, 1, 2 to the CPU, which keeps 2 (page 0
# dropped), and as B decodes to 8 pages page 3 goes too (page 1 dropped). A's history at A1:
# pages 4..7 on the GPU (64 tokens), 2 and 3 on the CPU (32), 0 and 1 dropped (32), which the
# store's chunk 0 holds. Before A1 is admitted its CPU pages are prefetched to the GPU (``think``:
# before it arrives; ``queue``: while it waits); they count on the CPU, where they came from, and
# the dropped ones are loaded, not recomputed: 64 / 32 / store 32 / 0. Without the recovery's
# ``outside_tokens`` the prefetched split would count pages 0 and 1 as recomputed too (160 of a
# history of 128).
@pytest.mark.parametrize("prefetch", ["off", "queue", "think"])
def test_a_prefetched_turn_loads_its_dropped_pages_from_the_store_by_hand(loads, prefetch):
    from tests.sim.test_cluster_store_write import TWO

    engine = EngineConfig(prefetch=prefetch)
    res = run(TWO, mem(12, 2), 1, store=store(100, chunk_tokens=32), engine=engine)
    t = by_turn(res)
    cols = ["gpu_hit_tokens", "cpu_hit_tokens", "store_tokens", "recomputed_tokens"]
    assert t.loc[("A", 1), cols].tolist() == [64, 32, 32, 0]
    prefetched = 0 if prefetch == "off" else 2 * PAGE
    assert t.loc[("A", 1), "prefetched_bytes"] == prefetched
    assert_conserved_with_store(res.turns)
    if prefetch != "off":  # B1 too: 2 pages prefetched, 6 loaded
        assert t.loc[("B", 1), cols].tolist() == [0, 32, 96, 0]
        assert t.loc[("B", 1), "prefetched_bytes"] == 2 * PAGE
        assert res.store.loaded_bytes == (2 + 6) * PAGE
        assert loads[0] == 2 + 6


# -- random traces with a prefetch ------------------------------------------------------------------
ALL_UNITS = st.sampled_from(["block", "session", "layer_block"])
PREFETCH = st.sampled_from(["queue", "think"])


@SETTINGS
@given(traces(), ALL_UNITS, PREFETCH, st.sampled_from(["completion", "both"]), POLICIES)
def test_a_prefetch_with_a_store_on_random_traces(
    loads, drop_writes, sessions, unit, prefetch, write, policy
):
    st_ = store(80, chunk_tokens=32, policy="s3fifo", write=write)
    memory, engine = mem(120, 40, unit=unit), EngineConfig(prefetch=prefetch)
    res = run(sessions, memory, 3, store=st_, policy=policy, engine=engine)
    assert_conserved_with_store(res.turns)
    strict = run(
        sessions,
        memory,
        3,
        store=st_,
        policy=policy,
        engine=engine,
        decode_spans=False,
        debug=False,
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert res.store == strict.store


@SETTINGS
@given(
    traces(),
    ALL_UNITS,
    PREFETCH,
    st.sampled_from([(12, 24), (40, 20), (200, 30)]),
    st.sampled_from([8, 40]),
    st.sampled_from(["network", "pcie-host"]),
)
def test_a_prefetch_with_a_prefill_pool_on_random_traces(
    pulls, sessions, unit, prefetch, pages, cpu, link
):
    engine = EngineConfig(prefetch=prefetch)
    res = disagg_run(sessions, unit, *pages, cpu, link, engine=engine)
    assert_conserved(res, 1)
    strict = disagg_run(
        sessions, unit, *pages, cpu, link, engine=engine, decode_spans=False, debug=False
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)


@SETTINGS
@given(traces(), ALL_UNITS, PREFETCH)
def test_a_prefetch_with_a_store_and_a_prefill_pool_on_random_traces(
    loads, pulls, sessions, unit, prefetch
):
    kw = {"store": store(60, chunk_tokens=32), "disaggregation": DisaggConfig(1)}
    engine = EngineConfig(prefetch=prefetch)
    res = run(sessions, mem(120, 40, unit=unit), 3, engine=engine, **kw)
    assert_conserved(res, 1)
    strict = run(
        sessions, mem(120, 40, unit=unit), 3, engine=engine, decode_spans=False, debug=False, **kw
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)


@pytest.mark.parametrize(("unit", "pool"), [("block", 1), ("layer_block", 1), ("session", 0)])
def test_prefetched_sessions_load_and_pull_through_the_plain_models(monkeypatch, unit, pool):
    # the random traces' checks are not vacuous: on a fixed trace turns are prefetched, and
    # pages are loaded from the store and pulled from the prefill pool. (At session units a
    # prefill pool leaves nothing to prefetch: a decode replica's catch-up drops the unit whole,
    # and the prefill replica lets go of what was pulled; with a store alone there is.)
    loads, pulls = watch_loads(monkeypatch), watch_pulls(monkeypatch)
    kw = {"store": store(150, chunk_tokens=32)}
    if pool:
        kw["disaggregation"] = DisaggConfig(pool)
    engine = EngineConfig(prefetch="queue")
    res = run(synthetic(25, seed=7), mem(100, 60, unit=unit), 3, engine=engine, **kw)
    prefetched = sum(r.turns.prefetched_bytes.sum() for r in res.replicas)
    assert prefetched > 0 and loads[0] > 0 and (pulls[1] > 0) == bool(pool)
    if pool:
        assert_conserved(res, pool)
    else:
        assert_conserved_with_store(res.turns)


# -- twins: a store that sends nothing, with writes at drops and a prefetch --------------------------
@SETTINGS
@given(traces(), ALL_UNITS, st.sampled_from(["off", "queue", "think"]))
def test_a_store_that_sends_nothing_writing_at_drops_is_the_run_without_one(
    sessions, unit, prefetch
):
    # no chunk is ever full: nothing is written at completions or at drops, nothing loaded; the
    # drops' hooks and the prefetched split's outside tokens change nothing, to the bit
    memory, engine = mem(60, 20, unit=unit), EngineConfig(prefetch=prefetch)
    plain = run(sessions, memory, 3, engine=engine)
    never = run(
        sessions, memory, 3, engine=engine, store=store(chunk_tokens=BT * 1024, write="both")
    )
    assert never.store.written_chunks == 0 and never.store.loaded_bytes == 0
    pd.testing.assert_frame_equal(plain.turns, never.turns.drop(columns="store_tokens"))
    for a, b in zip(plain.replicas, never.replicas, strict=True):
        pd.testing.assert_frame_equal(a.turns, b.turns)
        for name in STATS:
            x, y = getattr(a.stats, name), getattr(b.stats, name)
            if name == "gpu_util":  # an integral over the replica's spans: a store cuts them at
                # other moments, so its sum may differ in the last bit (as spans on and off do)
                assert x == pytest.approx(y, rel=1e-12, abs=0, nan_ok=True), name
                continue
            assert x == y or (math.isnan(x) and math.isnan(y)), name
