"""A policy's run form against its per-unit form, driven by the same engine-like calls.

Both forms get units of one page (``OneSizeView``: the run form where ``unit_bytes`` is set, the
per-unit form where it is not); every answer is compared, and after every call each test compares
the two forms' own state (``TwinDriver.compare``). ``TwinDriver.step`` takes one op of ``OPS``:
``(op, session, first page, count)``. A test overrides an op where its policy has a twist of its
own (a turn that hits part of a run, a request incoming before an insert)."""

from __future__ import annotations

from hypothesis import strategies as st

from sim.units import UNIT_BITS, extents_of, uid_of

PAGE = 4096
SESSIONS = 3
PAGES = 40  # unit indices per session


class OneSizeView:
    """Every unit one page; ``unit_bytes`` says so or not (then the policy keeps its per-unit
    form)."""

    def __init__(self, says: bool) -> None:
        self.unit_bytes = PAGE if says else None

    def size(self, uid: int) -> int:
        return PAGE


def uids_of(s: int, a: int, n: int) -> list[int]:
    """Session ``s``'s units from page ``a``, ``n`` of them (fewer at the session's end)."""
    return [s << UNIT_BITS | i for i in range(a, min(PAGES, a + n))]


OPS = st.lists(
    st.tuples(
        st.integers(0, 8),
        st.integers(0, SESSIONS - 1),
        st.integers(0, PAGES - 1),
        st.integers(1, 16),
    ),
    max_size=120,
)


def session_batches(sessions: int, units: int):
    """Batches as the engine gives them on its ``UnitView``: units of one session from a page (a
    range, a list, a list with holes, or reversed), or any units of any sessions."""

    def batch(s: int, a: int, n: int, form: int):
        uids = list(range(uid_of(s, a), uid_of(s, min(a + n, units))))
        if form == 0:
            return range(uid_of(s, a), uid_of(s, min(a + n, units)))
        if form == 1:
            return uids
        if form == 2:
            return uids[::2] + uids[1::4]
        return uids[::-1]

    return st.one_of(
        st.builds(
            batch,
            st.integers(0, sessions - 1),
            st.integers(0, units - 1),
            st.integers(1, units),
            st.integers(0, 3),
        ),
        st.lists(
            st.builds(uid_of, st.integers(0, sessions - 1), st.integers(0, units - 1)), max_size=12
        ),
    )


