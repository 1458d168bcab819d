"""Debug-mode invariant checks, run after every iteration (``simulate(debug=True)``).

Every unit is in exactly one state (its byte in the session's array), the per-session page counts
agree with the arrays, enough units cover every token (every layer of it at ``layer_block``), no tier is over capacity and its byte count
equals the sum of its units; pinned sessions are exactly those of running turns and sit wholly on
the GPU; shared units with holders are never candidates; the policies' candidate sets are exactly
the unpinned, unheld units of their tier.
"""
from __future__ import annotations

from sim.units import Tier, uid_of


def check_invariants(sched) -> None:
    mem, bt = sched.mem, sched.bt
    view = mem.view
    used = [0, 0]
    evictable = [0, 0]
    candidates = [0, 0]
    running = {run.sess.index: run for run in sched.running.values()}
    for sess in sched.kv:
        run = running.get(sess.index)
        tokens = run.tokens_at(sched.step) if run is not None else sess.tokens
        where = f"session {sess.session_id}"
        if sess.pinned != (run is not None):
            raise AssertionError(f"{where}: pinned={sess.pinned} but running={run is not None}")
        size = mem.unit_size(sess)
        ppu = sess.unit_pages if view.per_session else 1
        counts = [0, 0, 0]
        for idx, t in enumerate(sess.tier):
            if t not in (Tier.GPU, Tier.CPU, Tier.DROPPED):
                raise AssertionError(f"{where}: unit {idx} has no tier ({t})")
            counts[t] += ppu
            if t == Tier.DROPPED:
                continue
            uid = uid_of(sess.index, idx)
            in_policy = uid in mem.policy[t]
            used[t] += size
            if sess.refs is not None and sess.refs[idx]:
                if in_policy:
                    raise AssertionError(f"{where}: shared unit {idx} held {sess.refs[idx]} times is a candidate")
            elif sess.pinned:
                if t != Tier.GPU:
                    raise AssertionError(f"{where}: pinned unit {idx} is on {Tier(t).name}")
                if in_policy:
                    raise AssertionError(f"{where}: pinned unit {idx} is an eviction candidate")
            else:
                evictable[t] += size
                candidates[t] += 1
                if not in_policy:
                    raise AssertionError(f"{where}: unpinned {Tier(t).name} unit {idx} is not a candidate")
        if counts != sess.tier_pages:
            raise AssertionError(f"{where}: units hold pages {counts} per tier, counted {sess.tier_pages}")
        if len(sess.tier) % view.layers:
            raise AssertionError(f"{where}: {len(sess.tier)} units are not whole pages of "
                                 f"{view.layers} layers")
        need = -(-tokens // bt) * view.layers          # unit pages: page-layers at layer_block
        if sess.done and not sess.tier:
            continue                     # finished, nothing left in any tier: its array was freed
        if sum(counts) < need:
            raise AssertionError(f"{where}: {tokens} tokens need {need} unit pages, units cover "
                                 f"{sum(counts)}")
    for index, (key, tokens) in getattr(sched, "_dropped_memo", {}).items():
        sess = sched.kv[index]
        if key == (sess.tier_pages[Tier.DROPPED], sess.tokens) \
                and tokens != sched._split(sess)[Tier.DROPPED]:
            raise AssertionError(f"session {sess.session_id}: remembered {tokens} dropped tokens, "
                                 f"has {sched._split(sess)[Tier.DROPPED]}")
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
