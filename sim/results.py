"""Typed results of one simulation: the per-turn ledger and engine-wide statistics.

The ledger is the single source of every metric (see docs/semantics.md); ``sim.metrics`` turns it
into the summary row. Token counts g/c/d split each turn's history H = g + c + d exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One completed turn: a row of the ledger. Times are simulated seconds."""

    session_id: str
    turn: int                    # 0-based index within the session
    priority: int                # QoS class (0 = default)
    arrival_s: float             # when the turn entered the queue
    admit_s: float               # start of the iteration that first ran its prefill
    first_token_s: float         # end of that iteration (first output token)
    finish_s: float              # end of the iteration that produced its last token
    prompt_tokens: int           # p_k
    output_tokens: int           # o_k
    history_tokens: int          # H_k = g + c + d + pruned
    gpu_hit_tokens: int          # g_k: history tokens already on the GPU
    cpu_hit_tokens: int          # c_k: history tokens swapped in from the CPU tier
    recomputed_tokens: int       # d_k: history tokens recomputed in the prefill (re-prefill)
    pruned_tokens: int           # history tokens a token budget pruned for good (0: full KV)
    shared_hit_tokens: int       # prompt tokens whose KV another turn left on the GPU (shared prefix)
    shared_cpu_tokens: int       # ... left on the CPU (swapped in)
    gpu_layer_units: int         # the history's (page, layer) pairs on the GPU at admission
    cpu_layer_units: int         # ... on the CPU
    dropped_layer_units: int     # ... DROPPED
    swap_in_bytes: int           # host-to-device bytes to admit this turn (whole pages)
    copy_stall_s: float          # swap-in copy time its admission iteration could not hide
    prefetched_bytes: int        # of swap_in_bytes, copied ahead of admission (engine.prefetch)
    preemptions: int             # times this turn was preempted during decode
    preempt_recompute_tokens: int  # tokens recomputed because of those preemptions
    ttft_s: float                # first_token_s - arrival_s
    ttft_ideal_s: float          # TTFT with the whole history on the GPU and an empty queue
    tbt_mean_s: float            # (finish_s - first_token_s) / (output_tokens - 1); NaN if o_k == 1
    e2e_s: float                 # finish_s - arrival_s
    queue_s: float               # admit_s - arrival_s


# Per-turn ledger columns, in order: the fields of TurnRecord.
TURN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TurnRecord))


def ledger_frame(records: list[TurnRecord]) -> pd.DataFrame:
    """The ledger as a DataFrame with the schema of TURN_DTYPES (also when empty)."""
    cols = {c: [getattr(r, c) for r in records] for c in TURN_COLUMNS}
    return pd.DataFrame(cols, columns=list(TURN_COLUMNS)).astype(TURN_DTYPES)


_INT_COLUMNS = {"turn", "priority", "prompt_tokens", "output_tokens", "history_tokens", "gpu_hit_tokens",
                "cpu_hit_tokens", "recomputed_tokens", "pruned_tokens", "shared_hit_tokens",
                "shared_cpu_tokens", "gpu_layer_units", "cpu_layer_units",
                "dropped_layer_units", "swap_in_bytes", "prefetched_bytes", "preemptions",
                "preempt_recompute_tokens"}
# dtypes of the ledger, so an empty ledger (every turn rejected) has the same schema as a full one
TURN_DTYPES: dict[str, str] = {c: "object" if c == "session_id" else "int64" if c in _INT_COLUMNS
                               else "float64" for c in TURN_COLUMNS}


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Engine-wide figures that are not per turn."""

    sim_time_s: float            # simulated time from the first arrival to the last completion
    steps: int                   # engine iterations
    output_tokens: int           # tokens generated (throughput numerator)
    gpu_capacity_bytes: int
    cpu_capacity_bytes: int
    gpu_util: float              # time-weighted GPU KV occupancy / capacity
    gpu_peak_bytes: int          # highest GPU KV occupancy
    peak_demand_bytes: int       # highest KV of sessions not yet finished, in whole pages, any tier
    swap_in_bytes: int           # host-to-device, all turns
    swap_out_bytes: int          # device-to-host demotions
    dropped_bytes: int           # bytes dropped from the CPU tier (or from the GPU when no CPU room)
    preemptions: int
    preempt_recompute_tokens: int
    evict_us: np.ndarray         # wall-clock microseconds of victim selection, per make-room call that evicted
    step_s: np.ndarray           # duration of each iteration that decoded something
    step_decode_seqs: np.ndarray # sequences decoded in that iteration (weights for TBT percentiles)
    rejected_turns: int = 0      # turns longer than the whole GPU KV (and the rest of their session)
    policy_metrics: tuple = ()   # EvictionPolicy.metrics() of the GPU and the CPU instance
    wall_s: float = 0.0          # wall-clock time the simulation took
    decode_h2d_bytes: float = 0.0  # sparse offload: pages decode steps read from the CPU
    gpu_reserved_peak_bytes: int = 0  # sparse offload: most GPU bytes held by rings and metadata


@dataclass(frozen=True, slots=True)
class SimResult:
    """What ``sim.simulate`` returns: the ledger, the engine statistics, and the run's labels."""

    turns: pd.DataFrame          # TURN_COLUMNS, one row per completed turn
    stats: EngineStats
    labels: dict = field(default_factory=dict)  # policy, capacities, seed ... (summary columns)
