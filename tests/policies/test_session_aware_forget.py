"""session-aware's acquire of every candidate of a session at once (``_forget_session``: the
uids read once, the session's flags and the session dropped whole) against the same policy with
that path off (``_forget``'s general path), over the engine's ``UnitView`` at one and at three
layers a page, sessions long enough for the path's lists (64 uids and more): the same answers and,
after every call, the same sessions (candidates, their times, the ranking) and the same flags."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies import PolicyContext
from sim.policies.session_aware import SessionAware
from sim.units import SessionKV, Tier, UnitView, uid_of

PAGE = 64
SESSIONS, UNITS = 3, 96


class _General(SessionAware):
    def _forget_session(self, uids) -> bool:
        return False


def _state(pol: SessionAware):
    sessions = {
        i: (
            list(s.cand) if s.span is None else ("span", s.span),
            dict(s.times),
            s.a,
            None if s.when is None else dict(s.when),
        )
        for i, s in pol._sessions.items()
    }
    flags = {b: bytes(f).rstrip(b"\x00") for b, f in pol._held._flags.items()}
    return sessions, flags, dict(pol._held._count), len(pol._held), pol._order.min()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["release", "acquire", "acquire", "insert", "fill", "remove", "evict"]),
        st.integers(0, SESSIONS - 1),
        st.integers(0, UNITS - 1),  # first unit
        st.integers(1, UNITS),  # count
        st.sampled_from(["range", "list", "holes"]),  # the batch's form
        st.sampled_from([1.0, 1.0, 2.0, 3.0]),  # the session's last use (ties on purpose)
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(OPS, st.sampled_from([1, 3]))
@example(
    [
        ("insert", 0, 0, 96, "range", 1.0),
        ("acquire", 0, 0, 96, "list", 1.0),
        ("release", 0, 0, 96, "range", 2.0),
        ("evict", 0, 0, 5, "range", 1.0),
        ("acquire", 0, 0, 96, "list", 1.0),
    ],
    3,
)
def test_acquire_of_a_whole_session_equals_the_general_path(calls, layers):
    sessions = [SessionKV(i, f"s{i}", 0) for i in range(SESSIONS)]
    view = UnitView(sessions, PAGE, layers)
    fast = SessionAware(PolicyContext(Tier.GPU, 16, layers, view=view))
    plain = _General(PolicyContext(Tier.GPU, 16, layers, view=view))
    members: set[int] = set()
    cands: set[int] = set()
    for now, (op, s, first, count, form, last) in enumerate(calls, start=1):
        stop = min(first + count, UNITS)
        run = [uid_of(s, i) for i in range(first, stop, 2 if form == "holes" else 1)]
        sessions[s].last_access_s = last
        if op == "release":
            held = [u for u in run if u in members and u not in cands]
            if not held:
                continue
            whole = held[-1] - held[0] == len(held) - 1
            batch = range(held[0], held[-1] + 1) if whole and form == "range" else held
            for pol in (fast, plain):
                pol.release(batch, float(now))
            cands.update(held)
        elif op == "acquire":  # the engine's: every unit of the session in the tier
            if form != "holes":
                run = [uid_of(s, i) for i in range(UNITS)]
            held = [u for u in run if u in members]
            whole = held and held[-1] - held[0] == len(held) - 1
            batch = range(held[0], held[-1] + 1) if whole and form == "range" else held
            for pol in (fast, plain):
                pol.acquire(batch, float(now))
            cands.difference_update(held)
        elif op in ("insert", "fill"):  # fill: every unit of the session, none pinned
            if op == "fill":
                run, form = [uid_of(s, i) for i in range(UNITS)], "list"
            fresh = [u for u in run if u not in members]
            pinned = form == "holes"
            for pol in (fast, plain):
                pol.insert_many(fresh, float(now), pinned)
            members.update(fresh)
            if not pinned:
                cands.update(fresh)
        elif op == "remove":
            gone = [u for u in run if u in members]
            for pol in (fast, plain):
                pol.remove_many([u for u in gone if u in cands], False)
                pol.remove_many([u for u in gone if u not in cands], True)
            members.difference_update(gone)
            cands.difference_update(gone)
        else:
            got = fast.evict_bytes(count * PAGE, float(now))
            assert got == plain.evict_bytes(count * PAGE, float(now))
            members.difference_update(got)
            cands.difference_update(got)
        assert _state(fast) == _state(plain)
        assert len(fast) == len(plain) == len(cands)
        assert fast.peek(float(now)) == plain.peek(float(now))


def test_the_path_is_taken_for_a_listed_session_and_not_for_part_of_one():
    sessions = [SessionKV(i, f"s{i}", 0) for i in range(2)]
    view = UnitView(sessions, PAGE, 3)
    pol = SessionAware(PolicyContext(Tier.GPU, 16, 3, view=view))
    uids = [uid_of(0, i) for i in range(UNITS)]
    pol.insert_many(uids, 1.0, False)
    pol.insert_many([uid_of(0, UNITS)], 1.0, True)  # a pinned member
    assert not pol._forget_session(uids[:-1])  # part of its candidates
    assert not pol._forget_session(uids[:-1] + [uid_of(0, UNITS)])  # as many, one pinned
    assert not pol._forget_session(uids[:-1] + [uid_of(1, 0)])  # two sessions
    assert pol._forget_session(uids[::-1])  # all of them, in any order
    assert len(pol) == 0 and not pol._sessions and not pol._held._flags
