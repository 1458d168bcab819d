"""The shared KV store under the policies that read a chunk's conversation (qos, session-aware,
predictive, the pensieve family): hand-worked victims on a tiny store, a plain model of each
against random requests, exact decode spans in a cluster, and what is still refused."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cmp_to_key

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import cost_model, recompute_s
from sim import EngineConfig, MemoryConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster.store import SharedStore, StoreConfig
from sim.lifetime import LifetimePredictor
from sim.units import SessionKV
from traces import load_trace

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16  # tokens a page
CT = 64  # tokens a chunk: 4 pages
PAGE = BT * COST.kv_bytes_per_token
CHUNK = 4 * PAGE
GIB = 1 << 30


def tiny_store(chunks: int, policy: str, sessions: dict[int, SessionKV] | None = None):
    """A store of ``chunks`` chunks of 64 tokens, its conversations those of one replica."""
    cfg = StoreConfig(capacity_gb=chunks * CHUNK / 1e9, policy=policy, chunk_tokens=CT)
    store = SharedStore(cfg, PAGE, BT)
    if sessions is not None:
        store.serve(sessions, COST)
    return store


def replica(*priorities: int, turns: tuple[int, ...] | None = None) -> dict[int, SessionKV]:
    """A replica's sessions 0, 1, ... with these priorities and turns completed."""
    out = {}
    for i, p in enumerate(priorities):
        out[i] = SessionKV(i, f"s{i}", p)
        out[i].next_turn = 1 if turns is None else turns[i]
    return out


def held(store: SharedStore) -> set[tuple[int, int]]:
    """The stored (session, chunk) pairs."""
    assert store.cache is not None
    return {(uid >> 24, uid & ((1 << 24) - 1)) for uid in store.cache.cached}


def test_the_view_answers_a_chunks_place_and_its_conversation():
    sessions = replica(1, -1, turns=(2, 0))
    store = tiny_store(4, "qos", sessions)
    view = store.view
    uid = 1 << 24 | 3  # session 1's chunk 3: its pages 12 .. 15, every layer
    assert (view.first_page(uid), view.pages(uid), view.layer(uid)) == (12, 4, -1)
    assert view.session(uid) is None  # not met yet
    store.write_dropped(1, [3], now=1.0)
    sess = view.session(uid)
    assert (sess.index, sess.session_id, sess.priority, sess.next_turn) == (1, "s1", -1, 0)
    assert sess.tokens == 256 and sess.pages(BT) == 16  # the context its chunks cover
    sessions[1].next_turn = 1  # its first turn completes: its context written, 192 tokens
    store.write(1, 192, now=2.0)
    assert (sess.next_turn, sess.tokens) == (1, 256)


# -- hand-worked ----------------------------------------------------------------------------------
def test_qos_evicts_the_lowest_priority_conversation_first():
    # three sessions of one chunk each fill the store; session 2 (priority -1, a batch job) is
    # the most recent, but a new chunk of session 0 (priority 1) evicts it, not session 1's
    # older chunk (priority 0), which LRU would take
    store = tiny_store(3, "qos", replica(1, 0, -1))
    store.write(0, 64, now=1.0)
    store.write(1, 64, now=2.0)
    store.write(2, 64, now=3.0)
    store.write(0, 128, now=4.0)  # chunk 0 is a hit, chunk 1 needs room
    assert held(store) == {(0, 0), (0, 1), (1, 0)}
    lru = tiny_store(3, "lru")
    for s, tokens, now in [(0, 64, 1.0), (1, 64, 2.0), (2, 64, 3.0), (0, 128, 4.0)]:
        lru.write(s, tokens, now)
    assert held(lru) == {(0, 0), (0, 1), (2, 0)}


