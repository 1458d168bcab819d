"""Prefill/decode disaggregation: a hand-worked turn (TTFT = prefill + transfer + first decode
step), what each pool holds and sends, conservation on both sides, exact decode spans, and bad
input."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from costmodels import BatchShape, attention_pairs
from sim import EngineConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster.disagg import DisaggConfig
from sim.cluster.store import StoreConfig
from tests.sim.test_cluster import COST, PAGE, conversation, mem, synthetic
from tests.sim.trace_strategies import traces

L = COST.model.num_layers
STEP = COST.profile.step_overhead_s


def run(sessions, memory, replicas=2, prefill=1, router="round-robin", **kw):
    keys = ("bandwidth_gb_s", "latency_us", "layerwise", "link")
    link = {k: kw.pop(k) for k in keys if k in kw}
    cfg = ClusterConfig(
        replicas,
        router,
        store=kw.pop("store", None),
        disaggregation=DisaggConfig(prefill, **link),
    )
    engine = kw.pop("engine", EngineConfig())
    return simulate_cluster(
        sessions, COST, memory, engine, "lru", 0, cfg, debug=kw.pop("debug", True), **kw
    )


def assert_conserved(res, prefill: int) -> None:
    """The prefill side: every history token a GPU, CPU or store hit or recomputed, once. The
    decode side: every token of the context it receives (history + prompt) held there or sent,
    once, at a decode part's first admission."""
    t = res.turns
    store = t.store_tokens if "store_tokens" in t else 0
    split = t.gpu_hit_tokens + t.cpu_hit_tokens + store + t.recomputed_tokens + t.pruned_tokens
    assert (split == t.history_tokens).all()
    decoded = t[t.decode_replica >= 0].set_index(["session_id", "turn"])
    parts = pd.concat([r.turns for r in res.replicas[prefill:]]).set_index(["session_id", "turn"])
    assert len(parts) == len(decoded)
    mine = decoded.loc[parts.index]
    assert (parts.recomputed_tokens == 0).all() and (parts.prompt_tokens == 0).all()
    held = parts.gpu_hit_tokens + parts.cpu_hit_tokens
    assert (held + mine.transfer_tokens == parts.history_tokens).all()
    assert (parts.history_tokens == mine.history_tokens + mine.prompt_tokens).all()


# -- hand-worked ----------------------------------------------------------------------------------
# One conversation, two turns: (120 prompt, 200 output), then (100, 5) after 100 s; one prefill
# and one decode replica, unbounded GPUs; a link of 0.5 GB/s and 1 ms, whole transfers.
ONE = [conversation("A", 0.0, [(120, 200), (100, 5)])]


def test_ttft_is_prefill_then_transfer_then_the_first_decode_step():
    res = run(ONE, mem(math.inf), bandwidth_gb_s=0.5, latency_us=1000, layerwise=False)
    t = res.turns.set_index("turn")
    assert t.replica.tolist() == [0, 0] and t.decode_replica.tolist() == [1, 1]
    # turn 0: the prefill replica computes the 120 prompt tokens alone; the decode replica holds
    # nothing, so all 8 pages (7 full, one of 8 tokens) cross the link before its first step,
    # which computes one token over the 120 received
    prefill = COST.lone_prefill_s(120, 0)
    transfer = 1e-3 + 8 * PAGE / 0.5e9
    first_step = COST.lone_prefill_s(1, 120)
    assert t.loc[0, ["transfer_tokens", "transfer_bytes"]].tolist() == [120, 8 * PAGE]
    assert t.loc[0, "transfer_stall_s"] == pytest.approx(transfer, rel=1e-9)
    assert t.loc[0, "ttft_s"] == pytest.approx(prefill + transfer + first_step, rel=1e-9)
    # the decode part then runs the other 199 tokens; the turn's TBT is the decode replica's
    d0 = res.replicas[1].turns.set_index("turn").loc[0]
    assert d0.output_tokens == 200 and t.loc[0, "finish_s"] == d0.finish_s
    assert t.loc[0, "tbt_mean_s"] == pytest.approx((d0.finish_s - d0.first_token_s) / 199)
    assert t.loc[0, "output_tokens"] == 200 and t.loc[0, "prompt_tokens"] == 120


def test_each_pool_keeps_what_it_computed():
    t = run(ONE, mem(math.inf), bandwidth_gb_s=0.5, latency_us=1000).turns.set_index("turn")
    # turn 1 (history 320): the prefill replica computed 121 tokens of turn 0 (the prompt and
    # the first output token): 7 full pages hit, the partial eighth and the 200 tokens decoded
    # elsewhere are recomputed
    assert t.loc[1, ["gpu_hit_tokens", "recomputed_tokens"]].tolist() == [112, 208]
    assert t.loc[1, "elsewhere_tokens"] == 199
    # the decode replica holds the 320 tokens of context (20 full pages): only the new prompt's
    # 100 tokens (7 pages) cross
    assert t.loc[1, ["transfer_tokens", "transfer_bytes"]].tolist() == [100, 7 * PAGE]


