"""ARC on runs (``RunARC``, built where every unit has one size) against ARC on one ordered dict
per list (built where sizes may vary), driven by the same engine-like calls with units of one size
(hypothesis): the same victims, the same four lists in the same order and the same p after every
call. And ``RunList`` against a plain list of uids."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies import run_lists
from sim.policies.arc import ARC, RunARC
from sim.policies.base import PolicyContext
from sim.policies.run_lists import RunList
from sim.units import UNIT_BITS, Tier, extents_of

PAGE = 4096
SESSIONS = 3
PAGES = 40  # unit indices per session


class OneSizeView:
    """Every unit one page; ``unit_bytes`` says so or not (then ARC keeps its dicts)."""

    def __init__(self, says: bool) -> None:
        self.unit_bytes = PAGE if says else None

    def size(self, uid: int) -> int:
        return PAGE


def _arc(says: bool, tier: Tier, capacity: int | None) -> ARC:
    ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=1, view=OneSizeView(says))
    pol = ARC(ctx)
    if capacity is not None:
        pol.set_capacity(capacity * PAGE)
    return pol


def _uids(s: int, a: int, n: int) -> list[int]:
    return [s << UNIT_BITS | i for i in range(a, min(PAGES, a + n))]


class Twins:
    """The run form and the dict form, and the engine's view of each unit (candidate, pinned or
    out of the tier)."""

    def __init__(self, tier: Tier, capacity: int | None) -> None:
        self.runs, self.dicts = _arc(True, tier, capacity), _arc(False, tier, capacity)
        assert type(self.runs) is RunARC and type(self.dicts) is ARC
        self.state: dict[int, str] = {}  # uid -> "cand" | "pinned"

    def both(self, call: str, *args):
        got = getattr(self.runs, call)(*args)
        want = getattr(self.dicts, call)(*args)
        assert got == want, f"{call}{args}: {got} != {want}"
        return got

    def check(self) -> None:
        r, d = self.runs, self.dicts
        assert list(r._t1) == list(d._t1) and list(r._t2) == list(d._t2)
        assert list(r._b1) == list(d._b1) and list(r._b2) == list(d._b2)
        assert r.p == d.p and r._c() == d._c()
        assert len(r) == len(d) == sum(v == "cand" for v in self.state.values())
        assert len(r._t1) + len(r._t2) + len(r._h1) + len(r._h2) == len(self.state)

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
        elif op == 1:  # a turn starts
            uids = self._with(s, "cand") + self._with(s, "pinned") * (n % 3 == 0)
            uids = sorted(set(uids))
            self.both("acquire", uids, now)
            self.state.update(dict.fromkeys(uids, "pinned"))
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
            if v is not None and n % 2:
                assert self.both("evict", now) == v
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
def test_arc_on_runs_equals_arc_on_dicts(ops, capacity, tier):
    twins = Twins(tier, capacity)
    for op in ops:
        twins.step(*op)


def test_a_stretch_that_trims_b2_equals_one_victim_after_another():
    """Case IV's trim of B2 (the four lists over 2c, T1 + B1 within c) over many victims: T1
    empties into B1, then T2 into B2, trimming it while the lists hold 2c or more."""
    for first_t1 in (10, 4):
        twins = Twins(Tier.GPU, 10)
        twins.step(0, 0, 0, 15)  # 15 units of session 0 (pinned: n odd is unpinned)
        twins.step(1, 0, 0, 1)
        twins.step(2, 0, 0, 1)  # a turn: all 15 in T2
        twins.step(0, 1, 0, first_t1 + (first_t1 % 2 == 0))  # into T1
        twins.step(0, 2, 0, 9)
        twins.step(3, 0, 0, 30)
        twins.step(0, 1, 20, 11)  # back in T1, B1 trimmed
        twins.step(3, 0, 0, 12)


# -- RunList against a plain list -------------------------------------------------------------
LIST_OPS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, 2),
        st.integers(0, 90),
        st.integers(1, 90),
    ),
    max_size=150,
)


@settings(max_examples=400, deadline=None)
@given(LIST_OPS, st.sampled_from([3, run_lists.SHORT_RUN]))
# a hole of a short run taken again as a run of its own, then the old run popped past it
@example([(0, 0, 0, 10), (3, 0, 5, 1), (0, 0, 0, 10), (2, 0, 0, 9)], run_lists.SHORT_RUN)
def test_run_list_equals_a_plain_list(ops, short_run):
    kept = run_lists.SHORT_RUN
    run_lists.SHORT_RUN = short_run  # short runs are indexed by uid, long ones scanned
    try:
        _run_list_against_a_list(ops)
    finally:
        run_lists.SHORT_RUN = kept


def _run_list_against_a_list(ops) -> None:
    rl, ref = RunList(), []
    for op, s, a, n in ops:
        lo, hi = s << UNIT_BITS | a, s << UNIT_BITS | min(a + n, 100)
        if op == 0:  # append the range's non-members, as runs
            new = [u for u in range(lo, hi) if u not in ref]
            rl.push_runs(extents_of(new))
            ref += new
        elif op == 1:
            want = sorted(u for u in ref if lo <= u < hi)
            assert rl.count_in(lo, hi) == len(want)
            assert rl.first_in(lo, hi) == (want[0] if want else None)
            got = rl.take_range(lo, hi)
            assert got == extents_of(want)
            ref = [u for u in ref if not lo <= u < hi]
        elif op == 2:
            got = [u for x, y in rl.pop_runs(n) for u in range(x, y)]
            assert got == ref[:n]
            ref = ref[n:]
        elif op == 3:
            assert rl.discard(lo) == (lo in ref)
            if lo in ref:
                ref.remove(lo)
        elif op == 4:  # the whole bucket's members, a range at a time
            assert rl.count_in(lo, hi) == sum(lo <= u < hi for u in ref)
            if any(lo <= u < hi for u in ref):
                assert rl.meets(lo, hi)
        else:
            assert rl.first() == (ref[0] if ref else None)
        assert list(rl) == ref and len(rl) == len(ref)
        assert all(u in rl for u in ref)
        members = set(ref)
        for u in range(lo - 1, hi + 1):
            assert (u in rl) == (u in members)
