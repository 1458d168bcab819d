"""session-aware against its definition written plainly (hypothesis), over the engine's
``UnitView`` at one and at three layers a page: the victim is a candidate of the session whose
latest candidate time is the oldest (ties: the lower session index), and within it the highest
page, then the lowest layer. A unit's time is its session's last use when it became a candidate
(capped at now). Sessions' units are released, pinned, inserted, removed and evicted in the
engine's batches (a session's range, its pages with holes), at times that repeat and that differ
between a session's candidates."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies import PolicyContext, policy_class
from sim.units import UNIT_MASK, SessionKV, Tier, UnitView, uid_of

PAGE = 64
SESSIONS, UNITS = 3, 12


class Model:
    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.time: dict[int, float] = {}  # candidate -> its time

    def victim(self) -> int | None:
        if not self.time:
            return None
        latest: dict[int, float] = {}
        for u, t in self.time.items():
            latest[u >> 24] = max(latest.get(u >> 24, t), t)
        session = min(latest, key=lambda s: (latest[s], s))
        units = [u for u in self.time if u >> 24 == session]
        layers = self.layers
        return max(units, key=lambda u: ((u & UNIT_MASK) // layers, -((u & UNIT_MASK) % layers)))

    def take(self, n: int) -> list[int]:
        out = []
        while len(out) < n and self.time:
            v = self.victim()
            del self.time[v]
            out.append(v)
        return out


OPS = st.lists(
    st.tuples(
        st.sampled_from(["release", "acquire", "insert", "remove", "evict", "extents"]),
        st.integers(0, SESSIONS - 1),
        st.integers(0, UNITS - 1),  # first unit
        st.integers(1, UNITS),  # count
        st.booleans(),  # every other unit (holes) or a range
        st.sampled_from([1.0, 1.0, 2.0, 3.0]),  # the session's last use (ties on purpose)
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(OPS, st.sampled_from([1, 3]), st.booleans())
@example(  # a session's candidates of two times, evicted, then pinned whole and released
    [
        ("insert", 0, 0, 6, False, 1.0),
        ("acquire", 0, 0, 2, False, 1.0),
        ("release", 0, 0, 2, False, 3.0),
        ("evict", 0, 0, 3, False, 1.0),
        ("acquire", 0, 0, 6, False, 1.0),
        ("release", 0, 0, 6, False, 2.0),
    ],
    3,
    True,
)
@example(  # a released range of whole pages (kept as a range of keys) loses units one at a time
    [  # (a pinned unit of the session in the batch): from its low end, then its top
        ("insert", 0, 0, 6, False, 1.0),
        ("acquire", 0, 0, 6, False, 1.0),
        ("release", 0, 0, 6, False, 2.0),
        ("insert", 0, 6, 4, True, 2.0),
        ("remove", 0, 0, 12, False, 2.0),
    ],
    3,
    False,
)
@example(  # the same at a layer a page, and victims from the range's top while it is one
    [
        ("insert", 0, 0, 6, False, 1.0),
        ("acquire", 0, 0, 6, False, 1.0),
        ("release", 0, 0, 6, False, 2.0),
        ("evict", 0, 0, 2, False, 1.0),
        ("insert", 0, 6, 4, True, 2.0),
        ("remove", 0, 0, 12, False, 2.0),
    ],
    1,
    False,
)
@example(  # victims across pages, a part of each end page: the last page's top layers only
    [
        ("insert", 0, 0, 3, False, 1.0),
        ("insert", 0, 5, 1, False, 1.0),
        ("extents", 0, 0, 3, False, 1.0),
    ],
    3,
    True,
)
def test_victims_are_the_plain_definitions(calls, layers, dropped):
    sessions = [SessionKV(i, f"s{i}", 0) for i in range(SESSIONS)]
    view = UnitView(sessions, PAGE, layers)
    pol = policy_class("session-aware")(PolicyContext(Tier.GPU, 16, layers, view=view))
    pol.drops_victims = dropped
    model = Model(layers)
    members: set[int] = set()  # in the tier, candidates or pinned
    for now, (op, s, first, count, holes, last) in enumerate(calls, start=1):
        stop = min(first + count, UNITS)
        step = 2 if holes else 1
        run = [uid_of(s, i) for i in range(first, stop, step)]
        batch = run if holes else range(run[0], run[-1] + 1)
        sessions[s].last_access_s = last
        if op == "release":  # a turn ends: its pinned units rejoin
            held = [u for u in batch if u in members and u not in model.time]
            whole = held and held[-1] - held[0] == len(held) - 1  # as the engine: a range
            pol.release(range(held[0], held[-1] + 1) if whole else held, float(now))
            model.time.update(dict.fromkeys(held, min(float(now), last)))
        elif op == "acquire":  # a turn starts: its units in the tier are pinned
            held = [u for u in batch if u in members]
            pol.acquire(held, float(now))
            for u in held:
                model.time.pop(u, None)
        elif op == "insert":  # new units enter pinned (the engine's) or not
            fresh = [u for u in batch if u not in members]
            pol.insert_many(fresh, float(now), holes)
            members.update(fresh)
            if not holes:
                model.time.update(dict.fromkeys(fresh, min(float(now), last)))
        elif op == "remove":  # the engine moves units out of the tier
            gone = [u for u in batch if u in members]
            pol.remove_many(gone, False)
            pol.remove_many([u for u in gone if u not in model.time], True)
            members.difference_update(gone)
            for u in gone:
                model.time.pop(u, None)
        elif op == "evict":
            got = pol.evict_bytes(count * PAGE, float(now))
            assert got == model.take(count)
            members.difference_update(got)
        else:
            got = [u for a, b in pol.evict_extents(count * PAGE, float(now)) for u in range(a, b)]
            want = model.take(count)
            assert (sorted(got) == sorted(want)) if dropped else got == want
            members.difference_update(got)
        assert len(pol) == len(model.time)
        assert all((u in pol) == (u in model.time) for u in members)
        assert pol.peek(float(now)) == model.victim()
