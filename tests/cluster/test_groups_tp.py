"""Groups at their own tensor-parallel degree (``cluster.groups[i].tp``): a fleet whose every group
sets the same tp is the run at that tp, bit for bit (colocated, with a store, disaggregated); a
transfer between pools at different tps is priced on the busiest GPU's shard, by hand and against
a plain model on random traces; a tp that replicates KV heads is refused where KV crosses."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodels import cost_model
from sim import EngineConfig, MemoryConfig
from sim.cluster import ClusterConfig, simulate_cluster
from sim.cluster.disagg import DecodeRecovery, DisaggConfig
from sim.cluster.groups import ReplicaGroup, fleet_label, replica_setups
from sim.cluster.store import StoreConfig
from sim.config import GIB
from tests.cluster.test_hetero import assert_same_run
from tests.sim.trace_strategies import traces
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16
WHOLE = BT * COST.kv_bytes_per_token  # a page of the whole model (8 KV heads)


def mem(gpu_pages: float, cpu_pages: float = 0) -> MemoryConfig:
    """The whole group's KV (each of its tp GPUs holds 1/tp of it), in whole-model pages."""
    return MemoryConfig(
        gpu_kv_gb=gpu_pages * WHOLE / GIB, cpu_kv_gb=cpu_pages * WHOLE / GIB, block_tokens=BT
    )


def run(sessions, memory, cfg, cost=COST, **kw):
    return simulate_cluster(sessions, cost, memory, EngineConfig(), "lru", 0, cfg, **kw)


# -- every group at one tp is the run at that tp ------------------------------------------------
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.sampled_from([2, 4]), st.sampled_from(["none", "store", "disagg"]))
def test_every_group_at_one_tp_is_the_run_at_that_tp(sessions, tp, extra):
    memory = mem(40, 30)
    kw: dict = {}
    if extra == "store":
        kw["store"] = StoreConfig(capacity_gb=40 * WHOLE / 1e9, chunk_tokens=BT)
    elif extra == "disagg":
        kw["disaggregation"] = DisaggConfig(prefill_replicas=1)
    at_tp = cost_model("llama-3-8b", "h100-sxm", tp=tp)
    plain = run(sessions, memory, ClusterConfig(3, "kv-aware", **kw), at_tp, debug=True)
    groups = ({"replicas": 1, "tp": tp}, {"replicas": 2, "tp": tp})
    grouped = run(sessions, memory, ClusterConfig(3, "kv-aware", groups=groups, **kw), debug=True)
    assert_same_run(grouped, plain)
    name = COST.profile.name
    assert grouped.labels["groups"] == f"1x {name} tp={tp} + 2x {name} tp={tp}"


def test_a_group_at_its_own_tp_prices_one_of_its_gpus():
    (one, two) = replica_setups(
        [ReplicaGroup(1), ReplicaGroup(1, "a100-sxm", tp=2)], 2, COST, mem(10), "lru"
    )
    assert one.cost is COST
    a100_tp2 = cost_model("llama-3-8b", "a100-sxm", tp=2)
    assert two.cost.tp == 2 and two.cost.model == a100_tp2.model
    assert two.cost.kv_bytes_per_token * 2 == COST.kv_bytes_per_token
    assert fleet_label([ReplicaGroup(1), ReplicaGroup(2, tp=4)], "h100-sxm") == (
        "1x h100-sxm + 2x h100-sxm tp=4"
    )


# -- a transfer between pools at different tps ----------------------------------------------------
def watch_links(monkeypatch) -> list:
    """Each decode part's first admission, against a plain model: the link carries, per page, the
    whole page over the fewer GPUs of the two replicas (each GPU has its own link, so the busiest
    GPU's shard sets the time); the ledger's bytes are the whole model's. Returns each first
    admission's (pages, link bytes)."""
    seen: list = []
    original = DecodeRecovery.fetch_dropped

    def fetch_dropped(self, run, dropped_units, now, pf):
        first = run.sess.index in self.pending
        sender = self.sender_tp.get(run.sess.index, self.core.cost.tp)
        before = pf.remote_bytes
        out = original(self, run, dropped_units, now, pf)
        if first:
            pages = len(dropped_units)
            link = pf.remote_bytes - before
            assert link == pages * WHOLE // min(sender, self.core.cost.tp)
            assert self.transfers[run.sess.index, run.k][1] == pages * WHOLE
            seen.append((pages, link))
        return out

    monkeypatch.setattr(DecodeRecovery, "fetch_dropped", fetch_dropped)
    return seen


