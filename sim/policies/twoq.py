"""2Q (Johnson & Shasha, VLDB'94, full version), as libCacheSim's TwoQ.c.

Three queues sized in bytes from the capacity c: A1in, a FIFO of new units with a share
Kin = int(0.25 c); A1out, a ghost FIFO of int(0.5 c) bytes of keys evicted from A1in; Am, an LRU of
units seen again after leaving A1in.

- A miss whose key is in A1out leaves A1out and enters Am's MRU end; any other miss enters A1in.
- A hit in Am moves the unit to Am's MRU end; a hit in A1in changes nothing (correlated references).
- The victim: A1in's oldest unit while A1in holds more than Kin bytes (its key then enters A1out,
  which drops its oldest keys to make room), else Am's LRU unit.
- ``admit``: an object larger than Kin is not admitted (libCacheSim's ``can_insert``).

Difference from libCacheSim (documented, tested): libCacheSim inserts an A1out hit into Am with
Am's own LRU ``get``, which evicts Am's LRU units while Am would exceed c - Kin bytes even when the
cache as a whole has room. kvsim cannot evict during an insert (the caller owns membership), so Am
may exceed c - Kin until the next miss. With unit sizes this never happens (once A1out has a key,
A1in holds >= Kin units for good, so Am < c - Kin whenever there is room) and kvsim matches
libCacheSim request by request; with variable sizes the two agree up to the first such eviction.

An A1in unit that ``evict`` chooses leaves its key in A1out; a unit the engine ``remove``s is
forgotten. Pins: a pinned unit leaves its queue; an A1in unit returns to its place in A1in, an Am
unit to Am's MRU end. Without ``set_capacity`` (the engine) c is the high-water mark of the bytes
the tier has held. O(log n) per operation (A1in is a heap with lazy deletion).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import compress, filterfalse

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import ByteBudget, GhostFIFO, SizedOrder, consume

A1IN, AM = 0, 1


@register("twoq")
class TwoQ(EvictionPolicy):
    a_in_size_ratio = 0.25
    a_out_size_ratio = 0.5
    reads_last_access = False
    # A pinned insert changes no victim: A1in's byte count is its candidates', it joins A1in's
    # newest end, which evictions never append to, and a new decode page cannot be in A1out (see
    # ARC's note); the capacity is fixed (the engine sets it).
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._ain = SizedOrder()  # a pinned unit keeps its place
        self._am: OrderedDict[int, None] = OrderedDict()  # uid, LRU first
        self._am_bytes = 0
        self._aout = GhostFIFO()
        self._size: dict[int, int] = {}
        self._pinned: dict[int, int] = {}  # uid -> its queue
        self._budget = ByteBudget()
        self._incoming: tuple[int, bool] | None = None

    # -- sizes and the incoming request ----------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        self._budget.set(capacity)

    def _sizes(self) -> tuple[int, int]:
        c = self._budget.c
        return int(c * self.a_in_size_ratio), int(c * self.a_out_size_ratio)

    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self._aout.take(uid) is not None)

    def admit(self, uid: int) -> bool:
        return self.view.size(uid) <= self._sizes()[0]

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        if uid in self._size:  # (a member inserted again enters anew)
            self.remove(uid)
        size = self.view.size(uid)
        inc = self._incoming
        hit = inc[1] if inc is not None and inc[0] == uid else self._aout.take(uid) is not None
        self._incoming = None
        self._size[uid] = size
        self._budget.grow(size)
        q = AM if hit else A1IN
        if pinned:
            self._pinned[uid] = q
        if q == AM:
            if not pinned:
                self._am[uid] = None
                self._am_bytes += size
        else:
            self._ain.enter(uid, size, candidate=not pinned)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order; in C when all have one size and none is a member or in
        A1out (then each enters A1in)."""
        uids = list(uids)
        unit = self.view.unit_bytes
        members = not self._size.keys().isdisjoint(uids) or len(set(uids)) < len(uids)
        if not unit or members or self._aout.holds_any(uids) or self._incoming is not None:
            super().insert_many(uids, now, pinned)
            return
        self._size.update(dict.fromkeys(uids, unit))
        self._budget.grow(unit * len(uids))
        if pinned:
            self._pinned.update(dict.fromkeys(uids, A1IN))
        self._ain.enter_many(uids, unit, candidate=not pinned)

    def access(self, uid: int, now: float) -> None:
        self._incoming = None
        if uid in self._am:
            self._am.move_to_end(uid)

    def pin(self, uid: int) -> None:
        if uid in self._am:
            del self._am[uid]
            self._am_bytes -= self._size[uid]
            self._pinned[uid] = AM
        elif self._ain.discard(uid):
            self._pinned[uid] = A1IN

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each: set operations and C-level maps (no order to keep)."""
        self._incoming = None
        uids = list(uids)
        am = self._am
        in_am = am.keys() & uids
        consume(map(am.__delitem__, in_am))
        self._am_bytes -= sum(map(self._size.__getitem__, in_am))
        self._pinned.update(dict.fromkeys(in_am, AM))
        was = self._ain.discard_many(filterfalse(in_am.__contains__, uids))
        self._pinned.update(dict.fromkeys(was, A1IN))

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order."""
        uids = list(uids)
        if not self.view.unit_bytes:
            super().release(uids, now)  # one at a time: a unit may have grown while pinned
            return
        queue = list(map(self._pinned.get, uids))
        to_am = list(compress(uids, map(AM.__eq__, queue)))
        to_ain = list(compress(uids, map(A1IN.__eq__, queue)))
        entries = self._ain.pinned_entries(to_ain)
        distinct = len(set(uids)) == len(uids)
        if not distinct or None in queue or entries is None:
            super().release(uids, now)  # one at a time: some enter anew
            return
        # Equal sizes, every unit pinned here once: Am takes its units at its MRU end in page
        # order, A1in's return to their places.
        consume(map(self._pinned.__delitem__, uids))
        self._am.update(dict.fromkeys(to_am))
        self._am_bytes += sum(map(self._size.__getitem__, to_am))
        self._ain.back_entries(to_ain, entries)

    def unpin(self, uid: int, now: float) -> None:
        q = self._pinned.pop(uid, None)
        if q is None:
            self.insert(uid, now)
            return
        size = self.view.size(uid)  # a pinned unit may have grown
        self._budget.grow(size - self._size[uid])
        self._size[uid] = size
        if q == AM:
            self._am[uid] = None
            self._am_bytes += size
        else:
            self._ain.back(uid, size)

    def remove(self, uid: int, pinned: bool = False) -> None:
        size = self._size.pop(uid, None)
        if size is None:
            return
        self._budget.shrink(size)
        self._pinned.pop(uid, None)
        if uid in self._am:
            del self._am[uid]
            self._am_bytes -= size
            return
        self._ain.leave(uid)

    def _evicted(self, uid: int) -> None:
        from_ain = uid in self._ain
        size = self._size[uid]
        self.remove(uid)
        if from_ain:
            self._aout.put(uid, size, self._sizes()[1])

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """``evict`` until ``nbytes`` are freed. Where every unit has one size and no request is
        incoming (the engine's case), in three runs, the order ``peek`` gives (Kin does not change
        while evicting): A1in's oldest while it holds more than Kin bytes, then Am's LRU, then,
        once Am is empty, A1in's oldest again; A1in's victims enter A1out in that order."""
        unit = self.view.unit_bytes
        if not unit or self._incoming is not None:
            return super().evict_bytes(nbytes, now)
        n = -(-nbytes // unit)
        if n <= 0:
            return []
        ain, am = self._ain, self._am
        kin, kout = self._sizes()
        over = -(-(ain.nbytes - kin) // unit) if ain.nbytes > kin else 0
        out = ain.pop_many(min(n, over))
        from_ain = out[:]
        if len(out) < n and am:
            take = min(n - len(out), len(am))
            out += [am.popitem(last=False)[0] for _ in range(take)]
            self._am_bytes -= take * unit
        if len(out) < n and not am:
            more = ain.pop_many(n - len(out))
            out += more
            from_ain += more
        consume(map(self._size.__delitem__, out))
        self._budget.shrink(unit * len(out))
        self._aout.put_many(from_ain, unit, kout)  # A1out keeps its newest kout bytes
        return out

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    def peek(self, now: float) -> int | None:
        kin = self._sizes()[0]
        if self._ain.nbytes > kin or not self._am:
            uid = self._ain.oldest()
            if uid is not None:
                return uid
        return next(iter(self._am), None)

    def __len__(self) -> int:
        return len(self._ain) + len(self._am)

    def __contains__(self, uid: int) -> bool:
        return uid in self._am or uid in self._ain
