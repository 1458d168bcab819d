"""The shared policy structures against plain references (hypothesis): same order, same members."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.policies.structures import (
    ByteBudget,
    EntryOrder,
    GhostFIFO,
    LazyHeap,
    RunQueue,
    SizedOrder,
    SortedQueue,
    SweepOrder,
)

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
        if op <= 1:  # push a stretch of absent uids, at once or one at a time
            new = [u for u in range(base + a, base + a + b + 1) if u not in ref]
            if op == 0:
                q.extend(new)
            else:
                for u in new:
                    q.append(u)
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


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_sorted_queue_gives_what_a_lazy_heap_gives(ops):
    """Pushes (single, and batches onto nothing or onto a queue), discards and reads of the
    minimum: the same minimum, key and length as ``LazyHeap`` after every call, ties by uid."""
    queue, heap = SortedQueue(), LazyHeap()
    for op, flag, a, b in ops:
        if op <= 1:
            queue.push(a, b % 4)
            heap.push(a, b % 4)
        elif op == 2:
            assert queue.discard(a) == heap.discard(a)
        elif op == 3:
            items = [((a + 3 * i) % 41, (a * i + flag) % 5) for i in range(b)]
            queue.push_many(items)
            heap.push_many(items)
        elif op == 4:
            uids = [(a + i) % 41 for i in range(b)]
            queue.discard_many(uids)
            heap.discard_many(uids)
        elif op == 5 and heap.min() is not None:  # the minimum leaves, as a group's head does
            uid = heap.min()
            assert queue.min() == uid
            queue.discard(uid)
            heap.discard(uid)
        assert queue.min() == heap.min()
        assert len(queue) == len(heap)
        assert all(queue.key(u) == heap.key(u) and (u in queue) == (u in heap) for u in range(41))


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


def _pop_many_as_the_reference(order: EntryOrder, ref: _EntryRef, k: int) -> None:
    got = order.pop_many(k)
    assert got == ref.candidates()[:k]
    for u in got:
        del ref.members[u]


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
            _pop_many_as_the_reference(order, ref, b)
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


class _SweepRef:
    """SIEVE's sweep written plainly: members by entry number, a hand, the candidates ahead of it
    found by a scan, one unit passed at a time."""

    def __init__(self) -> None:
        self.members: dict[int, list] = {}  # uid -> [entry number, candidate, marked]
        self.n = 0
        self.hand = -1

    def ordered(self):
        return sorted(self.members.items(), key=lambda kv: kv[1][0])

    def ahead(self):
        return [u for u, (e, c, _) in self.ordered() if c and e > self.hand]

    def wrap_if_done(self):
        if not self.ahead():
            self.hand = -1

    def enter(self, uid, candidate=True):
        if uid in self.members:
            self.leave(uid)
        self.n += 1
        self.members[uid] = [self.n, candidate, False]

    def pin(self, uid, mark):
        m = self.members.get(uid)
        if m is None:
            return
        m[2] = m[2] or mark
        if m[1]:
            m[1] = False
            if m[0] > self.hand:
                self.wrap_if_done()

    def back_many(self, uids):
        new = []
        for u in uids:
            m = self.members.get(u)
            if m is None or m[1]:
                new.append(u)
            else:
                m[1] = True
        for u in new:
            self.enter(u)

    def leave(self, uid):
        m = self.members.get(uid)
        if m is None:
            return False
        ahead = self.ahead()
        del self.members[uid]
        if m[1] and m[0] > self.hand:
            if ahead[0] == uid:
                self.hand = m[0]
            self.wrap_if_done()
        return m[1]

    def sweep(self):
        while any(c for _, c, _ in self.members.values()):
            ahead = self.ahead()
            if not ahead:
                self.hand = -1
                continue
            m = self.members[ahead[0]]
            self.hand = m[0]
            if m[2]:
                m[2] = False
                continue
            del self.members[ahead[0]]
            self.wrap_if_done()
            return ahead[0]
        return None


def _check_sweep(order: SweepOrder, ref: _SweepRef) -> None:
    cands = [u for u, (_, c, _) in ref.ordered() if c]
    assert len(order) == len(cands)
    assert all((u in order) == (u in cands) for u in ref.members)
    assert all(order.marked(u) == m[2] for u, m in ref.members.items())


# The explicit example both runs take (the default run draws 300 sequences, the slow one 1,500).
SWEEP_EXAMPLE = [(0, 1, 1, 0), (0, 1, 2, 0), (0, 1, 3, 0), (1, 0, 1, 0), (5, 0, 0, 0)]
SWEEP_EXAMPLE += [(2, 0, 3, 0), (0, 1, 4, 0), (5, 0, 0, 0)]


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
@example(ops=SWEEP_EXAMPLE)
def test_sweep_order_is_the_plain_sieve_sweep(ops):
    """Marks survive pins, the hand stays where its victim was and wraps as soon as nothing is
    ahead of it, passed units lose their mark: the byte-array sweep takes the plain sweep's
    victims."""
    _check_sweep_ops(ops)


@pytest.mark.slow  # the same with 1,500 examples
@settings(max_examples=1500, deadline=None)
@given(ops=OPS)
@example(ops=SWEEP_EXAMPLE)
def test_sweep_order_is_the_plain_sieve_sweep_at_length(ops):
    _check_sweep_ops(ops)


def _check_sweep_ops(ops) -> None:
    order, ref = SweepOrder(), _SweepRef()
    for op, flag, a, b in ops:
        uid = a % 6
        if op == 0:
            order.enter(uid, candidate=flag != 0)
            ref.enter(uid, candidate=flag != 0)
        elif op == 1:
            order.mark(uid)
            if uid in ref.members:
                ref.members[uid][2] = True
        elif op == 2:
            uids = [(a + i) % 6 for i in range(b % 4 + 1)]
            order.pin_many(uids, mark=flag == 1)
            for u in uids:
                ref.pin(u, mark=flag == 1)
        elif op == 3:
            uids = [(a + i) % 6 for i in range(b % 4 + 1)]
            order.back_many(uids)
            ref.back_many(uids)
        elif op == 4:
            assert order.leave(uid) == ref.leave(uid)
        else:
            for _ in range(b % 3 + 1):
                assert order.sweep() == ref.sweep()
        _check_sweep(order, ref)


def test_sweep_order_compacts_and_keeps_the_hand_in_place():
    order, ref = SweepOrder(), _SweepRef()
    for i in range(12_000):
        uid = i % 300
        if i % 7 == 0:
            order.mark(uid)
            if uid in ref.members:
                ref.members[uid][2] = True
        elif i % 13 == 0:
            assert order.sweep() == ref.sweep()
        elif i % 5 == 0:
            order.pin_many([uid], mark=False)
            ref.pin(uid, mark=False)
        elif i % 5 == 1:
            order.back_many([uid])
            ref.back_many([uid])
        else:
            order.enter(uid)
            ref.enter(uid)
    assert len(order._state) <= 4 * len(ref.members) + 4096 < 12_000  # (its entry numbers)
    _check_sweep(order, ref)
    assert [order.sweep() for _ in range(len(ref.members) + 1)] == [
        ref.sweep() for _ in range(len(ref.members) + 1)
    ]


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_sized_order_counts_its_candidates_bytes(ops):
    """A pinned member keeps its place and its bytes leave the count; it returns with its size
    now; entering again, or a reinsertion, moves a member to the newest end."""
    order, ref = SizedOrder(), _EntryRef()
    sizes: dict[int, int] = {}
    for op, flag, a, b in ops:
        uid = a % 15
        if op <= 1:
            order.enter(uid, b + 1, candidate=flag != 0)
            ref.enter(uid, candidate=flag != 0)
            sizes[uid] = b + 1
        elif op == 2:
            was = uid in ref.members and ref.members[uid][1]
            assert order.discard(uid) == was
            if was:
                ref.members[uid][1] = False
        elif op == 3 and uid in ref.members:
            order.back(uid, b + 1)
            ref.back(uid)
            sizes[uid] = b + 1
        elif op == 4:
            was = uid in ref.members and ref.members[uid][1]
            assert order.leave(uid) == was
            ref.members.pop(uid, None)
        elif op == 5 and uid in ref.members:
            order.move_to_end(uid)
            ref.enter(uid, candidate=ref.members[uid][1])
        cands = ref.candidates()
        assert order.oldest() == (cands[0] if cands else None) and len(order) == len(cands)
        assert order.nbytes == sum(sizes[u] for u in cands)
        assert all(order.size_of(u) == sizes[u] for u in ref.members)


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


def test_sweep_wraps_at_once_when_a_pin_takes_the_last_unit_ahead():
    """The hand passed 1 and took 2; pinning 3 leaves nothing ahead, so the hand wraps then, and
    4, entering later, comes after 1 in the next sweep (a lazy wrap would take 4 first)."""
    order, ref = SweepOrder(), _SweepRef()
    for u in (1, 2, 3):
        order.enter(u)
        ref.enter(u)
    order.mark(1)
    ref.members[1][2] = True
    assert order.sweep() == ref.sweep()
    order.pin_many([3], mark=False)
    ref.pin(3, mark=False)
    order.enter(4)
    ref.enter(4)
    assert order.sweep() == ref.sweep() == 1


@settings(max_examples=400, deadline=None)
@given(ops=OPS)
def test_entry_order_batches_are_their_single_operations(ops):
    """discard_many (repeats and non-members among the uids) and pinned_entries + back_entries
    leave the order as one discard, or one back, per uid would."""
    order, ref = EntryOrder(), _EntryRef()
    for op, flag, a, b in ops:
        uids = [(a + 3 * i) % 11 for i in range(2 * b)]  # repeats from b = 6 on
        if op <= 2:
            order.enter(a % 11, candidate=flag != 0)
            ref.enter(a % 11, candidate=flag != 0)
        elif op == 3:
            expect = []
            for u in uids:
                if u in ref.members and ref.members[u][1]:
                    ref.members[u][1] = False
                    expect.append(u)
            assert order.discard_many(uids) == expect
        elif op == 4:
            batch = uids[: b % 4] * (2 if flag == 2 else 1)  # short, so often all pinned
            pinned = all(u in ref.members and not ref.members[u][1] for u in batch)
            entries = order.pinned_entries(batch)
            assert (entries is not None) == (pinned and len(set(batch)) == len(batch))
            if entries is not None:
                order.back_entries(entries)
                for u in batch:
                    ref.back(u)
        elif op == 5:
            _pop_many_as_the_reference(order, ref, b)
        _check_entry_order(order, ref)


def test_sized_order_batches_count_the_bytes_that_change_hands():
    order = SizedOrder()
    for uid, size in ((1, 10), (2, 20), (3, 30), (4, 40)):
        order.enter(uid, size)
    assert order.discard_many([3, 9, 1, 3]) == [3, 1] and order.nbytes == 60
    assert order.pinned_entries([1, 2]) is None  # 2 is a candidate
    assert order.pinned_entries([1, 1]) is None  # twice
    entries = order.pinned_entries([3, 1])
    assert entries is not None
    order.back_entries([3, 1], entries)
    assert order.nbytes == 100 and order.oldest() == 1  # back in its old place, first


def test_lazy_heap_batches_from_empty_and_discards_many():
    heap = LazyHeap()
    heap.push_many([(5, 2.0), (3, 1.0), (9, 1.0), (5, 0.5)])  # 5 twice: its last key holds
    assert [heap.key(u) for u in (3, 5, 9)] == [1.0, 0.5, 1.0] and len(heap) == 3
    heap.discard_many([5, 7])
    assert heap.min() == 3 and len(heap) == 2
    heap.push_many([(4, 0.1)])  # not empty: merged
    assert [heap.pop() for _ in range(4)] == [4, 3, 9, None]
