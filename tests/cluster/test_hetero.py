"""Groups of replicas with their own hardware, KV and policy (``sim.cluster.groups``): a fleet of
groups that all equal the run's values is the run without groups, bit for bit; each replica's
set-up against a plain expansion of the groups; a prefill on a faster GPU, worked by hand; the
routers read each replica's own GPU KV; bad input names its key."""

from __future__ import annotations

import math
from typing import ClassVar

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodels import CostModel, cost_model, get_model, load_profile
from sim import EngineConfig, MemoryConfig
from sim.cluster import Arrival, ClusterConfig, make_router, simulate_cluster
from sim.cluster.disagg import DisaggConfig
from sim.cluster.groups import ReplicaGroup, fleet_label, replica_setups
from sim.cluster.routers import RoundRobin
from sim.cluster.store import StoreConfig
from sim.config import GIB
from tests.sim.trace_strategies import traces
from traces import load_trace
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")
BT = 16
PAGE = BT * COST.kv_bytes_per_token


def mem(gpu_pages: float, cpu_pages: float = 0) -> MemoryConfig:
    return MemoryConfig(gpu_kv_gb=gpu_pages * PAGE / GIB, cpu_kv_gb=cpu_pages * PAGE / GIB)


def run(sessions, memory, cfg: ClusterConfig, policy="lru", cost=COST, **kw):
    return simulate_cluster(sessions, cost, memory, EngineConfig(), policy, 0, cfg, **kw)


STATS = ("sim_time_s", "steps", "output_tokens", "gpu_capacity_bytes", "cpu_capacity_bytes",
         "gpu_util", "gpu_peak_bytes", "peak_demand_bytes", "swap_in_bytes", "swap_out_bytes",
         "dropped_bytes", "preemptions", "rejected_turns")  # fmt: skip


def assert_same_run(a, b) -> None:
    """The same ledger, and every replica's statistics equal (the run's wall time aside)."""
    pd.testing.assert_frame_equal(a.turns, b.turns)
    assert len(a.replicas) == len(b.replicas)
    for ra, rb in zip(a.replicas, b.replicas, strict=True):
        pd.testing.assert_frame_equal(ra.turns, rb.turns)
        for name in STATS:
            x, y = getattr(ra.stats, name), getattr(rb.stats, name)
            assert x == y or (math.isnan(x) and math.isnan(y)), name
    assert a.active == b.active and a.store == b.store


# -- groups equal to the run's values are no groups ----------------------------------------------
def same_as_the_run(memory: MemoryConfig, policy: str, counts, explicit) -> tuple:
    """A fleet of ``counts`` replicas per group, each group writing out the run's own values
    where ``explicit`` says (the hardware by its name), the rest left to default."""
    values = {
        "hardware": "h100-sxm",
        "gpu_kv_gb": memory.gpu_kv_gb,
        "cpu_kv_gb": memory.cpu_kv_gb,
        "policy": policy,
    }
    return tuple(
        ReplicaGroup(n, **{k: v for k, v in values.items() if k in keys})
        for n, keys in zip(counts, explicit, strict=True)
    )


KEYS = st.sets(st.sampled_from(["hardware", "gpu_kv_gb", "cpu_kv_gb", "policy"]))


@st.composite
def fleets_of_the_run(draw):
    """2 to 4 replicas in 1 to 3 groups, with a router and one of: colocated, a store, a
    prefill pool."""
    replicas = draw(st.integers(2, 4))
    cuts = sorted(draw(st.sets(st.integers(1, replicas - 1), max_size=2)))
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, replicas])]
    explicit = [draw(KEYS) for _ in counts]
    router = draw(st.sampled_from(["round-robin", "least-loaded", "session-affinity", "kv-aware"]))
    extra = draw(st.sampled_from(["none", "store", "disagg"]))
    return replicas, counts, explicit, router, extra


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), fleets_of_the_run(), st.sampled_from(["lru", "arc"]))
def test_groups_of_the_runs_values_are_the_run_without_groups(sessions, fleet, policy):
    replicas, counts, explicit, router, extra = fleet
    memory = mem(40, 30)
    groups = same_as_the_run(memory, policy, counts, explicit)
    kw: dict = {}
    if extra == "store":
        kw["store"] = StoreConfig(capacity_gb=40 * PAGE / 1e9, chunk_tokens=BT)
    elif extra == "disagg":
        kw["disaggregation"] = DisaggConfig(prefill_replicas=1)
    plain = run(sessions, memory, ClusterConfig(replicas, router, **kw), policy, debug=True)
    grouped = run(
        sessions, memory, ClusterConfig(replicas, router, groups=groups, **kw), policy, debug=True
    )
    assert_same_run(grouped, plain)
    assert grouped.labels == plain.labels | {"groups": fleet_label(groups, COST.profile.name)}


