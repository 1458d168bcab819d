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
def test_lazy_heap_and_entry_order_give_the_smallest_live_key(ops):
    heap, order, live, seq, n = LazyHeap(), EntryOrder(), {}, {}, 0
    for op, _, a, b in ops:
        uid = a
        if op <= 2 and uid not in live:
            n += 1
            seq.setdefault(uid, n)
            live[uid] = seq[uid]
            heap.push(uid, seq[uid])
            if seq[uid] == n:
                order.push_new(uid, n)
            else:
                order.push_back(uid, seq[uid])  # a unit that comes back keeps its place
        elif op == 3 and uid in live:
            del live[uid]
            assert heap.discard(uid) and order.discard(uid)
        elif op == 4 and b % 3 == 0:
            items = [
                (u, seq.setdefault(u, n + 1 + i))
                for i, u in enumerate(range(50, 50 + b))
                if u not in live
            ]
            n += b
            for u, k in items:
                live[u] = k
            heap.push_many(items)
            order.push_back_many(items)
        expect = min(live, key=lambda u: (live[u], u)) if live else None
        assert heap.min() == expect and order.min() == expect
        assert len(heap) == len(order) == len(live)
    drained = []
    while len(order):
        drained.append(order.pop_first())
    assert drained == [u for _, u in sorted((k, u) for u, k in live.items())]
    assert [heap.pop() for _ in range(len(live))] == drained and heap.pop() is None


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
