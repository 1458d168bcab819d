"""``simulate_vllm``: one trace through kvsim's vLLM v1 engine -> a SimResult, like ``simulate``.

The GPU KV of ``memory.gpu_kv_gb`` is cut into vLLM's blocks of ``memory.block_tokens`` tokens
(block 0 is vLLM's null block); each step is priced by the cost model from its exact batch. The
ledger keeps its meaning (docs/semantics.md, section 11): a turn's history hit is the prefix-cache
hit at its first admission (vLLM's full blocks, at most all tokens but the last), and what of its
history it did not hit is its re-prefill.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from costmodels import BatchShape, CostModel
from sim.config import GIB, EngineConfig, MemoryConfig
from sim.policies import PolicyContext, policy_class
from sim.results import EngineStats, Ledger, SimResult, ledger_frame, run_labels
from sim.samples import Samples
from sim.units import Tier
from sim.vllm_v1.block_pool import BlockView, PolicyBlockPool
from sim.vllm_v1.loop import KvsimSide, StepPrices, TurnState, replay
from sim.vllm_v1.offload import OffloadConfig, OffloadConnector
from sim.vllm_v1.scheduler import VllmConfig, VllmScheduler
from traces.records import Session

# Policies that cannot order vLLM's free cached blocks, and why.
UNSUPPORTED = {
    "offline": "needs the future (next-access times), which vLLM's prefix cache cannot know",
    "needs_predictor": "predicts a session's lifetime; a cached block belongs to no one session",
    "reads_session": "reads a unit's session, and a cached block belongs to no one session",
}


def check_policy(name: str) -> None:
    """ValueError if policy ``name`` cannot run inside vLLM's prefix cache."""
    cls = policy_class(name)
    for attr, why in UNSUPPORTED.items():
        if getattr(cls, attr, False):
            raise ValueError(f"policy {name!r} cannot run with engine.kind vllm-v1: it {why}")