def test_qos_and_session_aware_without_a_replica_are_lru():
    # a store no replica serves knows no conversation: QoS's one class is LRU, and session-aware
    # ranks each chunk as its own session, by idle time
    ops = [(0, 128, 1.0), (1, 64, 2.0), (0, 64, 3.0), (2, 128, 4.0), (1, 192, 5.0)]
    stores = {p: tiny_store(3, p) for p in ("lru", "qos", "session-aware")}
    for s, tokens, now in ops:
        for store in stores.values():
            store.write(s, tokens, now)
    assert held(stores["qos"]) == held(stores["lru"]) == held(stores["session-aware"])
    assert stores["qos"].stats == stores["lru"].stats == stores["session-aware"].stats


def test_session_aware_evicts_the_idle_conversation_whole_where_lru_breaks_a_run():
    store = tiny_store(4, "session-aware", replica(0, 0, 0))
    lru = tiny_store(4, "lru")
    for st_ in (store, lru):
        st_.write(0, 128, now=1.0)  # session 0's chunks 1 then 0, at 1
        st_.write(1, 64, now=2.0)  # session 1's chunk 0, at 2
        st_.write_dropped(0, [2], now=3.0)  # a replica drops session 0's chunk 2: written at 3
        st_.write(2, 64, now=4.0)  # session 2's chunk needs room
    # session 0 was used at 3, session 1 at 2: session 1 is the idle one, and goes
    assert held(store) == {(0, 0), (0, 1), (0, 2), (2, 0)}
    assert store.prefix_pages(0) == 12
    # LRU takes the oldest chunk, session 0's chunk 1: its chunk 2 is now behind a gap
    assert held(lru) == {(0, 0), (0, 2), (1, 0), (2, 0)}
    assert lru.prefix_pages(0) == 4


def test_session_aware_takes_a_conversations_tail_chunks_first():
    store = tiny_store(4, "session-aware", replica(0, 0))
    store.write(0, 192, now=1.0)  # session 0's chunks 0, 1, 2
    store.write(1, 64, now=2.0)
    store.write(1, 128, now=3.0)  # session 1's chunk 1: session 0 (idle since 1) loses chunk 2
    assert held(store) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert store.prefix_pages(0) == 8


def test_predictive_keeps_the_conversation_more_likely_to_come_back():
    # session 0 has completed 5 turns and was written at 1; session 1 has completed 1 turn and
    # was written at 3. At 4, under the prior, the long conversation idle for 3 s is likelier to
    # come back than the one-turn one idle for 1 s: predictive evicts session 1's chunk (LRU
    # would evict session 0's, the older)
    prior = LifetimePredictor.prior()
    p_long = prior.p_return(prior.bucket_index(5), 3.0)
    p_short = prior.p_return(prior.bucket_index(1), 1.0)
    assert p_short < p_long
    store = tiny_store(2, "predictive", replica(0, 0, 0, turns=(5, 1, 1)))
    store.write(0, 64, now=1.0)
    store.write(1, 64, now=3.0)
    store.write(2, 64, now=4.0)
    assert held(store) == {(0, 0), (2, 0)}


def test_predictive_never_evicts_a_conversation_in_its_first_turn_before_others():
    # a chunk dropped during session 0's first turn (no turn completed: it is certainly coming
    # back) scores 1; session 1's chunk, written later, goes first
    store = tiny_store(2, "predictive", replica(0, 0, 0, turns=(0, 3, 1)))
    store.write_dropped(0, [0], now=1.0)
    store.write(1, 64, now=2.0)
    store.write(2, 64, now=50.0)
    assert held(store) == {(0, 0), (2, 0)}


