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
    # turns in the middle of a chunked prefill hold their session (its KV is as admitted)
    holding = running | {run.sess.index: run for run in sched.chunking}
    holding |= dict.fromkeys(sched.held_for_transfer)  # a cluster holds them for a transfer out
    offload = sched.offload.sparse if sched.offload is not None else None
    for sess in sched.kv:
        run = running.get(sess.index)
        tokens = run.tokens_at(sched.step) if run is not None else sess.tokens
        where = f"session {sess.session_id}"
        if sess.pinned != (sess.index in holding):
            raise AssertionError(
                f"{where}: pinned={sess.pinned} but held by a turn={sess.index in holding}"
            )
        size = mem.unit_size(sess)
        ppu = sess.unit_pages if view.per_session else 1
        counts = [0, 0, 0, 0]
        for idx, t in enumerate(sess.tier):
            if t not in (Tier.GPU, Tier.CPU, Tier.DROPPED, Tier.SHARED):
                raise AssertionError(f"{where}: unit {idx} has no tier ({t})")
            counts[t] += ppu
            if t == Tier.DROPPED or t == Tier.SHARED:  # a SHARED page's bytes are the pool's
                continue
            uid = uid_of(sess.index, idx)
            in_policy = uid in mem.policy[t]
            used[t] += size
            if sess.refs is not None and sess.refs[idx]:
                if in_policy:
                    raise AssertionError(
                        f"{where}: shared unit {idx} held {sess.refs[idx]} times is a candidate"
                    )
            elif sess.pinned:
                if t != Tier.GPU and not (offload is not None and t == Tier.CPU):
                    raise AssertionError(f"{where}: pinned unit {idx} is on {Tier(t).name}")
                if in_policy:
                    raise AssertionError(f"{where}: pinned unit {idx} is an eviction candidate")
            else:
                evictable[t] += size
                candidates[t] += 1
                if not in_policy:
                    raise AssertionError(
                        f"{where}: unpinned {Tier(t).name} unit {idx} is not a candidate"
                    )
        if counts != sess.tier_pages:
            raise AssertionError(
                f"{where}: units hold pages {counts} per tier, counted {sess.tier_pages}"
            )
        if len(sess.tier) % view.layers:
            raise AssertionError(
                f"{where}: {len(sess.tier)} units are not whole pages of {view.layers} layers"
            )
        need = -(-tokens // bt) * view.layers  # unit pages: page-layers at layer_block
        if sess.done and not sess.tier:
            continue  # finished, nothing left in any tier: its array was freed
        if sum(counts) < need:
            raise AssertionError(
                f"{where}: {tokens} tokens need {need} unit pages, units cover {sum(counts)}"
            )
    share = sched.share
    if share is not None:
        _check_shared(share, holding)
    decoding = list(sched.running.values())  # checked after an iteration: all decode
    ctx = sum(run.tokens_at(sched.step) for run in decoding)
    if ctx != sched.dec_ctx or len(decoding) != sched.dec_seqs:
        raise AssertionError(
            f"decode batch: {len(decoding)} runs over {ctx} tokens, counted "
            f"{sched.dec_seqs} over {sched.dec_ctx}"
        )
    growing = sum(run.tokens_at(sched.step) < run.cap for run in decoding)
    if growing != sched.dec_grow or any(
        r.growing != (r.tokens_at(sched.step) < r.cap) for r in decoding
    ):
        raise AssertionError(
            f"{growing} decoding runs are below their cap, counted {sched.dec_grow}"
        )
    cap = sched.cap
    for sess in sched.kv:
        # A token budget's footprint: no session holds more than the pages of its cap.
        if len(sess.tier) > -(-cap // bt) * view.layers and not view.per_session:
            raise AssertionError(
                f"session {sess.session_id}: {len(sess.tier)} units exceed the "
                f"budget of {cap} tokens"
            )
        if view.per_session and sess.unit_pages > -(-cap // bt):
            raise AssertionError(
                f"session {sess.session_id}: {sess.unit_pages} pages exceed the "
                f"budget of {cap} tokens"
            )
    memo = getattr(sched.recovery, "dropped_memo", {})  # layer_block's
    for index, (key, tokens) in memo.items():
        sess = sched.kv[index]
        if (
            key == (sess.tier_pages[Tier.DROPPED], sess.tokens)
            and tokens != sched.split(sess)[Tier.DROPPED]
        ):
            raise AssertionError(
                f"session {sess.session_id}: remembered {tokens} dropped tokens, "
                f"has {sched.split(sess)[Tier.DROPPED]}"
            )
    used[Tier.GPU] += mem.reserved  # rings and metadata of sparse offload
    if offload is not None:
        off = [run for run in sched.running.values() if run.cpu_pages >= 0]
        for run in off:
            cpu = run.sess.tier_pages[Tier.CPU] // view.layers
            first = run.sess.tier[: run.cpu_pages * view.layers]
            if cpu != run.cpu_pages or first.count(Tier.CPU) != len(first):
                raise AssertionError(
                    f"session {run.sess.session_id}: offloaded {run.cpu_pages} "
                    f"pages, holds {cpu} on the CPU"
                )
        if sum(r.cpu_pages for r in off) != offload.cpu_pages or sum(
            offload.by_selected.values()
        ) != len(off):
            raise AssertionError(
                f"offload counts {offload.cpu_pages} CPU pages of "
                f"{sum(offload.by_selected.values())} sequences, running hold "
                f"{sum(r.cpu_pages for r in off)} of {len(off)}"
            )
        if mem.reserved != sum(offload.reserve_bytes(r.cpu_pages) for r in off):
            raise AssertionError(f"reserved {mem.reserved} GPU bytes for rings and metadata")
    elif mem.reserved:
        raise AssertionError(f"{mem.reserved} GPU bytes reserved without offload")
    for tier in (Tier.GPU, Tier.CPU):
        if used[tier] != mem.used[tier]:
            raise AssertionError(
                f"{tier.name}: units hold {used[tier]} bytes, accounting says {mem.used[tier]}"
            )
        if used[tier] > mem.capacity[tier]:
            raise AssertionError(f"{tier.name} over capacity: {used[tier]} > {mem.capacity[tier]}")
        if evictable[tier] != mem.evictable[tier]:
            raise AssertionError(
                f"{tier.name}: evictable {evictable[tier]} != accounted {mem.evictable[tier]}"
            )
        if candidates[tier] != len(mem.policy[tier]):
            raise AssertionError(
                f"{tier.name} policy holds {len(mem.policy[tier])} candidates, "
                f"expected {candidates[tier]}"
            )


def _check_shared(share, running: dict) -> None:
    """Each pool page is held exactly by the running turns whose prefix names it, and a held page
    is on the GPU; each session's placeholders are its prefix pages, leading its array."""
    pool = share.pool
    holders = [0] * len(pool.tier)
    for index, units in share.units.items():
        if index in running:
            for u in units.tolist():
                holders[u] += 1
    for idx, t in enumerate(pool.tier):
        if pool.refs[idx] != holders[idx]:
            raise AssertionError(
                f"shared page {idx}: {pool.refs[idx]} holds, {holders[idx]} running turns name it"
            )
        if holders[idx] and t != Tier.GPU:
            raise AssertionError(f"shared page {idx} is held but on {Tier(t).name}")
    for index, run in running.items():
        sess = run.sess
        pages = sess.tier_pages[Tier.SHARED]
        if pages != share.pages(index) or sess.tier[:pages].count(Tier.SHARED) != pages:
            raise AssertionError(
                f"session {sess.session_id}: {pages} placeholders, prefix of "
                f"{share.pages(index)} pages"
            )