def test_a_layer_by_layer_transfer_overlaps_the_first_step():
    whole = run(ONE, mem(math.inf), bandwidth_gb_s=0.1, latency_us=1000, layerwise=False)
    layered = run(ONE, mem(math.inf), bandwidth_gb_s=0.1, latency_us=1000, layerwise=True)
    # the link is slow: each layer of the first step waits for its KV, and the last layer's
    # compute (then the LM head and the step's overhead) follows the last byte
    transfer = 1e-3 + 8 * PAGE / 0.1e9
    layer = COST.layer_s(BatchShape(1, attention_pairs(1, 120), 1, 0, 0, ((1, 120),), None))
    assert transfer / L > 10 * layer
    ttft = COST.lone_prefill_s(120, 0) + transfer + layer + COST.lm_head_s(1) + STEP
    assert layered.turns.ttft_s.iloc[0] == pytest.approx(ttft, rel=1e-9)
    assert layered.turns.ttft_s.iloc[0] < whole.turns.ttft_s.iloc[0]


def test_a_one_token_turn_ends_on_the_prefill_replica():
    one = [conversation("A", 0.0, [(120, 1), (50, 30)])]
    t = run(one, mem(math.inf)).turns.set_index("turn")
    assert t.loc[0, "decode_replica"] == -1 and t.loc[0, "transfer_bytes"] == 0
    assert t.loc[0, "ttft_s"] == pytest.approx(COST.lone_prefill_s(120, 0), rel=1e-12)
    # its whole context (the prompt and the one output token) stays on the prefill replica
    assert t.loc[1, ["history_tokens", "gpu_hit_tokens", "recomputed_tokens"]].tolist() == [
        121,
        121,
        0,
    ]
    assert t.loc[1, "decode_replica"] == 1


def test_a_store_gives_the_prefill_pool_what_decode_wrote():
    st = StoreConfig(capacity_gb=1000 * PAGE / 1e9, chunk_tokens=16)
    t = run(ONE, mem(math.inf), store=st).turns.set_index("turn")
    # the decode replica wrote turn 0's 320 tokens (20 full pages) at its completion; the prefill
    # replica holds 7 of them and loads the other 13 (its partial page among them)
    assert t.loc[1, ["gpu_hit_tokens", "store_tokens", "recomputed_tokens"]].tolist() == [
        112,
        208,
        0,
    ]


# -- random traces ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("router", ["round-robin", "kv-aware", "session-affinity"])
def test_pools_conserve_and_spans_give_the_iteration_by_iteration_run(router):
    sessions = synthetic(30, seed=2)
    engine = EngineConfig(max_batch_tokens=512, chunked_prefill=True)
    res = run(sessions, mem(400, 100), 4, 2, router, engine=engine)
    strict = run(
        sessions, mem(400, 100), 4, 2, router, engine=engine, decode_spans=False, debug=False
    )
    pd.testing.assert_frame_equal(res.turns, strict.turns)
    assert_conserved(res, 2)
    rejected = sum(r.stats.rejected_turns for r in res.replicas)
    assert len(res.turns) + rejected == sum(len(s.turns) for s in sessions)
    assert set(res.turns.replica) <= {0, 1} and set(res.turns.decode_replica) <= {-1, 2, 3}
    merged = res.merged()
    assert merged.stats.output_tokens == res.turns.output_tokens.sum()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=traces())
def test_random_traces_conserve_on_both_pools(sessions):
    st = StoreConfig(capacity_gb=60 * PAGE / 1e9, chunk_tokens=32)
    res = run(sessions, mem(120, 40), 3, 1, store=st)
    assert_conserved(res, 1)
    strict = run(sessions, mem(120, 40), 3, 1, store=st, decode_spans=False, debug=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"prefill_replicas": 0}, "cluster.disaggregation.prefill_replicas"),
        ({"prefill_replicas": 1, "bandwidth_gb_s": 0}, "cluster.disaggregation.bandwidth_gb_s"),
        ({"prefill_replicas": 1, "latency_us": -1}, "cluster.disaggregation.latency_us"),
        ({"prefill_replicas": 1, "layerwise": "yes"}, "cluster.disaggregation.layerwise"),
    ],
)
def test_bad_disaggregation_names_the_key(kw, message):
    with pytest.raises(ValueError, match=message):
        DisaggConfig(**kw)