def test_pensieve_prices_a_chunk_by_its_position_and_evicts_the_cheapest_per_idle_second():
    # pensieve's formula on a chunk: pages 4c .. 4c + 3 of its session, all layers (the mean
    # layer weight), its context the tokens before its last page, its position weight its last
    # page over the session's pages. Session 0 (128 tokens: chunks 0, 1) written at 1, session 1
    # (one chunk) at 2; at 3 a third chunk needs room.
    store = tiny_store(3, "pensieve", replica(0, 0, 0))
    store.write(0, 128, now=1.0)
    store.write(1, 64, now=2.0)
    k = COST.pensieve_constants(BT)
    alpha, beta = k.alpha, k.beta + k.non_attention
    L = COST.model.num_layers
    w = (L + 1) / (2 * L)
    s0c0 = w * (4 / 8) * (alpha * 48 + beta)  # context 48: 3 pages before its last
    s0c1 = w * (8 / 8) * (alpha * 112 + beta)
    s1c0 = w * (4 / 4) * (alpha * 48 + beta)
    value = {(0, 0): s0c0 / 2, (0, 1): s0c1 / 2, (1, 0): s1c0 / 1}  # cost / idle at 3
    for (s, c), v in value.items():  # the policy's own values
        assert store.cache.policy.value(s << 24 | c, 3.0) == pytest.approx(v, rel=1e-12)
    assert min(value, key=value.get) == (0, 0)
    store.write(2, 64, now=3.0)
    # the head of session 0 goes: the cheapest to recompute, though it breaks the session's
    # run (a lookup stops at the first missing chunk)
    assert held(store) == {(0, 1), (1, 0), (2, 0)}
    assert store.prefix_pages(0) == 0


def test_pensieve_physics_prices_a_chunk_as_recomputing_its_tokens_at_their_place():
    store = tiny_store(3, "pensieve-physics", replica(0, 0, 0))
    store.write(0, 128, now=1.0)
    store.write(1, 64, now=4.0)
    # session 0's chunk 1 recomputes 64 tokens after 64: dearer than a first chunk
    head, second = recompute_s(COST, 64, 0, -1), recompute_s(COST, 64, 64, -1)
    assert second > head
    # at 5: session 0's chunks idle 4 s, session 1's 1 s; value = cost / idle
    assert head / 4 < second / 4 < head / 1
    policy = store.cache.policy
    assert [policy.value(uid, 5.0) for uid in (0, 1, 1 << 24)] == [head / 4, second / 4, head]
    store.write(2, 64, now=5.0)
    assert held(store) == {(0, 1), (1, 0), (2, 0)}
    store.write(2, 128, now=6.0)  # then session 0's chunk 1 (idle 5 s, cost `second`)
    assert held(store) == {(1, 0), (2, 0), (2, 1)}


def test_pensieve_depth_on_the_store_is_pensieve_physics():
    # a chunk holds every layer of its pages: there is no depth of a page to share
    ops = [(0, 128, 1.0), (1, 64, 2.0), (0, 192, 3.0), (2, 128, 4.0), (1, 128, 5.0)]
    a = tiny_store(4, "pensieve-depth", replica(0, 0, 0))
    b = tiny_store(4, "pensieve-physics", replica(0, 0, 0))
    for s, tokens, now in ops:
        a.write(s, tokens, now)
        b.write(s, tokens, now)
    assert held(a) == held(b) and a.stats == b.stats and a.stats.evicted_chunks > 0


@pytest.mark.parametrize("policy", ["belady", "cost-belady"])
def test_offline_policies_are_still_refused_naming_the_key(policy):
    with pytest.raises(ValueError, match=r"cluster\.store\.policy: .*next access"):
        StoreConfig(capacity_gb=1, policy=policy)


@pytest.mark.parametrize(
    "policy", ["qos", "session-aware", "predictive", "pensieve", "pensieve-flat", "pensieve-depth"]
)
def test_every_online_policy_is_a_store_policy(policy):
    assert StoreConfig(capacity_gb=1, policy=policy).policy == policy


