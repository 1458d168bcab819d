"""S3-FIFO (Yang et al., SOSP'23), as libCacheSim's S3FIFO.c (small 10 %, main, ghost 90 %).

Three FIFO queues sized in bytes from the capacity c: a small queue S of int(0.1 c), a main queue M
of c - int(0.1 c), and a ghost G of int(0.9 c) bytes that remembers only keys and sizes.

- A miss whose key is in G leaves G and enters M; any other miss enters S (before the first eviction
  a miss enters M once S holds its share, as libCacheSim's version does).
- A hit adds one to the unit's counter (kept per unit; reinsertion caps it at 3).
- Eviction: from M if M holds more than its share or S is empty, else from S.
  From S: the oldest unit with counter >= 2 moves to M (counter 0), the first one below 2 is the
  victim and its key enters G (G drops its oldest keys to make room). One-hit wonders thus leave
  from S without ever reaching M.
  From M: the oldest unit with counter >= 1 is reinserted at M's newest end with counter
  min(counter, 3) - 1; the first with counter 0 is the victim.
- ``admit`` (cachesim): an object larger than S is not admitted, nor one of exactly S's size unless
  its key was in G. libCacheSim's ``can_insert`` refuses the former; the latter it admits, makes
  room for, then drops in ``insert``; kvsim refuses it up front, without evicting. That is the one
  documented difference (tested in tests/policies/test_differential_libcachesim.py); the engine
  never calls ``admit``.

``victim`` performs the moves (S to M, M reinsertions) that libCacheSim's eviction does on its way to
the victim, and caches its answer until the next change, so asking twice names the same unit.
``remove`` of that victim puts an S victim's key in G; any other removal (the engine moving or
dropping a unit) forgets the key.

Pins: a pinned unit leaves its queue but keeps its queue, place and counter; on unpin it returns to
its place. A queue's byte count is that of its candidates. Without ``set_capacity`` (the engine),
c is the high-water mark of the bytes the tier has held.
"""
from __future__ import annotations

from collections import OrderedDict

from sim.policies.base import EvictionPolicy
from sim.policies.clock import SeqQueue
from sim.policies.registry import register

SMALL, MAIN = 0, 1


