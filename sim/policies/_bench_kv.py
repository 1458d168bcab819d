"""Decision latency of the KV policies with many resident units (a benchmark: it prints figures).

    python -m sim.policies._bench_kv [--units 100000] [--decisions 20000] [--per-session 50]

Steady state of a full GPU tier: ``units`` candidates are resident; each step advances the clock,
calls ``evict(now)`` (timed: the decision and its bookkeeping) and inserts one new unit, so the tier
stays full. New units arrive ``per_session`` at a time with one shared last use, as a finished turn
releases its session's pages (``--per-session 1``: every unit has its own last use, the worst case for
the time-grouped Pensieve/cost-belady structures). Units are uids read through a ``UnitView`` over
the sessions built here, as in the engine. Wall clock is read here only, around the calls.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from typing import Any

import numpy as np

from sim.policies import PolicyContext, make_policy
from sim.units import UNIT_BITS, UNIT_MASK, SessionKV, Tier, UnitView, uid_of

KV_POLICIES = (
    "pensieve",
    "pensieve-flat",
    "pensieve-physics",
    "predictive",
    "qos",
    "session-aware",
    "cost-belady",
)


def bench(
    policy: str,
    cost,
    units: int = 100_000,
    decisions: int = 20_000,
    per_session: int = 50,
    block_tokens: int = 16,
    seed: int = 0,
) -> dict:
    rng = random.Random(seed)
    page = block_tokens * cost.kv_bytes_per_token
    sessions: list[SessionKV] = []
    view = UnitView(sessions, page)
    ctx = PolicyContext(
        tier=Tier.GPU,
        block_tokens=block_tokens,
        num_layers=cost.model.num_layers,
        view=view,
        cost=cost,
    )
    pol = make_policy(policy, ctx)
    state: dict[str, Any] = {"sess": None, "left": 0}

    def new_unit(now: float) -> int:
        if state["left"] == 0:
            s = SessionKV(len(sessions), f"b{len(sessions)}", rng.choice((-1, 0, 0, 1)))
            s.tokens = per_session * block_tokens - rng.randrange(block_tokens)
            s.next_turn = rng.randint(1, 20)
            s.last_access_s = now
            s.next_access_s = (
                math.inf if rng.random() < 0.3 else now + rng.lognormvariate(math.log(30), 1)
            )
            sessions.append(s)
            state["sess"], state["left"] = s, per_session
        s = state["sess"]
        state["left"] -= 1
        s.tier.append(Tier.GPU)
        s.tier_pages[Tier.GPU] += 1
        return uid_of(s.index, len(s.tier) - 1)

    now = 0.0
    for _ in range(units):  # fill: releases spread over the past
        now += rng.expovariate(units / 3600.0) if state["left"] == 0 else 0.0
        pol.insert(new_unit(now), now)
    evict_ns = np.empty(decisions, dtype=np.int64)
    insert_ns = np.empty(decisions, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(decisions):
        now += rng.expovariate(50.0)
        t0 = clock()
        v = pol.evict(now)
        evict_ns[i] = clock() - t0
        assert v is not None  # a full tier always has a victim
        gone = sessions[v >> UNIT_BITS]  # the victim leaves the tier (untimed)
        gone.tier[v & UNIT_MASK] = Tier.DROPPED
        gone.tier_pages[Tier.GPU] -= 1
        gone.tier_pages[Tier.DROPPED] += 1
        u = new_unit(now)
        t0 = clock()
        pol.insert(u, now)
        insert_ns[i] = clock() - t0
    assert len(pol) == units
    return {
        "policy": policy,
        "units": units,
        "per_session": per_session,
        "evict_p50_us": float(np.percentile(evict_ns, 50)) / 1e3,
        "evict_p99_us": float(np.percentile(evict_ns, 99)) / 1e3,
        "evict_max_us": float(evict_ns.max()) / 1e3,
        "insert_p50_us": float(np.percentile(insert_ns, 50)) / 1e3,
        "insert_p99_us": float(np.percentile(insert_ns, 99)) / 1e3,
    }


def main(argv=None) -> None:
    from costmodels import cost_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--decisions", type=int, default=20_000)
    ap.add_argument("--per-session", type=int, nargs="+", default=[50, 1])
    ap.add_argument("--policies", nargs="+", default=list(KV_POLICIES))
    args = ap.parse_args(argv)
    cost = cost_model("llama-3-8b", "h100-sxm")
    print(
        f"{'policy':18s} {'units/sess':>10s} {'evict p50':>11s} {'p99':>9s} {'max':>9s} "
        f"{'insert p50':>11s} {'p99':>9s}   (microseconds, {args.units} resident units)"
    )
    for per in args.per_session:
        for name in args.policies:
            r = bench(name, cost, args.units, args.decisions, per)
            print(
                f"{name:18s} {per:>10d} {r['evict_p50_us']:>11.1f} {r['evict_p99_us']:>9.1f} "
                f"{r['evict_max_us']:>9.1f} {r['insert_p50_us']:>11.1f} {r['insert_p99_us']:>9.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
