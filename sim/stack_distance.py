"""LRU hits of a whole request stream at once, in numpy (Mattson's stack algorithm).

Under LRU with a capacity in bytes, when every object has one size for the whole stream, the cache
after each request is the longest prefix of the recency list (objects, most recently requested
first; objects larger than the capacity never enter it) whose sizes fit: a hit moves the object to
the front and keeps the cached set; a miss puts it in front and evicts from the back until it fits,
which leaves the longest prefix that fits again. So request ``i`` to object ``x``, whose previous
request was ``p``, hits iff

    size(x) + (sizes of the distinct objects requested in (p, i)) <= capacity

and a first request misses. Each distinct object of the window is counted at its first request in
it, the ``j`` in ``(p, i)`` whose own previous request lies before ``p``; the window's sum less the
requests whose previous request lies inside the window is that sum, and the latter is the sum over
``j < i`` with ``prev(j) > prev(i)``: a weighted inversion count, taken by a merge sort with one
numpy pass per level (``earlier_greater_sums``).

Where an object's size changes from one request to another, the cached object keeps the size it was
admitted with and an admitted object can be requested at a size larger than the capacity (a hit):
the prefix rule no longer holds, and ``lru_hit_flags`` returns None for the caller's replay.
"""

from __future__ import annotations

import numpy as np

# The weights, their running sums and the request indices share one int64 where they fit.
_WORD_BITS = 63


def stable_order_by_id(obj_ids: np.ndarray) -> np.ndarray:
    """The request indices sorted by object id, requests of one object in request order."""
    return _order_by_id(np.asarray(obj_ids, dtype=np.int64))[0]


