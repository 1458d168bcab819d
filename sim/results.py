"""Typed results of one simulation: the per-turn ledger and engine-wide statistics.

The ledger is the single source of every metric (see docs/semantics.md); ``sim.metrics`` turns it
into the summary row. Token counts g/c/d split each turn's history H = g + c + d exactly.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from sim.samples import Samples

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One completed turn: a row of the ledger. Times are simulated seconds."""

    session_id: str
    turn: int  # 0-based index within the session
    priority: int  # QoS class (0 = default)
    arrival_s: float  # when the turn entered the queue
    admit_s: float  # start of the iteration that first ran its prefill
    first_token_s: float  # end of that iteration (first output token)
    finish_s: float  # end of the iteration that produced its last token
    prompt_tokens: int  # p_k
    output_tokens: int  # o_k
    history_tokens: int  # H_k = g + c + d + pruned
    gpu_hit_tokens: int  # g_k: history tokens already on the GPU
    cpu_hit_tokens: int  # c_k: history tokens swapped in from the CPU tier
    recomputed_tokens: int  # d_k: history tokens recomputed in the prefill (re-prefill)
    pruned_tokens: int  # history tokens a token budget pruned for good (0: full KV)
    shared_hit_tokens: int  # prompt tokens whose KV another turn left on the GPU (shared prefix)
    shared_cpu_tokens: int  # ... left on the CPU (swapped in)
    gpu_layer_units: int  # the history's (page, layer) pairs on the GPU at admission
    cpu_layer_units: int  # ... on the CPU
    dropped_layer_units: int  # ... DROPPED
    swap_in_bytes: int  # host-to-device bytes to admit this turn (whole pages)
    copy_stall_s: float  # swap-in copy time its admission iteration could not hide
    prefetched_bytes: int  # of swap_in_bytes, copied ahead of admission (engine.prefetch)
    preemptions: int  # times this turn was preempted during decode
    preempt_recompute_tokens: int  # tokens recomputed because of those preemptions
    ttft_s: float  # first_token_s - arrival_s
    ttft_ideal_s: float  # TTFT with the whole history on the GPU and an empty queue
    tbt_mean_s: float  # (finish_s - first_token_s) / (output_tokens - 1); NaN if o_k == 1
    e2e_s: float  # finish_s - arrival_s
    queue_s: float  # admit_s - arrival_s


# Per-turn ledger columns, in order: the fields of TurnRecord.
TURN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TurnRecord))

_INT_COLUMNS = {
    "turn",
    "priority",
    "prompt_tokens",
    "output_tokens",
    "history_tokens",
    "gpu_hit_tokens",
    "cpu_hit_tokens",
    "recomputed_tokens",
    "pruned_tokens",
    "shared_hit_tokens",
    "shared_cpu_tokens",
    "gpu_layer_units",
    "cpu_layer_units",
    "dropped_layer_units",
    "swap_in_bytes",
    "prefetched_bytes",
    "preemptions",
    "preempt_recompute_tokens",
}
# dtypes of the ledger, so an empty ledger (every turn rejected) has the same schema as a full one
TURN_DTYPES: dict[str, str] = {
    c: "object" if c == "session_id" else "int64" if c in _INT_COLUMNS else "float64"
    for c in TURN_COLUMNS
}


class Ledger:
    """The ledger while a run fills it: one column per field of TurnRecord, in completion order.

    Numeric columns are ``array('q')`` (int64) and ``array('d')`` (float64), ``session_id`` a list
    of the sessions' own id strings: a turn costs 8 bytes a column, not a Python object, so a run of
    millions of turns holds no per-turn objects. ``append`` takes the values of one TurnRecord, in
    field order; ``records()`` gives them back as TurnRecords.
    """

    __slots__ = ("columns", "_appends")

    def __init__(self) -> None:
        self.columns: dict[str, list | array] = {
            c: [] if c == "session_id" else array("q" if c in _INT_COLUMNS else "d")
            for c in TURN_COLUMNS
        }
        self._appends = tuple(col.append for col in self.columns.values())

    def append(self, *values) -> None:
        """One completed turn: the values of a TurnRecord, in TURN_COLUMNS order."""
        if len(values) != len(self._appends):
            raise ValueError(f"a ledger row has {len(self._appends)} values, got {len(values)}")
        for add, v in zip(self._appends, values):
            add(v)

    def __len__(self) -> int:
        return len(self.columns["session_id"])

    def records(self):
        """The rows as TurnRecords (one object per turn: for small ledgers and tests)."""
        cols = [self.columns[c] for c in TURN_COLUMNS]
        return [TurnRecord(*row) for row in zip(*cols)]

    def arrays(self) -> dict[str, np.ndarray]:
        """Each column as a numpy array (numeric ones share the arrays' memory)."""
        return {c: self._array(c) for c in TURN_COLUMNS}

    def _array(self, c: str) -> np.ndarray:
        col = self.columns[c]
        if c == "session_id":
            a = np.empty(len(col), dtype=object)
            a[:] = col
            return a
        assert isinstance(col, array)  # every column but session_id
        return np.frombuffer(col, dtype=np.int64 if col.typecode == "q" else np.float64)

    def clear(self) -> None:
        """Empty every column (their memory is given back)."""
        Ledger.__init__(self)


