"""ARC (Megiddo & Modha, FAST'03) in the byte-aware form of libCacheSim's ARC.c.

Four LRU lists, sized in bytes: T1 (seen once recently) and T2 (seen at least twice) hold units;
the ghosts B1 and B2 hold only the keys and sizes of units evicted from T1 and T2. A target p for
T1's bytes adapts: a miss found in B1 raises p by max(|B2|/|B1|, 1), one found in B2 lowers it by
max(|B1|/|B2|, 1) (bytes, float division, p kept in [0, c]; libCacheSim's float form).

- A hit moves the unit to the MRU end of T2 (from T1 or T2).
- A miss found in a ghost leaves the ghost and enters T2; any other miss enters T1.
- Victims (the REPLACE of the paper): the LRU of T1 if T1 is non-empty and holds more than p bytes
  (or exactly p when the incoming key was found in B2), or if T2 is empty; else the LRU of T2.
  Its key enters B1 or B2 (MRU end).
- On a miss found in no list (case IV), before REPLACE: if T1 + B1 + incoming size > c, the LRU of
  B1 is dropped, or, with B1 empty, the LRU of T1 is evicted without a ghost; otherwise, if the
  four lists together hold >= 2c bytes, the LRU of B2 is dropped (when B2 is non-empty).

The incoming key and size come from the ``admitting`` hook (cachesim, as libCacheSim's ``find``);
the engine does not call it, so there ghost lookups happen at ``insert`` and the victim choice sees
an incoming size of 0. ``evict`` applies the choice's ghost updates; a unit the engine ``remove``s
is forgotten without a ghost entry. c is the capacity given to ``set_capacity``, or else the
high-water mark of the bytes the tier has held (the engine fills a tier before it evicts).

Pins: a pinned unit leaves T1/T2 and remembers which; a hit while pinned marks it for T2. On unpin
it returns to the MRU end of T2 if it was in T2 or was accessed, else of T1 (the engine calls
``access`` before ``pin``, so a unit a turn used returns to T2). A unit inserted pinned (a miss,
placed for a running turn) joins T1, or T2 if its key was in a ghost, when it is released.

Differences from libCacheSim: none on cachesim streams with positive sizes (tested request by
request, unit and variable sizes). libCacheSim keeps ghost entries in its hash table; here they live
in B1/B2 only.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import compress

from sim.policies.base import EvictionPolicy
from sim.policies.registry import register
from sim.policies.structures import ByteBudget, GhostFIFO, consume


@register("arc")
class ARC(EvictionPolicy):
    reads_last_access = False
    # A pinned insert changes no victim: its size counts only on release, the capacity is fixed
    # (the engine sets it), and a new decode page cannot be in a ghost list (a ghost holds only
    # uids evicted from this tier; a page index a token budget pruned was on the GPU when it went,
    # so its ghost entry, if any, was taken when it came back).
    grows_in_bulk = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._t1: OrderedDict[int, None] = OrderedDict()  # uid, LRU first
        self._t2: OrderedDict[int, None] = OrderedDict()
        self._b1 = GhostFIFO()  # ghosts: entries leave by a hit or
        self._b2 = GhostFIFO()  # from the old end, so FIFO = LRU
        self._t1b = self._t2b = 0
        self._size: dict[int, int] = {}  # bytes of every member (T1, T2 and pinned)
        self._home: dict[int, int] = {}  # pinned member -> 1 or 2
        self.p = 0.0
        self._budget = ByteBudget()
        self._incoming: tuple[int, int, int] | None = None  # (uid, size, ghost list 0/1/2)

    # -- capacity and the incoming request -------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        self._budget.set(capacity)

    def _c(self) -> int:
        return self._budget.c

    def admitting(self, uid: int, now: float) -> None:
        self._incoming = (uid, self.view.size(uid), self._ghost_hit(uid))

    def _ghost_hit(self, uid: int) -> int:
        """Cases II and III of the paper: adapt p and take the key out of its ghost."""
        if uid in self._b1:
            delta = max(self._b2.bytes / self._b1.bytes, 1) if self._b1.bytes > 0 else 1
            self.p = min(self.p + delta, self._c())
            self._b1.take(uid)
            return 1
        if uid in self._b2:
            delta = max(self._b1.bytes / self._b2.bytes, 1) if self._b2.bytes > 0 else 1
            self.p = max(self.p - delta, 0)
            self._b2.take(uid)
            return 2
        return 0

    # -- membership ------------------------------------------------------------------------------
    def insert(self, uid: int, now: float, pinned: bool = False) -> None:
        size = self.view.size(uid)
        inc = self._incoming
        ghost = inc[2] if inc is not None and inc[0] == uid else self._ghost_hit(uid)
        self._incoming = None
        lst = 2 if ghost else 1
        self._budget.grow(size)
        self._size[uid] = size
        if pinned:
            self._home[uid] = lst
        else:
            self._link(uid, lst, size)

    def insert_many(self, uids, now: float, pinned: bool = False) -> None:
        """``insert`` each, in order; in C when all have one size and none is a ghost (then each
        joins T1, or will on release)."""
        uids = list(uids)
        unit = self.view.unit_bytes
        ghosts = self._b1.holds_any(uids) or self._b2.holds_any(uids)
        if not unit or ghosts or self._incoming is not None or len(set(uids)) < len(uids):
            super().insert_many(uids, now, pinned)
            return
        self._budget.grow(unit * len(uids))
        self._size.update(dict.fromkeys(uids, unit))
        if pinned:
            self._home.update(dict.fromkeys(uids, 1))
        else:
            self._t1.update(dict.fromkeys(uids))
            self._t1b += unit * len(uids)

    def _link(self, uid: int, lst: int, size: int) -> None:
        if lst == 1:
            self._t1[uid] = None
            self._t1b += size
        else:
            self._t2[uid] = None
            self._t2b += size

    def _unlink(self, uid: int) -> int:
        """Take a candidate out of T1/T2; returns the list it was in (0: not a candidate)."""
        if uid in self._t1:
            del self._t1[uid]
            self._t1b -= self._size[uid]
            return 1
        if uid in self._t2:
            del self._t2[uid]
            self._t2b -= self._size[uid]
            return 2
        return 0

    def access(self, uid: int, now: float) -> None:
        self._incoming = None
        if uid in self._t2:
            self._t2.move_to_end(uid)
        elif uid in self._t1:
            del self._t1[uid]
            size = self._size[uid]
            self._t1b -= size
            self._t2[uid] = None
            self._t2b += size
        elif uid in self._home:
            self._home[uid] = 2

    def pin(self, uid: int) -> None:
        lst = self._unlink(uid)
        if lst:
            self._home[uid] = lst

    def unpin(self, uid: int, now: float) -> None:
        lst = self._home.pop(uid, None)
        if lst is None:
            self.insert(uid, now)
            return
        size = self.view.size(uid)  # a pinned unit may have grown
        self._budget.grow(size - self._size[uid])
        self._size[uid] = size
        self._link(uid, lst, size)

    def acquire(self, uids, now: float) -> None:
        """``access`` then ``pin`` each: a member leaves T1/T2 for good and returns to T2."""
        self._incoming = None
        unit = self.view.unit_bytes
        if not unit:
            self._acquire_each(uids)
            return
        # Equal sizes: set operations and C-level maps over the batch (no order to keep).
        t1, t2, home = self._t1, self._t2, self._home
        uids = list(uids)
        in1, in2 = t1.keys() & uids, t2.keys() & uids
        consume(map(t1.__delitem__, in1))
        consume(map(t2.__delitem__, in2))
        self._t1b -= len(in1) * unit
        self._t2b -= len(in2) * unit
        home.update(dict.fromkeys(in1 | in2 | (home.keys() & uids), 2))

    def _acquire_each(self, uids) -> None:
        t1, t2, home, size = self._t1, self._t2, self._home, self._size
        t1b = t2b = 0
        for uid in uids:
            if uid in t2:
                del t2[uid]
                t2b += size[uid]
            elif uid in t1:
                del t1[uid]
                t1b += size[uid]
            elif uid not in home:
                continue  # not a member: a hit on it is none
            home[uid] = 2
        self._t1b -= t1b
        self._t2b -= t2b

    def release(self, uids, now: float) -> None:
        """``unpin`` each, in page order."""
        uids = list(uids)
        unit = self.view.unit_bytes
        lists = list(map(self._home.get, uids))
        if not unit or None in lists or len(set(uids)) < len(uids):
            self._release_each(uids, now)
            return
        # Equal sizes (none grows) and every unit pinned here: each list takes its units in
        # page order, appended at its MRU end as one ``update``.
        consume(map(self._home.__delitem__, uids))
        to_t1 = list(compress(uids, map((1).__eq__, lists)))
        if to_t1:
            self._t1.update(dict.fromkeys(to_t1))
            self._t1b += len(to_t1) * unit
        if len(to_t1) < len(uids):
            to_t2 = list(compress(uids, map((2).__eq__, lists)))
            self._t2.update(dict.fromkeys(to_t2))
            self._t2b += len(to_t2) * unit

    def _release_each(self, uids, now: float) -> None:
        home, sizes, size_of = self._home, self._size, self.view.size
        for uid in uids:
            lst = home.pop(uid, None)
            if lst is None:
                self.insert(uid, now)
                continue
            size = size_of(uid)  # a pinned unit may have grown
            grown = size - sizes[uid]
            if grown:
                self._budget.grow(grown)
                sizes[uid] = size
            self._link(uid, lst, size)

    def remove(self, uid: int, pinned: bool = False) -> None:
        if self._home.pop(uid, None) is None and not self._unlink(uid):
            return  # not a member
        self._budget.shrink(self._size.pop(uid))

    def _add(self, uid: int, now: float) -> None:
        self.insert(uid, now)

    def _discard(self, uid: int) -> None:
        self.remove(uid)

    # -- eviction --------------------------------------------------------------------------------
    def _replace_list(self, ghost: int) -> int:
        """REPLACE: which data list gives the victim (1: T1, 2: T2, 0: both empty)."""
        t1b = self._t1b
        use_t1 = (t1b > 0 and (t1b > self.p or (t1b == self.p and ghost == 2))) or self._t2b == 0
        if not self._t1:
            return 2 if self._t2 else 0
        if not self._t2:
            return 1
        return 1 if use_t1 else 2

    def _plan(self):
        """(victim, its list, drop B1's LRU, drop B2's LRU, victim's key to a ghost) or None."""
        inc = self._incoming
        size, ghost = (inc[1], inc[2]) if inc is not None else (0, 0)
        c = self._c()
        trim_b1 = trim_b2 = False
        if not ghost:  # case IV
            if self._t1b + self._b1.bytes + size > c:
                if self._b1.bytes > 0:
                    trim_b1 = True
                elif self._t1:  # T1 >= c: evict from T1, no ghost
                    return (next(iter(self._t1)), 1, False, False, False)
            elif (
                self._t1b + self._b1.bytes + self._t2b + self._b2.bytes >= 2 * c
            ) and self._b2.bytes > 0:
                trim_b2 = True
        lst = self._replace_list(ghost)
        if lst == 0:
            return None
        uid = next(iter(self._t1 if lst == 1 else self._t2))
        return (uid, lst, trim_b1, trim_b2, True)

    def peek(self, now: float) -> int | None:
        plan = self._plan()
        return plan[0] if plan is not None else None

    def evict(self, now: float) -> int | None:
        plan = self._plan()
        if plan is None:
            return None
        uid, lst, trim_b1, trim_b2, ghost = plan
        if trim_b1:
            self._b1.pop_oldest()
        if trim_b2:
            self._b2.pop_oldest()
        size = self._size[uid]
        self.remove(uid)
        if ghost:
            (self._b1 if lst == 1 else self._b2).add(uid, size)
        return uid

    def evict_bytes(self, nbytes: int, now: float) -> list[int]:
        """``evict`` until ``nbytes`` are freed. Where every unit has one size and no request is
        incoming (the engine's case), in one loop over local copies of the list sizes: the same
        victims, trims and ghosts as victim by victim (p and c do not change while evicting)."""
        unit = self.view.unit_bytes
        if not unit or self._incoming is not None:
            return super().evict_bytes(nbytes, now)
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        b1q, b2q = b1.ghosts(), b2.ghosts()
        t1b, t2b, b1b, b2b = self._t1b, self._t2b, b1.bytes, b2.bytes
        p, c = self.p, self._c()
        out: list[int] = []
        for _ in range(-(-nbytes // unit)):
            lst = 0
            if t1b + b1b > c:  # case IV, incoming size 0
                if b1b > 0:
                    b1b -= b1q.popitem(last=False)[1]
                elif t1:  # T1 >= c: evict from T1, no ghost
                    lst = -1
            elif t1b + b1b + t2b + b2b >= 2 * c and b2b > 0:
                b2b -= b2q.popitem(last=False)[1]
            if lst == 0:  # REPLACE
                if not t1:
                    lst = 2 if t2 else 0
                elif not t2:
                    lst = 1
                else:
                    lst = 1 if (t1b > 0 and t1b > p) or t2b == 0 else 2
                if lst == 0:
                    break
            if lst == 2:
                uid = t2.popitem(last=False)[0]
                t2b -= unit
                ghosts = b2q
                b2b += unit
            else:
                uid = t1.popitem(last=False)[0]
                t1b -= unit
                if lst == 1:
                    ghosts = b1q
                    b1b += unit
            if lst > 0:
                old = ghosts.pop(uid, None)  # (a member is never a ghost: kept as add does)
                if old is not None:
                    if lst == 1:
                        b1b -= old
                    else:
                        b2b -= old
                ghosts[uid] = unit
            out.append(uid)
        self._t1b, self._t2b, b1.bytes, b2.bytes = t1b, t2b, b1b, b2b
        consume(map(self._size.__delitem__, out))
        self._budget.shrink(unit * len(out))
        return out

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, uid: int) -> bool:
        return uid in self._t1 or uid in self._t2
