"""Tiered KV memory: GPU, CPU, DROPPED, with exact byte accounting, over integer units.

Plain synchronous code (no event loop, no clock of its own): the scheduler drives it and tests
drive it directly. Units are uids (``sim.units``); each session's byte array holds the tier of its
units. Reclaiming GPU room (``make_room``, "free N bytes" in one call) asks the GPU policy for its
victims in one batch, then demotes each GPU->CPU while the CPU tier has room for it (after the CPU
policy's victims are dropped to make that room), else drops it. Expected shortage returns False; a
broken invariant raises with a diagnosis.

``evict_ns`` holds one sample per make-room call that evicted: the wall-clock nanoseconds spent in
the policies' victim selection (the GPU batch and any CPU victims it forced); it is the value array
of ``evict_samples`` (``sim.samples``), which the scheduler compacts. The clock is passed
in (``clock``), so tests can drive this class without reading the wall clock.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.samples import Samples
from sim.units import (
    UNIT_BITS,
    UNIT_MASK,
    SessionKV,
    Tier,
    UnitView,
    dropped_run,
    extents_of,
    layer_codes,
    uid_of,
)

GPU, CPU, DROPPED, SHARED = Tier.GPU, Tier.CPU, Tier.DROPPED, Tier.SHARED
_TIER_BYTES = (b"\x00", b"\x01", b"\x02")  # one unit's state byte, by Tier
_GPU_BYTE = _TIER_BYTES[GPU]


def _no_clock() -> int:
    return 0


@dataclass(slots=True)
class LayerFetch:
    """What ``bring_layers_to_gpu`` did: the units swapped in per layer, the pages recomputed and
    the deepest layer each is recomputed through, and the CPU units the recompute regenerated."""

    swapped_per_layer: np.ndarray  # int, one entry per layer
    recomputed_pages: np.ndarray  # page indices, in order
    depth: np.ndarray  # deepest dropped layer of each recomputed page
    regenerated: int  # CPU units at or above a recomputed page's depth
    # (first page, stop page, the first page's depth) when the recomputed pages are one run whose
    # pages after the first are all recomputed through the last layer (one run of dropped units)
    run: tuple[int, int, int] | None = None

    @property
    def swapped_units(self) -> int:
        return int(self.swapped_per_layer.sum())


def _uids_of(idx: np.ndarray, base: int) -> list[int] | range:
    """The uids of increasing unit indices ``idx``: a range when they are consecutive (a page-layer
    session's hundreds of thousands of units are then no list to build, nor for a policy to read)."""
    if len(idx) and int(idx[-1]) - int(idx[0]) == len(idx) - 1:
        return range(base + int(idx[0]), base + int(idx[-1]) + 1)
    return (idx + base).tolist()


def _pin_each(policy, uids) -> None:
    pin = policy.pin
    for uid in uids:
        pin(uid)


class TieredMemory:
    def __init__(
        self,
        gpu_bytes: float,
        cpu_bytes: float,
        gpu_policy,
        cpu_policy,
        view: UnitView,
        clock: Callable[[], int] = _no_clock,
    ) -> None:
        self.capacity = [gpu_bytes, cpu_bytes]
        self.used = [0, 0]
        self.evictable = [0, 0]  # bytes of unpinned units per tier
        self.policy = [gpu_policy, cpu_policy]
        self.view = view
        self.clock = clock
        for tier in (GPU, CPU):
            if math.isfinite(self.capacity[tier]):
                self.policy[tier].set_capacity(int(self.capacity[tier]))
        self.peak_gpu_bytes = 0  # highest GPU occupancy seen
        self.reserved = 0  # GPU bytes held outside KV pages (``reserve``)
        self.peak_reserved = 0
        self.swap_out_bytes = 0
        self.dropped_bytes = 0
        # victim-selection time of each make-room call that evicted (kept as sim.samples.Samples)
        self.evict_samples = Samples(typecode="q")
        self.evict_ns = self.evict_samples.values
        # Hears of each finished session whose last unit left the GPU and CPU (None: no one).
        self.on_gone: Callable[[SessionKV], None] | None = None

    def free(self, tier: Tier) -> float:
        return self.capacity[tier] - self.used[tier]

    def reclaimable(self, tier: Tier) -> float:
        return self.free(tier) + self.evictable[tier]

    def unit_size(self, sess: SessionKV) -> int:
        return (
            sess.unit_pages * self.view.page_bytes
            if self.view.per_session
            else self.view.page_bytes
        )

    def _grew(self, tier: Tier) -> None:
        if self.used[tier] > self.capacity[tier]:
            raise AssertionError(
                f"{tier.name} over capacity: {self.used[tier]} > {self.capacity[tier]}"
            )
        if tier == GPU and self.used[GPU] > self.peak_gpu_bytes:
            self.peak_gpu_bytes = self.used[GPU]

    # -- a session's units -----------------------------------------------------------------------
    def add_units(self, sess: SessionKV, pages: int, now: float, insert: bool = True) -> None:
        """``pages`` new pages of a running turn (one unit each, or one per layer at
        ``layer_block``), pinned on the GPU (room was made). ``insert=False``: the caller tells the
        GPU policy itself (a batch across sessions)."""
        if pages <= 0:
            return
        count = pages * self.view.layers
        base = uid_of(sess.index, len(sess.tier))
        sess.tier.extend(_GPU_BYTE * count)
        sess.tier_pages[GPU] += count
        self.used[GPU] += count * self.view.page_bytes
        self._grew(GPU)
        if insert:
            self.policy[GPU].insert_many(range(base, base + count), now, True)

    def add_pages(self, grown: Iterable[tuple[SessionKV, int]]) -> None:
        """``add_units(sess, pages, now, insert=False)`` for each (session, pages) of a batch (a
        decode span's allocations), with the byte count and its check taken once."""
        layers, gpu = self.view.layers, _GPU_BYTE
        count = 0
        for sess, pages in grown:
            if pages > 0:
                units = pages * layers
                sess.tier.extend(gpu * units)
                sess.tier_pages[GPU] += units
                count += units
        self.used[GPU] += count * self.view.page_bytes
        self._grew(GPU)

    def grow_session_unit(self, sess: SessionKV, pages: int, now: float) -> None:
        """Session granularity: the session's one pinned GPU unit now spans ``pages`` pages."""
        if not sess.tier:
            # The unit enters empty (the policy sees its size at insert as 0), then grows pinned;
            # the policy reads its size again when it is released.
            sess.tier.extend(_GPU_BYTE)
            sess.unit_pages = 0
            self.policy[GPU].insert(uid_of(sess.index, 0), now, True)
        if not sess.pinned or sess.tier[0] != GPU:
            raise AssertionError(f"session {sess.session_id}: only a pinned GPU unit grows")
        self.used[GPU] += (pages - sess.unit_pages) * self.view.page_bytes
        sess.tier_pages[GPU] += pages - sess.unit_pages
        sess.unit_pages = pages
        self._grew(GPU)

    def truncate(self, sess: SessionKV, pages: int, now: float) -> None:
        """A running session keeps only its first ``pages`` pages: a token budget pruned the rest
        for good (they leave every tier: not dropped, never recomputed). Its KV is compacted, so
        page i is the i-th page of what it keeps."""
        if not sess.pinned:
            raise AssertionError(f"session {sess.session_id}: only a running turn's KV is pruned")
        if self.view.per_session:
            if pages < sess.unit_pages:
                self.grow_session_unit(sess, pages, now)
            return
        keep = pages * self.view.layers
        count = len(sess.tier) - keep
        if count <= 0:
            return
        base = uid_of(sess.index, keep)
        self.policy[GPU].remove_many(range(base, base + count), pinned=True)
        del sess.tier[keep:]
        sess.tier_pages[GPU] -= count
        self.used[GPU] -= count * self.view.page_bytes

    def offload_pinned(self, sess: SessionKV, first: int, stop: int, now: float) -> bool:
        """Move a running session's GPU units ``first..stop-1`` to the CPU, still held by its turn
        (sparse decode reads them there): CPU candidates are dropped to make room, the copy is a
        device-to-host save. False, and nothing moves, when the CPU cannot hold them."""
        count = stop - first
        if count <= 0:
            return True
        size = self.view.page_bytes
        need = count * size
        if not sess.pinned or sess.tier.count(GPU, first, stop) != count:
            raise AssertionError(
                f"session {sess.session_id}: offload of units {first}..{stop} "
                f"that are not its pinned GPU units"
            )
        if self.reclaimable(CPU) < need:
            return False
        short = need - (self.capacity[CPU] - self.used[CPU])
        if short > 0:  # the CPU policy's victims, dropped in one batch
            extents = self.policy[CPU].evict_extents(short, now)
            dropped = sum(b - a for a, b in extents) * size
            self._move_extents(extents, CPU, DROPPED, policy=CPU)
            self.used[CPU] -= dropped
            self.evictable[CPU] -= dropped
            self.dropped_bytes += dropped
        sess.tier[first:stop] = _TIER_BYTES[CPU] * count
        sess.tier_pages[GPU] -= count
        sess.tier_pages[CPU] += count
        self.used[GPU] -= need
        self.used[CPU] += need
        self._grew(CPU)
        self.swap_out_bytes += need
        base = uid_of(sess.index, first)
        self.policy[GPU].remove_many(range(base, base + count), pinned=True)
        self.policy[CPU].insert_many(range(base, base + count), now, True)
        return True

    def unreserve(self, nbytes: int) -> None:
        """Give back ``nbytes`` that ``reserve`` held."""
        if not 0 <= nbytes <= self.reserved:
            raise AssertionError(f"unreserve of {nbytes} bytes with {self.reserved} reserved")
        self.used[GPU] -= nbytes
        self.reserved -= nbytes

    def reserve(self, nbytes: int, now: float) -> bool:
        """Hold ``nbytes`` of GPU memory outside the KV pages (ring buffers, page metadata),
        evicting to make room; False (and no change) when it cannot be made."""
        if self.capacity[GPU] - self.used[GPU] < nbytes and not self.make_room(nbytes, now):
            return False
        self.used[GPU] += nbytes
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self._grew(GPU)
        return True

    def acquire(self, sess: SessionKV, now: float) -> None:
        """A turn uses all the session's units where they are: a hit in their tier, then pinned."""
        self._hold(sess, lambda policy, uids: policy.acquire(uids, now))

    def pin(self, sess: SessionKV) -> None:
        """Hold all the session's units where they are, with no use of them (no hit): they stop
        being candidates until ``release``."""
        self._hold(sess, _pin_each)

    def _hold(self, sess: SessionKV, take: Callable[[Any, Any], None]) -> None:
        """Pin the session: ``take(policy, uids)`` tells each tier's policy of its units."""
        if sess.pinned:
            raise AssertionError(f"session {sess.session_id} pinned twice")
        size = self.unit_size(sess)
        counts = None if self.view.per_session else sess.tier_pages  # units, a unit a page
        for tier in (GPU, CPU):
            uids = sess.uids(tier, None if counts is None else counts[tier])
            if uids:
                take(self.policy[tier], uids)
                self.evictable[tier] -= len(uids) * size
        sess.pinned = True

    def release(self, sess: SessionKV, now: float) -> None:
        """The turn using the session's units finished: they are candidates again, in page order."""
        if not sess.pinned:
            raise AssertionError(f"session {sess.session_id} released but not pinned")
        sess.pinned = False
        size = self.unit_size(sess)
        counts = None if self.view.per_session else sess.tier_pages  # units, a unit a page
        for tier in (GPU, CPU):
            uids = sess.uids(tier, None if counts is None else counts[tier])
            if uids:
                self.evictable[tier] += len(uids) * size
                self.policy[tier].release(uids, now)

    def bring_to_gpu(self, sess: SessionKV, now: float) -> tuple[int, int, np.ndarray | list[int]]:
        """Make every unit of the pinned session GPU-resident (the caller made room): CPU units are
        swapped in, dropped ones recomputed. The GPU policy hears of them in page order.

        Returns (swapped-in bytes, swapped-in pages, unit indices recomputed, as an array).
        """
        if not sess.pinned:
            raise AssertionError(f"session {sess.session_id} is not pinned")
        tier, base = sess.tier, sess.index << UNIT_BITS
        n_cpu, n_dropped = sess.tier_pages[CPU], sess.tier_pages[DROPPED]
        if not n_cpu and not n_dropped:
            return 0, 0, []
        size = self.unit_size(sess)
        run = self._dropped_run(sess)
        if run is not None:  # one run of dropped units: no scan for where they are
            first, stop = run
            tier[first:stop] = _GPU_BYTE * n_dropped
            self.policy[CPU].remove_many([], True)  # the calls the scan below makes, as made
            self.policy[GPU].insert_many(range(base + first, base + stop), now, True)
            sess.tier_pages[DROPPED] = 0
            sess.tier_pages[GPU] += n_dropped
            self.used[GPU] += n_dropped * size
            self._grew(GPU)
            return 0, 0, np.arange(first, stop)
        ppu = sess.unit_pages if self.view.per_session else 1  # pages per unit
        codes = np.frombuffer(tier, dtype=np.uint8)
        if sess.tier_pages[SHARED]:  # the pool's pages stay put
            moved = np.flatnonzero((codes == CPU) | (codes == DROPPED))
        else:
            moved = np.flatnonzero(codes)  # not on the GPU, page order
        was = codes[moved]
        recomputed = moved[was == 2]  # an index array
        swapped = (moved[was == 1] + base).tolist()
        del codes
        tier[moved[0] :] = tier[moved[0] :].replace(b"\x01", b"\x00").replace(b"\x02", b"\x00")
        self.policy[CPU].remove_many(swapped, True)
        self.policy[GPU].insert_many(_uids_of(moved, base), now, True)
        n_swapped = len(swapped)
        pages = sess.tier_pages
        pages[CPU] -= n_swapped * ppu
        pages[DROPPED] -= len(recomputed) * ppu
        pages[GPU] += len(moved) * ppu
        self.used[CPU] -= n_swapped * size
        self.used[GPU] += len(moved) * size
        self._grew(GPU)
        return n_swapped * size, n_swapped * ppu, recomputed

    def _dropped_run(self, sess: SessionKV) -> tuple[int, int] | None:
        """(first, stop) of the session's units off the GPU where they are all dropped and
        consecutive, a unit a page (none on the CPU or in the shared pool): the common case, as a
        policy takes a session's oldest pages first. None otherwise."""
        return None if self.view.per_session else dropped_run(sess)

    def _dropped_layer_run(self, sess: SessionKV) -> tuple[int, int] | None:
        """``_dropped_run`` for per-layer units: (first, stop) of the units off the GPU where
        they are all dropped and consecutive, else None."""
        return dropped_run(sess)

    def bring_layers_to_gpu(self, sess: SessionKV, now: float) -> LayerFetch | None:
        """``bring_to_gpu`` for per-layer units: a page with a dropped layer is recomputed through
        its deepest dropped layer, which also regenerates its CPU units of the layers up to that
        depth (no copy); every other CPU unit is swapped in. None when all are on the GPU."""
        if not sess.pinned:
            raise AssertionError(f"session {sess.session_id} is not pinned")
        n_cpu, n_dropped = sess.tier_pages[CPU], sess.tier_pages[DROPPED]
        if not n_cpu and not n_dropped:
            return None
        layers, base, tier = self.view.layers, sess.index << UNIT_BITS, sess.tier
        run = self._dropped_layer_run(sess)
        if run is not None:  # one run of dropped units: its pages and depths from its ends
            first, stop = run
            tier[first:stop] = _GPU_BYTE * n_dropped
            self.policy[CPU].remove_many([], True)  # the calls the scan below makes, as made
            if self.policy[GPU].hears_pinned():
                self.policy[GPU].insert_many(range(base + first, base + stop), now, True)
            sess.tier_pages[DROPPED] = 0
            sess.tier_pages[GPU] += n_dropped
            self.used[GPU] += n_dropped * self.view.page_bytes
            self._grew(GPU)
            p0, p1 = first // layers, (stop - 1) // layers + 1
            # a page's first unit is its deepest layer: every page after the first has it
            # dropped; the first page's run starts at its unit first % layers
            depth = np.full(p1 - p0, layers - 1, dtype=np.intp)
            depth[0] = d0 = layers - 1 - first % layers
            return LayerFetch(
                np.zeros(layers, dtype=np.int64), np.arange(p0, p1), depth, 0, (p0, p1, d0)
            )
        codes = layer_codes(sess, layers)  # (pages, layer)
        dropped = codes == 2
        pages = np.flatnonzero(dropped.any(axis=1))  # pages to recompute, in order
        depth = layers - 1 - np.argmax(dropped[pages, ::-1], axis=1)  # deepest dropped layer
        n_regen, per_layer = 0, np.zeros(layers, dtype=np.int64)
        if n_cpu:
            on_cpu = codes == 1
            regen = np.zeros_like(on_cpu)
            regen[pages] = on_cpu[pages] & (np.arange(layers) <= depth[:, None])
            per_layer = (on_cpu & ~regen).sum(axis=0)  # swapped-in units of layer l
            n_regen = int(regen.sum())
        flat = np.frombuffer(tier, dtype=np.uint8)
        moved = np.flatnonzero(flat)
        from_cpu = (moved[flat[moved] == 1] + base).tolist() if n_cpu else []
        del codes, dropped, flat
        tier[moved[0] :] = tier[moved[0] :].replace(b"\x01", b"\x00").replace(b"\x02", b"\x00")
        self.policy[CPU].remove_many(from_cpu, True)
        if self.policy[GPU].hears_pinned():
            self.policy[GPU].insert_many(_uids_of(moved, base), now, True)
        size = self.view.page_bytes
        counts = sess.tier_pages
        counts[CPU] -= n_cpu
        counts[DROPPED] -= n_dropped
        counts[GPU] += n_cpu + n_dropped
        self.used[CPU] -= n_cpu * size
        self.used[GPU] += (n_cpu + n_dropped) * size
        self._grew(GPU)
        return LayerFetch(per_layer, pages, depth, n_regen)

    def swap_in_cpu_units(self, sess: SessionKV, now: float) -> np.ndarray:
        """Swap the pinned session's CPU units in (the caller made room); dropped units stay
        dropped. Returns their unit indices (an ahead-of-time swap-in)."""
        if not sess.pinned:
            raise AssertionError(f"session {sess.session_id} is not pinned")
        idx = np.flatnonzero(np.frombuffer(sess.tier, dtype=np.uint8) == 1)
        if not len(idx):
            return idx
        uids = (idx + (sess.index << UNIT_BITS)).tolist()
        self.policy[CPU].remove_many(uids, True)
        self.policy[GPU].insert_many(uids, now, True)
        for a, b in extents_of(idx):
            sess.tier[a:b] = _GPU_BYTE * (b - a)
        n, size = len(idx), self.unit_size(sess)
        ppu = sess.unit_pages if self.view.per_session else 1
        sess.tier_pages[CPU] -= n * ppu
        sess.tier_pages[GPU] += n * ppu
        self.used[CPU] -= n * size
        self.used[GPU] += n * size
        self._grew(GPU)
        return idx

    def drop_from(self, sess: SessionKV, first_unit: int, now: float) -> None:
        """Drop the session's unpinned units from ``first_unit`` on (preemption discards them)."""
        if sess.pinned:
            raise AssertionError(f"session {sess.session_id}: cannot drop pinned units")
        tier, base = sess.tier, sess.index << UNIT_BITS
        size = self.unit_size(sess)
        ppu = sess.unit_pages if self.view.per_session else 1
        for idx in range(first_unit, len(tier)):
            t = tier[idx]
            if t == DROPPED or t == SHARED:  # the pool's pages are released, not dropped
                continue
            self.policy[t].remove(base | idx)
            tier[idx] = DROPPED
            sess.tier_pages[t] -= ppu
            sess.tier_pages[DROPPED] += ppu
            self.used[t] -= size
            self.evictable[t] -= size
            self.dropped_bytes += size

    # -- shared pages: a pool whose units are held one by one ------------------------------------
    def add_shared_units(self, pool: SessionKV, count: int, now: float) -> list[int]:
        """``count`` new pages of a shared pool, on the GPU and held once by the turn that computed
        them (room was made). Returns their unit indices."""
        if pool.refs is None:
            pool.refs = array("I")
        first = len(pool.tier)
        pool.tier.extend(_GPU_BYTE * count)
        pool.refs.extend([1] * count)
        pool.tier_pages[GPU] += count
        self.used[GPU] += count * self.view.page_bytes
        self._grew(GPU)
        base = uid_of(pool.index, first)
        self.policy[GPU].insert_many(range(base, base + count), now, True)
        return list(range(first, first + count))

    def new_shared_units(self, pool: SessionKV, count: int) -> int:
        """``count`` pages of a shared pool that no turn has computed yet: DROPPED (they take no
        memory until a turn computes them), held by no one. Returns the first one's index."""
        if pool.refs is None:
            pool.refs = array("I")
        first = len(pool.tier)
        pool.tier.extend(_TIER_BYTES[DROPPED] * count)
        pool.refs.extend([0] * count)
        pool.tier_pages[DROPPED] += count
        return first

    def bring_shared_to_gpu(self, pool: SessionKV, units: np.ndarray, now: float) -> np.ndarray:
        """Make held shared units GPU-resident (the caller made room): CPU ones are swapped in,
        dropped ones computed. Returns the positions in ``units`` of those swapped in."""
        codes = np.frombuffer(pool.tier, dtype=np.uint8)[units]
        moved = np.flatnonzero(codes != GPU)
        if not len(moved):
            return moved
        assert pool.refs is not None  # a shared pool has reference counts
        if any(pool.refs[i] == 0 for i in units[moved].tolist()):
            raise AssertionError(f"shared units of {pool.session_id} fetched but not held")
        swapped = moved[codes[moved] == CPU]
        base = pool.index << UNIT_BITS
        uids = (units[swapped] + base).tolist()
        self.policy[CPU].remove_many(uids, True)
        self.policy[GPU].insert_many((units[moved] + base).tolist(), now, True)
        for idx in units[moved].tolist():
            pool.tier[idx] = GPU
        n_cpu, size = len(swapped), self.view.page_bytes
        pool.tier_pages[CPU] -= n_cpu
        pool.tier_pages[DROPPED] -= len(moved) - n_cpu
        pool.tier_pages[GPU] += len(moved)
        self.used[CPU] -= n_cpu * size
        self.used[GPU] += len(moved) * size
        self._grew(GPU)
        return swapped

    def hold(self, pool: SessionKV, units: list[int], now: float) -> None:
        """A running turn uses these shared units: a hit, and they stop being candidates while any
        turn holds them (reference counts)."""
        refs, base, size = pool.refs, pool.index << UNIT_BITS, self.view.page_bytes
        assert refs is not None  # a shared pool has reference counts
        for idx in units:
            r = refs[idx]
            t = pool.tier[idx]
            if r == 0 and t != DROPPED:
                self.policy[t].access(base | idx, now)
                self.policy[t].pin(base | idx)
                self.evictable[t] -= size
            refs[idx] = r + 1

    def unhold(self, pool: SessionKV, units: list[int], now: float) -> None:
        """A turn that held these shared units finished; the last holder makes each a candidate."""
        refs, base, size = pool.refs, pool.index << UNIT_BITS, self.view.page_bytes
        assert refs is not None  # a shared pool has reference counts
        for idx in units:
            r = refs[idx]
            if r == 0:
                raise AssertionError(
                    f"shared unit {idx} of {pool.session_id} released but not held"
                )
            refs[idx] = r - 1
            t = pool.tier[idx]
            if r == 1 and t != DROPPED:
                self.evictable[t] += size
                self.policy[t].unpin(base | idx, now)

    # -- reclaiming room -------------------------------------------------------------------------
    def drops_victims(self) -> bool:
        """Would ``make_room`` drop its GPU victims (no CPU tier can take one) rather than demote
        them? Dropping leaves the CPU tier as it is, so the answer holds until the CPU changes."""
        size = self.view.unit_bytes or 0
        return not (self.capacity[CPU] >= size and self.reclaimable(CPU) >= size)

    def drop_at(self, schedule: list[tuple[float, int]]) -> None:
        """``make_room``'s evictions of several calls, each (time, bytes to evict) in turn, where
        units have one size and every victim is dropped (``drops_victims``): the GPU policy chooses
        each call's victims at its time (``evict_extents_at``), and all of them leave at once."""
        t0 = self.clock()
        extents = self.policy[GPU].evict_extents_at(schedule)
        self.evict_ns.append(self.clock() - t0)
        k = self._free_victims(extents, sum(nbytes for _, nbytes in schedule))
        self._move_extents(extents, GPU, DROPPED)
        self.dropped_bytes += k * (self.view.unit_bytes or 0)

    def _free_victims(self, extents: list[tuple[int, int]], need: float) -> int:
        """The GPU bytes of equal-sized victims leave its count (at least ``need``: else the
        policy failed); returns how many units they are."""
        size = self.view.unit_bytes or 0  # (set wherever victims come as extents)
        k = sum(b - a for a, b in extents)
        if k * size < need:
            raise AssertionError(
                f"{type(self.policy[GPU]).__name__} freed {k * size} of {need} "
                f"bytes with {self.evictable[GPU]} evictable"
            )
        self.used[GPU] -= k * size
        self.evictable[GPU] -= k * size
        return k

    def make_room(self, nbytes: int, now: float) -> bool:
        """Evict GPU victims until ``nbytes`` are free. False (and no change) if that is impossible."""
        if self.reclaimable(GPU) < nbytes:
            return False
        need = nbytes - (self.capacity[GPU] - self.used[GPU])
        if need <= 0:
            return True
        clock = self.clock
        view = self.view
        size = view.unit_bytes
        if size:  # equal sizes: one decision for the batch
            t0 = clock()
            extents = self.policy[GPU].evict_extents(need, now)
            spent = clock() - t0
            k = self._free_victims(extents, need)
            # Demotion keeps the CPU's reclaimable bytes constant, so either all go or none.
            if not self.drops_victims():
                self._move_extents(extents, GPU, CPU)
                t1 = clock()
                dropped = self.policy[CPU].take_in_extents(
                    extents, self.capacity[CPU] - self.used[CPU], now
                )
                spent += clock() - t1
                self._move_extents(dropped, CPU, DROPPED, policy=CPU)
                n_dropped = sum(b - a for a, b in dropped)
                net = (k - n_dropped) * size
                self.used[CPU] += net
                self.evictable[CPU] += net
                self._grew(CPU)
                self.swap_out_bytes += k * size
                self.dropped_bytes += n_dropped * size
            else:
                self._move_extents(extents, GPU, DROPPED)
                self.dropped_bytes += k * size
            self.evict_ns.append(spent)
            return True
        t0 = clock()
        victims = self.policy[GPU].evict_bytes(need, now)
        spent = clock() - t0
        sessions, cpu_cap, freed = view.sessions, self.capacity[CPU], 0
        for uid in victims:  # sizes vary (session units): one at a time
            sess = sessions[uid >> UNIT_BITS]
            idx = uid & UNIT_MASK
            if idx >= len(sess.tier) or sess.tier[idx] != GPU or sess.held(idx):
                raise AssertionError(
                    f"{type(self.policy[GPU]).__name__} returned unit {uid} of session "
                    f"{sess.session_id} as a GPU victim, but it is pinned or not on the GPU"
                )
            size = view.size(uid)
            ppu = sess.unit_pages
            freed += size
            if cpu_cap >= size and self.reclaimable(CPU) >= size:
                while self.capacity[CPU] - self.used[CPU] < size:
                    t1 = clock()
                    cpu_victim = self.policy[CPU].evict(now)
                    spent += clock() - t1
                    self._drop_cpu_victim(cpu_victim)
                sess.tier[idx] = CPU
                self.used[CPU] += size
                self.evictable[CPU] += size
                self._grew(CPU)
                self.policy[CPU].insert(uid, now)
                self.swap_out_bytes += size
                sess.tier_pages[CPU] += ppu
                sess.tier_pages[GPU] -= ppu
            else:
                self._drop_gpu_victim(sess, idx, size, ppu)
        self.used[GPU] -= freed
        self.evictable[GPU] -= freed
        self.evict_ns.append(spent)
        if freed < need:
            raise AssertionError(
                f"{type(self.policy[GPU]).__name__} freed {freed} of {need} bytes with "
                f"{self.evictable[GPU] + freed} evictable"
            )
        return True

    def _move_extents(
        self, extents: list[tuple[int, int]], frm: Tier, to: Tier, policy: Tier = GPU
    ) -> None:
        """Set equal-sized units' tier from ``frm`` to ``to``, an extent (consecutive uids of one
        session) at a time, with byte-string operations; checks that each unit is in ``frm`` and
        held by no running turn. Per-session page counts are kept; byte totals are the caller's."""
        f, t = int(frm), int(to)
        sessions = self.view.sessions
        to_bytes = _TIER_BYTES[t]
        for a, b in extents:
            sess = sessions[a >> UNIT_BITS]
            i = a & UNIT_MASK
            n = b - a
            tier = sess.tier
            if n == 1:  # (a page of its own, the common victim: no slices)
                if (
                    i >= len(tier)
                    or sess.pinned
                    or tier[i] != f
                    or (sess.refs is not None and sess.refs[i])
                ):
                    self._bad_victim(policy, [a], sess, frm)
                tier[i] = t
            else:
                j = i + n
                if (
                    (b - 1) >> UNIT_BITS != a >> UNIT_BITS
                    or j > len(tier)
                    or sess.pinned
                    or tier.count(f, i, j) != n
                    or (sess.refs is not None and any(sess.refs[i:j]))
                ):
                    self._bad_victim(policy, list(range(a, b)), sess, frm)
                tier[i:j] = to_bytes * n
            pages = sess.tier_pages
            pages[f] -= n
            pages[t] += n
            if t == 2:
                self.forget_if_gone(sess)

    def _bad_victim(self, tier: Tier, units: list[int], sess: SessionKV, frm: Tier):
        raise AssertionError(
            f"{type(self.policy[tier]).__name__} returned units {units} of session "
            f"{sess.session_id} as victims, but one is pinned or not on {Tier(frm).name}"
        )

    def _drop_gpu_victim(self, sess: SessionKV, idx: int, size: int, ppu: int) -> None:
        """A variable-size GPU victim (a session unit) that no CPU tier can take: dropped."""
        sess.tier[idx] = DROPPED
        self.dropped_bytes += size
        sess.tier_pages[DROPPED] += ppu
        sess.tier_pages[GPU] -= ppu  # (before the check: its one unit left the GPU)
        self.forget_if_gone(sess)

    def _drop_cpu_victim(self, uid: int | None) -> None:
        if uid is None:
            raise AssertionError(
                f"{type(self.policy[CPU]).__name__} named no CPU victim with "
                f"{self.evictable[CPU]} evictable bytes"
            )
        sess = self.view.sessions[uid >> UNIT_BITS]
        idx = uid & UNIT_MASK
        if idx >= len(sess.tier) or sess.tier[idx] != CPU or sess.held(idx):
            raise AssertionError(
                f"{type(self.policy[CPU]).__name__} returned unit {uid} of session "
                f"{sess.session_id} as a CPU victim, but it is pinned or not on the CPU"
            )
        size = self.view.size(uid)
        ppu = sess.unit_pages if self.view.per_session else 1
        sess.tier[idx] = DROPPED
        sess.tier_pages[CPU] -= ppu
        sess.tier_pages[DROPPED] += ppu
        self.used[CPU] -= size
        self.evictable[CPU] -= size
        self.dropped_bytes += size
        self.forget_if_gone(sess)

    def forget_if_gone(self, sess: SessionKV) -> None:
        """A finished session with nothing left on the GPU or the CPU (its last unit dropped, or
        none there when its last turn ended) frees its array, and ``on_gone`` hears of it: memory
        follows the live state (its uids stay valid names for ghost lists)."""
        if sess.done and not sess.pinned and not sess.tier_pages[GPU] and not sess.tier_pages[CPU]:
            if sess.tier:
                sess.tier = bytearray()
                sess.tier_pages[DROPPED] = sess.tier_pages[SHARED] = 0
            if self.on_gone is not None:
                self.on_gone(sess)
