"""Small stand-ins for traces.load_trace, costmodels.cost_model and sim.simulate, so the experiment
plumbing is tested without the real simulator (end-to-end tests use the real ones)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.config import GIB, EngineConfig, MemoryConfig
from sim.results import TURN_COLUMNS, EngineStats, SimResult
from sim.samples import Samples
from traces.records import Session, Turn

# A small valid experiment, for the schema's tests to vary one key at a time.
BASE = """
name: t
trace: {kind: synthetic, sessions: 5, seed: 1}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [1, 2], cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
policies: [lru, fifo]
seeds: [1]
"""


def error_of(path) -> str:
    """The message of the ConfigError loading ``path`` raises (the test fails if none)."""
    import pytest

    from experiments.schema import ConfigError, load_experiment

    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    return str(info.value)


TINY = """
name: tiny
trace: {kind: synthetic, sessions: 6, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [0.5, 1, 2], cpu_kv_gb: [0, 4], block_tokens: 16, evict_unit: block}
policies: [lru, fifo]
seeds: [1]
"""

CALLS = {"load_trace": 0, "simulate": 0}


def make_stats(**values) -> EngineStats:
    """EngineStats from ``values``; any other field without a default is 0 (fakes only)."""
    import dataclasses

    for f in dataclasses.fields(EngineStats):
        if (
            f.name not in values
            and dataclasses.MISSING is f.default
            and dataclasses.MISSING is f.default_factory
        ):
            values[f.name] = 0
    return EngineStats(**values)


@dataclass
class FakeTraceLoad:
    sessions: list


def fake_load_trace(spec: dict) -> FakeTraceLoad:
    CALLS["load_trace"] += 1
    n, rng = int(spec.get("sessions", 4)), np.random.default_rng(spec.get("seed", 0))
    sessions = []
    for i in range(n):
        turns = [
            Turn(
                prompt_tokens=int(rng.integers(10, 100)),
                output_tokens=int(rng.integers(5, 50)),
                arrival_s=float(i) if k == 0 else None,
                think_s=None if k == 0 else 1.0,
            )
            for k in range(1 + i % 3)
        ]
        sessions.append(Session(session_id=f"s{i}", turns=tuple(turns)))
    return FakeTraceLoad(sessions)


def fake_cost_model(model: str, hardware: str, tp: int = 1) -> str:
    return f"cost({model},{hardware})" if tp == 1 else f"cost({model},{hardware},tp{tp})"


def fake_simulate(
    sessions,
    cost,
    memory: MemoryConfig,
    engine: EngineConfig | None = None,
    policy: str = "lru",
    seed: int = 0,
    debug: bool = False,
    progress=None,
    budget=None,
    sparse=None,
) -> SimResult:
    """A deterministic ledger: less GPU memory -> more re-prefill; fifo worse than lru."""
    CALLS["simulate"] += 1
    if policy == "boom":
        raise RuntimeError("the fake simulator exploded")
    share = 1.0 / (1.0 + memory.gpu_kv_gb) * (1.5 if policy == "fifo" else 1.0)
    share = 0.0 if memory.gpu_kv_gb == float("inf") else min(1.0, share)
    cpu_share = 0.5 if memory.cpu_kv_gb > 0 else 0.0
    rows, out_tokens, end = [], 0, 0.0
    for s in sessions:
        hist, t = 0, s.start_s
        for k, turn in enumerate(s.turns):
            d = int(hist * share)
            c = int((hist - d) * cpu_share)
            ideal = 0.01 + 1e-5 * (turn.prompt_tokens + hist)
            ttft = ideal + 1e-4 * d * (1 + seed % 3)
            e2e = ttft + 0.02 * turn.output_tokens
            rows.append(
                dict(
                    session_id=s.session_id,
                    turn=k,
                    priority=0,
                    arrival_s=t,
                    admit_s=t,
                    first_token_s=t + ttft,
                    finish_s=t + e2e,
                    prompt_tokens=turn.prompt_tokens,
                    output_tokens=turn.output_tokens,
                    history_tokens=hist,
                    gpu_hit_tokens=hist - d - c,
                    cpu_hit_tokens=c,
                    recomputed_tokens=d,
                    pruned_tokens=0,
                    swap_in_bytes=c * 1024,
                    preemptions=0,
                    preempt_recompute_tokens=0,
                    ttft_s=ttft,
                    ttft_ideal_s=ideal,
                    tbt_mean_s=0.02,
                    e2e_s=e2e,
                    queue_s=0.0,
                )
            )
            out_tokens += turn.output_tokens
            hist += turn.prompt_tokens + turn.output_tokens
            t += e2e + (turn.think_s or 1.0)
            end = max(end, t)
            if progress is not None:
                progress(1)
    stats = make_stats(
        sim_time_s=end,
        gpu_peak_bytes=3 * GIB,
        steps=len(rows),
        output_tokens=out_tokens,
        gpu_capacity_bytes=int(min(memory.gpu_kv_gb, 1e6) * GIB),
        cpu_capacity_bytes=int(memory.cpu_kv_gb * GIB),
        gpu_util=0.95 - share / 10,
        swap_in_bytes=sum(r["swap_in_bytes"] for r in rows),
        swap_out_bytes=0,
        dropped_bytes=0,
        preemptions=0,
        preempt_recompute_tokens=0,
        evict_ns=Samples.of([5_000, 7_000, 9_000]),
        tbt=Samples.of([0.02, 0.03], [4, 1]),
        wall_s=0.01,
    )
    return SimResult(turns=pd.DataFrame(rows, columns=list(TURN_COLUMNS)), stats=stats)


def fake_simulate_to_file(path, sessions, cost, memory, engine=None, **options):
    """``fake_simulate``'s run with its ledger written to ``path`` as ``sim.simulate_to_file``
    writes one (the columns it leaves out hold 0)."""
    from sim.ledger_spool import LedgerSpool, SpooledResult
    from sim.results import TURN_DTYPES, run_labels

    result = fake_simulate(sessions, cost, memory, engine, **options)
    turns = result.turns.fillna({c: 0 for c, t in TURN_DTYPES.items() if t == "int64"})
    spool = LedgerSpool(path)
    for row in turns.astype(TURN_DTYPES).itertuples(index=False):
        spool.append(*row)
    labels = run_labels(options.get("policy", "lru"), memory, options.get("seed", 0))
    return SpooledResult(spool.close(), result.stats, labels)
