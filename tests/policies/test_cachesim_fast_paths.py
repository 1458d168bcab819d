"""The whole-process fast paths of ``kvsim cachesim`` against the plain forms they replace: the
digit-pair reader against numpy's separator parser (``_plain_pairs``), the radix order's narrow
digits against a stable sort, the rule-out round on the undecided rows only against the round
over every row, and the command's direct import against the package listing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cachesim import odd_body
from test_stack_distance import reuse_windows

from sim.cachesim import CacheSim, _digit_pairs, _plain_pairs, _read_numeric, read_trace
from sim.stack_distance import (
    _previous_request,
    _rule_out_by_recent_requests,
    lru_hit_flags,
    stable_order_by_id,
)

# -- the reader ----------------------------------------------------------------------------------
_CELL = st.one_of(
    st.integers(0, 10**9 - 1).map(str),  # 1-9 digits: the fast reader's own
    st.integers(10**9, 2**63 - 2).map(str),  # ten digits and more: declined, left to the others
    st.integers(0, 999).map(lambda v: f"000{v}"),  # leading zeros
    st.sampled_from(["", " 5", "-3", "+4", "1.5", "9" * 20, "7\r", "x", "0", "999999999"]),
    st.sampled_from(["9999999999", "2147483648", "4294967296"]),  # ten digits, past int32
)


@settings(max_examples=400, deadline=None)
@given(
    rows=st.lists(st.tuples(_CELL, _CELL), min_size=1, max_size=12),
    odd=st.sets(st.sampled_from(["extra comma", "blank line", "no last newline", "one column"])),
    header=st.sampled_from([b"obj_id,size\n", b"size,obj_id\n", b"h\n", b"\n"]),
)
def test_digit_pairs_read_what_the_separator_parser_reads_or_decline(rows, odd, header):
    """Where the digit-pair reader answers, numpy's separator parser gives the same columns; it
    answers every body of 1-9 digit fields, one comma a line (the last newline optional)."""
    body = odd_body(rows, odd)
    got = _digit_pairs(header + body, len(header))
    as_array = _digit_pairs(np.frombuffer(header + body, dtype=np.uint8), len(header))
    assert (got is None) == (as_array is None)
    if got is not None and as_array is not None:
        assert got[0].tolist() == as_array[0].tolist() and got[1].tolist() == as_array[1].tolist()
    want = _plain_pairs(body, body.count(b"\n") + (not body.endswith(b"\n")))
    if got is not None:
        assert want is not None
        assert got[0].dtype == got[1].dtype == np.int64
        assert got[0].tolist() == want[:, 0].tolist() and got[1].tolist() == want[:, 1].tolist()
    plain = all(c.isdigit() and len(c) <= 9 for row in rows for c in row)
    if plain and odd <= {"no last newline"}:
        assert got is not None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(list(b"0123456789,\n,\n.- \r+")), max_size=40))
def test_digit_pairs_of_any_bytes_are_the_separator_parsers_or_none(chars):
    """Bytes of digits, separators and a few others in any order: where the digit-pair reader
    answers, the separator parser gives the same columns (a separator other than comma, newline,
    comma, newline... must be declined, even where every field has digits)."""
    body = bytes(chars)
    got = _digit_pairs(b"obj_id,size\n" + body, 12)
    if got is not None:
        want = _plain_pairs(body, body.count(b"\n") + (not body.endswith(b"\n")))
        assert want is not None
        assert got[0].tolist() == want[:, 0].tolist() and got[1].tolist() == want[:, 1].tolist()


@pytest.mark.parametrize(
    "text",
    [
        "obj_id,size\n1,2\n3,45",
        "size,obj_id\n7,123456789\n1,000000001\n",
        "obj_id,size\n0,1\n",
        "obj_id, size\n5,5\n6,6\n",  # spaces in the header only
        "obj_id" + " " * 5000 + ",size\n1,2\n",  # a header past 4 KiB: the general reader's
    ],
)
def test_read_trace_of_digit_pairs_equals_the_reader_before(tmp_path, monkeypatch, text):
    p = tmp_path / "s.csv"
    p.write_text(text)
    fast = read_trace(p)
    monkeypatch.setattr("sim.cachesim._read_digit_pairs", lambda data, path: None)
    before = _read_numeric(p)
    assert before is not None and fast.times is None and before.times is None
    assert fast.obj_ids.tolist() == before.obj_ids.tolist()
    assert fast.sizes.tolist() == before.sizes.tolist()
    assert fast.source == before.source == str(p)
    assert fast.obj_ids.flags.c_contiguous and fast.sizes.flags.c_contiguous


def test_a_zero_size_is_left_to_the_reader_that_names_its_line(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("obj_id,size\n1,2\n3,0\n")
    with pytest.raises(ValueError, match="line 3"):
        read_trace(p)


# -- the radix order --------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 40, 48, 63]).flatmap(
        lambda bits: st.tuples(
            st.integers(-(2**63), 2**63 - 1 - (2**bits - 1)),
            st.just(2**bits - 1),
            st.lists(st.integers(0, 2**bits - 1), max_size=50),
        )
    )
)
def test_stable_order_by_id_over_every_digit_width(case):
    """Ids spanning 1 to 64 bits from any least id (the span's width picks the digits: 8 or 16
    bits, uint32 or uint64 keys): a stable sort."""
    lo, span, offsets = case
    eighths = [lo + span * q // 8 for q in range(9)]  # every digit's high values among them
    ids = [lo, lo + span, *(lo + o for o in offsets), *eighths[::-1], lo + span, lo]
    got = stable_order_by_id(np.array(ids, dtype=np.int64)).tolist()
    assert got == sorted(range(len(ids)), key=lambda i: ids[i])


# -- the rule-out round ---------------------------------------------------------------------------
def _rule_out_every_row(undecided, ends, starts, size, before, capacity) -> None:
    """The round as it was: ``recent`` for every row, cleared where longer than k and over."""
    n = len(before) - 1
    length = ends - starts
    at_end = before[ends]
    k = 4 * int(length[undecided].min())
    worth = len(ends) // 16
    while k < n and (undecided & (length > k)).any():
        left = int(np.count_nonzero(undecided))
        inside = size * (length < k)
        ended = np.cumsum(inside)
        ended -= inside
        started = np.zeros(n + 1, dtype=np.int64)
        started[starts + 1] = inside
        np.cumsum(started, out=started)
        back = np.maximum(ends - k, 0)
        recent = at_end - before[back] - ended + started[back]
        recent += size
        undecided &= ~((length > k) & (recent > capacity))
        if left - int(np.count_nonzero(undecided)) < worth:
            break
        k *= 4


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    objects=st.integers(2, 400),
    capacity=st.integers(1, 400),
    hot=st.floats(1.05, 2.0),
)
def test_the_rule_out_round_on_undecided_rows_equals_the_round_on_every_row(
    seed, objects, capacity, hot
):
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(hot, 3_000) % objects).astype(np.int64)
    sizes = rng.integers(1, 40, objects)[ids]
    ends, starts, size, before, undecided = reuse_windows(ids, sizes, capacity)
    if not undecided.any():
        return
    want = undecided.copy()
    _rule_out_every_row(want, ends, starts, size, before, capacity)
    _rule_out_by_recent_requests(undecided, ends, starts, size, before, capacity)
    assert undecided.tolist() == want.tolist()


def test_lru_hits_where_no_object_fits_and_where_some_do_not():
    """The mask-free path (every object fits) and the masked one give the replay's hits."""
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 40, 2_000)
    for top in (10, 30):  # sizes up to 10 (all fit capacity 25) or 30 (some do not)
        sizes = rng.integers(1, top + 1, 40)[ids]
        sim = CacheSim("lru", 25)
        want = [sim.get(o, z) for o, z in zip(ids.tolist(), sizes.tolist())]
        assert lru_hit_flags(ids, sizes, 25).tolist() == want