def vllm_config(cost: CostModel, memory: MemoryConfig, engine: EngineConfig) -> VllmConfig:
    """vLLM's scheduler config for this memory and engine: the GPU KV in whole blocks."""
    page_bytes = memory.block_tokens * cost.kv_bytes_per_token
    if math.isinf(memory.gpu_kv_gb):
        raise ValueError(
            "engine.kind vllm-v1 needs a finite memory.gpu_kv_gb (vLLM's blocks are counted)"
        )
    # the cost model prices one GPU of a tensor-parallel group: its blocks hold its KV shard, in
    # its 1/tp of the group's pool (as kvsim's engine counts its pages)
    return VllmConfig(
        num_blocks=int(memory.gpu_kv_gb / cost.tp * GIB // page_bytes),
        block_size=memory.block_tokens,
        max_num_seqs=engine.max_running,
        max_num_batched_tokens=engine.max_batch_tokens,
        long_prefill_token_threshold=engine.long_prefill_token_threshold,
        scheduler_reserve_full_isl=engine.scheduler_reserve_full_isl,
        enable_prefix_caching=engine.enable_prefix_caching,
        async_scheduling=engine.async_scheduling,
    )


def offload_config(
    cost: CostModel, memory: MemoryConfig, engine: EngineConfig
) -> OffloadConfig | None:
    """vLLM's CPU offloading for ``memory.cpu_kv_gb`` (None: no CPU tier): as many chunks as fit,
    each rounded up to whole 4 KiB pages as vLLM's CPU spec allocates them."""
    if memory.cpu_kv_gb <= 0:
        return None
    if math.isinf(memory.cpu_kv_gb):
        raise ValueError("engine.kind vllm-v1 needs a finite memory.cpu_kv_gb (chunks are counted)")
    per_chunk = memory.block_tokens * cost.kv_bytes_per_token * engine.offload_blocks_per_chunk
    per_chunk = -(-per_chunk // 4096) * 4096
    chunks = int(memory.cpu_kv_gb / cost.tp * GIB // per_chunk)
    if chunks < 1:
        raise ValueError(f"memory.cpu_kv_gb {memory.cpu_kv_gb} holds no chunk of {per_chunk} bytes")
    return OffloadConfig(chunks, engine.offload_blocks_per_chunk, engine.offload_eviction_policy)


def transfer_prices(cost: CostModel, block_size: int) -> Callable[[str, int], float]:
    """A CPU offloading job's copy time: ``blocks`` GPU blocks, one copy each (a load host to
    device, a store device to host)."""
    block_bytes = block_size * cost.kv_bytes_per_token

    def transfer_s(kind: str, blocks: int) -> float:
        return cost.copy_s("h2d" if kind == "load" else "d2h", blocks * block_bytes, blocks)

    return transfer_s


def make_scheduler(
    cfg: VllmConfig,
    policy: str,
    cost: CostModel | None = None,
    offload: OffloadConfig | None = None,
) -> VllmScheduler:
    """vLLM's scheduler; for any policy but ``lru`` its free cached blocks are ordered by it;
    ``offload``: with vLLM's CPU offloading connector."""
    conn = (
        OffloadConnector(offload, cfg.block_size, cfg.enable_prefix_caching)
        if offload is not None
        else None
    )
    if policy == "lru":
        return VllmScheduler(cfg, offload=conn)  # vLLM's own free queue
    check_policy(policy)
    view = BlockView(cfg.block_size)
    ctx = PolicyContext(
        tier=Tier.GPU,
        block_tokens=cfg.block_size,
        num_layers=cost.model.num_layers if cost is not None else 1,
        view=view,
        cost=cost,
    )
    pol = policy_class(policy)(ctx)
    pol.set_capacity(cfg.num_blocks - 1)
    return VllmScheduler(cfg, PolicyBlockPool(cfg.num_blocks, pol, view), conn)


def simulate_vllm(
    sessions: Sequence[Session],
    cost: CostModel,
    memory: MemoryConfig,
    engine: EngineConfig | None = None,
    policy: str = "lru",
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    on_step: Callable[[dict], None] | None = None,
) -> SimResult:
    """Replay ``sessions`` through kvsim's vLLM v1 engine; ``on_step`` hears each step-log entry.
    The engine is deterministic: ``seed`` only labels the run."""
    engine = engine or EngineConfig(kind="vllm-v1")
    wall0 = time.perf_counter()
    sessions = list(sessions)
    cfg = vllm_config(cost, memory, engine)
    offload = offload_config(cost, memory, engine)
    sched = make_scheduler(cfg, policy, cost, offload)
    side = KvsimSide(sched)
    page_bytes = cfg.block_size * cost.kv_bytes_per_token
    ledger = Ledger()
    price = _BookedPrices(cost, sched)

    def on_turn(st: TurnState) -> None:
        s = sessions[st.session]
        turn = s.turns[st.k]
        ledger.append(*_ledger_row(s, st, turn, cfg.block_size, cost))
        price.tbt.compact()
        sched.pool.evict_samples.compact()
        if progress is not None:
            progress(1)

    run = replay(
        sessions if memory.prefix_sharing else without_prefixes(sessions),
        side,
        price,
        cfg.block_size,
        cfg.model_len,
        engine.replay,
        on_step=on_step,
        on_turn=on_turn,
        async_scheduling=cfg.async_scheduling,
        transfer_s=transfer_prices(cost, cfg.block_size),
    )
    start = min((s.start_s for s in sessions), default=0.0)
    sim_time = max(0.0, run.end_s - start)
    pool = sched.pool
    usable = cfg.num_blocks - 1
    stats = EngineStats(
        sim_time_s=sim_time,
        steps=run.num_steps,
        output_tokens=int(sum(ledger.columns["output_tokens"])),
        gpu_capacity_bytes=cfg.num_blocks * page_bytes,
        cpu_capacity_bytes=(
            offload.cpu_chunks * offload.blocks_per_chunk * page_bytes if offload else 0
        ),
        gpu_util=price.block_s / (usable * sim_time) if sim_time > 0 else math.nan,
        gpu_peak_bytes=price.peak_held * page_bytes,
        peak_demand_bytes=run.peak_demand_blocks * page_bytes,
        swap_in_bytes=run.loaded_blocks * page_bytes,
        swap_out_bytes=run.stored_blocks * page_bytes,
        dropped_bytes=pool.evictions * page_bytes,
        preemptions=int(sum(ledger.columns["preemptions"])),
        preempt_recompute_tokens=int(sum(ledger.columns["preempt_recompute_tokens"])),
        evict_ns=pool.evict_samples,
        tbt=price.tbt,
        rejected_turns=run.rejected_turns,
        policy_metrics=(pool.policy.metrics(),) if isinstance(pool, PolicyBlockPool) else (),
        wall_s=time.perf_counter() - wall0,
    )
    return SimResult(
        turns=ledger_frame(ledger, sort=True, release=True),
        stats=stats,
        labels=run_labels(policy, memory, seed),
    )


class _BookedPrices(StepPrices):
    """Step prices that also book each step: its duration (decode steps), and the blocks holding
    KV (held, or free with a key) over time."""

    def __init__(self, cost: CostModel, sched: VllmScheduler) -> None:
        super().__init__(cost)
        self.pool = sched.pool
        self.usable = sched.cfg.num_blocks - 1
        self.block_s = 0.0  # block-seconds holding KV
        self.peak_held = 0
        self.tbt = Samples(weighted=True)  # decode steps: compacted by compact()
        assert self.tbt.weights is not None
        self.step_s, self.step_decode = self.tbt.values, self.tbt.weights

    def __call__(self, shape: BatchShape) -> float:
        dur = self.cost.iteration(shape).total_s
        pool = self.pool
        held = self.usable - pool.num_free + pool.num_free_cached
        self.block_s += held * dur
        self.peak_held = max(self.peak_held, held)
        if shape.decode_seqs:
            self.step_s.append(dur)
            self.step_decode.append(shape.decode_seqs)
        return dur

    def book_decodes(self, durations: list[float], seqs: int, held: list[int]) -> None:
        block_s = self.block_s
        for h, d in zip(held, durations, strict=True):  # in step order: as step by step
            block_s += h * d
        self.block_s = block_s
        self.peak_held = max(self.peak_held, max(held))
        self.step_s.extend(durations)
        self.step_decode.extend([seqs] * len(durations))


def _ledger_row(s: Session, st: TurnState, turn, bs: int, cost: CostModel) -> tuple:
    """A TurnRecord's values. The first admission's computed tokens are a prefix: the GPU's hit,
    then what was loaded from the CPU. Their part inside the history is its GPU and CPU hit; the
    part beyond it, the prompt's shared prefix; the rest of the history is recomputed."""
    history = st.prompt_len - turn.prompt_tokens
    cpu = min(st.loaded, st.hit)
    gpu_end = st.hit - cpu  # the GPU's hit ends here, the loaded tokens follow
    g = min(gpu_end, history)
    c = min(st.hit, history) - g
    layers = cost.model.num_layers
    hist_blocks = -(-history // bs)
    gpu_blocks = min(gpu_end // bs, hist_blocks)
    cpu_blocks = min(st.hit // bs, hist_blocks) - gpu_blocks
    ttft = st.first_token_s - st.arrival_s
    out = turn.output_tokens
    return (
        s.session_id,
        st.k,
        turn.priority,
        st.arrival_s,
        st.admit_s,
        st.first_token_s,
        st.finish_s,
        turn.prompt_tokens,
        out,
        history,
        g,
        c,
        history - g - c,
        0,  # pruned: full KV
        max(0, gpu_end - history),
        max(0, st.hit - max(gpu_end, history)),
        gpu_blocks * layers,
        cpu_blocks * layers,
        (hist_blocks - gpu_blocks - cpu_blocks) * layers,
        st.loaded * cost.kv_bytes_per_token,
        0.0,  # the load is waited for before the turn is scheduled: no stall inside a step
        0,
        st.preemptions,
        st.preempt_recompute,
        ttft,
        cost.iteration(BatchShape.prefill(max(turn.prompt_tokens, 1), history)).total_s,
        (st.finish_s - st.first_token_s) / (out - 1) if out > 1 else math.nan,
        st.finish_s - st.arrival_s,
        st.admit_s - st.arrival_s,
    )


def without_prefixes(sessions: Sequence[Session]) -> list[Session]:
    """The sessions without their shared-prefix hashes (memory.prefix_sharing off)."""
    return [
        replace(s, turns=tuple(replace(t, prefix_hashes=()) for t in s.turns)) for s in sessions
    ]