class TwinDriver:
    """The run form and the per-unit form, and the engine's view of each unit (candidate, pinned
    or out of the tier)."""

    def __init__(self, runs, plain) -> None:
        self.runs, self.plain = runs, plain
        self.state: dict[int, str] = {}  # uid -> "cand" | "pinned"

    def both(self, call: str, *args):
        got = getattr(self.runs, call)(*args)
        want = getattr(self.plain, call)(*args)
        assert got == want, f"{call}{args}: {got} != {want}"
        return got

    def compare(self) -> None:
        """The two forms' own state, the same (each test's)."""
        raise NotImplementedError

    def check(self) -> None:
        self.compare()
        cands = sum(v == "cand" for v in self.state.values())
        assert len(self.runs) == len(self.plain) == cands

    def with_state(self, s: int, state: str) -> list[int]:
        return [u for u in uids_of(s, 0, PAGES) if self.state.get(u) == state]

    def gone(self, victims) -> None:
        for u in victims:
            assert self.state.pop(u) == "cand"

    def step(self, op: int, s: int, a: int, n: int) -> None:
        (
            self.new_units,
            self.turn_starts,
            self.turn_ends,
            self.evict_bytes,
            self.evict_extents,
            self.peek,
            self.demotion,
            self.removal,
            self.one_unit,
        )[op](s, a, n, 0.0)
        self.check()

    def new_units(self, s: int, a: int, n: int, now: float) -> None:
        """New units (pinned or not), some of them ghosts."""
        uids = [u for u in uids_of(s, a, n) if u not in self.state]
        if a % 3 == 0:  # a batch across sessions, in no uid order
            uids = [u for u in uids_of((s + 1) % SESSIONS, a, n) if u not in self.state] + uids
        if a % 5 == 0:
            uids.reverse()
        pinned = n % 2 == 0
        self.both("insert_many", uids, now, pinned)
        self.state.update(dict.fromkeys(uids, "pinned" if pinned else "cand"))

    def turn_start_units(self, s: int, n: int) -> list[int]:
        """A turn's units: its candidates, with its pinned ones (repeats) now and then."""
        uids = self.with_state(s, "cand") + self.with_state(s, "pinned") * (n % 3 == 0)
        return sorted(set(uids))

    def turn_starts(self, s: int, a: int, n: int, now: float) -> None:
        uids = self.turn_start_units(s, n)
        self.both("acquire", uids, now)
        self.state.update(dict.fromkeys(uids, "pinned"))

    def turn_end_units(self, s: int, n: int) -> list[int]:
        """A finished turn's units: its pinned ones."""
        return self.with_state(s, "pinned")

    def turn_ends(self, s: int, a: int, n: int, now: float) -> None:
        uids = self.turn_end_units(s, n)
        whole = bool(uids) and uids[-1] - uids[0] + 1 == len(uids)
        self.both("release", range(uids[0], uids[-1] + 1) if whole else uids, now)
        self.state.update(dict.fromkeys(uids, "cand"))

    def evict_bytes(self, s: int, a: int, n: int, now: float) -> None:
        self.gone(self.both("evict_bytes", n * PAGE, now))

    def evict_extents(self, s: int, a: int, n: int, now: float) -> None:
        ext = self.both("evict_extents", n * PAGE, now)
        self.gone([u for x, y in ext for u in range(x, y)])

    def peek(self, s: int, a: int, n: int, now: float) -> None:
        """A peek, and now and then the eviction it names."""
        v = self.both("peek", now)
        if n % 2:
            assert self.both("evict", now) == v
            if v is not None:
                self.gone([v])

    def demotion(self, s: int, a: int, n: int, now: float) -> None:
        """A demotion batch into this tier, as uids or as extents."""
        uids = [u for u in uids_of(s, a, n) if u not in self.state]
        if a % 2:
            uids.reverse()
        free = (a % 5) * PAGE
        cands = sum(v == "cand" for v in self.state.values())
        if len(uids) > free // PAGE and cands + free // PAGE < 1:
            return  # room cannot be made
        if n % 2:
            out = self.both("take_in", uids, free, now)
        else:
            ext = self.both("take_in_extents", extents_of(uids), free, now)
            out = [u for x, y in ext for u in range(x, y)]
        self.state.update(dict.fromkeys(uids, "cand"))
        self.gone(out)

    def removal(self, s: int, a: int, n: int, now: float) -> None:
        """The engine takes units away, in one call or one at a time."""
        uids = [u for u in uids_of(s, a, n) if u in self.state]
        if n % 2:
            self.both("remove_many", uids, False)
        else:
            for u in uids:
                self.both("remove", u, self.state[u] == "pinned")
        for u in uids:
            del self.state[u]

    def admits(self, uid: int, a: int, now: float) -> bool:
        """Before a single insert: may the unit enter? (A test may hear the request first.)"""
        return True

    def one_unit(self, s: int, a: int, n: int, now: float) -> None:
        """One unit at a time: an insert (pinned or not), a hit and a pin, or an unpin."""
        uid = uids_of(s, a, 1)[0]
        st_ = self.state.get(uid)
        if st_ is None:
            if not self.admits(uid, a, now):
                return
            self.both("insert", uid, now, n % 2 == 0)
            self.state[uid] = "pinned" if n % 2 == 0 else "cand"
        elif st_ == "cand":
            self.both("access", uid, now)
            if n % 2:
                self.both("pin", uid)
                self.state[uid] = "pinned"
        else:
            if n % 3 == 0:
                self.both("access", uid, now)
            self.both("unpin", uid, now)
            self.state[uid] = "cand"
