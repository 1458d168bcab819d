"""Decision latency of the KV policies with many resident units (a benchmark: it prints figures).

    python -m sim.policies._bench_kv [--units 100000] [--decisions 20000] [--per-session 50]

Steady state of a full GPU tier: ``units`` candidates are resident; each step advances the clock,
asks ``victim(now)`` (timed: the decision), removes the victim and inserts one new unit, so the tier
stays full. New units arrive ``per_session`` at a time with one shared last use, as a finished turn
releases its session's pages (``--per-session 1``: every unit has its own last use, the worst case for
the time-grouped Pensieve/cost-belady structures). Wall clock is read here only, around the calls.
"""
from __future__ import annotations

import argparse
import math
import random
import time

import numpy as np

from sim.policies import PolicyContext, make_policy
from sim.units import SessionKV, Tier, Unit

KV_POLICIES = ("pensieve", "pensieve-flat", "pensieve-physics", "predictive", "qos", "session-aware",
               "cost-belady")


def bench(policy: str, cost, units: int = 100_000, decisions: int = 20_000, per_session: int = 50,
          block_tokens: int = 16, seed: int = 0) -> dict:
    rng = random.Random(seed)
    ctx = PolicyContext(tier=Tier.GPU, block_tokens=block_tokens, num_layers=cost.model.num_layers,
                        seed=seed, cost=cost)
    pol = make_policy(policy, ctx)
    page = block_tokens * cost.kv_bytes_per_token
    state = {"key": 0, "sess": None, "left": 0, "index": 0}

    def new_unit(now: float) -> Unit:
        if state["left"] == 0:
            state["index"] += 1
            s = SessionKV(state["index"], f"b{state['index']}", rng.choice((-1, 0, 0, 1)))
            s.tokens = per_session * block_tokens - rng.randrange(block_tokens)
            s.next_turn = rng.randint(1, 20)
            state["sess"], state["left"], state["t"] = s, per_session, now
            state["next"] = math.inf if rng.random() < 0.3 else now + rng.lognormvariate(math.log(30), 1)
        s = state["sess"]
        state["left"] -= 1
        state["key"] += 1
        u = Unit(state["key"], s, per_session - 1 - state["left"], 1, page, tier=Tier.GPU,
                 last_access_s=state["t"], next_access_s=state["next"])
        s.units.append(u)
        return u

    now = 0.0
    for _ in range(units):  # fill: releases spread over the past
        now += rng.expovariate(units / 3600.0) if state["left"] == 0 else 0.0
        pol.insert(new_unit(now), now)
    victim_ns = np.empty(decisions, dtype=np.int64)
    insert_ns = np.empty(decisions, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(decisions):
        now += rng.expovariate(50.0)
        t0 = clock()
        v = pol.victim(now)
        victim_ns[i] = clock() - t0
        pol.remove(v)
        u = new_unit(now)
        t0 = clock()
        pol.insert(u, now)
        insert_ns[i] = clock() - t0
    assert len(pol) == units
    return {"policy": policy, "units": units, "per_session": per_session,
            "victim_p50_us": float(np.percentile(victim_ns, 50)) / 1e3,
            "victim_p99_us": float(np.percentile(victim_ns, 99)) / 1e3,
            "victim_max_us": float(victim_ns.max()) / 1e3,
            "insert_p50_us": float(np.percentile(insert_ns, 50)) / 1e3,
            "insert_p99_us": float(np.percentile(insert_ns, 99)) / 1e3}


def main(argv=None) -> None:
    from costmodels import cost_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--decisions", type=int, default=20_000)
    ap.add_argument("--per-session", type=int, nargs="+", default=[50, 1])
    ap.add_argument("--policies", nargs="+", default=list(KV_POLICIES))
    args = ap.parse_args(argv)
    cost = cost_model("llama-3-8b", "h100-sxm")
    print(f"{'policy':18s} {'units/sess':>10s} {'victim p50':>11s} {'p99':>9s} {'max':>9s} "
          f"{'insert p50':>11s} {'p99':>9s}   (microseconds, {args.units} resident units)")
    for per in args.per_session:
        for name in args.policies:
            r = bench(name, cost, args.units, args.decisions, per)
            print(f"{name:18s} {per:>10d} {r['victim_p50_us']:>11.1f} {r['victim_p99_us']:>9.1f} "
                  f"{r['victim_max_us']:>9.1f} {r['insert_p50_us']:>11.1f} {r['insert_p99_us']:>9.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
