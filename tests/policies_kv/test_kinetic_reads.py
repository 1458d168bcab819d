"""``KineticMin._merge_sorted`` reads each group's first entries and reads more of a group only
while all it read are among the first n (``_read_short``): one group that gives most victims is
read deeper, the others are not read again. Against the exact order (brute force in rationals)
and against the plain definition of the groups that must read more."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_kinetic_groups import _pops_are_exact
from test_kv_pensieve import _exact_key

from sim.policies import kinetic
from sim.policies.kinetic import SINCE, UNTIL, KineticMin, _read_short


def _uneven_groups(mode: str, sizes: list[int], cheap: list[int], now: float):
    """A tournament of one group a size (a time each), the groups in ``cheap`` priced far below
    the others (they give most victims); and the live (cost, tau) of each uid."""
    kin = KineticMin(SINCE if mode == "since" else UNTIL)
    live: dict[int, tuple[float, float]] = {}
    for g, size in enumerate(sizes):
        k = 1 + g
        tau = now - k if mode == "since" else now + k
        factor = 0.001 * (1 + g) if g in cheap else 1.0 + 0.37 * g
        uids = [1000 * g + j for j in range(size)]
        costs = [(j + 1) * factor * k for j in range(size)]
        kin.add_many(uids, costs, tau, now)
        live.update((u, (m, tau)) for u, m in zip(uids, costs, strict=True))
    return kin, live


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 120), min_size=1, max_size=12),
    cheap=st.lists(st.integers(0, 11), max_size=2),
    mode=st.sampled_from(["since", "until"]),
    counts=st.lists(st.integers(8, 150), min_size=1, max_size=4),
)
@example(sizes=[17, 5, 5, 5, 5], cheap=[0], mode="since", counts=[20])  # one entry beyond k
@example(sizes=[120, 3, 3, 3, 3, 3, 3, 3], cheap=[0], mode="since", counts=[100])  # 3 reads
@example(sizes=[60, 60, 2, 2, 2, 2], cheap=[0, 1], mode="until", counts=[90])  # two read deeper
def test_groups_read_deeper_pop_the_exact_minima(sizes, cheap, mode, counts):
    now = 500.0
    kin, live = _uneven_groups(mode, sizes, cheap, now)
    decided: list[bool] = []
    merge_sorted = kin._merge_sorted

    def spy(*args, **kw):
        decided.append(merge_sorted(*args, **kw))
        return decided[-1]

    kin._merge_sorted = spy  # type: ignore[method-assign]
    _pops_are_exact(kin, live, mode, counts, now)
    assert len(decided) == len(counts)


def test_one_cheap_group_is_read_deeper_by_the_sort():
    # the numpy sort decides (no fallback to the heap merge), reading the cheap group deeper and
    # each other group once
    now = 500.0
    kin, live = _uneven_groups("since", [200, 4, 4, 4, 4, 4, 4, 4], [0], now)
    reads: list[tuple[int, int]] = []
    first_live = kinetic._GroupQueue.first_live

    def spy(q, k):
        reads.append((id(q), k))
        return first_live(q, k)

    kinetic._GroupQueue.first_live = spy  # type: ignore[method-assign]
    try:
        out: list[int] = []
        assert kin._merge_sorted(150, now, out)
    finally:
        kinetic._GroupQueue.first_live = first_live  # type: ignore[method-assign]
    assert out == sorted(live, key=lambda uid: _exact_key("since", uid, *live[uid], now))[:150]
    per_queue: dict[int, list[int]] = {}
    for q, k in reads:
        per_queue.setdefault(q, []).append(k)
    deep = [ks for ks in per_queue.values() if len(ks) > 1]
    assert len(deep) == 1 and deep[0][-1] == 150  # the cheap group alone, up to n
    assert sum(len(ks) == 1 for ks in per_queue.values()) == 7


class _Q:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class _G:
    def __init__(self, n: int) -> None:
        self.heap = _Q(n)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 40)), max_size=10
    ),
    n=st.integers(1, 40),
)
def test_read_short_is_its_definition(rows, n):
    # a group must read more when every entry it read is among the first n, fewer than n were
    # read and it has more: ``taken == reads < n < live`` ... with reads < live
    groups = [_G(live) for _, _, live in rows]
    reads = [r for r, _, _ in rows]
    taken = [min(c, r) for r, c, _ in rows]
    want = [
        i
        for i in range(len(rows))
        if taken[i] == reads[i] and reads[i] < n and rows[i][2] > reads[i]
    ]
    assert _read_short(groups, reads, taken, n) == want