ONE = [Session("A", (Turn(64, 20, arrival_s=0.0),))]  # its 64 prompt tokens cross: 4 pages


@pytest.mark.parametrize(
    ("prefill_tp", "decode_tp", "link_pages"),
    # the link carries 4 pages over the fewer GPUs: at tp 1 whole pages, at 2 halves, at 4 quarters
    [(1, 1, 4), (2, 2, 2), (1, 2, 4), (2, 1, 4), (4, 2, 2), (2, 4, 2), (4, 4, 1)],
)
def test_a_transfer_takes_the_busiest_gpus_shard_by_hand(
    monkeypatch, prefill_tp, decode_tp, link_pages
):
    seen = watch_links(monkeypatch)
    groups = ({"replicas": 1, "tp": prefill_tp}, {"replicas": 1, "tp": decode_tp})
    cfg = ClusterConfig(2, "round-robin", disaggregation=DisaggConfig(1), groups=groups)
    res = run(ONE, mem(100), cfg)
    assert seen == [(4, link_pages * WHOLE)]
    t = res.turns.iloc[0]
    assert (t.transfer_tokens, t.transfer_bytes) == (64, 4 * WHOLE)
    # over a network link of 50 GB/s (20 us), the decode part's first iteration waits for its
    # last layer: its stall grows with the bytes the busiest GPU's link carries
    stall = t.transfer_stall_s
    assert stall > 0
    # (the same decode replica with the link's bytes of a tp-1 sender: the same stall)
    if prefill_tp > decode_tp:
        groups_same = ({"replicas": 1, "tp": decode_tp}, {"replicas": 1, "tp": decode_tp})
        cfg = ClusterConfig(2, "round-robin", disaggregation=DisaggConfig(1), groups=groups_same)
        same = run(ONE, mem(100), cfg).turns.iloc[0]
        assert same.transfer_stall_s == stall


def test_a_slower_sender_makes_the_stall_longer_by_hand():
    # A decode replica at tp 2 pulling 4 pages from a tp-1 prefill replica waits for whole pages
    # on the busiest link (the sender's one GPU); from a tp-2 one, half pages. Not layer by
    # layer, every layer waits for latency + bytes / 50 GB/s, so the stalls differ by 2 pages
    # over 50 GB/s (the first iteration's compute is the decode replica's in both).
    stalls = {}
    for prefill_tp in (1, 2):
        groups = ({"replicas": 1, "tp": prefill_tp}, {"replicas": 1, "tp": 2})
        disagg = DisaggConfig(1, layerwise=False)
        cfg = ClusterConfig(2, "round-robin", disaggregation=disagg, groups=groups)
        stalls[prefill_tp] = run(ONE, mem(100), cfg).turns.iloc[0].transfer_stall_s
    assert stalls[1] - stalls[2] == pytest.approx(2 * WHOLE / 50e9, rel=1e-9)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(traces(), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]))
def test_transfers_between_tps_as_the_plain_model_on_random_traces(
    monkeypatch, sessions, prefill_tp, decode_tp
):
    seen = watch_links(monkeypatch)
    groups = ({"replicas": 1, "tp": prefill_tp}, {"replicas": 2, "tp": decode_tp})
    cfg = ClusterConfig(3, "kv-aware", disaggregation=DisaggConfig(1), groups=groups)
    res = run(sessions, mem(30), cfg, debug=True)
    # the ledger's bytes: the first admissions' whole pages, and any readmission's pulls
    assert sum(p for p, _ in seen) * WHOLE <= res.turns.transfer_bytes.sum()
    strict = run(sessions, mem(30), cfg, decode_spans=False)
    pd.testing.assert_frame_equal(res.turns, strict.turns)


# -- refused -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "kw"),
    [
        ("cluster.store", {"store": StoreConfig(capacity_gb=1.0)}),
        ("cluster.disaggregation", {"disaggregation": DisaggConfig(1)}),
    ],
)
def test_a_tp_that_replicates_kv_heads_is_refused_where_kv_crosses(key, kw):
    # llama-3-8b has 8 KV heads: at tp 16 each GPU holds one, replicated on two GPUs, so a page
    # takes twice the whole model's bytes over the group's GPUs
    groups = ({"replicas": 1}, {"replicas": 1, "tp": 16})
    cfg = ClusterConfig(2, "round-robin", groups=groups, **kw)
    with pytest.raises(ValueError, match=rf"cluster.groups: tp \[1, 16\] with {key}: a page"):
        run(ONE, mem(100), cfg)