def test_groups_of_the_runs_values_are_the_run_without_groups_on_a_longer_trace():
    sessions = load_trace({"kind": "synthetic", "sessions": 60, "seed": 3}).sessions
    memory = mem(600, 500)
    groups = ({"replicas": 2, "hardware": "h100", "policy": "lru"}, {"gpu_kv_gb": memory.gpu_kv_gb})
    for router in ("session-affinity", "kv-aware"):
        plain = run(sessions, memory, ClusterConfig(3, router))
        assert_same_run(run(sessions, memory, ClusterConfig(3, router, groups=groups)), plain)


# -- each replica's set-up -----------------------------------------------------------------------
GROUP = st.builds(
    ReplicaGroup,
    replicas=st.integers(1, 3),
    hardware=st.sampled_from([None, "a100-sxm", "h200"]),
    gpu_kv_gb=st.sampled_from([None, 0.5, 3.0]),
    cpu_kv_gb=st.sampled_from([None, 0.0, 2.0]),
    policy=st.sampled_from([None, "arc", "s3fifo"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(GROUP, min_size=1, max_size=4))
def test_each_replica_runs_its_groups_keys_and_the_runs_for_the_rest(groups):
    memory = MemoryConfig(gpu_kv_gb=1.0, cpu_kv_gb=4.0, block_tokens=32, evict_unit="session")
    setups = replica_setups(groups, sum(g.replicas for g in groups), COST, memory, "lru")
    # the plain model: replica r belongs to the group whose cumulative count first exceeds r
    owner = [g for g in groups for _ in range(g.replicas)]
    assert len(setups) == len(owner)
    for s, g in zip(setups, owner, strict=True):
        assert s.policy == (g.policy or "lru")
        assert s.memory.gpu_kv_gb == (memory.gpu_kv_gb if g.gpu_kv_gb is None else g.gpu_kv_gb)
        assert s.memory.cpu_kv_gb == (memory.cpu_kv_gb if g.cpu_kv_gb is None else g.cpu_kv_gb)
        assert (s.memory.block_tokens, s.memory.evict_unit) == (32, "session")
        assert s.hardware == g.hardware
        if g.hardware is None:
            assert s.cost is COST
        else:
            assert s.cost.profile == load_profile(g.hardware)
            assert s.cost.kv_bytes_per_token == COST.kv_bytes_per_token  # pages alike


def test_a_group_on_other_hardware_keeps_the_tensor_parallel_shard():
    tp2 = cost_model("llama-3-8b", "h100-sxm", tp=2)
    (setup,) = replica_setups([ReplicaGroup(1, "a100-sxm")], 1, tp2, mem(10), "lru")
    assert setup.cost.tp == 2 and setup.cost.model == tp2.model
    assert setup.cost.profile == load_profile("a100-sxm")


# -- a prefill on a faster GPU, by hand ----------------------------------------------------------
TINY = """\
name: tiny-3
num_layers: 3
hidden_size: 4096
num_heads: 32
num_kv_heads: 8
head_dim: 128
intermediate_size: 14336
vocab_size: 128256
dtype_bytes: 2
gated_mlp: true
source: a test
"""


def hand_profile(flops: float) -> str:
    return f"""\
name: hand-{flops:g}
linear: {{tau_s: 10.0e-6, weight_bw_Bps: 2.0e12, flops: {flops}, elementwise_bw_Bps: 1.0e12}}
prefill_attn: {{tau_s: 20.0e-6, flops: 2.0e14, per_seq_s: 0.0}}
decode_attn: {{tau_s: 5.0e-6, per_seq_s: 1.0e-6, kv_bw_Bps: 1.0e12}}
h2d: {{latency_s: 10.0e-6, bw_Bps: 25.0e9}}
d2h: {{latency_s: 10.0e-6, bw_Bps: 25.0e9}}
overlap: {{compute_slowdown: 0.0, layerwise_h2d: true}}
step_overhead_s: 0.5e-3
meta: {{gpu: hand, backend: hand, dtype: bf16, source: "hand-written for a test"}}
"""


def test_a_prefill_on_the_faster_group_takes_that_profiles_time_by_hand(tmp_path):
    """Two conversations of one turn (1000 prompt tokens, one output token) arrive together;
    round robin sends one to each replica, so each turn is one prefill iteration on an idle
    replica and its TTFT is that iteration. Replica 1's GPU has twice replica 0's GEMM FLOPs.

    The 3-layer model (Llama-3-8B's layers): P = 218,103,808 linear parameters a layer, 196,608
    elementwise bytes a token-layer, an LM head of 525,336,576 parameters. One layer at 1000
    tokens: the GEMMs, tau + max(weight read 2P / 2e12, compute 1000 * 2P / flops); elementwise
    1000 * 196,608 / 1e12; prefill attention tau + 1000 * 500 pairs * 4 * 32 * 128 / 2e14 (more
    than its KV read). Then the LM head's weight read (one row) and the step overhead."""
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "slow.yaml").write_text(hand_profile(5.0e14))
    (tmp_path / "fast.yaml").write_text(hand_profile(1.0e15))
    P, L = 218_103_808, 3

    def by_hand(flops: float) -> float:
        gemms = 10e-6 + max(2 * P / 2e12, 1000 * 2 * P / flops)  # 872.4 us or 436.2 us of compute
        elementwise = 1000 * 196_608 / 1e12  # 196.6 us
        attention = 20e-6 + 1000 * 500 * 4 * 32 * 128 / 2e14  # 61.0 us
        head = 525_336_576 * 2 / 2e12  # 525.3 us
        return L * (gemms + elementwise + attention) + head + 0.5e-3

    assert by_hand(5.0e14) == pytest.approx(4.4452e-3, abs=1e-7)
    assert by_hand(1.0e15) == pytest.approx(3.1366e-3, abs=1e-7)
    slow = CostModel(
        get_model(str(tmp_path / "tiny.yaml")), load_profile(str(tmp_path / "slow.yaml"))
    )
    sessions = [Session(f"s{i}", (Turn(1000, 1, arrival_s=0.0),)) for i in range(2)]
    groups = ({"replicas": 1}, {"replicas": 1, "hardware": str(tmp_path / "fast.yaml")})
    memory = MemoryConfig(gpu_kv_gb=1.0)
    res = run(sessions, memory, ClusterConfig(2, "round-robin", groups=groups), cost=slow)
    t = res.turns.set_index("session_id")
    assert list(t.replica) == [0, 1]
    assert t.ttft_s["s0"] == pytest.approx(by_hand(5.0e14), rel=1e-12)
    assert t.ttft_s["s1"] == pytest.approx(by_hand(1.0e15), rel=1e-12)
    # without groups both run on the slow profile
    alike = run(sessions, memory, ClusterConfig(2, "round-robin"), cost=slow).turns
    assert list(alike.ttft_s) == pytest.approx([by_hand(5.0e14)] * 2, rel=1e-12)


# -- routers read each replica's own GPU KV -------------------------------------------------------
class SizedView:
    """A router's view of two replicas of different GPU KV, with hand-set loads."""

    replica_count = 2

    def __init__(self, capacity: list[float], load: dict[int, int]) -> None:
        self.capacity, self.load = capacity, load

    @property
    def kv_capacity_tokens(self) -> float:
        return self.capacity[0]

    def replica_kv_capacity_tokens(self, r: int) -> float:
        return self.capacity[r]

    def inflight_turns(self, r: int) -> int:
        return 1 if self.load.get(r) else 0

    def inflight_tokens(self, r: int) -> int:
        return self.load.get(r, 0)

    def cached_tokens(self, r: int, arrival: Arrival) -> tuple[int, int]:
        return 0, 0


def test_session_affinity_overloads_a_home_at_its_own_gpu_kv():
    router = make_router("session-affinity", 2)
    sizes = [1000, 4000]
    assert router.route(Arrival(0, 0, 0, 100, 0.0), SizedView(sizes, {})) == 0  # home 0
    assert router.route(Arrival(1, 0, 0, 100, 0.0), SizedView(sizes, {0: 1})) == 1  # home 1
    later = Arrival(1, 1, 300, 100, 5.0)  # 400 tokens
    # home 1 holds 4000 tokens: 3500 + 400 stays (replica 0 is idle, but home is not overloaded)
    assert router.route(later, SizedView(sizes, {1: 3500})) == 1
    assert router.route(later, SizedView(sizes, {1: 3601})) == 0  # 4001 > 4000: moves
    # home 0 holds 1000: 601 + 400 is over it
    first = Arrival(0, 1, 300, 100, 5.0)
    assert router.route(first, SizedView(sizes, {0: 601, 1: 50})) == 1


class CapacitySpy(RoundRobin):
    """Round robin, noting the GPU KV its view gives each replica at every turn."""

    seen: ClassVar[list[list[float]]] = []

    def route(self, arrival: Arrival, view) -> int:
        self.seen.append([view.replica_kv_capacity_tokens(r) for r in range(view.replica_count)])
        return super().route(arrival, view)


def test_the_pool_view_gives_each_replicas_own_gpu_kv():
    sessions = load_trace({"kind": "synthetic", "sessions": 6, "seed": 2}).sessions
    CapacitySpy.seen.clear()
    groups = ({"replicas": 2}, {"gpu_kv_gb": 300 * PAGE / GIB})
    run(sessions, mem(200), ClusterConfig(3, f"{__name__}:CapacitySpy", groups=groups))
    assert CapacitySpy.seen
    assert all(s == [200 * BT, 200 * BT, 300 * BT] for s in CapacitySpy.seen)


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("groups", "replicas", "message"),
    [
        ([{"replicas": 1}, {"replicas": 2}], 2, r"cluster.groups: the groups' replicas sum to 3, "),
        ([{"replicas": 1, "hardware": "z80"}], 1, r"cluster.groups\[0\].hardware: unknown profile"),
        ([{"replicas": 1, "gpu": 3}], 1, r"cluster.groups\[0\].gpu: not a group key"),
        ([{"replicas": 0}], 1, r"cluster.groups\[0\].replicas: must be an integer >= 1"),
        ([{}, {"gpu_kv_gb": 0}], 2, r"cluster.groups\[1\].gpu_kv_gb: must be a number > 0"),
        ([{"cpu_kv_gb": -1}], 1, r"cluster.groups\[0\].cpu_kv_gb: must be a number >= 0"),
        ([{"policy": "lrux"}], 1, r"cluster.groups\[0\].policy: unknown policy 'lrux'"),
        ([{"policy": "belady"}], 1, r"cluster.groups\[0\].policy: 'belady' reads each session"),
        (["h100"], 1, r"cluster.groups\[0\]: must be a mapping"),
    ],
)
def test_bad_groups_name_the_key(groups, replicas, message):
    with pytest.raises(ValueError, match=message):
        ClusterConfig(replicas, groups=groups)


def test_a_file_model_at_tp_above_one_is_not_priced_on_other_hardware(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    tp2 = CostModel(get_model(str(tmp_path / "tiny.yaml")), load_profile("h100"), 2)
    with pytest.raises(ValueError, match=r"cluster.groups\[0\].hardware: .* not a registered"):
        replica_setups([ReplicaGroup(1, "a100-sxm")], 1, tp2, mem(10), "lru")
