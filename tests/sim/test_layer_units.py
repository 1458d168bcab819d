"""layer_block units: the per-page split by byte counts, and a session's one run of dropped units
read from its ends (``session_layer_split``, ``bring_layers_to_gpu``), each against the plain form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodels import cost_model
from sim import MemoryConfig, simulate
from sim.memory import TieredMemory
from sim.policies import PolicyContext, make_policy
from sim.recovery import run_work
from sim.units import (
    SessionKV,
    Tier,
    UnitView,
    _layer_split_masks,
    dropped_run,
    layer_codes,
    layer_split,
    session_layer_split,
)
from traces.synthetic import SyntheticConfig, generate_synthetic

PAGE = 100
GPU, CPU, DROPPED = Tier.GPU, Tier.CPU, Tier.DROPPED
COST = cost_model("llama-3-8b", "h100-sxm")
SESSIONS = generate_synthetic(SyntheticConfig(sessions=25, seed=5)).sessions


def plain_split(codes: np.ndarray, tokens: int, bt: int) -> tuple[int, int, int]:
    """The split page by page: dropped if any layer is, else swapped in if any is on the CPU."""
    g = c = d = 0
    for p, row in enumerate(codes.tolist()):
        n = min(bt, tokens - p * bt)
        if 2 in row:
            d += n
        elif 1 in row:
            c += n
        else:
            g += n
    return g, c, d


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 5),  # layers
    st.lists(st.sampled_from([0, 0, 1, 2, 3]), max_size=40),
    st.integers(1, 16),  # block tokens
    st.integers(0, 15),  # the last page's unfilled tokens
)
def test_layer_split_by_counts_equals_the_page_by_page_split(layers, codes, bt, short):
    pages = len(codes) // layers
    arr = np.array(codes[: pages * layers], dtype=np.uint8).reshape(-1, layers)[:, ::-1]
    tokens = max(0, pages * bt - min(short, bt - 1)) if pages else 0
    want = plain_split(arr, tokens, bt)
    assert layer_split(arr, tokens, bt) == want
    assert _layer_split_masks(arr, tokens, bt) == want if pages else True


def session(codes: list[int], tokens: int) -> SessionKV:
    sess = SessionKV(0, "s", 0, tokens=tokens, tier=bytearray(codes))
    sess.tier_pages = [codes.count(t) for t in range(4)]
    return sess


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 5),  # layers
    st.integers(0, 8),  # pages
    st.integers(1, 16),  # block tokens
    st.integers(0, 15),  # the last page's unfilled tokens
    st.data(),
)
def test_session_split_reads_a_dropped_run_from_its_ends(layers, pages, bt, short, data):
    n = pages * layers
    if data.draw(st.booleans()):  # one run of dropped units (the common case), maybe with CPU
        a = data.draw(st.integers(0, n))
        b = data.draw(st.integers(a, n))
        codes = [0] * a + [2] * (b - a) + [0] * (n - b)
        if n and data.draw(st.booleans()):
            codes[data.draw(st.integers(0, n - 1))] = 1
    else:
        codes = data.draw(st.lists(st.sampled_from([0, 1, 2]), min_size=n, max_size=n))
    tokens = max(0, pages * bt - min(short, bt - 1)) if pages else 0
    sess = session(codes, tokens)
    want = plain_split(np.array(codes, dtype=np.uint8).reshape(-1, layers)[:, ::-1], tokens, bt)
    assert session_layer_split(sess, layers, bt) == want
    run = dropped_run(sess)
    if 1 in codes or 2 not in codes:
        assert run is None
    else:
        first = codes.index(2)
        stop = n - codes[::-1].index(2)
        assert run == ((first, stop) if codes[first:stop] == [2] * (stop - first) else None)


class ScanningMemory(TieredMemory):
    """Brings per-layer units back by scanning them, never by their one run of dropped units."""

    def _dropped_layer_run(self, sess: SessionKV) -> tuple[int, int] | None:
        return None


def twin(cls: type[TieredMemory], policy: str, layers: int, gpu_units: int, cpu_units: int):
    kv = [SessionKV(i, f"s{i}", 0) for i in range(4)]
    view = UnitView(kv, PAGE, layers=layers)
    pols = [
        make_policy(policy, PolicyContext(tier=t, block_tokens=16, num_layers=layers, view=view))
        for t in (GPU, CPU)
    ]
    return cls(gpu_units * PAGE, cpu_units * PAGE, pols[0], pols[1], view), kv


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(["lru", "fifo", "lfu", "clock", "sieve", "s3fifo", "arc", "twoq"]),
    st.integers(1, 4),  # layers
    st.sampled_from([0, 5]),  # CPU units: victims dropped, or demoted first
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=14),
)
def test_bringing_back_one_dropped_layer_run_equals_the_scan(policy, layers, cpu, turns):
    # turns of (session, new pages) on a small GPU; both ways of bringing the per-layer units
    # back report the same recompute (pages, depths, swaps) and leave the same state
    gpu = 12
    fast, kv_fast = twin(TieredMemory, policy, layers, gpu, cpu)
    scan, kv_scan = twin(ScanningMemory, policy, layers, gpu, cpu)
    for t, (s, new) in enumerate(turns):
        if len(kv_fast[s].tier) + new * layers > gpu:
            continue
        got = []
        for m, kv in ((fast, kv_fast), (scan, kv_scan)):
            sess = kv[s]
            m.acquire(sess, float(t))
            missing = sess.tier_pages[CPU] + sess.tier_pages[DROPPED] + new * layers
            assert m.make_room(missing * PAGE, float(t))
            f = m.bring_layers_to_gpu(sess, float(t))
            got.append(
                None
                if f is None
                else (
                    f.swapped_per_layer.tolist(),
                    f.recomputed_pages.tolist(),
                    f.depth.tolist(),
                    f.regenerated,
                    f.recomputed_pages.dtype,
                    f.depth.dtype,
                )
            )
            m.add_units(sess, new, float(t))
            m.release(sess, float(t))
        assert got[0] == got[1]
        for a, b in zip(kv_fast, kv_scan, strict=True):
            assert a.tier == b.tier and a.tier_pages == b.tier_pages
        assert fast.used == scan.used and fast.evictable == scan.evictable
    # the policies' order: everything evicted, in the same order
    assert fast.make_room(gpu * PAGE, 99.0) and scan.make_room(gpu * PAGE, 99.0)
    assert [a.tier for a in kv_fast] == [b.tier for b in kv_scan]


def test_a_dropped_run_from_mid_page_is_recomputed_through_its_first_pages_deepest_layer():
    # 3 pages of 4 layers; units 6..9 dropped: page 1's units 2, 3 (layers 1, 0), page 2's 0, 1
    # (layers 3, 2): page 1 is recomputed through layer 1, page 2 through layer 3
    fast, kv = twin(TieredMemory, "lru", 4, 12, 0)
    sess = kv[0]
    fast.acquire(sess, 0.0)
    fast.add_units(sess, 3, 0.0)
    fast.release(sess, 0.0)
    sess.tier[6:10] = b"\x02" * 4
    sess.tier_pages[GPU] -= 4
    sess.tier_pages[DROPPED] += 4
    fast.used[GPU] -= 4 * PAGE
    fast.evictable[GPU] -= 4 * PAGE
    for uid in range(6, 10):
        fast.policy[GPU].remove(uid)
    sess.tokens = 40
    assert layer_codes(sess, 4)[1].tolist() == [2, 2, 0, 0]
    assert session_layer_split(sess, 4, 16) == (16, 0, 24)
    fast.acquire(sess, 1.0)
    f = fast.bring_layers_to_gpu(sess, 1.0)
    assert f is not None
    assert f.recomputed_pages.tolist() == [1, 2] and f.depth.tolist() == [1, 3]
    assert sess.tier == bytearray(12) and sess.tier_pages == [12, 0, 0, 0]


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 60), st.integers(0, 12), st.integers(0, 1200), st.integers(1, 32))
def test_run_work_is_bring_ins_page_by_page_work(first, pages, tokens, bt):
    # the per-page recompute work bring_in adds for recomputed pages (numpy, in float), against
    # its closed form over a run of pages (integers); pages past the history count as priced
    idx = np.arange(first, first + pages)
    a = idx * bt
    n = np.minimum(tokens, a + bt) - a
    got_n, twice = run_work(first, first + pages, tokens, bt)
    assert got_n == int(n.sum())
    assert twice / 2 == float(np.sum(n * (a + n / 2.0)))
    assert twice == int(np.sum(2 * n * a + n * n))


@pytest.mark.parametrize("policy", ["lru", "arc", "s3fifo"])
def test_the_engine_reads_dropped_runs_as_the_scan_would(policy, monkeypatch):
    # layer_block runs, with victims dropped and demoted: the ledger with a session's one run of
    # dropped units read from its ends (split, bring-in, recompute work) equals the one where
    # every admission scans, and the run path does run (so the check can fail)
    import sim.units

    runs = []
    run_of = TieredMemory._dropped_layer_run

    def counted(mem, sess):
        got = run_of(mem, sess)
        runs.append(got is not None)
        return got

    for gpu, cpu in ((0.4, 0.0), (0.4, 0.5)):
        mem = MemoryConfig(gpu_kv_gb=gpu, cpu_kv_gb=cpu, block_tokens=16, evict_unit="layer_block")
        runs.clear()
        with monkeypatch.context() as m:
            m.setattr(TieredMemory, "_dropped_layer_run", counted)
            fast = simulate(SESSIONS, COST, mem, policy=policy, seed=1)
        assert any(runs), (policy, gpu, cpu)
        with monkeypatch.context() as m:
            m.setattr(TieredMemory, "_dropped_layer_run", lambda mem, sess: None)
            m.setattr(sim.units, "dropped_run", lambda sess: None)
            slow = simulate(SESSIONS, COST, mem, policy=policy, seed=1)
        assert fast.turns.equals(slow.turns), (policy, gpu, cpu)
        assert fast.stats.steps == slow.stats.steps
        assert np.array_equal(fast.stats.step_s, slow.stats.step_s)
