"""Which group of a ``KineticMin`` holds a candidate uid: a dict for any uids; for the engine's
uids (``session << UNIT_BITS | unit``) a byte a unit per session (layer units), or a session's
members as runs (block units).

The engine moves a session's units in batches (a turn's release is thousands of consecutive
units, a layer_block eviction hundreds of units of a few sessions), and a dict entry a unit made
those batches cost a hash, often a cache miss, a unit. ``GroupsBySession`` keeps, per session, a
byte array by unit number (0: not a candidate, k: the session's k-th group) and the session's
short table of groups, so a consecutive batch is a slice and a scattered one a numpy scatter.

At block units a session's pages enter one group together (a turn's release, a range) and leave
as runs (a merge takes a group's cheapest entries: a session's leading pages; a pin takes the
session's pages), so ``GroupsByRuns`` keeps, per session, its members as sorted [lo, hi) runs,
each of one group: a release, a pin and a merge's victims cost per run, not per page.

The classes have one interface. The batch calls state what holds: ``join`` adds uids where none
is a member (and says whether they were distinct), ``take_out`` takes members, each once;
``pop_many`` any uids.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, compress, repeat, starmap
from operator import and_

import numpy as np

from sim.policies.structures import consume
from sim.units import UNIT_BITS, UNIT_MASK

_SCALAR_MAX = 32  # batches up to this size go unit by unit (numpy's call costs more)
_MORE = 255  # the code of a unit whose group is in its session's overflow dict
_CODES = _MORE - 1  # groups a session's table names


class GroupsByUid:
    """uid -> group in a dict: any uids."""

    __slots__ = ("_of",)

    def __init__(self) -> None:
        self._of: dict[int, object] = {}

    def get(self, uid: int):
        return self._of.get(uid)

    def pop(self, uid: int):
        return self._of.pop(uid, None)

    def set(self, uid: int, g) -> None:
        self._of[uid] = g

    def join(self, uids, g) -> bool | None:
        """``uids`` join ``g`` where none is a member (then: whether they were distinct), else
        None and nothing changes."""
        of = self._of
        if not of.keys().isdisjoint(uids):
            return None
        before = len(of)
        of.update(zip(uids, repeat(g)))
        return len(of) - before == len(uids)

    def pop_many(self, uids) -> dict:
        """The members among ``uids`` leave: {group: its uids that left}, each uid once."""
        left = list(map(self._of.pop, uids, repeat(None)))  # in C: None where not a member
        g = left[0] if left else None
        if g is not None and left.count(g) == len(left):  # usual: one group, each uid once
            return {g: uids if type(uids) is list else list(uids)}
        out: dict = {}
        for uid, g in zip(uids, left, strict=True):
            if g is not None:
                out.setdefault(g, []).append(uid)
        return out

    def take_out(self, uids, in_order: np.ndarray | None = None) -> None:
        """Members, each once, leave (``in_order``: the same, a sorted int64 array)."""
        consume(map(self._of.__delitem__, uids))

    def take_spans(self, spans: list[tuple[int, int]]) -> None:
        """The members in these disjoint [lo, hi) spans, all members, leave."""
        consume(map(self._of.__delitem__, chain.from_iterable(starmap(range, spans))))

    def group_of_all(self, uids: list[int]):
        """The group of all of ``uids`` (members, ascending) when they share one, else None."""
        of = self._of
        g = of[uids[0]]
        return g if list(map(of.__getitem__, uids)).count(g) == len(uids) else None

    def members_in(self, lo: int, hi: int) -> list[int]:
        """The members in ``range(lo, hi)``, ascending."""
        return list(filter(self._of.__contains__, range(lo, hi)))

    def __len__(self) -> int:
        return len(self._of)

    def __contains__(self, uid: int) -> bool:
        return uid in self._of

    def __iter__(self) -> Iterator[int]:
        return iter(self._of)


class _Session:
    """One session's candidates: a code a unit, its groups by code - 1, and the units whose
    group has no code (``more``: a session with more than 254 live groups, rare)."""

    __slots__ = ("codes", "count", "more", "tab")

    def __init__(self, size: int) -> None:
        self.codes = bytearray(size)
        self.tab: list = []
        self.count = 0
        self.more: dict[int, object] = {}


class GroupsBySession:
    """uid -> group for the engine's uids, a byte a unit per session (see the module's doc).
    ``alive(g)`` says whether group ``g`` has members: a session's code of a group that has none
    is free for another group."""

    __slots__ = ("_alive", "_n", "_sess")

    def __init__(self, alive: Callable[[object], bool]) -> None:
        self._alive = alive
        self._sess: dict[int, _Session] = {}
        self._n = 0

    # -- one unit --------------------------------------------------------------------------------
    def get(self, uid: int):
        ss = self._sess.get(uid >> UNIT_BITS)
        if ss is None:
            return None
        p = uid & UNIT_MASK
        codes = ss.codes
        if p >= len(codes):
            return None
        c = codes[p]
        if not c:
            return None
        return ss.more[uid] if c == _MORE else ss.tab[c - 1]

    def pop(self, uid: int):
        s = uid >> UNIT_BITS
        ss = self._sess.get(s)
        if ss is None:
            return None
        p = uid & UNIT_MASK
        codes = ss.codes
        if p >= len(codes):
            return None
        c = codes[p]
        if not c:
            return None
        codes[p] = 0
        g = ss.more.pop(uid) if c == _MORE else ss.tab[c - 1]
        self._n -= 1
        ss.count -= 1
        if not ss.count:
            del self._sess[s]
        return g

    def set(self, uid: int, g) -> None:
        """``uid`` (not a member) joins ``g``."""
        ss = self._session(uid >> UNIT_BITS, (uid & UNIT_MASK) + 1)
        c = self._code(ss, g)
        ss.codes[uid & UNIT_MASK] = c
        if c == _MORE:
            ss.more[uid] = g
        ss.count += 1
        self._n += 1

    def _session(self, s: int, size: int) -> _Session:
        """Session ``s``'s record, its codes covering unit numbers below ``size``."""
        ss = self._sess.get(s)
        if ss is None:
            ss = self._sess[s] = _Session(size)
        elif len(ss.codes) < size:
            ss.codes.extend(bytes(max(size, 2 * len(ss.codes)) - len(ss.codes)))
        return ss

    def _code(self, ss: _Session, g) -> int:
        """``g``'s code in the session: its own, a free one, else ``_MORE``."""
        tab = ss.tab
        for i, h in enumerate(tab):
            if h is g:
                return i + 1
        alive = self._alive
        for i, h in enumerate(tab):
            if not alive(h):  # no member anywhere: no unit holds its code
                tab[i] = g
                return i + 1
        if len(tab) < _CODES:
            tab.append(g)
            return len(tab)
        self._recode(ss)
        if len(tab) < _CODES:
            tab.append(g)
            return len(tab)
        return _MORE

    @staticmethod
    def _recode(ss: _Session) -> None:
        """Keep only the codes some unit holds (a group may live on in other sessions only)."""
        used = sorted(set(ss.codes) - {0, _MORE})
        table = bytearray(range(256))
        for new, old in enumerate(used, 1):
            table[old] = new
        ss.tab[:] = [ss.tab[old - 1] for old in used]
        ss.codes = bytearray(ss.codes.translate(table))

    # -- batches ---------------------------------------------------------------------------------
    @staticmethod
    def _span(uids) -> tuple[int, int, int] | None:
        """(session, lowest unit number, highest + 1) of a non-empty batch of one session."""
        if type(uids) is range and uids.step == 1:
            lo, hi = uids.start, uids.stop - 1
        else:
            lo, hi = min(uids), max(uids)
        if lo >> UNIT_BITS != hi >> UNIT_BITS:
            return None
        return lo >> UNIT_BITS, lo & UNIT_MASK, (hi & UNIT_MASK) + 1

    def join(self, uids, g) -> bool | None:
        """``uids`` join ``g`` where none is a member (then: whether they were distinct), else
        None and nothing changes. A session's consecutive units (a turn's release) are a slice."""
        if not uids:
            return True
        if type(uids) is not range:
            uids = list(uids)
        span = self._consecutive(uids) if len(uids) > _SCALAR_MAX else None
        if span is None:
            if any(map(self.__contains__, uids)):
                return None
            return self._add_each(uids, g)
        s, lo, stop = span
        ss = self._sess.get(s)
        if ss is not None:
            codes = ss.codes
            if codes.count(0, lo, stop) != max(0, min(stop, len(codes)) - lo):
                return None
        ss = self._session(s, stop)
        c = self._code(ss, g)
        if c == _MORE:
            return self._add_each(uids, g)
        ss.codes[lo:stop] = bytes((c,)) * (stop - lo)
        ss.count += stop - lo
        self._n += stop - lo
        return True

    @staticmethod
    def _consecutive(uids) -> tuple[int, int, int] | None:
        """(session, first unit number, last + 1) of consecutive ascending uids of one session,
        else None."""
        first, last = uids[0], uids[-1]
        if first >> UNIT_BITS != last >> UNIT_BITS or last - first != len(uids) - 1:
            return None
        if type(uids) is not range and uids != list(range(first, last + 1)):
            return None
        return first >> UNIT_BITS, first & UNIT_MASK, (last & UNIT_MASK) + 1

    def _add_each(self, uids, g) -> bool:
        """``join`` unit by unit (none a member): whether they were distinct."""
        added = 0
        for uid in uids:
            if self.get(uid) is None:
                self.set(uid, g)
                added += 1
        return added == len(uids)

    def pop_many(self, uids) -> dict:
        """The members among ``uids`` leave: {group: its uids that left}, each uid once."""
        out: dict = {}
        if not uids:
            return out
        span = self._span(uids)
        ss = None if span is None else self._sess.get(span[0])
        if span is None or ss is None or ss.more or len(ss.codes) < span[2]:
            return self._pop_each(uids)
        if len(uids) <= _SCALAR_MAX:  # a page's units (pensieve-depth): maps in C
            codes = ss.codes
            at = list(map(and_, uids, repeat(UNIT_MASK)))
            held = list(map(codes.__getitem__, at))
            c = held[0]
            if not c or held.count(c) != len(held) or len(set(at)) != len(at):
                return self._pop_each(uids)
            consume(map(codes.__setitem__, at, repeat(0)))
            out[ss.tab[c - 1]] = list(uids)
            self._left(span[0], ss, len(at))
            return out
        a = np.asarray(uids, dtype=np.int64)
        if not (a[1:] > a[:-1]).all():
            a = np.unique(a)
        units = a & UNIT_MASK
        view = np.frombuffer(ss.codes, dtype=np.uint8)
        code = view[units]
        member = code != 0
        k = int(member.sum())
        if k:
            view[units[member]] = 0
        del view
        if not k:
            return out
        present = np.unique(code[member]).tolist()
        if len(present) == 1:
            out[ss.tab[present[0] - 1]] = (a[member] if k < len(a) else a).tolist()
        else:
            for c in present:
                out[ss.tab[c - 1]] = a[code == c].tolist()
        self._left(span[0], ss, k)
        return out

    def _pop_each(self, uids) -> dict:
        out: dict = {}
        for uid in uids:
            g = self.pop(uid)
            if g is not None:
                out.setdefault(g, []).append(uid)
        return out

    def _left(self, s: int, ss: _Session, k: int) -> None:
        """``k`` units of session ``s`` left; its record goes with its last."""
        self._n -= k
        ss.count -= k
        if not ss.count:
            del self._sess[s]

    def take_out(self, uids, in_order: np.ndarray | None = None) -> None:
        """Members, each once, leave (``in_order``: the same, a sorted int64 array)."""
        if len(uids) <= _SCALAR_MAX:
            consume(map(self.pop, uids))
            return
        a = np.asarray(uids, dtype=np.int64) if in_order is None else in_order
        sessions = a >> UNIT_BITS
        if not (sessions[1:] >= sessions[:-1]).all():  # one session's units side by side
            a = np.sort(a)
            sessions = a >> UNIT_BITS
        cuts = [0, *(np.flatnonzero(sessions[1:] != sessions[:-1]) + 1).tolist(), len(a)]
        starts = sessions[cuts[:-1]].tolist()
        for s, i, j in zip(starts, cuts, cuts[1:], strict=False):
            ss = self._sess[s]
            if ss.more or j - i <= 4:
                consume(map(self.pop, a[i:j].tolist()))
                continue
            view = np.frombuffer(ss.codes, dtype=np.uint8)
            view[a[i:j] & UNIT_MASK] = 0
            del view
            self._left(s, ss, j - i)

    def take_spans(self, spans: list[tuple[int, int]]) -> None:
        """The members in these disjoint [lo, hi) spans, all members, leave."""
        uids = sorted(chain.from_iterable(starmap(range, spans)))
        self.take_out(uids, np.array(uids, dtype=np.int64))

    def group_of_all(self, uids: list[int]):
        """The group of all of ``uids`` (members, ascending) when they share one, else None."""
        s = uids[0] >> UNIT_BITS
        ss = self._sess.get(s)
        if ss is None or uids[-1] >> UNIT_BITS != s:  # (ascending: the ends say one session)
            return self._group_of_each(uids)
        codes = set(map(ss.codes.__getitem__, map(and_, uids, repeat(UNIT_MASK))))
        if len(codes) != 1:
            return None
        c = codes.pop()
        if c == _MORE:
            return self._group_of_each(uids)
        return ss.tab[c - 1]

    def _group_of_each(self, uids: Iterable[int]):
        groups = list(map(self.get, uids))
        g = groups[0]
        return g if groups.count(g) == len(groups) else None

    def members_in(self, lo: int, hi: int) -> list[int]:
        """The members in ``range(lo, hi)``, ascending."""
        ss = self._sess.get(lo >> UNIT_BITS)
        if ss is None:
            return []
        if lo >> UNIT_BITS != (hi - 1) >> UNIT_BITS:
            return list(filter(self.__contains__, range(lo, hi)))
        p = lo & UNIT_MASK
        return list(compress(range(lo, hi), ss.codes[p : p + hi - lo]))

    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: int) -> bool:
        ss = self._sess.get(uid >> UNIT_BITS)
        if ss is None:
            return False
        p = uid & UNIT_MASK
        return p < len(ss.codes) and ss.codes[p] != 0

    def __iter__(self) -> Iterator[int]:
        for s, ss in self._sess.items():
            base = s << UNIT_BITS
            yield from (base + p for p, c in enumerate(ss.codes) if c)


