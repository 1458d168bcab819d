"""The shared policy structures against plain references (hypothesis): same order, same members."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.structures import ByteBudget, EntryOrder, GhostFIFO, LazyHeap, RunQueue

OPS = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(0, 40), st.integers(0, 9)),
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(ops=OPS)
def test_run_queue_is_a_queue_of_uids(ops):
    """Runs, holes and buckets are invisible: the queue behaves as an ordered dict of uids."""
    q, ref = RunQueue(), OrderedDict()
    for op, bucket, a, b in ops:
        base = bucket << 24
        if op <= 1:  # push a stretch of absent uids
            new = [u for u in range(base + a, base + a + b + 1) if u not in ref]
            q.extend(new)
            ref.update((u, None) for u in new)
        elif op == 2:
            u = base + a
            assert q.discard(u) == (u in ref)
            ref.pop(u, None)
        elif op == 3:
            got = q.pop(b)
            assert got == [ref.popitem(last=False)[0] for _ in range(min(b, len(ref)))]
        elif op == 4:
            mine = [u for u in ref if u >> 24 == bucket]
            assert q.discard_bucket(bucket) == len(mine)
            for u in mine:
                del ref[u]
        elif op == 5:
            r = range(base + a, base + a + b + 1)
            assert q.holds_exactly(r) == (sorted(u for u in ref if u >> 24 == bucket) == list(r))
        else:
            assert (base + a in q) == (base + a in ref)
        assert len(q) == len(ref)
        assert q.first() == next(iter(ref), None)
        assert list(q) == list(ref)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_lazy_heap_gives_the_smallest_live_key(ops):
    heap, live, seq, n = LazyHeap(), {}, {}, 0
    for op, _, a, b in ops:
        uid = a
        if op <= 2 and uid not in live:
            n += 1
            live[uid] = seq.setdefault(uid, n)  # a unit that comes back keeps its key
            heap.push(uid, seq[uid])
        elif op == 3 and uid in live:
            del live[uid]
            assert heap.discard(uid)
        elif op == 4 and b % 3 == 0:
            items = [
                (u, seq.setdefault(u, n + 1 + i))
                for i, u in enumerate(range(50, 50 + b))
                if u not in live
            ]
            n += b
            live.update(items)
            heap.push_many(items)
        expect = min(live, key=lambda u: (live[u], u)) if live else None
        assert heap.min() == expect
        assert len(heap) == len(live)
    drained = [u for _, u in sorted((k, u) for u, k in live.items())]
    assert [heap.pop() for _ in range(len(live))] == drained and heap.pop() is None


class _EntryRef:
    """The plain form of an entry order: members with their entry number and candidacy."""

    def __init__(self) -> None:
        self.members: dict[int, list] = {}  # uid -> [entry number, candidate]
        self.n = 0

    def enter(self, uid, candidate=True):
        self.n += 1
        self.members[uid] = [self.n, candidate]

    def back(self, uid):
        if uid in self.members:
            self.members[uid][1] = True
        else:
            self.enter(uid)

    def candidates(self):
        return [u for u, (_, c) in sorted(self.members.items(), key=lambda kv: kv[1][0]) if c]


def _check_entry_order(order: EntryOrder, ref: _EntryRef) -> None:
    cands = ref.candidates()
    assert len(order) == len(cands)
    assert order.min() == (cands[0] if cands else None)
    assert all((u in order) == (u in cands) for u in ref.members)


@settings(max_examples=400, deadline=None)
@given(ops=OPS)
def test_entry_order_takes_candidates_in_entry_order(ops):
    """Pinned members keep their place; leaving forgets it; popping takes the oldest."""
    order, ref = EntryOrder(), _EntryRef()
    for op, flag, a, b in ops:
        uid = a
        if op == 0:
            order.enter(uid, candidate=flag != 0)
            ref.enter(uid, candidate=flag != 0)
        elif op == 1:
            order.back(uid)
            ref.back(uid)
        elif op == 2:
            was = uid in ref.members and ref.members[uid][1]
            assert order.discard(uid) == was
            if was:
                ref.members[uid][1] = False
        elif op == 3:
            was = uid in ref.members and ref.members[uid][1]
            assert order.leave(uid) == was
            ref.members.pop(uid, None)
        elif op == 4 and flag == 2:  # a batch enters (some may be members, some repeated)
            uids = [(a + 7 * i) % (41 if b % 2 else 300) + (0 if b % 2 else 41) for i in range(b)]
            order.enter_many(uids, candidate=b % 3 != 0)
            for u in uids:
                ref.enter(u, candidate=b % 3 != 0)
        elif op == 4:
            uids = [(a + 7 * i) % 41 for i in range(b)]
            order.back_many(uids)
            for u in uids:
                ref.back(u)
        elif op == 5:
            got = order.pop_many(b)
            assert got == ref.candidates()[:b]
            for u in got:
                del ref.members[u]
        else:
            expect = ref.candidates()[:1]
            assert [order.pop_first()] == (expect or [None])
            for u in expect:
                del ref.members[u]
        _check_entry_order(order, ref)


def test_entry_order_compacts_and_keeps_its_order():
    """Thousands of members come and go: the entry numbers of those gone are dropped (memory
    follows the members) and the order stays the entry order."""
    order, ref = EntryOrder(), _EntryRef()
    for i in range(20_000):
        uid = i % 700
        if i % 5 == 0:
            order.discard(uid)
            if uid in ref.members:
                ref.members[uid][1] = False
        elif i % 5 == 1:
            order.back(uid)
            ref.back(uid)
        elif i % 11 == 0:
            got = order.pop_many(3)
            assert got == ref.candidates()[:3]
            for u in got:
                del ref.members[u]
        else:
            order.enter(uid, candidate=i % 3 != 0)
            ref.enter(uid, candidate=i % 3 != 0)
    assert len(order._uid_at) <= 4 * len(ref.members) + 4096
    _check_entry_order(order, ref)
    assert order.pop_many(10**6) == ref.candidates()
    assert len(order) == 0 and order.min() is None and order.pop_first() is None


def test_ghost_fifo_forgets_the_oldest_first_and_counts_bytes():
    g = GhostFIFO()
    for uid, size in ((1, 10), (2, 20), (3, 30)):
        g.add(uid, size)
    assert g.bytes == 60 and g.take(2) == 20 and g.take(2) is None and g.bytes == 40
    g.trim(35)
    assert 1 not in g and 3 in g and g.bytes == 30
    assert g.pop_oldest() == (3, 30) and not g


def test_byte_budget_is_the_capacity_or_the_high_water_mark():
    b = ByteBudget()
    b.grow(50)
    b.shrink(20)
    b.grow(10)
    assert b.c == 50 and b.resident == 40
    b.set(100)
    assert b.c == 100


def test_lazy_heap_compacts_so_memory_follows_the_live_set():
    h = LazyHeap()
    for i in range(10_000):
        h.push(i, i)
        h.discard(i)
    assert len(h) == 0 and len(h._heap) < 200 and h.min() is None