# -- the command's import ---------------------------------------------------------------------------
def test_a_named_command_imports_what_the_listing_finds():
    import pkgutil

    import experiments.commands as pkg
    from experiments.cli import _command_modules

    listed = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name[0] != "_")
    assert "cachesim" in listed
    for name in listed:
        typed = name.replace("_", "-")
        assert [n for n, _ in _command_modules(typed)] == [name]
    everything = [n for n, _ in _command_modules(None)]
    assert everything == listed
    for odd in ("no-such", "cache_sim", "../cachesim", "--help", ""):
        assert [n for n, _ in _command_modules(odd)] == listed


# -- the previous request ---------------------------------------------------------------------------
def _previous_plain(ids, sizes):
    """The previous request of each request by a dict; None where an object's size changes."""
    last: dict[int, int] = {}
    size_of: dict[int, int] = {}
    prev = []
    for i, (o, z) in enumerate(zip(ids, sizes)):
        if size_of.setdefault(o, z) != z:
            return None
        prev.append(last.get(o, -1))
        last[o] = i
    return prev


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 60).flatmap(
        lambda objects: st.tuples(
            st.lists(st.integers(0, objects - 1), min_size=1, max_size=80),
            st.sampled_from([1, 3, 1000, 2**40]),  # id spacing: dense (a table by id) or not
            st.integers(-(2**50), 2**50),
            st.lists(st.integers(1, 4), min_size=objects, max_size=objects),
            st.one_of(st.none(), st.tuples(st.integers(0, 79), st.integers(1, 3))),
        )
    )
)
def test_previous_request_against_a_dict(case):
    """Dense ids (span under 4 requests an id: counts and a size table by id) and sparse ones
    (ids and sizes gathered in the sorted order): the previous request of each, or None where an
    object's size changes."""
    picks, spacing, lo, size_of, change = case
    ids = [lo + spacing * o for o in picks]
    sizes = [size_of[o] for o in picks]
    if change is not None:  # one request at another size than its object's
        sizes[change[0] % len(sizes)] += change[1]
    got = _previous_request(np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64))
    want = _previous_plain(ids, sizes)
    assert (got is None) == (want is None)
    if got is not None:
        assert got.tolist() == want