def _order_by_id(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``stable_order_by_id``'s order of the int64 ``ids``, with what it sorted: each id's offset
    from the least one (uint32 where the span fits, else uint64) and that span (the largest)."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint32), 0
    lo = int(ids.min())
    span = int(ids.max()) - lo
    # offsets from the least id, in uint64 arithmetic: the int64 range's span does not overflow
    offsets = ids.view(np.uint64) - np.uint64(lo & 0xFFFF_FFFF_FFFF_FFFF)
    if not span >> 32:
        offsets = offsets.astype(np.uint32)
    order = np.argsort(offsets.astype(np.uint16), kind="stable")  # the low 16 bits (a cast
    shift = 16  # keeps the low bits), then each next 16
    while span >> shift:
        # the next digit of every request, then taken in the order so far: a gather from 2 bytes
        # a request rather than from the 4 or 8 of the offsets (random reads: cache misses)
        digit = (offsets >> offsets.dtype.type(shift)).astype(np.uint16)
        order = order[np.argsort(digit[order], kind="stable")]
        shift += 16
    return order, offsets, span


def earlier_greater_sums(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``out[k]`` = the sum of ``weights[j]`` over ``j < k`` with ``values[j] > values[k]``.

    ``values`` are distinct non-negative integers, ``weights`` positive. A merge sort on the
    indices, top down: at each level the elements are in order of value within blocks of indices
    (aligned blocks of a power of two, the last one short); an element of a block's right half
    gains the weights of the left half's elements that come after it, then each block is split
    into its halves, keeping the order. The running sums travel in the same int64 as the index
    and the weight where they fit, else in a second array.
    """
    m = len(values)
    out = np.zeros(m, dtype=np.int64)
    if m < 2:
        return out
    t_bits = (m - 1).bit_length()
    w_bits = int(weights.max()).bit_length()
    sum_shift = t_bits + w_bits
    if sum_shift > _WORD_BITS:
        raise ValueError("weights too large to pack with their indices")
    packed = sum_shift + int(weights.sum()).bit_length() <= _WORD_BITS

    by_value = np.full(int(values.max()) + 1, -1, dtype=np.int64)
    by_value[values] = np.arange(m)
    index = np.compress(by_value >= 0, by_value)
    key = (index << w_bits) | weights[index]  # [running sum |] index | weight
    sums = np.zeros(0 if packed else m, dtype=np.int64)  # the running sums, if not in the key
    w_mask = (1 << w_bits) - 1

    spare = np.empty_like(key)
    bit_set, left_w = np.empty_like(key), np.empty_like(key)
    is_right, is_left = np.empty(m, dtype=bool), np.empty(m, dtype=bool)
    for bit in range(t_bits - 1, -1, -1):
        half = 1 << bit
        np.bitwise_and(key, 1 << (w_bits + bit), out=bit_set)
        np.not_equal(bit_set, 0, out=is_right)
        np.logical_not(is_right, out=is_left)
        np.bitwise_and(key, w_mask, out=left_w)
        np.multiply(left_w, is_left, out=left_w)
        np.cumsum(left_w, out=left_w)
        # a right element gains the left weight between it and its block's end
        rows = m // (2 * half)  # whole blocks; the rest is one short block
        ends = left_w[2 * half - 1 : rows * 2 * half : 2 * half]
        # each half's elements found once, for the key, the sums and the gains
        left_at, right_at = np.flatnonzero(is_left), np.flatnonzero(is_right)
        gained = left_w.take(right_at)
        tail = len(gained) - rows * half
        np.subtract(np.repeat(ends, half), gained[: rows * half], out=gained[: rows * half])
        np.subtract(left_w[-1], gained[rows * half :], out=gained[rows * half :])
        if packed:
            gained <<= sum_shift
            _split_halves(key, spare, left_at, right_at, rows, half, tail, gained)
        else:
            _split_halves(key, spare, left_at, right_at, rows, half, tail, None)
            _split_halves(sums, left_w, left_at, right_at, rows, half, tail, gained)
            sums, left_w = left_w, sums
        key, spare = spare, key
    at = (key >> w_bits) & ((1 << t_bits) - 1)
    out[at] = key >> sum_shift if packed else sums
    return out


def _split_halves(src, dst, left_at, right_at, rows, half, tail, add) -> None:
    """Each block of ``src`` into ``dst``: its left-half elements (at ``left_at``, in order), then
    its right-half ones (at ``right_at``; plus ``add``). ``rows`` whole blocks of ``2 * half``,
    then a short one with ``tail`` on its right."""
    lefts, rights = src.take(left_at), src.take(right_at)
    if add is not None:
        rights += add
    whole = rows * 2 * half
    blocks = dst[:whole].reshape(rows, 2 * half)
    blocks[:, :half] = lefts[: rows * half].reshape(rows, half)
    blocks[:, half:] = rights[: rows * half].reshape(rows, half)
    dst[whole : len(dst) - tail] = lefts[rows * half :]
    dst[len(dst) - tail :] = rights[rows * half :]


def lru_hit_flags(obj_ids: np.ndarray, sizes: np.ndarray, capacity: int) -> np.ndarray | None:
    """The hit (True) or miss of each request under LRU with ``capacity`` (in units of ``sizes``),
    or None where some object's size changes between its requests (the prefix rule needs one
    size per object)."""
    obj_ids, sizes = np.asarray(obj_ids, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    n = len(obj_ids)
    hit = np.zeros(n, dtype=bool)
    if n == 0:
        return hit
    if float(sizes.sum(dtype=np.float64)) >= 2.0 ** (_WORD_BITS - 1):
        return None  # a window's weight plus a size could overflow
    prev = _previous_request(obj_ids, sizes)
    if prev is None:
        return None
    before = np.zeros(n + 1, dtype=np.int64)  # before[k]: weight of requests 0..k-1
    # Each repeat request i of an object that fits, with its previous request p: the interval
    # (p, i). It hits if even every request inside it counted: the window's whole weight fits.
    if sizes.max() <= capacity:  # every object fits (the usual case: no mask to apply)
        np.cumsum(sizes, out=before[1:])
        ends = np.flatnonzero(prev >= 0)
    else:
        fits = sizes <= capacity  # an object larger than the capacity is never cached
        np.cumsum(np.where(fits, sizes, 0), out=before[1:])
        ends = np.flatnonzero((prev >= 0) & fits)
        del fits
    starts, size = prev[ends], sizes[ends]
    del prev
    window = before[ends] - before[starts + 1]
    sure = window + size <= capacity
    hit[ends] = sure
    if sure.all():
        return hit
    undecided = ~sure
    del sure
    _rule_out_by_recent_requests(undecided, ends, starts, size, before, capacity)
    del before
    if not undecided.any():
        return hit
    # The others need the weight of the intervals nested in theirs (a request seen again inside
    # the window). Those as long as an undecided one go through the merge sort (its answer is
    # exact for each of them: what is nested in one is shorter); a shorter one cannot contain any
    # of them, so it is nested in one iff it ends before its end and does not start before its
    # start: two prefix sums. A longer one is nested in none.
    length = ends - starts
    undecided_length = length[undecided]
    shortest, longest = undecided_length.min(), undecided_length.max()
    long = (length >= shortest) & (length <= longest)
    short_size = size * (length < shortest)
    del length, undecided, undecided_length
    short_started = np.zeros(n + 1, dtype=np.int64)  # [k]: short ones starting before k
    short_started[starts + 1] = short_size
    np.cumsum(short_started, out=short_started)
    short_ended = np.cumsum(short_size)
    short_ended -= short_size  # short ones ending before each end
    del short_size
    rows = np.flatnonzero(long)  # once for the five (np.compress finds them again each time)
    end, start, size, window, nested = (
        a.take(rows) for a in (ends, starts, size, window, short_ended)
    )
    del rows
    del ends, starts, short_ended
    if (len(end) - 1).bit_length() + int(size.max()).bit_length() > _WORD_BITS:
        return None  # an index and a weight do not fit in one int64
    nested -= short_started[start]
    del short_started
    nested += earlier_greater_sums(start, size)
    hit[end] = window - nested + size <= capacity
    return hit


def _rule_out_by_recent_requests(undecided, ends, starts, size, before, capacity) -> None:
    """Clears ``undecided`` where a request certainly misses: the distinct objects of the ``k``
    requests just before it, inside its window when ``k`` is less than the window's length, are
    some of the window's, so if their sizes alone overflow the capacity it misses. Those ``k``
    requests' distinct sizes are their sum less the intervals nested in them (shorter than ``k``):
    prefix sums. ``k`` from four times the shortest undecided window's length, four times larger
    each round, while a round decides at least one request in 16: a round costs about what the
    merge sort spends on that many, and a round with ``k`` just under the shortest length, the
    start this had, decided almost none (the shortest windows barely overflow)."""
    n = len(before) - 1
    length = ends - starts
    k = 4 * int(length[undecided].min())
    worth = len(ends) // 16  # requests a round must decide to pay for itself
    while k < n and len(rows := np.flatnonzero(undecided & (length > k))):
        inside = size * (length < k)
        ended = np.cumsum(inside)
        ended -= inside  # in order of ends: inside ones ending before each end
        started = np.zeros(n + 1, dtype=np.int64)  # [x]: inside ones starting before x
        started[starts + 1] = inside
        np.cumsum(started, out=started)
        # The undecided ones longer than k (the only ones a round can decide): where their k
        # requests start, inside their windows
        end = ends[rows]
        back = end - k
        recent = before[end] - before[back] - ended[rows] + started[back]
        recent += size[rows]
        out = rows[recent > capacity]
        undecided[out] = False
        if len(out) < worth:
            break
        k *= 4


def _previous_request(obj_ids: np.ndarray, sizes: np.ndarray) -> np.ndarray | None:
    """For each request, the index of the previous request to its object (-1 for a first one);
    None if an object's size differs between two of its requests."""
    ids = np.asarray(obj_ids, dtype=np.int64)
    if (sorted_keys := _sorted_keys(ids)) is not None:
        # the ids and the order from one sort of id-and-index keys
        key, index_bits = sorted_keys
        order = key & ((1 << index_bits) - 1)
        key >>= index_bits  # each request's id offset, in order
        same = key[1:] == key[:-1]  # [k]: the k-th and the next in order share an id
        del key
        if sizes.min() != sizes.max() and _sizes_change(sizes, order, same):
            return None
        return _previous_in_order(order, same)
    return _previous_request_by_radix(ids, sizes)


def _sizes_change(sizes: np.ndarray, order: np.ndarray, same: np.ndarray) -> bool:
    """Does an object's size change between two of its requests (in id ``order``; ``same[k]``:
    the k-th and the next share an id)?"""
    by_id = sizes[order]
    return bool((same & (by_id[1:] != by_id[:-1])).any())


def _previous_in_order(order: np.ndarray, same: np.ndarray) -> np.ndarray:
    """Each request's previous request of its object (-1: none), from the requests in id order."""
    prev = np.full(len(order), -1, dtype=np.int64)
    at = np.flatnonzero(same)  # the earlier of each pair, once for both sides
    prev[order.take(at + 1)] = order.take(at)
    return prev


def _sorted_keys(ids: np.ndarray) -> tuple[np.ndarray, int] | None:
    """Each request's key, its id's offset from the least id above its index (``index_bits``
    low bits), sorted: the requests in order of id, then of index (the keys are distinct, so
    numpy's unstable sort, vectorised, gives that order; one sort of 8-byte keys took 0.6x
    ``_order_by_id``'s 16-bit passes where ids span more than 16 bits). None where an offset and
    an index do not fit in 63 bits together, or no request."""
    n = len(ids)
    if n == 0:
        return None
    lo = int(ids.min())
    span = int(ids.max()) - lo
    index_bits = max((n - 1).bit_length(), 1)
    if span.bit_length() + index_bits > _WORD_BITS:
        return None
    key = ids - lo  # no overflow: the span fits
    key <<= index_bits
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    return key, index_bits


def _previous_request_by_radix(ids: np.ndarray, sizes: np.ndarray) -> np.ndarray | None:
    """``_previous_request`` where its keys do not fit: the order by ``_order_by_id``."""
    order, offsets, span = _order_by_id(ids)
    n = len(order)
    if n and span < 4 * n and offsets.dtype == np.uint32:
        # Ids dense enough for a table by id: where each id's requests end in the order (a count
        # per id) and one size per id, instead of the ids and sizes gathered in the order
        same = np.ones(n - 1, dtype=bool)  # [k]: the k-th and the next in order share an id
        same[np.cumsum(np.bincount(offsets, minlength=span + 1))[:-1] - 1] = False
        if sizes.min() != sizes.max():
            size_of = np.empty(span + 1, dtype=sizes.dtype)
            size_of[offsets] = sizes  # one of each id's sizes
            if (size_of[offsets] != sizes).any():
                return None
    else:
        by_id = ids[order]
        same = by_id[1:] == by_id[:-1]
        del by_id
        if sizes.min() != sizes.max() and _sizes_change(sizes, order, same):
            return None
    return _previous_in_order(order, same)