@register("s3fifo")
class S3FIFO(EvictionPolicy):
    small_size_ratio = 0.1
    ghost_size_ratio = 0.9
    move_to_main_threshold = 2
    max_freq = 3

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._q = (SeqQueue(), SeqQueue())
        self._ghost: OrderedDict[int, int] = OrderedDict()   # key -> size, oldest first
        self._ghost_bytes = 0
        self._freq: dict[int, int] = {}
        self._pinned: dict[int, tuple[int, int, int]] = {}   # key -> (queue, seq, size)
        self._capacity: int | None = None
        self._hwm = 0
        self._resident = 0
        self._has_evicted = False
        self._incoming: tuple[int, bool] | None = None       # (key, ghost hit) from admitting
        self._seq = 0
        self._version = 0
        self._plan = None                                    # (unit, queue) named by victim
        self._plan_version = -1

    # -- sizes -----------------------------------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        self._capacity = int(capacity)

    def _sizes(self) -> tuple[int, int, int]:
        c = self._capacity if self._capacity is not None else self._hwm
        small = int(c * self.small_size_ratio)
        return small, c - small, int(c * self.ghost_size_ratio)

    # -- cachesim hooks --------------------------------------------------------------------------
    def admitting(self, unit, now: float) -> None:
        self._incoming = (unit.key, self._ghost_take(unit.key))

    def admit(self, unit) -> bool:
        small = self._sizes()[0]
        hit = self._incoming is not None and self._incoming[0] == unit.key and self._incoming[1]
        return unit.size < small or (hit and unit.size <= small)

    def _ghost_take(self, key: int) -> bool:
        size = self._ghost.pop(key, None)
        if size is None:
            return False
        self._ghost_bytes -= size
        return True

    def _ghost_put(self, key: int, size: int) -> None:
        cap = self._sizes()[2]
        if key in self._ghost or size > cap:
            return
        ghost = self._ghost
        while self._ghost_bytes + size > cap:
            self._ghost_bytes -= ghost.popitem(last=False)[1]
        ghost[key] = size
        self._ghost_bytes += size

    # -- membership ------------------------------------------------------------------------------
    def insert(self, unit, now: float) -> None:
        key, size = unit.key, unit.size
        inc = self._incoming
        hit = inc[1] if inc is not None and inc[0] == key else self._ghost_take(key)
        self._incoming = None
        self._version += 1
        self._freq[key] = 0
        self._resident += size
        if self._resident > self._hwm:
            self._hwm = self._resident
        if hit:
            q = MAIN
        elif not self._has_evicted and self._q[SMALL].nbytes >= self._sizes()[0]:
            q = MAIN
        else:
            q = SMALL
        self._seq += 1
        if unit.pinned:
            self._pinned[key] = (q, self._seq, size)
        else:
            self._q[q].push(unit, self._seq, size)

    def access(self, unit, now: float) -> None:
        f = self._freq.get(unit.key)
        if f is not None:
            self._freq[unit.key] = f + 1
            self._version += 1
        self._incoming = None

    def pin(self, unit) -> None:
        for qid in (SMALL, MAIN):
            e = self._q[qid].discard(unit.key)
            if e is not None:
                self._pinned[unit.key] = (qid, e[0], e[3])
                self._version += 1
                return

    def unpin(self, unit, now: float) -> None:
        p = self._pinned.pop(unit.key, None)
        if p is None:
            self.insert(unit, now)
            return
        qid, seq, size = p
        self._resident += unit.size - size
        if self._resident > self._hwm:
            self._hwm = self._resident
        self._q[qid].push(unit, seq, unit.size)
        self._version += 1

    def remove(self, unit) -> None:
        key = unit.key
        p = self._pinned.pop(key, None)
        if p is not None:
            size = p[2]
        else:
            plan = self._plan if self._plan_version == self._version else None
            e = self._q[SMALL].discard(key) or self._q[MAIN].discard(key)
            if e is None:
                self._freq.pop(key, None)
                return
            size = e[3]
            if plan is not None and plan[0] is unit and plan[1] == SMALL:
                self._ghost_put(key, size)      # a one-hit wonder leaves S for the ghost
        self._freq.pop(key, None)
        self._resident -= size
        self._version += 1

    def _add(self, unit, now: float) -> None:
        self.insert(unit, now)

    def _discard(self, unit) -> None:
        self.remove(unit)

    # -- eviction --------------------------------------------------------------------------------
    def victim(self, now: float):
        if self._plan_version == self._version:
            return self._plan[0] if self._plan is not None else None
        self._has_evicted = True
        small_q, main_q = self._q
        freq = self._freq
        _, main_size, _ = self._sizes()
        plan = None
        while plan is None:
            if main_q.nbytes > main_size or not small_q:
                unit = main_q.oldest()
                if unit is None:
                    if not small_q:
                        break                        # nothing to evict
                else:
                    f = freq[unit.key]
                    if f >= 1:                       # reinsert at the newest end of M
                        freq[unit.key] = min(f, self.max_freq) - 1
                        size = main_q.discard(unit.key)[3]
                        self._seq += 1
                        main_q.push(unit, self._seq, size)
                    else:
                        plan = (unit, MAIN)
                    continue
            unit = small_q.oldest()
            while unit is not None:
                if freq[unit.key] >= self.move_to_main_threshold:   # S -> M, counter cleared
                    freq[unit.key] = 0
                    size = small_q.discard(unit.key)[3]
                    self._seq += 1
                    main_q.push(unit, self._seq, size)
                    unit = small_q.oldest()
                else:
                    plan = (unit, SMALL)
                    break
        self._plan = plan
        self._plan_version = self._version
        return plan[0] if plan is not None else None

    def __len__(self) -> int:
        return len(self._q[SMALL]) + len(self._q[MAIN])

    def __contains__(self, unit) -> bool:
        return unit.key in self._q[SMALL] or unit.key in self._q[MAIN]
