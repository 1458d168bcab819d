"""``ReferenceBits``: a set of uids kept as one byte per unit of each session (CLOCK's bits).

A session's units are consecutive uids (``uid = session << UNIT_BITS | position``), and CLOCK
sets, clears and reads their bits a run at a time (a session's history pinned, a stretch that the
hand passes, a page's layers entering). A set of uids pays a hash per unit for each of those; here
a run is a slice of its session's byte array (set or clear by slice assignment, test by ``find``,
count by ``count``: memchr-like C loops), and a batch listed across sessions is one numpy scatter
per session. A session whose last bit clears is forgotten, so the arrays cover the sessions with a
bit set, each up to its highest position set.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet

import numpy as np

from sim.units import UNIT_BITS

LONG = 64  # a listed batch this long goes through numpy (its fixed cost pays)


def _pieces(a: int, s: int, bits: int) -> Iterator[tuple[int, int, int]]:
    """``a .. s-1`` split at session bounds (``bits`` of position): (session, first position,
    stop position)."""
    mask = (1 << bits) - 1
    while a < s:
        b = a >> bits
        end = min(s, (b + 1) << bits)
        yield b, a & mask, ((end - 1) & mask) + 1
        a = end


class ReferenceBits(AbstractSet[int]):
    """A set of uids with its runs' operations as byte-array slices, per session."""

    __slots__ = ("_bits", "_count", "_n", "_shift", "_mask")

    def __init__(self, unit_bits: int = UNIT_BITS) -> None:
        """``unit_bits``: a session's uids span ``2**unit_bits`` (tests shrink it, to cross
        session bounds without arrays of millions of bytes)."""
        self._shift, self._mask = unit_bits, (1 << unit_bits) - 1
        self._bits: dict[int, bytearray] = {}  # session -> position -> 1 if set
        self._count: dict[int, int] = {}  # session -> its bits set (> 0)
        self._n = 0

    # -- the set ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def __contains__(self, uid: object) -> bool:
        if not isinstance(uid, int):
            return False
        bits = self._bits.get(uid >> self._shift)
        p = uid & self._mask
        return bits is not None and p < len(bits) and bits[p] == 1

    def __iter__(self) -> Iterator[int]:
        for b, bits in list(self._bits.items()):
            base = b << self._shift
            yield from (base + int(p) for p in np.flatnonzero(np.frombuffer(bits, dtype=np.uint8)))

    @property
    def sessions(self) -> AbstractSet[int]:
        """The sessions with a bit set (``RunOrder.pop_unmarked``'s ``marked_in``)."""
        return self._count.keys()

    def _grown(self, b: int, stop: int) -> bytearray:
        bits = self._bits.get(b)
        if bits is None:
            bits = self._bits[b] = bytearray(stop)
            self._count[b] = 0
        elif len(bits) < stop:
            bits += bytes(stop - len(bits))
        return bits

    def _counted(self, b: int, change: int) -> None:
        if change:
            self._n += change
            left = self._count[b] + change
            if left:
                self._count[b] = left
            else:  # no bit left: forget the session
                del self._count[b], self._bits[b]

    # -- one uid ---------------------------------------------------------------------------------
    def add(self, uid: int) -> None:
        b, p = uid >> self._shift, uid & self._mask
        bits = self._grown(b, p + 1)
        if not bits[p]:
            bits[p] = 1
            self._counted(b, 1)

    def discard(self, uid: int) -> None:
        b, p = uid >> self._shift, uid & self._mask
        bits = self._bits.get(b)
        if bits is not None and p < len(bits) and bits[p]:
            bits[p] = 0
            self._counted(b, -1)

    # -- runs ------------------------------------------------------------------------------------
    def set_run(self, a: int, s: int) -> None:
        """Set the bits of ``a .. s-1``."""
        for b, p, q in _pieces(a, s, self._shift):
            bits = self._grown(b, q)
            was = bits.count(1, p, q)
            bits[p:q] = b"\x01" * (q - p)
            self._counted(b, q - p - was)

    def clear_run(self, a: int, s: int) -> None:
        """Clear the bits of ``a .. s-1``."""
        for b, p, q in _pieces(a, s, self._shift):
            bits = self._bits.get(b)
            if bits is None or p >= len(bits):
                continue
            q = min(q, len(bits))
            was = bits.count(1, p, q)
            if was:
                bits[p:q] = bytes(q - p)
                self._counted(b, -was)

    def clear_runs(self, runs: Iterable[tuple[int, int]]) -> None:
        """``clear_run`` of each of ``runs`` (first, stop): a run of a session with no bit set
        costs one look-up (a decode span's new pages, many short runs, most often)."""
        bits_of, shift, mask = self._bits, self._shift, self._mask
        for a, s in runs:
            b = a >> shift
            if (s - 1) >> shift != b:  # (across a session bound)
                self.clear_run(a, s)
                continue
            bits = bits_of.get(b)
            if bits is None:
                continue
            p = a & mask
            q = min(p + s - a, len(bits))
            if p < q:
                was = bits.count(1, p, q)
                if was:
                    bits[p:q] = bytes(q - p)
                    self._counted(b, -was)

    def isdisjoint(self, other: Iterable) -> bool:
        """No bit set among ``other`` (a range of step 1: a ``find`` per session it covers)."""
        if type(other) is range and other.step == 1:
            for b, p, q in _pieces(other.start, other.stop, self._shift):
                bits = self._bits.get(b)
                if bits is not None and bits.find(1, p, q) >= 0:
                    return False
            return True
        return not any(map(self.__contains__, other))

    def count_in(self, a: int, s: int) -> int:
        """How many bits of ``a .. s-1`` are set."""
        n = 0
        for b, p, q in _pieces(a, s, self._shift):
            bits = self._bits.get(b)
            if bits is not None:
                n += bits.count(1, p, q)
        return n

    def runs_in(self, a: int, s: int) -> list[tuple[int, int]]:
        """The uids of ``a .. s-1`` whose bit is set, as extents (first, stop) in order, split at
        session bounds: two ``find`` per run, where the bits set lie in runs (a session's units
        pinned together)."""
        out: list[tuple[int, int]] = []
        for b, p, q in _pieces(a, s, self._shift):
            bits = self._bits.get(b)
            if bits is None:
                continue
            base, find, top = b << self._shift, bits.find, min(q, len(bits))
            i = find(1, p, top)
            while i >= 0:
                j = find(0, i, top)
                if j < 0:
                    out.append((base + i, base + top))
                    break
                out.append((base + i, base + j))
                i = find(1, j, top)
        return out

    def set_in(self, a: int, s: int) -> list[int]:
        """The uids of ``a .. s-1`` whose bit is set, increasing."""
        out: list[int] = []
        for b, p, q in _pieces(a, s, self._shift):
            bits = self._bits.get(b)
            if bits is None or bits.find(1, p, q) < 0:
                continue
            at = np.flatnonzero(np.frombuffer(bits, dtype=np.uint8)[p:q])
            out += (at + ((b << self._shift) + p)).tolist()
        return out

    # -- batches ---------------------------------------------------------------------------------
    def update(self, uids: Iterable[int]) -> None:
        """Set the bits of ``uids`` (a range, or any iterable)."""
        self._batch(uids, 1)

    def difference_update(self, uids: Iterable[int]) -> None:
        """Clear the bits of ``uids`` (a range, or any iterable)."""
        if self._n:
            self._batch(uids, 0)

    def _batch(self, uids: Iterable[int], value: int) -> None:
        if type(uids) is range and uids.step == 1:
            (self.set_run if value else self.clear_run)(uids.start, uids.stop)
            return
        if not isinstance(uids, list | tuple) or len(uids) < LONG:
            one = self.add if value else self.discard
            for uid in uids:
                one(uid)
            return
        a = np.asarray(uids, dtype=np.int64)
        sessions = a >> self._shift
        cuts = np.flatnonzero(sessions[1:] != sessions[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(a)]
        for i, j in zip(bounds, bounds[1:], strict=False):
            self._scatter(int(sessions[i]), a[i:j] & self._mask, value)

    def _scatter(self, b: int, at: np.ndarray, value: int) -> None:
        """Set (``value`` 1) or clear the bits of session ``b`` at positions ``at``."""
        if value:
            bits = self._grown(b, int(at.max()) + 1)
        else:
            held = self._bits.get(b)
            if held is None:
                return
            bits, at = held, at[at < len(held)]
        view = np.frombuffer(bits, dtype=np.uint8)
        was = int(np.count_nonzero(view))
        view[at] = value
        now = int(np.count_nonzero(view))
        del view  # (the array may be resized only once no view holds it)
        self._counted(b, now - was)
