"""Debug-mode invariant checks, run after every iteration (``simulate(debug=True)``).

Every token of every session is in exactly one unit, every unit in exactly one state; no tier over
capacity and its byte count equal to the sum of its units; pinned units belong to running turns and
sit on the GPU; the policies' candidate sets are exactly the unpinned units of their tier.
"""
from __future__ import annotations

from sim.units import Tier


def check_invariants(sched) -> None:
    mem, bt = sched.mem, sched.bt
    used = [0, 0]
    evictable = [0, 0]
    running = {run.sess.index: run for run in sched.running.values()}
    candidates = [0, 0]
    for sess in sched.kv:
        run = running.get(sess.index)
        tokens = run.tokens_at(sched.step) if run is not None else sess.tokens
        where = f"session {sess.session_id}"
        pages = 0
        for u in sess.units:
            if u.first_page != pages:
                raise AssertionError(f"{where}: unit {u.key} starts at page {u.first_page}, expected {pages}")
            pages += u.pages
            if u.tier == Tier.DROPPED:
                if u.pinned and run is None:
                    raise AssertionError(f"{where}: dropped unit {u.key} is pinned")
                continue
            used[u.tier] += u.size
            in_policy = u in mem.policy[u.tier]
            if u.pinned:
                if run is None:
                    raise AssertionError(f"{where}: unit {u.key} pinned with no running turn")
                if u.tier != Tier.GPU:
                    raise AssertionError(f"{where}: pinned unit {u.key} is on {u.tier.name}")
                if in_policy:
                    raise AssertionError(f"{where}: pinned unit {u.key} is an eviction candidate")
            else:
                evictable[u.tier] += u.size
                candidates[u.tier] += 1
                if not in_policy:
                    raise AssertionError(f"{where}: unpinned {u.tier.name} unit {u.key} is not a candidate")
            if run is not None and not u.pinned:
                raise AssertionError(f"{where}: unit {u.key} of a running turn is not pinned")
        need = -(-tokens // bt)
        if pages < need:
            raise AssertionError(f"{where}: {tokens} tokens need {need} pages, units cover {pages}")
    for tier in (Tier.GPU, Tier.CPU):
        if used[tier] != mem.used[tier]:
            raise AssertionError(f"{tier.name}: units hold {used[tier]} bytes, accounting says {mem.used[tier]}")
        if used[tier] > mem.capacity[tier]:
            raise AssertionError(f"{tier.name} over capacity: {used[tier]} > {mem.capacity[tier]}")
        if evictable[tier] != mem.evictable[tier]:
            raise AssertionError(f"{tier.name}: evictable {evictable[tier]} != accounted {mem.evictable[tier]}")
        if candidates[tier] != len(mem.policy[tier]):
            raise AssertionError(f"{tier.name} policy holds {len(mem.policy[tier])} candidates, "
                                 f"expected {candidates[tier]}")
