"""The step log of kvsim's own engine (``sim.step_log``): what each entry says agrees with the
ledger and the engine's own counts."""

from __future__ import annotations

import collections

import costmodels
import sim
from sim.config import MemoryConfig
from sim.step_log import KvsimStepLog
from traces import load_trace

COST = costmodels.cost_model("llama-3-8b", "h100-sxm")


def _run(gpu_kv_gb: float, sessions: int = 30):
    trace = load_trace({"kind": "synthetic", "sessions": sessions, "seed": 3}).sessions
    steps: list[dict] = []
    log = KvsimStepLog(steps.append)
    res = sim.simulate(trace, COST, MemoryConfig(gpu_kv_gb=gpu_kv_gb), on_iteration=log)
    log.close()
    return res, steps


def test_one_entry_per_iteration_and_each_turn_done_once():
    res, steps = _run(0.5)
    assert len(steps) == res.stats.steps
    assert [e["step"] for e in steps] == list(range(len(steps)))
    done = collections.Counter(rid for e in steps for rid in e["done"])
    ledger = set(res.turns["session_id"] + "/" + res.turns["turn"].astype(str))
    assert set(done) == ledger and max(done.values()) == 1


def test_entries_agree_with_the_ledger_and_the_clock():
    res, steps = _run(0.5)
    t = res.turns.set_index(res.turns["session_id"] + "/" + res.turns["turn"].astype(str))
    for e, nxt in zip(steps, steps[1:]):
        assert nxt["t"] >= e["t"] + e["dur"] - 1e-9  # one iteration after the other
    for e in steps:
        for rid in e["done"]:
            assert t.loc[rid, "finish_s"] == e["t"] + e["dur"]
    first: dict[str, dict] = {}
    for e in steps:
        for rid in e["hit"]:
            first.setdefault(rid, e)
    for rid, e in first.items():
        assert t.loc[rid, "admit_s"] == e["t"]
        assert t.loc[rid, "first_token_s"] == e["t"] + e["dur"]
    # decodes (the entries not admitted in the step) take one token each, and their count per
    # iteration is the engine's own decode count (its TBT weights)
    decodes = [[n for rid, n, _ in e["sched"] if rid not in e["hit"]] for e in steps]
    assert all(n == 1 for d in decodes for n in d)
    assert [len(d) for d in decodes if d] == res.stats.step_decode_seqs.tolist()


def test_preemptions_are_listed_where_they_happen():
    res, steps = _run(0.25, sessions=60)
    listed = sum(len(e["preempted"]) for e in steps)
    assert res.stats.preemptions > 0 and listed == res.stats.preemptions


def test_free_blocks_follow_the_gpu_capacity():
    res, steps = _run(0.5)
    pages = int(0.5 * (1 << 30) // (16 * COST.kv_bytes_per_token))
    assert all(0 <= e["free_blocks"] <= pages for e in steps)
    assert min(e["free_blocks"] for e in steps) < pages