# -- a plain model of each, against random requests -----------------------------------------------
class Plain:
    """The store's policies restated over (session, chunk) keys: a victim is the minimum of a
    key over the stored chunks, each chunk's facts taken when it was last used."""

    def __init__(self, policy: str, capacity: int, priority: dict[int, int]) -> None:
        self.policy, self.capacity, self.priority = policy, capacity, priority
        self.prior = LifetimePredictor.prior()
        self.k = COST.pensieve_constants(BT)
        self.tokens: dict[int, int] = {}  # session -> longest context its requests covered
        self.turns: dict[int, int] = {}
        self.at: dict[tuple[int, int], tuple] = {}  # chunk -> (last use, seq, its facts)
        self.seq = 0

    def _use(self, key: tuple[int, int], now: float) -> None:
        """A hit or an insert: a hit keeps the chunk's price (pensieve prices a candidate once)."""
        self.seq += 1
        s, c = key
        cost = self.at[key][3] if key in self.at else self._cost(s, c)
        self.at[key] = (now, self.seq, self.turns[s], cost)

    def _cost(self, s: int, c: int) -> float:
        if self.policy == "pensieve-physics":
            return recompute_s(COST, CT, c * CT, -1)
        if self.policy == "pensieve":
            L = COST.model.num_layers
            last = 4 * c + 4  # pages [4c, 4c + 4)
            total = max(-(-self.tokens[s] // BT), last, 1)
            base = self.k.alpha * min(self.tokens[s], (last - 1) * BT) + (
                self.k.beta + self.k.non_attention
            )
            return (L + 1) / (2 * L) * (last / total) * base
        return 0.0

    def _victim(self, now: float) -> tuple[int, int]:
        at, p = self.at, self.policy
        if p == "qos":
            return min(at, key=lambda u: (self.priority[u[0]], at[u][1]))
        if p == "session-aware":
            last = {}
            for (s, _), entry in at.items():
                last[s] = max(last.get(s, -math.inf), entry[0])
            return min(at, key=lambda u: (last[u[0]], u[0], -u[1]))
        if p == "predictive":

            def score(u):
                a, seq, turns, _ = at[u]
                return (self.prior.p_return(self.prior.bucket_index(turns), now - a), a, seq)

            return min(at, key=score)

        def before(u, v) -> int:  # pensieve: cost_u * idle_v < cost_v * idle_u, exactly
            (au, _, _, cu), (av, _, _, cv) = at[u], at[v]
            lhs = Fraction(cu) * (Fraction(now) - Fraction(av))
            rhs = Fraction(cv) * (Fraction(now) - Fraction(au))
            if lhs != rhs:
                return -1 if lhs < rhs else 1
            return -1 if (cu, au, u) < (cv, av, v) else 1

        return min(at, key=cmp_to_key(before))

    def _insert(self, key: tuple[int, int], now: float) -> None:
        if len(self.at) == self.capacity:
            del self.at[self._victim(now)]
        self._use(key, now)

    def write(self, s: int, tokens: int, now: float) -> None:
        self.tokens[s] = max(self.tokens.get(s, 0), tokens)
        missing = []
        for c in range(tokens // CT - 1, -1, -1):
            if (s, c) in self.at:
                self._use((s, c), now)
            else:
                missing.append((s, c))
        for key in missing:
            self._insert(key, now)

    def write_dropped(self, s: int, chunks: list[int], now: float) -> None:
        self.tokens[s] = max(self.tokens.get(s, 0), (max(chunks) + 1) * CT)
        for c in chunks:
            if (s, c) not in self.at:
                self._insert((s, c), now)

    def read(self, s: int, last: int, now: float) -> None:
        self.tokens[s] = max(self.tokens.get(s, 0), (last + 1) * CT)
        for c in range(last, -1, -1):
            self._use((s, c), now)


@st.composite
def requests(draw):
    """A few requests of three conversations, each a write, a drop's write or a read (of what the
    store's run holds then), their turns completed growing now and then."""
    n = draw(st.integers(1, 25))
    return [
        (
            draw(st.sampled_from(["write", "drop", "read"])),
            draw(st.integers(0, 2)),  # session
            draw(st.integers(1, 4)),  # chunks
            draw(st.integers(0, 2)),  # more turns completed
            draw(st.integers(0, 3)),  # seconds since the last request
        )
        for _ in range(n)
    ]


@settings(max_examples=150, deadline=None)
@given(
    policy=st.sampled_from(["qos", "session-aware", "predictive", "pensieve", "pensieve-physics"]),
    capacity=st.integers(1, 5),
    priorities=st.lists(st.integers(-1, 1), min_size=3, max_size=3),
    ops=requests(),
)
def test_the_store_evicts_as_a_plain_model_of_its_policy(policy, capacity, priorities, ops):
    sessions = replica(*priorities, turns=(0, 0, 0))
    store = tiny_store(capacity, policy, sessions)
    model = Plain(policy, capacity, dict(enumerate(priorities)))
    now = 0.0
    for kind, s, n, more, gap in ops:
        now += gap
        sessions[s].next_turn += more
        model.turns[s] = sessions[s].next_turn
        if kind == "write":
            store.write(s, n * CT, now)
            model.write(s, n * CT, now)
        elif kind == "drop":
            chunks = list(range(n - 1, -1, -1))  # as a replica drops them: tail first
            store.write_dropped(s, chunks, now)
            model.write_dropped(s, chunks, now)
        elif store.prefix_pages(s):
            last = min(n * 4, store.prefix_pages(s)) - 1  # a page of the stored run
            store.read(s, [*range(last + 1)], now)
            model.read(s, last // 4, now)
        assert held(store) == set(model.at), (kind, s, n, now)


# -- in a cluster ----------------------------------------------------------------------------------
def _memory(gpu_pages: int, cpu_pages: int) -> MemoryConfig:
    return MemoryConfig(
        gpu_kv_gb=gpu_pages * PAGE / GIB, cpu_kv_gb=cpu_pages * PAGE / GIB, block_tokens=BT
    )


@pytest.mark.parametrize(
    ("policy", "write"),
    [("session-aware", "completion"), ("predictive", "both"), ("pensieve", "eviction")],
)
def test_spans_give_the_iteration_by_iteration_run_under_a_conversation_policy(policy, write):
    # the store's policy reads drops' times: a replica writing its drops takes a decode span's
    # allocations step by step, each step's drops dated at its own start
    sessions = load_trace({"kind": "synthetic", "sessions": 16, "seed": 4}).sessions
    cfg = StoreConfig(capacity_gb=300 * PAGE / 1e9, policy=policy, chunk_tokens=32, write=write)

    def run(spans: bool):
        return simulate_cluster(
            sessions,
            COST,
            _memory(300, 60),
            EngineConfig(max_batch_tokens=512),
            "lru",
            0,
            ClusterConfig(3, "round-robin", store=cfg),
            decode_spans=spans,
        )

    res, strict = run(True), run(False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert res.store == strict.store and res.store.evicted_chunks > 0
    assert res.turns.store_tokens.sum() > 0


def test_a_predictive_store_reads_the_lifetime_model_fitted_on_the_trace():
    # As each replica's predictive policy does: the trace's training split, not the prior.
    from sim.cluster.run import store_predictor
    from sim.lifetime import fit_lifetime

    sessions = load_trace({"kind": "synthetic", "sessions": 60, "seed": 3}).sessions
    cfg = ClusterConfig(replicas=2, store=StoreConfig(capacity_gb=1, policy="predictive"))
    fitted = store_predictor(cfg, sessions)
    assert fitted is not None
    assert fitted.return_score(1)(5.0) == fit_lifetime(sessions).return_score(1)(5.0)
    assert fitted.return_score(1)(5.0) != LifetimePredictor.prior().return_score(1)(5.0)
    store = SharedStore(cfg.store, PAGE, BT, fitted)
    assert store.cache is not None and store.cache.policy.predictor is fitted
    lru = ClusterConfig(replicas=2, store=StoreConfig(capacity_gb=1, policy="lru"))
    assert store_predictor(lru, sessions) is None