def test_a_tp_that_replicates_kv_heads_runs_in_a_colocated_fleet():
    groups = ({"replicas": 1}, {"replicas": 1, "tp": 16})
    res = run(ONE, mem(100), ClusterConfig(2, "round-robin", groups=groups))
    assert len(res.turns) == 1


@pytest.mark.parametrize(
    ("tp", "message"),
    [
        (0, r"cluster.groups\[0\].tp: must be an integer >= 1, got 0"),
        (1.5, r"cluster.groups\[0\].tp: must be an integer >= 1, got 1.5"),
        (True, r"cluster.groups\[0\].tp: must be an integer >= 1, got True"),
        (3, r"cluster.groups\[0\].tp: "),  # 8 KV heads and 32 query heads do not split over 3
    ],
)
def test_a_bad_group_tp_names_the_key(tp, message):
    with pytest.raises(ValueError, match=message):
        cfg = ClusterConfig(1, groups=[{"tp": tp}])
        run(ONE, mem(100), cfg)


# -- the experiment YAML -------------------------------------------------------------------------
YAML = """
name: g
trace: {kind: synthetic, sessions: 12, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: 1, cpu_kv_gb: 0}
policies: [lru]
cluster:
  router: [round-robin]
  groups:
    - {replicas: 1}
    - {replicas: 2, hardware: a100-sxm, gpu_kv_gb: 70, tp: 2}
"""


def test_a_group_tp_in_the_yaml_is_the_groups_and_its_memory_is_checked_at_it(tmp_path):
    from experiments.schema import ConfigError, load_experiment

    path = tmp_path / "g.yaml"
    path.write_text(YAML)
    (point,) = load_experiment(path).grid()
    assert point.cluster.groups == (ReplicaGroup(1), ReplicaGroup(2, "a100-sxm", 70.0, tp=2))
    assert point.labels()["groups"] == "1x h100-sxm + 2x a100-sxm gpu=70 tp=2"
    # 70 GiB of KV at tp 1 is more than an A100 holds beside the weights; at tp 2, 35 GiB each
    for tp, key, words in [
        (1, "cluster.groups[1]", "more than the 80.0 GB of HBM of one a100-sxm"),
        (3, "cluster.groups[1].tp", "3"),
    ]:
        path.write_text(YAML.replace("tp: 2", f"tp: {tp}"))
        with pytest.raises(ConfigError) as info:
            load_experiment(path)
        first = str(info.value).splitlines()[0]
        assert first.startswith(f"{path}: {key}: ") and words in first, str(info.value)


@pytest.mark.parametrize(
    ("crossing", "key"),
    [
        ("  store: {capacity_gb: [0, 4]}\n", "cluster.store"),
        ("  disaggregation: {prefill_replicas: [0, 1]}\n", "cluster.disaggregation"),
    ],
)
def test_a_tp_that_replicates_kv_heads_where_kv_crosses_is_refused_in_the_yaml(
    tmp_path, crossing, key
):
    """The refusal the run makes (above), at the fleet's key before any run; a fleet whose KV
    stays on its replicas (a store of 0 GB, no prefill pool) runs."""
    from experiments.schema import ConfigError, load_experiment

    fleet = YAML.replace("gpu_kv_gb: 70, tp: 2", "gpu_kv_gb: 1, tp: 16")
    path = tmp_path / "g.yaml"
    path.write_text(fleet + crossing)
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{path}: cluster.groups: tp [1, 16] with {key}: a token of "), first
    # no crossing at any point: accepted (tp 16 replicates llama-3-8b's 8 KV heads, colocated)
    path.write_text(fleet + crossing.replace("[0, 4]", "[0]").replace("[0, 1]", "[0]"))
    assert len(load_experiment(path).grid()) == 1
    # tps that split the KV heads cross: accepted
    path.write_text(fleet.replace("tp: 16", "tp: 8") + crossing)
    assert len(load_experiment(path).grid()) == 2
