"""QoS (a queue of runs per class) against a plain model: a list per class in LRU order
(hypothesis). The engine's calls on its ``UnitView`` -- whole sessions and parts of them, ranges
and lists, repeats, non-members -- give the same victims, extents, peeks, lengths and counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twin_driver import session_batches

from sim.policies import PolicyContext, policy_class
from sim.units import SessionKV, Tier, UnitView, extents_of

PAGE = 64
SESSIONS, UNITS = 4, 40
PRIORITY = (0, 1, -1, 0)


class PlainQoS:
    """Each class's candidates as a list, least recently filed first."""

    def __init__(self) -> None:
        self.classes: dict[int, list[int]] = {}
        self.by_class: dict[int, int] = {}

    @staticmethod
    def cls(uid: int) -> int:
        return PRIORITY[uid >> 24]

    def discard(self, uid: int) -> None:
        lst = self.classes.get(self.cls(uid), [])
        if uid in lst:
            lst.remove(uid)

    def add(self, uid: int) -> None:
        self.discard(uid)
        self.classes.setdefault(self.cls(uid), []).append(uid)

    def access(self, uid: int) -> None:
        if uid in self.classes.get(self.cls(uid), []):
            self.add(uid)

    def evict(self, k: int) -> list[int]:
        out: list[int] = []
        for c in sorted(self.classes):
            lst = self.classes[c]
            taken, self.classes[c] = lst[: k - len(out)], lst[k - len(out) :]
            if taken:
                self.by_class[c] = self.by_class.get(c, 0) + len(taken)
            out += taken
        return out

    def candidates(self) -> list[int]:
        return [u for c in sorted(self.classes) for u in self.classes[c]]


batch_st = session_batches(SESSIONS, UNITS)
op_st = st.one_of(
    st.tuples(st.sampled_from(["acquire", "release", "insert_many", "remove_many"]), batch_st),
    st.tuples(st.sampled_from(["access", "remove", "unpin", "pin"]), batch_st),
    st.tuples(st.sampled_from(["evict_bytes", "evict_extents", "evict"]), st.integers(1, 70)),
    st.tuples(st.just("take_in"), st.tuples(batch_st, st.sampled_from([0, 0, 1, 5]))),
)


def _policy(drops: bool):
    sessions = [SessionKV(i, f"s{i}", PRIORITY[i]) for i in range(SESSIONS)]
    view = UnitView(sessions, PAGE, 3)
    ctx = PolicyContext(Tier.GPU, 16, 3, view=view, cpu_kv_bytes=None if drops else 1e9)
    return policy_class("qos")(ctx)


def _step(pol, ref: PlainQoS, call: str, arg, now: float) -> None:
    if call in ("release", "insert_many"):
        getattr(pol, call)(arg, now)
        for uid in arg:
            ref.add(uid)
    elif call in ("acquire", "remove_many"):
        getattr(pol, call)(arg, now) if call == "acquire" else pol.remove_many(arg)
        for uid in arg:
            ref.discard(uid)
    elif call == "access":
        for uid in arg:
            pol.access(uid, now)
            ref.access(uid)
    elif call == "unpin":
        for uid in arg:
            pol.unpin(uid, now)
            ref.add(uid)
    elif call in ("remove", "pin"):
        for uid in arg:
            getattr(pol, call)(uid)
            ref.discard(uid)
    elif call == "take_in":  # a demotion batch: units that are not candidates, as extents
        batch, free = arg
        held = set(ref.candidates())
        uids = [u for u in dict.fromkeys(batch) if u not in held]
        free = max(free, len(uids) - len(held))  # (the engine makes sure there is room)
        room = free
        expect: list[int] = []
        for uid in uids:  # the base class's insert-and-evict
            if free:
                free -= 1
            else:
                expect += ref.evict(1)
                assert expect, "the model ran out of victims"
            ref.add(uid)
        got = pol.take_in_extents(extents_of(uids), room * PAGE + PAGE // 2, now)
        assert got == extents_of(expect)
    elif call == "evict":
        for _ in range(arg):
            assert pol.evict(now) == next(iter(ref.evict(1)), None)
    else:
        victims = ref.evict(arg)
        if call == "evict_bytes":
            assert pol.evict_bytes(arg * PAGE, now) == victims
        else:
            expect = extents_of(sorted(victims) if pol.drops_victims else victims)
            assert pol.evict_extents(arg * PAGE, now) == expect


@settings(max_examples=400, deadline=None)
@given(st.lists(op_st, max_size=30), st.booleans())
def test_qos_runs_equal_a_list_per_class(ops, drops):
    pol, ref = _policy(drops), PlainQoS()
    for now, (call, arg) in enumerate(ops):
        _step(pol, ref, call, arg, float(now))
        cands = ref.candidates()
        assert len(pol) == len(cands)
        assert pol.peek(float(now)) == (cands[0] if cands else None)
        assert all(u in pol for u in cands[:10])
        assert pol.metrics().evictions_by_class == dict(sorted(ref.by_class.items()))
    assert pol.evict_bytes(10**6 * PAGE, 1e9) == ref.evict(10**6)