def test_zero_decode_replicas_is_an_error():
    with pytest.raises(ValueError, match="prefill_replicas: 2 of 2 replicas leaves no decode"):
        ClusterConfig(2, disaggregation=DisaggConfig(2))


@pytest.mark.parametrize("prefetch", ["queue", "think"])
def test_a_prefetch_runs_with_disaggregation(prefetch):
    # (refused until the recovery told a prefetched split what a transfer sends: sim.recovery's
    # outside_tokens; tests/cluster/test_outside_units.py checks it on random traces)
    res = run(ONE, mem(100, 100), engine=EngineConfig(prefetch=prefetch))
    assert len(res.turns) == 2
    assert_conserved(res, 1)


def test_a_decode_part_too_long_for_a_decode_replica_is_counted():
    # 10 pages of GPU KV (160 tokens): the prefill part needs 101 tokens, the decode part 200.
    # The rejection frees A's pages on the prefill replica (held for a pull that never comes),
    # so B (7 pages) is admitted there at once.
    two = [conversation("A", 0.0, [(100, 100)]), conversation("B", 1.0, [(100, 20)])]
    res = run(two, mem(10))
    assert res.turns.session_id.tolist() == ["B"] and res.decode_rejected == 1
    assert res.replicas[0].stats.rejected_turns == 0 and len(res.replicas[0].turns) == 2
    assert res.replicas[1].stats.rejected_turns == 1
    assert res.turns.queue_s.iloc[0] == 0.0


def test_through_the_host_a_transfer_is_two_copies_priced_by_the_cost_model():
    # turn 0's 8 pages (one GPU's KV, all layers) go device to host on the prefill replica, then
    # host to device on the decode replica, each at the cost model's copy price
    whole = run(ONE, mem(math.inf), link="pcie-host", layerwise=False).turns
    nbytes = 8 * PAGE
    per_layer_pages = 8  # a page of one layer is one copy: 8 copies a layer, 256 in all
    transfer = COST.copy_s("d2h", nbytes, 8 * L) + COST.copy_s("h2d", nbytes, 8 * L)
    assert per_layer_pages * L == 256
    assert whole.transfer_stall_s.iloc[0] == pytest.approx(transfer, rel=1e-9)
    ttft = COST.lone_prefill_s(120, 0) + transfer + COST.lone_prefill_s(1, 120)
    assert whole.ttft_s.iloc[0] == pytest.approx(ttft, rel=1e-9)
    # layer by layer: layer l's second copy follows its first and the layer before's second
    layered = run(ONE, mem(math.inf), link="pcie-host").turns
    t_out = COST.copy_s("d2h", nbytes // L, 8)
    t_in = COST.copy_s("h2d", nbytes // L, 8)
    layer = COST.layer_s(BatchShape(1, attention_pairs(1, 120), 1, 0, 0, ((1, 120),), None))
    sent = done = end = 0.0
    for _ in range(L):
        sent += t_out
        done = max(sent, done) + t_in  # this layer's KV is in
        end = max(done, end) + layer  # and its compute follows it and the layer before
    step = end + COST.lm_head_s(1) + STEP
    assert layered.ttft_s.iloc[0] == pytest.approx(COST.lone_prefill_s(120, 0) + step, rel=1e-9)
    assert layered.ttft_s.iloc[0] < whole.ttft_s.iloc[0]
    with pytest.raises(ValueError, match="cluster.disaggregation.link"):
        DisaggConfig(1, link="carrier-pigeon")


def test_the_prefill_replica_holds_the_pages_until_the_decode_replica_pulls_them():
    # Two replicas of 12 pages. C (t=0) decodes 60 tokens on the decode replica, which then has
    # no room for A's decode part (t=0.05) until C ends; A's 7 pages stay pinned on the prefill
    # replica meanwhile, so B (t=0.1, 7 pages) waits there until A is pulled, and is admitted at
    # that very moment.
    sessions = [
        conversation("C", 0.0, [(100, 60)]),
        conversation("A", 0.05, [(100, 20)]),
        conversation("B", 0.1, [(100, 20)]),
    ]
    res = run(sessions, mem(12))
    t = res.turns.set_index("session_id")
    decoded = res.replicas[1].turns.set_index("session_id")
    c_done, a_pulled = decoded.loc["C", "finish_s"], decoded.loc["A", "admit_s"]
    assert a_pulled == c_done  # A's decode part waited for C's to end
    assert t.loc["B", "admit_s"] == a_pulled  # B waited for A's pages to be freed
    assert t.loc["B", "queue_s"] > 0.3
    assert res.replicas[0].stats.rejected_turns == 0 and len(t) == 3