def ledger_frame(
    records: Ledger | Iterable[TurnRecord], sort: bool = False, release: bool = False
) -> pd.DataFrame:
    """The ledger as a DataFrame with the schema of TURN_DTYPES (also when empty). ``records``: a
    ``Ledger`` (columns) or TurnRecords. ``sort``: rows by (session_id, turn), index 0..n-1 (what
    ``simulate`` returns), each column reordered once, without an intermediate frame.
    ``release`` (a Ledger): the ledger is emptied, its columns handed to the frame, or with
    ``sort`` freed one by one once reordered, so two copies of the ledger never coexist
    (``simulate``: the run is over). Without it the frame copies, and the ledger can grow on."""
    import pandas as pd  # here: a run that writes its ledger to a file builds no frame

    if isinstance(records, Ledger):
        ledger = records
        get = ledger._array
    else:
        rows = list(records)
        ledger, release = None, False
        values = {c: [getattr(r, c) for r in rows] for c in TURN_COLUMNS}

        def get(c: str) -> np.ndarray:
            if c == "session_id":
                a = np.empty(len(rows), dtype=object)
                a[:] = values[c]
                return a
            return (
                np.asarray(values[c], dtype=TURN_DTYPES[c])
                if rows
                else np.empty(0, dtype=TURN_DTYPES[c])
            )

    order = None
    if release:
        assert ledger is not None  # only a Ledger is released
        ledger._appends = ()  # they would keep the columns alive
    if sort:
        # (session_id, turn) is unique: any sort gives the one order. Session ids by rank, so the
        # strings are compared once per distinct id, not per turn.
        ranks = pd.factorize(get("session_id"), sort=True)[0]
        order = np.lexsort((get("turn"), ranks))
        del ranks
    cols: dict[str, pd.Series | np.ndarray] = {}
    for c in TURN_COLUMNS:
        a = get(c)
        if order is not None:
            a = a[order]
            if release:
                assert ledger is not None  # only a Ledger is released
                del ledger.columns[c]  # the array's memory goes now, not at the end
        elif ledger is not None and not release:
            a = a.copy()  # a view would stop the ledger from growing
        # object, not inferred: a string dtype would copy every id into new string objects
        cols[c] = pd.Series(a, dtype=object, copy=False) if c == "session_id" else a
    if release and ledger is not None:
        ledger.clear()
    frame = pd.DataFrame(cols, columns=list(TURN_COLUMNS), copy=False)
    return frame.astype(TURN_DTYPES)


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Engine-wide figures that are not per turn."""

    sim_time_s: float  # simulated time from the first arrival to the last completion
    steps: int  # engine iterations
    output_tokens: int  # tokens generated (throughput numerator)
    gpu_capacity_bytes: float  # math.inf when unbounded
    cpu_capacity_bytes: float  # math.inf when unbounded
    gpu_util: float  # time-weighted GPU KV occupancy / capacity
    gpu_peak_bytes: int  # highest GPU KV occupancy
    peak_demand_bytes: int  # highest KV of sessions not yet finished, in whole pages, any tier
    swap_in_bytes: int  # host-to-device, all turns
    swap_out_bytes: int  # device-to-host demotions
    dropped_bytes: int  # bytes dropped from the CPU tier (or from the GPU when no CPU room)
    preemptions: int
    preempt_recompute_tokens: int
    rejected_turns: int = 0  # turns longer than the whole GPU KV (and the rest of their session)
    policy_metrics: tuple = ()  # EvictionPolicy.metrics() of the GPU and the CPU instance
    wall_s: float = 0.0  # wall-clock time the simulation took
    decode_h2d_bytes: float = 0.0  # sparse offload: pages decode steps read from the CPU
    gpu_reserved_peak_bytes: int = 0  # sparse offload: most GPU bytes held by rings and metadata
    # Wall-clock nanoseconds of victim selection, one sample per make-room call that evicted.
    evict_ns: Samples = field(default_factory=lambda: Samples(typecode="q"))
    # The duration of each iteration that decoded something, weighted by the sequences it decoded
    # (TBT percentiles). Both are exact up to sim.samples.EXACT_LIMIT samples, then histograms.
    tbt: Samples = field(default_factory=lambda: Samples(weighted=True))

    @property
    def evict_us(self) -> np.ndarray:
        """Each make-room call's victim-selection time in microseconds (exact records only)."""
        return self.evict_ns.arrays()[0] / 1e3

    @property
    def step_s(self) -> np.ndarray:
        """Each decode iteration's duration, in order (exact records only)."""
        return self.tbt.arrays()[0]

    @property
    def step_decode_seqs(self) -> np.ndarray:
        """The sequences each decode iteration decoded (exact records only)."""
        weights = self.tbt.arrays()[1]
        assert weights is not None  # tbt is weighted
        return weights


@dataclass(frozen=True, slots=True)
class SimResult:
    """What ``sim.simulate`` returns: the ledger, the engine statistics, and the run's labels."""

    turns: pd.DataFrame  # TURN_COLUMNS, one row per completed turn
    stats: EngineStats
    labels: dict = field(default_factory=dict)  # policy, capacities, seed ... (summary columns)


def run_labels(policy: str, memory, seed: int) -> dict:
    """A SimResult's labels: the policy, the memory configuration and the seed."""
    return dict(
        policy=policy,
        gpu_kv_gb=memory.gpu_kv_gb,
        cpu_kv_gb=memory.cpu_kv_gb,
        block_tokens=memory.block_tokens,
        evict_unit=memory.evict_unit,
        seed=seed,
    )
