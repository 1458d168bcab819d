"""S3-FIFO on runs (``RunS3FIFO``, built where every unit has one size) against S3-FIFO on one
entry per unit (built where sizes may vary), driven by the same engine-like calls with units of
one size (hypothesis): the same answers to every call, and after every call the same candidates of
S and of M in the same order, the same members, the same counters and the same ghost keys."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies import s3fifo_runs
from sim.policies.base import PolicyContext
from sim.policies.s3fifo import S3FIFO
from sim.policies.s3fifo_runs import RunS3FIFO
from sim.units import UNIT_BITS, Tier, extents_of

PAGE = 4096
SESSIONS = 3
PAGES = 40  # unit indices per session


class OneSizeView:
    """Every unit one page; ``unit_bytes`` says so or not (then S3-FIFO keeps one entry per
    unit)."""

    def __init__(self, says: bool) -> None:
        self.unit_bytes = PAGE if says else None

    def size(self, uid: int) -> int:
        return PAGE


def _s3fifo(says: bool, tier: Tier, capacity: int | None) -> S3FIFO:
    ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=1, view=OneSizeView(says))
    pol = RunS3FIFO(ctx) if says else S3FIFO(ctx)  # (S3FIFO builds runs in a GPU tier only)
    if capacity is not None:
        pol.set_capacity(capacity * PAGE)
    return pol


def _uids(s: int, a: int, n: int) -> list[int]:
    return [s << UNIT_BITS | i for i in range(a, min(PAGES, a + n))]


class Twins:
    """The run form and the per-unit form, and the engine's view of each unit (candidate, pinned
    or out of the tier)."""

    def __init__(self, tier: Tier, capacity: int | None) -> None:
        self.runs, self.units = _s3fifo(True, tier, capacity), _s3fifo(False, tier, capacity)
        assert type(self.runs) is RunS3FIFO and type(self.units) is S3FIFO
        self.state: dict[int, str] = {}  # uid -> "cand" | "pinned"

    def both(self, call: str, *args):
        got = getattr(self.runs, call)(*args)
        want = getattr(self.units, call)(*args)
        assert got == want, f"{call}{args}: {got} != {want}"
        return got

    def check(self) -> None:
        r, u = self.runs, self.units
        assert list(r._s.candidates()) == list(u._q[0]._order.candidates())
        assert list(r._m.candidates()) == list(u._q[1]._order.candidates())
        for uid in self.state:
            q = u._queue_of[uid]
            assert (r._s.is_member(uid), r._m.is_member(uid)) == (q == 0, q == 1), uid
        assert r._freq == {uid: f for uid, f in u._freq.items() if f}
        assert list(r._ghost) == list(u._ghost)
        assert r._has_evicted == u._has_evicted and r._budget.c == u._budget.c
        assert len(r) == len(u) == sum(v == "cand" for v in self.state.values())

    def _with(self, s: int, state: str) -> list[int]:
        return [u for u in _uids(s, 0, PAGES) if self.state.get(u) == state]

    def _gone(self, victims) -> None:
        for u in victims:
            assert self.state.pop(u) == "cand"

    def step(self, op: int, s: int, a: int, n: int) -> None:
        now = 0.0
        if op == 0:  # new units (pinned or not), some of them ghosts
            uids = [u for u in _uids(s, a, n) if u not in self.state]
            if a % 3 == 0:  # a batch across sessions, in no uid order
                uids = [u for u in _uids((s + 1) % SESSIONS, a, n) if u not in self.state] + uids
            if a % 5 == 0:
                uids.reverse()
            pinned = n % 2 == 0
            self.both("insert_many", uids, now, pinned)
            self.state.update(dict.fromkeys(uids, "pinned" if pinned else "cand"))
        elif op == 1:  # a turn starts (twice over: the counters reach 2 and more)
            uids = self._with(s, "cand") + self._with(s, "pinned") * (n % 3 == 0)
            uids = sorted(set(uids))
            if n % 4 == 1:
                uids = uids[: len(uids) // 2]  # a hit on part of a run
            for _ in range(1 + n % 2):
                self.both("acquire", uids, now)
                self.state.update(dict.fromkeys(uids, "pinned"))
                if n % 2:
                    self.both("release", uids, now)
                    self.state.update(dict.fromkeys(uids, "cand"))
        elif op == 2:  # a turn ends
            uids = self._with(s, "pinned")
            whole = bool(uids) and uids[-1] - uids[0] + 1 == len(uids)
            self.both("release", range(uids[0], uids[-1] + 1) if whole else uids, now)
            self.state.update(dict.fromkeys(uids, "cand"))
        elif op == 3:
            self._gone(self.both("evict_bytes", n * PAGE, now))
        elif op == 4:
            ext = self.both("evict_extents", n * PAGE, now)
            self._gone([u for x, y in ext for u in range(x, y)])
        elif op == 5:
            v = self.both("peek", now)
            if n % 2:
                assert self.both("evict", now) == v
                if v is not None:
                    self._gone([v])
        elif op == 6:  # a demotion batch into this tier
            uids = [u for u in _uids(s, a, n) if u not in self.state]
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
            self._gone(out)
        elif op == 7:  # the engine takes units away
            uids = [u for u in _uids(s, a, n) if u in self.state]
            if n % 2:
                self.both("remove_many", uids, False)
            else:
                for u in uids:
                    self.both("remove", u, self.state[u] == "pinned")
            for u in uids:
                del self.state[u]
        elif op == 8:  # one unit at a time
            uid = _uids(s, a, 1)[0]
            st_ = self.state.get(uid)
            if st_ is None:
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
        self.check()


OPS = st.lists(
    st.tuples(
        st.integers(0, 8),
        st.integers(0, SESSIONS - 1),
        st.integers(0, PAGES - 1),
        st.integers(1, 16),
    ),
    max_size=120,
)


@settings(max_examples=600, deadline=None)
@given(OPS, st.sampled_from([None, 6, 20, 45]), st.sampled_from([Tier.GPU, Tier.CPU]))
def test_s3fifo_on_runs_equals_s3fifo_per_unit(ops, capacity, tier):
    assert type(_s3fifo(True, Tier.GPU, None)) is RunS3FIFO
    twins = Twins(tier, capacity)
    for op in ops:
        twins.step(*op)


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from([None, 6, 20]))
@example([(0, 0, 0, 15), (1, 0, 0, 3), (0, 1, 0, 11), (3, 0, 0, 16), (3, 0, 0, 9)], 20)
def test_short_readings_of_the_counters_equal_s3fifo_per_unit(ops, capacity):
    """The walks read a run's counters a few units at a time: many readings per walk."""
    kept = s3fifo_runs.FIRST_LOOK
    s3fifo_runs.FIRST_LOOK = 1
    try:
        twins = Twins(Tier.GPU, capacity)
        for op in ops:
            twins.step(*op)
    finally:
        s3fifo_runs.FIRST_LOOK = kept
