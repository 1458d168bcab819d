"""Belady's groups (a session's candidates with one next use) against the plain definition: the
victim is the candidate with the largest (next use, uid), its key read when it became a candidate.
Engine-style uids (a session's pages consecutive), sessions released, pinned and evicted in runs,
next uses that tie across sessions and change between turns."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_batches import UniformView
from test_contract import PAGE

from sim.policies import PolicyContext, make_policy
from sim.policies.belady import _SessionGroups
from sim.units import Tier, uid_of

SESSIONS = 3
PAGES = 6
NEXT_USES = (2.0, 2.0, 5.0, float("inf"))  # ties on purpose, within and across sessions


class Model:
    """Candidates and their keys, the victim the largest (next use, uid)."""

    def __init__(self) -> None:
        self.key: dict[int, tuple[float, int]] = {}

    def add(self, uid: int, next_use: float) -> None:
        self.key[uid] = (next_use, uid)

    def take(self, n: int) -> list[int]:
        out = sorted(self.key, key=self.key.__getitem__, reverse=True)[:n]
        for uid in out:
            del self.key[uid]
        return out


ops = st.lists(
    st.tuples(
        st.sampled_from(["release", "acquire", "insert", "evict", "extents", "pin_one"]),
        st.integers(0, SESSIONS - 1),
        st.integers(0, PAGES),  # the first k pages of the session
        st.sampled_from(NEXT_USES),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.booleans(), st.booleans())
@example([("insert", 0, 6, 2.0), ("pin_one", 0, 3, 2.0), ("release", 0, 6, 2.0)], False, False)
@example([("insert", 0, 6, 2.0), ("pin_one", 0, 3, 2.0), ("release", 0, 6, 2.0)], False, True)
@example([("insert", 0, 6, 2.0), ("pin_one", 0, 3, 2.0), ("acquire", 0, 6, 2.0)], False, True)
def test_victims_are_the_largest_next_use_then_uid(calls, dropped, by_session):
    """Both forms of the candidates' groups: by uid (any view's) and by session (the engine's,
    which this view's uids are)."""
    view = UniformView()
    pol = make_policy(
        "belady", PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32, view=view)
    )
    if by_session:
        pol._where = _SessionGroups(pol._groups)
    pol.drops_victims = dropped
    model = Model()
    members: set[int] = set()  # in the tier, pinned or not
    for op, s, k, next_use in calls:
        run = [uid_of(s, p) for p in range(k)]
        for uid in run:
            view.sizes[uid] = PAGE
        if op == "release":  # a turn ends: its units (in the tier) rejoin with a new next use
            held = [u for u in run if u in members and u not in model.key]
            for uid in held:
                view.next[uid] = next_use
                model.add(uid, next_use)
            pol.release(held, 0.0)
        elif op == "acquire":
            held = [u for u in run if u in members]
            pol.acquire(held, 0.0)
            for uid in held:
                model.key.pop(uid, None)
        elif op == "insert":  # new pages enter unpinned
            fresh = [u for u in run if u not in members]
            for uid in fresh:
                view.next[uid] = next_use
                model.add(uid, next_use)
            members.update(fresh)
            pol.insert_many(fresh, 0.0)
        elif op == "pin_one" and run and run[-1] in model.key:  # any page of a group, alone
            pol.pin(run[-1])
            del model.key[run[-1]]
        elif op == "evict":
            got = pol.evict_bytes(k * PAGE, 0.0)
            want = model.take(k)
            assert got == want
            members.difference_update(got)
        elif op == "extents":
            got = [u for a, b in pol.evict_extents(k * PAGE, 0.0) for u in range(a, b)]
            want = model.take(k)
            assert (sorted(got) == sorted(want)) if dropped else got == want
            members.difference_update(got)
        assert len(pol) == len(model.key)
        assert all((uid in pol) == (uid in model.key) for uid in members)
        want_peek = max(model.key, key=model.key.__getitem__) if model.key else None
        assert pol.peek(0.0) == want_peek
