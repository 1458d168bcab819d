"""``GhostQueue`` against a plain list of (key, size), oldest first (hypothesis): the same keys
in the same order and the same bytes after every call, with its trims taken key by key or a
stretch at a time and its lists' front dropped often (small constants) or as in a run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies import ghost_queue
from sim.policies.ghost_queue import GhostQueue


class GhostRef:
    """Keys and sizes oldest first; the oldest go first when the bytes exceed a bound."""

    def __init__(self) -> None:
        self.items: list[tuple[int, int]] = []

    def bytes(self) -> int:
        return sum(size for _, size in self.items)

    def trim(self, max_bytes: int) -> None:
        while self.bytes() > max_bytes and self.items:
            self.items.pop(0)

    def put(self, uid: int, size: int, max_bytes: int) -> None:
        if any(k == uid for k, _ in self.items) or size > max_bytes:
            return
        self.trim(max_bytes - size)
        self.items.append((uid, size))

    def take(self, uid: int) -> int | None:
        for i, (k, size) in enumerate(self.items):
            if k == uid:
                del self.items[i]
                return size
        return None


# (operation, key, size, bound, batch length): keys 0-30 so that puts meet remembered keys
OPS = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.integers(0, 30),
        st.integers(1, 4),
        st.integers(0, 40),
        st.integers(0, 12),
    ),
    max_size=120,
)


def _check(ghost: GhostQueue, ref: GhostRef) -> None:
    assert list(ghost) == [k for k, _ in ref.items]
    assert ghost.bytes == ref.bytes()
    assert len(ghost) == len(ref.items)
    assert bool(ghost) == bool(ref.items)


@pytest.mark.parametrize("small", [True, False])
@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_ghost_queue_matches_a_plain_list(small, ops):
    saved = ghost_queue.STRETCH, ghost_queue.ONE_BY_ONE, ghost_queue.COMPACT_SLACK
    if small:  # stretches of a few slots, and the front dropped as soon as it may be
        ghost_queue.STRETCH, ghost_queue.ONE_BY_ONE, ghost_queue.COMPACT_SLACK = 3, 1, 2
    try:
        ghost, ref = GhostQueue(), GhostRef()
        for op, key, size, bound, n in ops:
            if op == 0:
                ghost.put(key, size, bound)
                ref.put(key, size, bound)
            elif op == 1:  # a batch of distinct keys of one size, none remembered
                held = {k for k, _ in ref.items}
                uids = [u for u in ((key + i) % 31 for i in range(n)) if u not in held]
                ghost.put_many(uids, size, bound)
                for u in uids:
                    ref.put(u, size, bound)
            elif op == 2:
                assert ghost.take(key) == ref.take(key)
            elif op == 3:
                ghost.trim(bound)
                ref.trim(bound)
            else:
                uids = [(key + i) % 31 for i in range(n)]
                assert ghost.holds(uids) == [any(k == u for k, _ in ref.items) for u in uids]
                assert ghost.holds_any(uids) == any(ghost.holds(uids))
                assert (key in ghost) == any(k == key for k, _ in ref.items)
            _check(ghost, ref)
    finally:
        ghost_queue.STRETCH, ghost_queue.ONE_BY_ONE, ghost_queue.COMPACT_SLACK = saved
