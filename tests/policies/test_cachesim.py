"""``sim.cachesim`` and ``kvsim cachesim``: reading streams, replay semantics, the CLI contract."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pol_helpers import CLASSIC, stream

from costmodels import cost_model
from experiments.cli import main
from sim.cachesim import (
    CacheSim,
    CacheTraceError,
    _plain_pairs,
    _read_numeric,
    _read_with_pandas,
    next_access,
    read_trace,
    simulate_cache,
    stream_from_arrays,
)
from sim.policies import PolicyContext, available_policies
from sim.units import Tier


def _csv(tmp_path, text, name="s.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


# -- reading -----------------------------------------------------------------------------------------
def test_read_trace_columns_and_time(tmp_path):
    s = read_trace(_csv(tmp_path, "obj_id,size,time\n7,3,0.5\n8,1,1.5\n7,3,2\n"))
    assert s.obj_ids.tolist() == [7, 8, 7] and s.sizes.tolist() == [3, 1, 3]
    assert s.times.tolist() == [0.5, 1.5, 2.0]
    s = read_trace(_csv(tmp_path, "size,obj_id\n1,5\n2,6\n"))  # column order is free
    assert s.obj_ids.tolist() == [5, 6] and s.sizes.tolist() == [1, 2] and s.times is None


def test_read_trace_hashes_become_dense_ids(tmp_path):
    s = read_trace(_csv(tmp_path, "obj_id,size\nab12,1\ncd34,1\nab12,1\n"))
    assert s.obj_ids.tolist() == [0, 1, 0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("obj_id\n1\n", "missing column 'size'"),
        ("id,size\n1,1\n", "missing column 'obj_id'"),
        ("obj_id,size\n1,1\n2,x\n", "line 3: size 'x' is not an integer"),
        ("obj_id,size\n1,1\n2,1.5\n3,1\n", "line 3: size 1.5 is not an integer"),
        ("obj_id,size\n1,1\n2,1\n3,-4\n", "line 4: size -4 is not a positive integer"),
        ("obj_id,size,time\n1,1,0\n2,1,soon\n", "line 3: time 'soon' is not a number"),
        ("", "empty file"),
    ],
)
def test_read_trace_errors_name_file_and_line(tmp_path, text, message):
    p = _csv(tmp_path, text)
    with pytest.raises(CacheTraceError) as e:
        read_trace(p)
    assert str(e.value).startswith(str(p)) and message in str(e.value)


def test_read_trace_missing_file(tmp_path):
    with pytest.raises(CacheTraceError, match="no such file"):
        read_trace(tmp_path / "absent.csv")


def test_blank_lines_keep_line_numbers(tmp_path):
    p = _csv(tmp_path, "obj_id,size\n1,1\n\n2,oops\n")
    with pytest.raises(CacheTraceError, match="line 4: size 'oops'"):
        read_trace(p)


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(-(2**62), 2**62), st.integers(1, 2**40), st.floats(0, 1e9)),
        min_size=1,
        max_size=30,
    ),
    order=st.permutations(["obj_id", "size", "time"]),
    timed=st.booleans(),
    newline=st.sampled_from(["\n", "\r\n"]),
    space=st.sampled_from(["", " "]),
)
def test_numeric_files_read_without_pandas_as_pandas_reads_them(
    tmp_path_factory, rows, order, timed, newline, space
):
    cols = [c for c in order if timed or c != "time"]
    lines = [",".join(cols)] + [
        ",".join(space + repr(dict(zip(("obj_id", "size", "time"), r))[c]) for c in cols)
        for r in rows
    ]
    p = tmp_path_factory.mktemp("csv") / "s.csv"
    p.write_bytes((newline.join(lines) + newline).encode())
    fast, general = _read_numeric(p), _read_with_pandas(p)
    assert fast is not None
    assert fast.obj_ids.tolist() == general.obj_ids.tolist() == [r[0] for r in rows]
    assert fast.sizes.tolist() == general.sizes.tolist()
    if timed:
        assert fast.times.tolist() == general.times.tolist() == [r[2] for r in rows]
    else:
        assert fast.times is None and general.times is None


@pytest.mark.parametrize(
    "text",
    [
        "obj_id,size\nab,1\n",  # hashes: factorised by the general reader
        "obj_id,size\n1,1\n\n2,1\n",  # a blank line
        "obj_id,size\n1,1.0\n",  # an integral float
        "obj_id,size\n1,0\n",  # an error to report with its line
        "obj_id,size\n#1,1\n",
        "obj_id,size,extra\n1,1,1\n",
        "obj_id,size\n",
    ],
)
def test_the_numeric_reader_leaves_other_files_to_the_general_one(tmp_path, text):
    assert _read_numeric(_csv(tmp_path, text)) is None


def _loadtxt_pairs(body: bytes):
    """What ``np.loadtxt`` makes of a two-column body; None where it refuses it or skips a line."""
    try:
        with warnings.catch_warnings():  # an empty body: "input contained no data"
            warnings.simplefilter("ignore", UserWarning)
            rows = np.loadtxt(
                body.decode().splitlines(), delimiter=",", dtype=np.int64, comments=None, ndmin=2
            )
    except (ValueError, OverflowError):
        return None
    lines = body.count(b"\n") + (not body.endswith(b"\n"))
    return rows if rows.shape == (lines, 2) else None


_CELL = st.one_of(
    st.integers(0, 2**63 - 2).map(str),
    st.integers(0, 99).map(lambda v: f"00{v}"),  # leading zeros
    st.sampled_from(["", " 5", "-3", "+4", "1.5", "9223372036854775807", "9" * 20, "7\r", "x"]),
)


def odd_body(rows, odd) -> bytes:
    """``a,b`` lines of ``rows``, with the odd forms named in ``odd`` (an extra comma, a blank
    line, a line of one column, no last newline)."""
    lines = [f"{a},{b}" for a, b in rows]
    if "extra comma" in odd:
        lines[0] += ",1"
    if "blank line" in odd:
        lines.insert(len(lines) // 2, "")
    if "one column" in odd:
        lines[-1] = lines[-1].split(",")[0]
    return ("\n".join(lines) + ("" if "no last newline" in odd else "\n")).encode()


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(_CELL, _CELL), min_size=1, max_size=12),
    odd=st.sets(st.sampled_from(["extra comma", "blank line", "no last newline", "one column"])),
)
def test_plain_pairs_reads_what_loadtxt_reads_or_declines(rows, odd):
    """The fast separator parser returns loadtxt's rows exactly, or None (loadtxt then decides);
    it declines nothing made only of plain digits, one comma a line."""
    body = odd_body(rows, odd)
    got = _plain_pairs(body, body.count(b"\n") + (not body.endswith(b"\n")))
    want = _loadtxt_pairs(body)
    if got is not None:
        assert want is not None and got.tolist() == want.tolist()
    plain = all(a.isdigit() and b.isdigit() for a, b in rows) and odd <= {"no last newline"}
    if plain and max(int(c) for row in rows for c in row) < 2**63 - 1:
        assert got is not None


# -- semantics ---------------------------------------------------------------------------------------
def test_next_access_matches_a_naive_scan():
    ids = np.random.default_rng(0).integers(0, 30, 500)
    nxt = next_access(ids)
    for i in range(len(ids)):
        later = [j for j in range(i + 1, len(ids)) if ids[j] == ids[i]]
        assert nxt[i] == (later[0] if later else len(ids))


def test_first_access_misses_and_result_fields():
    s = stream_from_arrays([1, 2, 1, 3, 1, 2], [2, 3, 2, 1, 2, 3])
    r = simulate_cache(s, "lru", 5)
    assert r.hit_flags.tolist() == [False, False, True, False, True, False]
    assert (r.requests, r.hits, r.misses) == (6, 2, 4)
    assert (r.byte_requests, r.byte_hits) == (13, 4)
    assert r.summary() == {
        "policy": "lru",
        "capacity": 5,
        "requests": 6,
        "hits": 2,
        "misses": 4,
        "byte_requests": 13,
        "byte_hits": 4,
    }


def test_too_large_objects_are_not_admitted_and_evict_nothing():
    s = stream_from_arrays([1, 2, 9, 1, 2, 9], [4, 4, 101, 4, 4, 101])
    for policy in CLASSIC:
        r = simulate_cache(s, policy, 100)
        assert r.hit_flags.tolist() == [False, False, False, True, True, False], policy


@pytest.mark.parametrize("policy", CLASSIC)
def test_stepping_equals_replay_and_capacity_holds(policy):
    s = stream("zipf", 4000, sized=True, seed=9)
    r = simulate_cache(s, policy, 600)
    sim = CacheSim(policy, 600)
    nxt = next_access(s.obj_ids)
    flags = []
    for i, (o, z) in enumerate(zip(s.obj_ids.tolist(), s.sizes.tolist())):
        flags.append(sim.get(o, z, float(nxt[i]) if nxt[i] < len(s) else float("inf")))
        assert sim.used <= 600 and sim.used == sum(sim.view.sizes[x] for x in sim.cached)
    assert flags == r.hit_flags.tolist()


# Policies that price recovery with a cost model: in a replay they need one in the context.
NEEDS_COST = ("cost-belady", "pensieve", "pensieve-depth", "pensieve-flat", "pensieve-physics")
COST_CTX = PolicyContext(
    tier=Tier.GPU, block_tokens=16, num_layers=32, cost=cost_model("llama-3-8b", "h100-sxm")
)


@pytest.mark.parametrize("policy", available_policies())
def test_every_policy_replays(policy):
    """Every registered policy replays an object stream; the cost-aware ones given a cost model."""
    s = stream("zipf", 2000, sized=False, seed=1)
    ctx = COST_CTX if policy in NEEDS_COST else None
    r = simulate_cache(s, policy, 100, ctx=ctx)
    assert 0 < r.hits < r.requests == 2000
    assert r.hits + r.misses == 2000


@pytest.mark.parametrize("policy", available_policies())
def test_only_cost_aware_policies_need_a_cost_model(policy):
    s = stream("zipf", 200, sized=False, seed=1)
    if policy in NEEDS_COST:
        with pytest.raises(ValueError, match=f"policy '{policy}' needs PolicyContext.cost"):
            simulate_cache(s, policy, 100)
    else:
        assert simulate_cache(s, policy, 100).requests == 200


def test_invalid_capacity():
    s = stream_from_arrays([1])
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="capacity"):
            simulate_cache(s, "lru", bad)


# -- the command line --------------------------------------------------------------------------------
def test_cli_json_has_exactly_the_contract_keys(tmp_path, capsys):
    p = _csv(
        tmp_path, "obj_id,size\n" + "\n".join(f"{i % 7},{1 + i % 3}" for i in range(100)) + "\n"
    )
    assert (
        main(["cachesim", "--trace", str(p), "--policy", "arc", "--capacity", "5", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert list(out) == [
        "policy",
        "capacity",
        "requests",
        "hits",
        "misses",
        "byte_requests",
        "byte_hits",
    ]
    r = simulate_cache(read_trace(p), "arc", 5)
    assert out == r.summary() and out["policy"] == "arc" and out["requests"] == 100


def test_cli_all_prints_a_table(tmp_path, capsys):
    p = _csv(tmp_path, "obj_id,size\n" + "\n".join(f"{i % 11},1" for i in range(200)) + "\n")
    assert main(["cachesim", "--trace", str(p), "--policy", "all", "--capacity", "8"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:3] == ["policy", "capacity", "requests"]
    names = {ln.split()[0] for ln in lines[1:]}
    assert set(CLASSIC) <= names <= set(available_policies())
    assert (
        main(["cachesim", "--trace", str(p), "--policy", "all", "--capacity", "8", "--json"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert {r["policy"] for r in rows} == names


def test_cli_errors_exit_2_with_one_line(tmp_path, capsys):
    p = _csv(tmp_path, "obj_id,size\n1,1\n2,big\n")
    assert main(["cachesim", "--trace", str(p), "--policy", "lru", "--capacity", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvsim: error: ") and "line 3" in err and str(p) in err
    assert main(["cachesim", "--trace", str(p), "--policy", "nosuch", "--capacity", "5"]) == 2
    assert (
        main(
            [
                "cachesim",
                "--trace",
                str(tmp_path / "none.csv"),
                "--policy",
                "lru",
                "--capacity",
                "5",
            ]
        )
        == 2
    )


def test_cli_replay_of_a_registered_policy_imports_no_pandas(tmp_path):
    """Importing pandas or the experiment schema (pydantic) took longer than reading and replaying
    a million requests; a registered name needs neither."""
    p = _csv(tmp_path, "obj_id,size\n1,1\n2,1\n1,1\n")
    code = (
        "import sys\n"
        "from experiments.cli import main\n"
        f"assert main(['cachesim', '--trace', {str(p)!r}, '--policy', 'lru', '--capacity', '5',"
        " '--json']) == 0\n"
        "print(sorted(m for m in ('pandas', 'pydantic', 'experiments.schema') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_cli_lru_replay_imports_no_policy(tmp_path):
    """An LRU replay of one size per object is computed from the stream alone: importing every
    policy (the registry) took longer than reading the file."""
    p = _csv(tmp_path, "obj_id,size\n1,2\n2,1\n1,2\n")
    code = (
        "import sys, json\n"
        "from experiments.cli import main\n"
        f"assert main(['cachesim', '--trace', {str(p)!r}, '--policy', 'lru', '--capacity', '3',"
        " '--json']) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sim.policies', 'sim.units'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    *_, result, imported = out.stdout.strip().splitlines()
    assert imported == "[]"
    assert json.loads(result)["hits"] == 1
