"""``RunList`` against plain models (hypothesis): a plain list of uids for the ordered list, and a
plain set for a pinned set filled with ``add_runs`` (order unused), each checked after every call
along with the uid index (its buckets indexed at their first find, after 2 runs, or as in use)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies import run_lists
from sim.policies.run_lists import RunList
from sim.units import UNIT_BITS, extents_of

LIST_OPS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, 2),
        st.integers(0, 90),
        st.integers(1, 90),
    ),
    max_size=150,
)
SHORT_RUNS = st.sampled_from([3, run_lists.SHORT_RUN])
INDEX_AT = st.sampled_from([0, 2, run_lists.INDEX_AT])


def _with(short_run: int, index_at: int, check, ops) -> None:
    kept = run_lists.SHORT_RUN, run_lists.INDEX_AT
    # In an indexed bucket short runs are indexed by uid, long ones scanned; a bucket is indexed
    # once a find meets more than INDEX_AT runs in it (0: at its first find).
    run_lists.SHORT_RUN, run_lists.INDEX_AT = short_run, index_at
    try:
        check(ops)
    finally:
        run_lists.SHORT_RUN, run_lists.INDEX_AT = kept


def _check_index(rl: RunList) -> None:
    """The index holds exactly the members of the indexed buckets' short runs, each to its run;
    a short run is one of at most SHORT_RUN uids (a run extended past it is long)."""
    want = {}
    for b in rl._indexed:
        for key in rl._in[b]:
            first, stop, holes, bucket, short = rl._runs[key]
            assert bucket == b
            if short:
                want.update((u, key) for u in range(first, stop) if not holes or u not in holes)
    assert rl._where == want
    assert rl._indexed <= rl._in.keys()
    for key, (first, stop, _, b, short) in rl._runs.items():
        assert not short or stop - first <= run_lists.SHORT_RUN
        assert (key in rl._long.get(b, ())) == (not short)


def _span(s: int, a: int, n: int) -> tuple[int, int]:
    return s << UNIT_BITS | a, s << UNIT_BITS | min(a + n, 100)


@settings(max_examples=400, deadline=None)
@given(LIST_OPS, SHORT_RUNS, INDEX_AT)
# a hole of a short run taken again as a run of its own, then the old run popped past it
@example([(0, 0, 0, 10), (3, 0, 5, 1), (0, 0, 0, 10), (2, 0, 0, 9)], run_lists.SHORT_RUN, 0)
def test_run_list_equals_a_plain_list(ops, short_run, index_at):
    _with(short_run, index_at, _run_list_against_a_list, ops)


def _run_list_against_a_list(ops) -> None:
    rl, ref = RunList(), []
    for op, s, a, n in ops:
        lo, hi = _span(s, a, n)
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
        _check_index(rl)
        assert all(u in rl for u in ref)
        members = set(ref)
        for u in range(lo - 1, hi + 1):
            assert (u in rl) == (u in members)
        _check_index(rl)


@settings(max_examples=400, deadline=None)
@given(LIST_OPS, SHORT_RUNS, INDEX_AT)
# a session's pages added a few at a time: one run, long once past SHORT_RUN
@example([(5, 0, 0, 2), (5, 0, 2, 2), (5, 0, 4, 3), (3, 0, 1, 1), (1, 0, 0, 9)], 3, 0)
def test_a_pinned_set_equals_a_plain_set(ops, short_run, index_at):
    _with(short_run, index_at, _pinned_set_against_a_set, ops)


def _pinned_set_against_a_set(ops) -> None:
    rl, ref = RunList(), set()
    for op, s, a, n in ops:
        lo, hi = _span(s, a, n)
        new = [u for u in range(lo, hi) if u not in ref]
        if op in (0, 5):  # the range's non-members join (5: split in two batches, a run each)
            half = len(new) // 2 if op == 5 else len(new)
            rl.add_runs(extents_of(new[:half]))
            rl.add_runs(extents_of(new[half:]))
            ref.update(new)
        elif op == 1:
            want = sorted(u for u in ref if lo <= u < hi)
            assert rl.count_in(lo, hi) == len(want)
            assert rl.take_range(lo, hi) == extents_of(want)
            ref.difference_update(want)
        elif op == 2:  # the ordered form's push among the added runs
            rl.push_runs(extents_of(new))
            ref.update(new)
        elif op == 3:
            assert rl.discard(lo) == (lo in ref)
            ref.discard(lo)
        else:
            assert rl.first_in(lo, hi) == min((u for u in ref if lo <= u < hi), default=None)
        assert sorted(rl) == sorted(ref) and len(rl) == len(ref)
        _check_index(rl)
        for u in range(lo - 1, hi + 1):
            assert (u in rl) == (u in ref)
        _check_index(rl)


def test_pages_added_a_few_at_a_time_stay_one_run():
    """A session's decode pages added span by span extend its run (found by a scan, or in the
    index), which turns long past SHORT_RUN; a run that continues none is a run of its own."""
    for index_at in (0, run_lists.INDEX_AT):
        kept = run_lists.INDEX_AT
        run_lists.INDEX_AT = index_at
        try:
            rl, base = RunList(), 3 << UNIT_BITS
            assert 5 in rl or True  # (a find: bucket 0 indexed when index_at is 0)
            rl.add_runs([(base, base + 2)])
            assert base + 1 in rl
            for a in range(base + 2, base + 90, 4):
                rl.add_runs([(a, a + 4)])
            assert list(rl._in[3]) and len(rl._in[3]) == 1 and len(rl) == 90
            assert rl._long[3] and not rl._where
            rl.add_runs([(base + 95, base + 96)])
            assert len(rl._in[3]) == 2 and base + 95 in rl and base + 92 not in rl
            _check_index(rl)
        finally:
            run_lists.INDEX_AT = kept


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 40), st.integers(-3, 60))))
def test_runs_split_at_sessions_as_one_uid_at_a_time(spans):
    """Each run's uids, in order, grouped by session; empty runs give nothing."""
    edge = 1 << UNIT_BITS
    runs = [(b * edge + a, b * edge + a + n) for b, a, n in spans]
    got = run_lists.split_at_sessions(runs)
    want = [(u, u + 1) for a, s in runs for u in range(a, s)]
    assert [(u, u + 1) for a, s in got for u in range(a, s)] == want
    assert all(a < s and a >> UNIT_BITS == (s - 1) >> UNIT_BITS for a, s in got)
    assert run_lists.split_at_sessions(iter(runs)) == got


@settings(max_examples=1000, deadline=None)
@given(steps=st.lists(st.one_of(st.none(), st.integers(0, 60)), min_size=1, max_size=80))
def test_runs_in_order_are_the_extents_of_the_list(steps):
    """A list's runs of consecutive uids (a consecutive list checked at once) are its extents:
    consecutive stretches (a None step) broken by jumps, repeats and drops."""
    uids, u = [], 0
    for s in steps:
        u = u + 1 if s is None else s
        uids.append(u)
    assert run_lists.runs_in_order(uids) == extents_of(uids)
