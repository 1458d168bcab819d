"""LFU's, QoS's and session-aware's batch calls (``acquire``, ``release``, ``insert_many``, ``remove_many``) against
the base class's one call per unit, on twin instances over the engine's ``UnitView`` (hypothesis):
the same victims after every call, whatever mix of sessions, counts, classes, members and repeats
a batch holds (a batch groups its units by count or by class, in the batch's order)."""

from __future__ import annotations

import types

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies import EvictionPolicy, PolicyContext, policy_class
from sim.units import SessionKV, Tier, UnitView, uid_of

PAGE = 64
SESSIONS, PAGES = 3, 6
CALLS = ("acquire", "release", "insert_many", "remove_many")

uids_st = st.lists(
    st.builds(uid_of, st.integers(0, SESSIONS - 1), st.integers(0, PAGES - 1)), max_size=12
)
one_session_st = st.builds(
    lambda s, a, n: range(uid_of(s, a), uid_of(s, min(a + n, PAGES))),
    st.integers(0, SESSIONS - 1),
    st.integers(0, PAGES - 1),
    st.integers(1, PAGES),
)
batch_st = st.one_of(uids_st, one_session_st, uids_st.map(sorted))
op_st = st.one_of(
    st.tuples(st.sampled_from(CALLS), batch_st, st.booleans()),
    st.tuples(st.just("access"), uids_st, st.booleans()),
    st.tuples(st.just("evict"), st.integers(1, 8).map(lambda k: [k]), st.booleans()),
)


def _policy(name: str, looped: bool, layers: int = 1) -> EvictionPolicy:
    sessions = [SessionKV(i, f"s{i}", i % 2 - (i == 2)) for i in range(SESSIONS)]  # classes 0 1 -1
    for i, sess in enumerate(sessions):
        sess.last_access_s = float(i % 2)
    view = UnitView(sessions, PAGE, layers)
    pol = policy_class(name)(PolicyContext(Tier.GPU, 16, layers, view=view))
    if looped:
        for call in CALLS:
            setattr(pol, call, types.MethodType(getattr(EvictionPolicy, call), pol))
    return pol


def _apply(pol: EvictionPolicy, op: tuple, now: float):
    call, arg, flag = op
    if call == "evict":
        return pol.evict_bytes(arg[0] * PAGE, now)
    if call == "access":
        for uid in arg:
            pol.access(uid, now)
        return None
    if call in ("insert_many", "remove_many"):
        return getattr(pol, call)(arg, *((now, flag) if call == "insert_many" else (flag,)))
    return getattr(pol, call)(arg, now)


def _drain(pol: EvictionPolicy) -> list[int]:
    return pol.evict_bytes(10**6 * PAGE, 1e9)


def check(name: str, ops: list[tuple], layers: int = 1, repeats: bool = True) -> None:
    """``repeats``: a batch may name a unit twice (the engine's never do)."""
    batched, looped = _policy(name, False, layers), _policy(name, True, layers)
    members: set[int] = set()  # as the engine would: only a non-member enters, once
    for now, op in enumerate(ops):
        call, arg, flag = op
        if not repeats and isinstance(arg, list):
            op = (call, arg := list(dict.fromkeys(arg)), flag)
        if call == "insert_many":
            op = (call, [u for u in dict.fromkeys(arg) if u not in members], flag)
            members.update(op[1])
        victims = _apply(batched, op, float(now))
        assert victims == _apply(looped, op, float(now)), op
        assert len(batched) == len(looped)
        if call == "release":  # a non-member released enters
            members.update(arg)
        elif call == "remove_many":
            members.difference_update(arg)
        elif call == "evict":
            members.difference_update(victims)
    assert _drain(batched) == _drain(looped)


@settings(max_examples=400, deadline=None)
@given(st.lists(op_st, max_size=30))
def test_lfu_batches_equal_one_call_per_unit(ops):
    check("lfu", ops)


@settings(max_examples=400, deadline=None)
@given(st.lists(op_st, max_size=30))
def test_qos_batches_equal_one_call_per_unit(ops):
    check("qos", ops)


@settings(max_examples=300, deadline=None)
@given(st.lists(op_st, max_size=30), st.sampled_from([1, 3]))
def test_session_aware_batches_equal_one_call_per_unit(ops, layers):
    check("session-aware", ops, layers, repeats=False)
