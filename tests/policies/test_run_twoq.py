"""2Q on runs (``RunTwoQ``, built where every unit has one size) against 2Q on ordered dicts (built
where sizes may vary), driven by the same engine-like calls with units of one size (hypothesis):
the same victims and the same queues (A1in's candidates in order, Am, A1out, the pinned units and
the queue each returns to) after every call. And ``GhostRuns`` (A1out) against a plain list of
uids."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies.base import PolicyContext
from sim.policies.ghost_runs import GhostRuns
from sim.policies.run_lists import split_at_sessions
from sim.policies.twoq import A1IN, AM, RunTwoQ, TwoQ
from sim.units import UNIT_BITS, Tier, extents_of

PAGE = 4096
SESSIONS = 3
PAGES = 40  # unit indices per session


class OneSizeView:
    """Every unit one page; ``unit_bytes`` says so or not (then 2Q keeps its dicts)."""

    def __init__(self, says: bool) -> None:
        self.unit_bytes = PAGE if says else None

    def size(self, uid: int) -> int:
        return PAGE


def _twoq(says: bool, tier: Tier, capacity: int | None) -> TwoQ:
    ctx = PolicyContext(tier=tier, block_tokens=16, num_layers=1, view=OneSizeView(says))
    pol = TwoQ(ctx)
    if capacity is not None:
        pol.set_capacity(capacity * PAGE)
    return pol


def _uids(s: int, a: int, n: int) -> list[int]:
    return [s << UNIT_BITS | i for i in range(a, min(PAGES, a + n))]


class Twins:
    """The run form and the dict form, and the engine's view of each unit (candidate, pinned or
    out of the tier)."""

    def __init__(self, tier: Tier, capacity: int | None) -> None:
        self.runs, self.dicts = _twoq(True, tier, capacity), _twoq(False, tier, capacity)
        assert type(self.runs) is RunTwoQ and type(self.dicts) is TwoQ
        self.state: dict[int, str] = {}  # uid -> "cand" | "pinned"

    def both(self, call: str, *args):
        got = getattr(self.runs, call)(*args)
        want = getattr(self.dicts, call)(*args)
        assert got == want, f"{call}{args}: {got} != {want}"
        return got

    def check(self) -> None:
        r, d = self.runs, self.dicts
        assert list(r._ain.candidates()) == list(d._ain._order.candidates())
        assert list(r._am) == list(d._am) and list(r._aout) == list(d._aout)
        assert r._sizes() == d._sizes() and r._budget.resident == d._budget.resident
        assert len(r) == len(d) == sum(v == "cand" for v in self.state.values())
        assert set(r._hm) == {u for u, q in d._pinned.items() if q == AM}
        for u, v in self.state.items():
            in_ain = r._ain.is_member(u) and u not in r._ain
            assert in_ain == (d._pinned.get(u) == A1IN), u
            assert (v == "pinned") == (u in d._pinned)

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
            if n % 4 == 0:  # with a candidate among them: one at a time
                uids = sorted(set(uids + self._with(s, "cand")[:1]))
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
        elif op == 8:  # one unit at a time, some with a request incoming
            uid = _uids(s, a, 1)[0]
            st_ = self.state.get(uid)
            if st_ is None:
                if a % 2:
                    self.both("admitting", uid, now)
                    if not self.both("admit", uid):
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
def test_twoq_on_runs_equals_twoq_on_dicts(ops, capacity, tier):
    twins = Twins(tier, capacity)
    for op in ops:
        twins.step(*op)


def test_a1in_over_kin_then_am_then_a1in_again_equals_one_victim_after_another():
    """``evict_bytes``' three stretches in one call: A1in down to Kin, Am to empty, A1in again,
    its victims' keys entering A1out (which drops its oldest past Kout)."""
    twins = Twins(Tier.GPU, 20)
    twins.step(0, 0, 1, 9)  # 9 units of session 0 into A1in (n odd: unpinned)
    twins.step(3, 0, 0, 9)  # all evicted: their keys in A1out
    twins.step(0, 0, 1, 9)  # ghost hits: into Am
    twins.step(0, 1, 1, 15)  # 15 into A1in
    twins.step(3, 0, 0, 30)


# -- GhostRuns against a plain list ------------------------------------------------------------
GHOST_OPS = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.integers(1, 3),
        st.integers(0, 99),
        st.integers(1, 60),
    ),
    max_size=150,
)


def _ghost_uid(s: int, i: int) -> int:
    """Uids ``i`` of 0 .. 99 around the start of bucket ``s``: ranges may cross two buckets."""
    return (s << UNIT_BITS) + i - 50


@settings(max_examples=500, deadline=None)
@given(GHOST_OPS)
# the oldest run emptied by ghost hits, then forgotten past it (a dead entry at the head)
@example([(0, 1, 60, 5), (0, 1, 70, 5), (2, 1, 60, 5), (0, 2, 60, 5), (0, 2, 70, 8)])
def test_ghost_runs_equal_a_plain_list(ops):
    g, ref = GhostRuns(), []
    for op, s, a, n in ops:
        lo, hi = _ghost_uid(s, a), _ghost_uid(s, min(a + n, 100))
        if op == 0:  # victims enter as runs; the oldest past a limit are forgotten
            new = [u for u in range(lo, hi) if u not in ref]
            limit = None if n % 3 == 0 else 2 * n
            g.push_runs(extents_of(new), limit)
            ref += new
            if limit is not None:
                ref = ref[max(0, len(ref) - limit) :]
        elif op == 1:
            g.forget(n)
            ref = ref[n:]
        elif op == 2:  # the ghosts of a range taken out (ghost hits)
            want = sorted(u for u in ref if lo <= u < hi)
            assert g.take_range(lo, hi) == extents_of(want)
            ref = [u for u in ref if not lo <= u < hi]
        elif op == 3:
            assert g.discard(lo) == (lo in ref)
            if lo in ref:
                ref.remove(lo)
        else:  # the one-bucket questions, a bucket's part of the range at a time
            for x, y in split_at_sessions([(lo, hi)]):
                want = [u for u in ref if x <= u < y]
                assert g.first_in(x, y) == (min(want) if want else None)
                if want:
                    assert g.meets(x, y)
        assert list(g) == ref and len(g) == len(ref) and bool(g) == bool(ref)
        members = set(ref)
        for u in range(lo - 1, hi + 1):
            assert (u in g) == (u in members)
