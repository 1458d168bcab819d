"""``GhostQueue``: the keys (and sizes) of evicted units, oldest first, with their total bytes,
on plain dicts and lists: ``GhostFIFO``'s answers (``sim.policies.structures``) for a ghost that
takes its keys in batches (S3-FIFO's).

Each put gives its key the next *ticket*. ``_key_at`` and ``_size_at`` list keys and sizes by
ticket (less ``_base``, the tickets dropped off the front), and ``_ticket`` maps each remembered
key to its ticket, in ticket order (a remembered key is never put again, so the dict's order is
the age order). A slot whose key was taken since (a ghost hit) is stale: its key maps to another
ticket, or to none. Forgetting the oldest walks the slots from ``_head``, below which none is
remembered, a stretch at a time: liveness, sizes and deletions in C. A batch of puts is a few
C calls; a batch of forgets costs O(keys) in C, about half what an ordered dict's linked list
costs per key; the front of the lists is dropped once it is most of them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate, compress, repeat
from operator import eq, not_

from sim.policies.structures import consume

STRETCH = 256  # slots looked at, at most, per C pass of a trim
ONE_BY_ONE = 8  # a trim of at most about this many keys goes key by key (less overhead)
COMPACT_SLACK = 4096  # dead front slots kept before the lists may drop them


class GhostQueue:
    """Keys (and sizes) of evicted units, oldest first, with their total bytes."""

    __slots__ = ("_ticket", "_key_at", "_size_at", "_base", "_head", "bytes")

    def __init__(self) -> None:
        self._ticket: dict[int, int] = {}  # remembered key -> its ticket, oldest first
        self._key_at: list[int] = []  # ticket - _base -> key (stale once taken)
        self._size_at: list[int] = []  # ticket - _base -> size
        self._base = 0  # the ticket of slot 0
        self._head = 0  # no slot below holds a remembered key
        self.bytes = 0

    def _append(self, uids: list[int], sizes: Iterable[int]) -> None:
        """Distinct keys that are not remembered become the newest ones."""
        t = self._base + len(self._key_at)
        self._ticket.update(zip(uids, range(t, t + len(uids))))
        self._key_at.extend(uids)
        self._size_at.extend(sizes)

    def put(self, uid: int, size: int, max_bytes: float) -> None:
        """Remember an evicted unit, keeping at most ``max_bytes`` (the oldest go first); one
        remembered already keeps its place, one larger than ``max_bytes`` is not remembered."""
        if uid in self._ticket or size > max_bytes:
            return
        self.trim(max_bytes - size)
        self._ticket[uid] = self._base + len(self._key_at)
        self._key_at.append(uid)
        self._size_at.append(size)
        self.bytes += size

    def put_many(self, uids: Sequence[int], size: int, max_bytes: float) -> None:
        """``put`` of each of ``uids`` (distinct, none remembered, all of ``size``) in turn, at
        once: trimming after the last forgets the same oldest keys as trimming before each. (A
        remembered key is skipped: a put of one that the batch's own trims would forget first
        is not this.)"""
        if size > max_bytes or not uids:
            return
        if len(uids) == 1:  # (one victim: the plain put costs less)
            self.put(uids[0], size, max_bytes)
            return
        fresh = list(compress(uids, map(not_, map(self._ticket.__contains__, uids))))
        if not fresh:
            return  # (a put of a remembered key trims nothing)
        self._append(fresh, repeat(size, len(fresh)))
        self.bytes += size * len(fresh)
        self.trim(max_bytes)

    def take(self, uid: int) -> int | None:
        """Forget ``uid`` (a ghost hit); its size, or None if it was not remembered."""
        t = self._ticket.pop(uid, None)
        if t is None:
            return None
        size = self._size_at[t - self._base]
        self.bytes -= size
        return size

    def trim(self, max_bytes: float) -> None:
        """Forget the oldest keys until at most ``max_bytes`` are remembered."""
        ticket, key_at, size_at = self._ticket, self._key_at, self._size_at
        h, base, gone = self._head, self._base, 0
        while self.bytes - gone > max_bytes and ticket:
            excess = self.bytes - gone - max_bytes
            if excess <= ONE_BY_ONE * size_at[h]:  # the last few: key by key
                key = key_at[h]
                if ticket.get(key) == base + h:
                    del ticket[key]
                    gone += size_at[h]
                h += 1
                continue
            keys = key_at[h : h + STRETCH]
            live = list(map(eq, map(ticket.get, keys), range(base + h, base + h + len(keys))))
            freed = list(accumulate(compress(size_at[h : h + len(keys)], live)))
            j = bisect_left(freed, excess)  # forgetting live keys 0..j is enough
            if j < len(freed):
                cut = list(compress(range(len(keys)), live))[j] + 1
                del keys[cut:], live[cut:]
            consume(map(ticket.__delitem__, compress(keys, live)))
            gone += freed[min(j, len(freed) - 1)] if freed else 0
            h += len(keys)
        self.bytes -= gone
        self._head = h
        if h > COMPACT_SLACK and 2 * h > len(key_at):
            self._drop_front()

    def _drop_front(self) -> None:
        """The slots below ``_head`` hold no remembered key: drop them."""
        h = self._head
        del self._key_at[:h], self._size_at[:h]
        self._base += h
        self._head = 0

    def holds_any(self, uids) -> bool:
        """Is any of ``uids`` remembered (a batch's ghost hits, in C)?"""
        return not self._ticket.keys().isdisjoint(uids)

    def holds(self, uids) -> list[bool]:
        """For each of ``uids``, is it remembered?"""
        return list(map(self._ticket.__contains__, uids))

    def __len__(self) -> int:
        return len(self._ticket)

    def __contains__(self, uid: int) -> bool:
        return uid in self._ticket

    def __iter__(self):
        return iter(self._ticket)  # oldest first

    def __bool__(self) -> bool:
        return bool(self._ticket)