class _Runs:
    """One session's members: disjoint runs [starts[i], stops[i]) of uids, ascending, run i of
    group groups[i] (adjacent runs of one group are one)."""

    __slots__ = ("groups", "starts", "stops")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []
        self.groups: list = []


class GroupsByRuns:
    """uid -> group for the engine's uids as runs a session (see the module's doc)."""

    __slots__ = ("_n", "_sess")

    def __init__(self) -> None:
        self._sess: dict[int, _Runs] = {}
        self._n = 0

    # -- runs ------------------------------------------------------------------------------------
    def _put(self, lo: int, hi: int, g) -> None:
        """[lo, hi) (one session's, no member) joins ``g``: a run, joined to a neighbour of ``g``
        that touches it."""
        s = lo >> UNIT_BITS
        rs = self._sess.get(s)
        if rs is None:
            rs = self._sess[s] = _Runs()
        starts, stops, groups = rs.starts, rs.stops, rs.groups
        i = bisect_left(starts, lo)
        if i and stops[i - 1] == lo and groups[i - 1] is g:  # extends the run before
            if i < len(starts) and starts[i] == hi and groups[i] is g:  # and meets the next
                stops[i - 1] = stops[i]
                del starts[i], stops[i], groups[i]
            else:
                stops[i - 1] = hi
        elif i < len(starts) and starts[i] == hi and groups[i] is g:
            starts[i] = lo
        else:
            starts.insert(i, lo)
            stops.insert(i, hi)
            groups.insert(i, g)
        self._n += hi - lo

    def _cut(self, lo: int, hi: int) -> list[tuple]:
        """The members in [lo, hi) (one session's) leave: (group, first, stop) of each run cut."""
        s = lo >> UNIT_BITS
        rs = self._sess.get(s)
        if rs is None:
            return []
        starts, stops, groups = rs.starts, rs.stops, rs.groups
        i = bisect_right(stops, lo)  # the first run that ends past lo
        if i < len(starts) and starts[i] <= lo and hi <= stops[i]:  # within one run (usual)
            a, b, g = starts[i], stops[i], groups[i]
            if a == lo and b == hi:
                del starts[i], stops[i], groups[i]
            elif a == lo:
                starts[i] = hi
            elif b == hi:
                stops[i] = lo
            else:  # from its middle: two runs
                stops[i] = lo
                starts.insert(i + 1, hi)
                stops.insert(i + 1, b)
                groups.insert(i + 1, g)
            cut = [(g, lo, hi)]
        else:
            j = bisect_left(starts, hi, i)  # runs i..j-1 meet [lo, hi)
            cut, kept = [], []
            for a, b, g in zip(starts[i:j], stops[i:j], groups[i:j], strict=True):
                cut.append((g, max(a, lo), min(b, hi)))
                if a < lo:
                    kept.append((a, lo, g))
                if hi < b:
                    kept.append((hi, b, g))
            starts[i:j] = [a for a, _, _ in kept]
            stops[i:j] = [b for _, b, _ in kept]
            groups[i:j] = [g for _, _, g in kept]
        self._n -= sum(b - a for _, a, b in cut)
        if not starts:
            del self._sess[s]
        return cut

    @staticmethod
    def _spans(uids) -> list[tuple[int, int]]:
        """Distinct uids as ascending [lo, hi) runs, each within one session."""
        if type(uids) is range and uids.step == 1:
            lo, hi = uids.start, uids.stop
            if not uids or lo >> UNIT_BITS == (hi - 1) >> UNIT_BITS:
                return [(lo, hi)] if uids else []
        return GroupsByRuns._runs_of(sorted(set(uids)))

    @staticmethod
    def _runs_of(ascending: list[int]) -> list[tuple[int, int]]:
        """Ascending distinct uids as [lo, hi) runs, each within one session."""
        spans: list[tuple[int, int]] = []
        if not ascending:
            return spans
        it = iter(ascending)
        lo = prev = next(it)
        for uid in it:
            if uid != prev + 1 or not uid & UNIT_MASK:  # (a session's first unit: a new run)
                spans.append((lo, prev + 1))
                lo = uid
            prev = uid
        spans.append((lo, prev + 1))
        return spans

    @staticmethod
    def _array_runs(a: np.ndarray) -> list[tuple[int, int]]:
        """``_runs_of`` a sorted int64 array of distinct uids, in numpy (masks, not ``np.r_``:
        a merge's few hundred victims make the fixed costs count)."""
        first = np.empty(len(a), dtype=bool)  # a run starts here
        first[0] = True
        np.not_equal(a[1:] - a[:-1], 1, out=first[1:])
        first[1:] |= (a[1:] & UNIT_MASK) == 0
        last = np.empty(len(a), dtype=bool)  # a run ends here
        last[-1] = True
        last[:-1] = first[1:]
        return list(zip(a[first].tolist(), (a[last] + 1).tolist(), strict=True))

    def _run_of(self, uid: int) -> tuple[_Runs, int] | None:
        """The session's runs and the index of the run holding ``uid``, or None."""
        rs = self._sess.get(uid >> UNIT_BITS)
        if rs is None:
            return None
        i = bisect_right(rs.starts, uid) - 1
        return (rs, i) if i >= 0 and uid < rs.stops[i] else None

    # -- the interface ---------------------------------------------------------------------------
    def get(self, uid: int):
        found = self._run_of(uid)
        return None if found is None else found[0].groups[found[1]]

    def pop(self, uid: int):
        rs = self._sess.get(uid >> UNIT_BITS)
        if rs is not None and rs.starts[0] == uid and uid + 1 < rs.stops[0]:
            rs.starts[0] = uid + 1  # usual: a session's leading member (a single victim)
            self._n -= 1
            return rs.groups[0]
        cut = self._cut(uid, uid + 1)
        return cut[0][0] if cut else None

    def set(self, uid: int, g) -> None:
        """``uid`` (not a member) joins ``g``."""
        self._put(uid, uid + 1, g)

    def join(self, uids, g) -> bool | None:
        """``uids`` join ``g`` where none is a member (then: whether they were distinct), else
        None and nothing changes."""
        spans = self._spans(uids)
        for lo, hi in spans:
            rs = self._sess.get(lo >> UNIT_BITS)
            if rs is not None:
                i = bisect_right(rs.stops, lo)
                if i < len(rs.starts) and rs.starts[i] < hi:
                    return None
        for lo, hi in spans:
            self._put(lo, hi, g)
        return sum(hi - lo for lo, hi in spans) == len(uids)

    def pop_many(self, uids) -> dict:
        """The members among ``uids`` leave: {group: its uids that left}, each uid once."""
        out: dict = {}
        for lo, hi in self._spans(uids):
            for g, a, b in self._cut(lo, hi):
                out.setdefault(g, []).extend(range(a, b))
        return out

    def take_out(self, uids, in_order: np.ndarray | None = None) -> None:
        """Members, each once, leave (``in_order``: the same, a sorted int64 array)."""
        if in_order is not None and len(in_order) > _SCALAR_MAX:
            self.take_spans(self._array_runs(in_order))
        else:
            self.take_spans(self._runs_of(sorted(uids)))

    def take_spans(self, spans: list[tuple[int, int]]) -> None:
        """The members in these disjoint [lo, hi) spans, all members, leave."""
        sess, taken = self._sess, 0
        for lo, hi in spans:
            if lo >> UNIT_BITS != (hi - 1) >> UNIT_BITS:  # (across sessions: a run each)
                for a, b in self._spans(range(lo, hi)):
                    self._cut(a, b)
                continue
            # usual: a session's leading members (a group's cheapest entries), short of its end
            rs = sess[lo >> UNIT_BITS]
            starts = rs.starts
            if starts[0] == lo and hi < rs.stops[0]:
                starts[0] = hi
                taken += hi - lo
            else:
                self._cut(lo, hi)
        self._n -= taken

    def group_of_all(self, uids: list[int]):
        """The group of all of ``uids`` (members, ascending) when they share one, else None."""
        found = self._run_of(uids[0])
        if found is not None and uids[-1] < found[0].stops[found[1]]:  # one run holds them
            return found[0].groups[found[1]]
        groups = list(map(self.get, uids))
        g = groups[0]
        return g if groups.count(g) == len(groups) else None

    def members_in(self, lo: int, hi: int) -> list[int]:
        """The members in ``range(lo, hi)``, ascending."""
        if lo >> UNIT_BITS != (hi - 1) >> UNIT_BITS:
            return list(filter(self.__contains__, range(lo, hi)))
        rs = self._sess.get(lo >> UNIT_BITS)
        if rs is None:
            return []
        i, j = bisect_right(rs.stops, lo), bisect_left(rs.starts, hi)
        out: list[int] = []
        for a, b in zip(rs.starts[i:j], rs.stops[i:j], strict=True):
            out.extend(range(max(a, lo), min(b, hi)))
        return out

    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: int) -> bool:
        return self._run_of(uid) is not None

    def __iter__(self) -> Iterator[int]:
        for rs in self._sess.values():
            for a, b in zip(rs.starts, rs.stops, strict=True):
                yield from range(a, b)
