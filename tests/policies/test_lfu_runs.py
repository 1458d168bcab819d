"""``RunLFU`` (buckets of runs, counts in per-session arrays) against ``LFU`` (an ordered dict per
count, a dict of counts) driven by the same calls on the engine's ``UnitView`` (hypothesis): the
same victims, extents, peeks, counts and lengths, whichever of its whole-session, run or one-unit
paths a call takes. Units enter only when they are not members, as the engine's do."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twin_driver import session_batches

from sim.policies import PolicyContext
from sim.policies.lfu import LFU, RunLFU
from sim.units import SessionKV, Tier, UnitView, extents_of

PAGE = 64
SESSIONS, UNITS = 3, 40

batch_st = session_batches(SESSIONS, UNITS)
op_st = st.one_of(
    st.tuples(st.sampled_from(["acquire", "release", "remove_many", "session"]), batch_st),
    st.tuples(st.sampled_from(["insert_many", "insert_pinned"]), batch_st),
    st.tuples(st.sampled_from(["access", "remove", "unpin", "pin"]), batch_st),
    st.tuples(st.sampled_from(["evict_bytes", "evict_extents", "evict"]), st.integers(1, 70)),
    st.tuples(st.just("take_in"), st.tuples(batch_st, st.sampled_from([0, 0, 1, 5]))),
)


def _pair(drops: bool) -> tuple[LFU, LFU]:
    sessions = [SessionKV(i, f"s{i}", 0) for i in range(SESSIONS)]
    view = UnitView(sessions, PAGE, 3)
    ctx = PolicyContext(Tier.GPU, 16, 3, view=view, cpu_kv_bytes=None if drops else 1e9)
    runs = LFU(ctx)
    plain = object.__new__(LFU)  # the per-unit form, on the same view
    plain.__init__(ctx)
    assert type(runs) is RunLFU
    return runs, plain


def _call(pol: LFU, call: str, arg, now: float):
    if call in ("acquire", "release"):
        return getattr(pol, call)(arg, now)
    if call == "remove_many":
        return pol.remove_many(arg, pinned=False)
    if call in ("insert_many", "insert_pinned"):
        return pol.insert_many(arg, now, call == "insert_pinned")
    if call in ("access", "unpin"):
        return [getattr(pol, call)(uid, now) for uid in arg]
    if call in ("remove", "pin"):
        return [getattr(pol, call)(uid) for uid in arg]
    if call == "evict":
        return [pol.evict(now) for _ in range(arg)]
    if call == "take_in":  # a demotion batch, as extents
        extents, free = arg
        return pol.take_in_extents(extents, free * PAGE + PAGE // 2, now)
    return getattr(pol, call)(arg * PAGE, now)


@settings(max_examples=500, deadline=None)
@given(st.lists(op_st, max_size=30), st.booleans())
def test_run_lfu_equals_lfu(ops, drops):
    runs, plain = _pair(drops)
    for now, (call, arg) in enumerate(ops):
        if call in ("insert_many", "insert_pinned"):  # the engine brings in non-members only
            arg = [u for u in dict.fromkeys(arg) if not plain.count(u)]
        if call == "release":  # a turn unpins what it held: never a unit that is a candidate
            kept = [u for u in dict.fromkeys(arg) if u not in plain]
            arg = arg if len(kept) == len(arg) else kept
        if call == "unpin":  # a turn's end makes candidates of units it held, each once
            arg = [u for u in dict.fromkeys(arg) if u not in plain]
        if call == "take_in":  # units that are not members, with room enough to take them
            uids = [u for u in dict.fromkeys(arg[0]) if not plain.count(u)]
            arg = (extents_of(uids), max(arg[1], len(uids) - len(plain)))
        if call == "session":  # a whole session's members are used and pinned (a turn starts)
            s = arg[0] >> 24 if len(arg) else 0
            arg = sorted(u for u in plain._count if u >> 24 == s)
            call = "acquire"
        assert _call(runs, call, arg, float(now)) == _call(plain, call, arg, float(now)), call
        assert len(runs) == len(plain)
        assert runs.peek(float(now)) == plain.peek(float(now))
        for uid in list(plain._count)[:8]:
            assert runs.count(uid) == plain.count(uid) and (uid in runs) == (uid in plain)
    assert runs.evict_bytes(10**6 * PAGE, 1e9) == plain.evict_bytes(10**6 * PAGE, 1e9)
