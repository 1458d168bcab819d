"""Belady's group storage (``_Runs``: a group's uids as maximal extents) against a sorted list of
the same uids, driven by the calls Belady makes (hypothesis): joins above or among the members,
the last uid popped, the largest k taken, extents and single uids removed. After every call the
same uids, the same last uid, and extents that are maximal (no two adjacent) and ascending."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.belady import _extents, _Runs
from sim.units import extents_of

UIDS = 60

CALLS = st.lists(
    st.tuples(
        st.sampled_from(["add", "pop", "take", "remove", "remove_one"]),
        st.lists(st.integers(0, UIDS - 1), max_size=20),
        st.integers(1, 30),
    ),
    max_size=40,
)


def _check(runs: _Runs, plain: list[int]) -> None:
    ext = runs.extents()
    assert ext == extents_of(plain)  # maximal and ascending: the extents of the sorted uids
    assert len(runs) == len(plain)
    if plain:
        assert runs.last() == plain[-1]
    assert all((u in runs) == (u in plain) for u in range(-1, UIDS + 1))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, UIDS - 1), min_size=1, max_size=20), CALLS)
def test_runs_equal_a_sorted_list(first, calls):
    plain = sorted(set(first))
    runs = _Runs(_extents(plain))
    _check(runs, plain)
    for op, picks, k in calls:
        if not plain:
            break
        if op == "add":  # uids that are no member join (Belady's _join / _add)
            fresh = sorted(set(picks) - set(plain))
            if not fresh:
                continue
            runs.add(_extents(fresh))
            plain = sorted(plain + fresh)
        elif op == "pop":
            assert runs.pop() == plain.pop()
        elif op == "take":  # the k largest, fewer than all (Belady's _take)
            k = min(k, len(plain) - 1)
            if not k:
                continue
            got = runs.take_last(k)
            assert got == extents_of(plain[-k:])
            del plain[-k:]
        elif op in ("remove", "remove_one"):  # members leave, fewer than all
            gone = sorted(set(picks) & set(plain))
            if op == "remove_one":
                gone = gone[:1]
            if not gone or len(gone) == len(plain):
                continue
            runs.remove(_extents(gone))
            plain = [u for u in plain if u not in set(gone)]
        _check(runs, plain)


def test_a_range_is_one_extent_without_listing_it():
    assert _extents(range(10, 20)) == [(10, 20)]
    assert _extents(range(5, 5)) == []
    assert _extents([3, 4, 6]) == [(3, 5), (6, 7)]


def test_a_group_with_a_hole_gives_its_victims_largest_uid_first():
    """A session's group broken by a pinned unit: ``evict_bytes`` takes its uids from the top,
    across the hole; ``evict_extents`` of dropped victims gives them as increasing runs."""
    from test_batches import UniformView
    from test_contract import PAGE

    from sim.policies import PolicyContext, make_policy
    from sim.units import Tier, uid_of

    for dropped in (False, True):
        view = UniformView()
        uids = [uid_of(0, p) for p in range(6)]
        for uid in uids:
            view.sizes[uid], view.next[uid] = PAGE, 3.0
        pol = make_policy(
            "belady", PolicyContext(tier=Tier.GPU, block_tokens=16, num_layers=32, view=view)
        )
        pol.drops_victims = dropped
        pol.insert_many(uids, 0.0)
        pol.pin(uids[2])
        assert pol.peek(0.0) == uids[5]
        if dropped:
            got = pol.evict_extents(4 * PAGE, 0.0)
            assert got == [(uids[0] + 1, uids[2]), (uids[3], uids[5] + 1)]
        else:
            assert pol.evict_bytes(4 * PAGE, 0.0) == [uids[5], uids[4], uids[3], uids[1]]
        assert len(pol) == 1 and uids[0] in pol
