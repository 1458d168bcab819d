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

``remove`` of the unit ``victim`` names puts an A1in victim's key in A1out; any other removal
forgets it. Pins: a pinned unit leaves its queue; an A1in unit returns to its place in A1in, an Am
unit to Am's MRU end. Without ``set_capacity`` (the engine) c is the high-water mark of the bytes
the tier has held. O(log n) per operation (A1in is a heap with lazy deletion).
"""
from __future__ import annotations

from collections import OrderedDict

from sim.policies.base import EvictionPolicy
from sim.policies.clock import SeqQueue
from sim.policies.registry import register

A1IN, AM = 0, 1


@register("twoq")
class TwoQ(EvictionPolicy):
    a_in_size_ratio = 0.25
    a_out_size_ratio = 0.5

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._ain = SeqQueue()
        self._am: OrderedDict[int, object] = OrderedDict()    # key -> unit, LRU first
        self._am_bytes = 0
        self._aout: OrderedDict[int, int] = OrderedDict()     # key -> size, oldest first
        self._aout_bytes = 0
        self._size: dict[int, int] = {}
        self._pinned: dict[int, tuple[int, int]] = {}         # key -> (queue, seq in A1in)
        self._capacity: int | None = None
        self._hwm = 0
        self._resident = 0
        self._incoming: tuple[int, bool] | None = None
        self._seq = 0

    # -- sizes and the incoming request ----------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        self._capacity = int(capacity)

    def _sizes(self) -> tuple[int, int]:
        c = self._capacity if self._capacity is not None else self._hwm
        return int(c * self.a_in_size_ratio), int(c * self.a_out_size_ratio)

    def admitting(self, unit, now: float) -> None:
        self._incoming = (unit.key, self._aout_take(unit.key))

    def admit(self, unit) -> bool:
        return unit.size <= self._sizes()[0]

    def _aout_take(self, key: int) -> bool:
        size = self._aout.pop(key, None)
        if size is None:
            return False
        self._aout_bytes -= size
        return True

    def _aout_put(self, key: int, size: int) -> None:
        cap = self._sizes()[1]
        if key in self._aout or size > cap:
            return
        while self._aout_bytes + size > cap:
            self._aout_bytes -= self._aout.popitem(last=False)[1]
        self._aout[key] = size
        self._aout_bytes += size

    # -- membership ------------------------------------------------------------------------------
    def insert(self, unit, now: float) -> None:
        key, size = unit.key, unit.size
        inc = self._incoming
        hit = inc[1] if inc is not None and inc[0] == key else self._aout_take(key)
        self._incoming = None
        self._size[key] = size
        self._resident += size
        if self._resident > self._hwm:
            self._hwm = self._resident
        q = AM if hit else A1IN
        self._seq += 1
        if unit.pinned:
            self._pinned[key] = (q, self._seq)
        elif q == AM:
            self._am[key] = unit
            self._am_bytes += size
        else:
            self._ain.push(unit, self._seq, size)

    def access(self, unit, now: float) -> None:
        self._incoming = None
        if unit.key in self._am:
            self._am.move_to_end(unit.key)

    def pin(self, unit) -> None:
        key = unit.key
        if self._am.pop(key, None) is not None:
            self._am_bytes -= self._size[key]
            self._pinned[key] = (AM, 0)
            return
        e = self._ain.discard(key)
        if e is not None:
            self._pinned[key] = (A1IN, e[0])

    def unpin(self, unit, now: float) -> None:
        key = unit.key
        p = self._pinned.pop(key, None)
        if p is None:
            self.insert(unit, now)
            return
        size = unit.size
        self._resident += size - self._size[key]
        if self._resident > self._hwm:
            self._hwm = self._resident
        self._size[key] = size
        if p[0] == AM:
            self._am[key] = unit
            self._am_bytes += size
        else:
            self._ain.push(unit, p[1], size)

    def remove(self, unit) -> None:
        key = unit.key
        size = self._size.pop(key, None)
        if size is None:
            return
        self._resident -= size
        if self._pinned.pop(key, None) is not None:
            return
        if self._am.pop(key, None) is not None:
            self._am_bytes -= size
            return
        is_victim = self.victim(0.0) is unit
        self._ain.discard(key)
        if is_victim:
            self._aout_put(key, size)

    def _add(self, unit, now: float) -> None:
        self.insert(unit, now)

    def _discard(self, unit) -> None:
        self.remove(unit)

    def victim(self, now: float):
        kin = self._sizes()[0]
        if self._ain.nbytes > kin or not self._am:
            unit = self._ain.oldest()
            if unit is not None:
                return unit
        for unit in self._am.values():
            return unit
        return None

    def queue(self, unit) -> str | None:
        """'a1in', 'am' (or None): where the unit is."""
        if unit.key in self._am or self._pinned.get(unit.key, (None,))[0] == AM:
            return "am"
        if unit.key in self._ain or unit.key in self._pinned:
            return "a1in"
        return None

    def __len__(self) -> int:
        return len(self._ain) + len(self._am)

    def __contains__(self, unit) -> bool:
        return unit.key in self._am or unit.key in self._ain
