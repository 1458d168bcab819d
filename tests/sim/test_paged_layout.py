"""The paged-layout export: hand-worked page tables, FlashInfer's invariants at every iteration of
real simulations, the checker, the .npz round trip and `kvsim export-layout`."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import traces
from costmodels import cost_model
from experiments.cli import main as kvsim
from sim import EngineConfig, MemoryConfig, simulate
from sim.config import GIB
from sim.paged_layout import LayoutExporter, PagedLayout, layout_of
from sim.pricing import Pricer
from traces.records import Session, Turn

COST = cost_model("llama-3-8b", "h100-sxm")  # 8 KV heads of 128
BT = 16
PAGE = BT * COST.kv_bytes_per_token
QUICKSTART = str(Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml")


def memory(gpu_pages: float, cpu_pages: float = 0, unit: str = "block") -> MemoryConfig:
    gpu = math.inf if math.isinf(gpu_pages) else gpu_pages * PAGE / GIB
    return MemoryConfig(
        gpu_kv_gb=gpu, cpu_kv_gb=cpu_pages * PAGE / GIB, block_tokens=BT, evict_unit=unit
    )


def one_turn(sid: str, at: float, prompt: int, output: int) -> Session:
    return Session(sid, (Turn(prompt, output, arrival_s=at),))


def follow(sessions, mem, steps, kv_layout="NHD", **engine):
    """Run with a LayoutExporter following every iteration; the layouts of ``steps``."""
    exporter, got = LayoutExporter(kv_layout), {}

    def hook(sched, step, now):
        if sched.step in steps:
            got[sched.step] = exporter.layout(sched, step)
        else:
            exporter(sched, step, now)

    simulate(sessions, COST, mem, EngineConfig(**engine), on_iteration=hook)
    return got, exporter


# --- hand-worked states ----------------------------------------------------------------------------
THREE = [one_turn("a", 0.0, 1, 3), one_turn("b", 0.0, 16, 3), one_turn("c", 0.0, 33, 3)]


def test_three_prefills_then_their_first_decode():
    got, _ = follow(THREE, memory(64), {0, 1})
    first, second = got[0], got[1]
    # Step 0 prefills 1, 16 and 33 tokens: 1, 1 and 3 pages, slots taken in batch order.
    assert first.kv_indptr.tolist() == [0, 1, 2, 5]
    assert first.kv_last_page_len.tolist() == [1, 16, 1]
    assert first.kv_page_indices.tolist() == [0, 1, 2, 3, 4]
    assert first.qo_indptr.tolist() == [0, 1, 17, 50]
    assert first.seq_lens.tolist() == [1, 16, 33]
    assert first.max_num_pages == 64
    # Step 1 decodes the sampled token of each: 2, 17 and 34 tokens. b's second page is new and
    # takes the lowest free slot (5); the others keep theirs.
    assert second.kv_indptr.tolist() == [0, 1, 3, 6]
    assert second.kv_last_page_len.tolist() == [2, 1, 2]
    assert second.kv_page_indices.tolist() == [0, 1, 5, 2, 3, 4]
    assert second.qo_indptr.tolist() == [0, 1, 2, 3]


def test_a_one_off_layout_numbers_pages_in_batch_order():
    got = {}

    def hook(sched, step, now):
        if sched.step == 1:
            got[1] = layout_of(sched, step)

    simulate(THREE, COST, memory(64), on_iteration=hook)
    assert got[1].kv_page_indices.tolist() == [0, 1, 2, 3, 4, 5]
    assert got[1].kv_indptr.tolist() == [0, 1, 3, 6]


# A (2 pages) finishes and stays cached, C (1 page) too; B needs 3 of the 4 pages: LRU evicts A, whose
# slots 0 and 1 are reused lowest-first, while cached C keeps slot 2.
EVICTION = [one_turn("A", 0.0, 20, 1), one_turn("C", 1.0, 10, 1), one_turn("B", 10.0, 40, 2)]


@pytest.mark.parametrize(
    "kv_layout, shape", [("NHD", (4, 2, 16, 8, 128)), ("HND", (4, 2, 8, 16, 128))]
)
def test_freed_slots_are_reused_lowest_first(kv_layout, shape):
    got, exporter = follow(
        EVICTION, memory(4, unit="session"), {0, 1, 2}, kv_layout=kv_layout, max_running=1
    )
    assert got[0].kv_page_indices.tolist() == [0, 1]  # A: 20 tokens
    assert got[1].kv_page_indices.tolist() == [2]  # C: 10 tokens, A still cached
    assert got[2].kv_page_indices.tolist() == [0, 1, 3]  # B: 40 tokens, after A's eviction
    assert exporter.high_water == 4
    assert got[2].max_num_pages == 4 and got[2].pool_shape == shape


def test_infinite_gpu_sizes_the_pool_by_the_pages_in_use():
    got, exporter = follow(EVICTION, memory(math.inf, unit="session"), {2})
    assert got[2].kv_page_indices.tolist() == [3, 4, 5]  # nothing evicted: fresh slots
    assert got[2].max_num_pages == exporter.high_water == 6


# --- invariants at every iteration of real runs -----------------------------------------------------
SYNTHETIC = traces.load_trace(
    {"kind": "synthetic", "sessions": 16, "seed": 3, "max_context_tokens": 1024}
).sessions


@pytest.mark.slow
@pytest.mark.parametrize(
    "unit, prefetch",
    [("block", "off"), ("session", "off"), ("layer_block", "off"), ("block", "think")],
)
def test_every_iteration_is_a_valid_layout_of_the_schedulers_batch(unit, prefetch, monkeypatch):
    priced = []  # tokens each admission was priced for, recomputed ones included
    admission_s = Pricer.admission_s

    def recording(self, pf, *args, **kwargs):
        deep = 0 if pf.deep_tokens is None else int(pf.deep_tokens.sum())
        priced.append(pf.tokens + deep)
        return admission_s(self, pf, *args, **kwargs)

    monkeypatch.setattr(Pricer, "admission_s", recording)

    exporter = LayoutExporter()
    seen = {"iterations": 0, "prefill_iterations": 0, "readmitted": 0}
    previous: dict[int, list[int]] = {}

    def hook(sched, step, now):
        assert sched.step == seen["iterations"]
        seen["iterations"] += 1
        lay = exporter.layout(sched, step)
        runs = list(sched.running.values())
        n = len(runs)
        for name in ("kv_indptr", "kv_page_indices", "kv_last_page_len", "qo_indptr"):
            assert getattr(lay, name).dtype == np.int32
        assert len(lay.kv_indptr) == len(lay.qo_indptr) == n + 1 and lay.kv_indptr[0] == 0
        assert (np.diff(lay.kv_indptr) >= 1).all()
        pages = lay.kv_page_indices
        assert len(np.unique(pages)) == len(pages)
        assert lay.max_num_pages == 66 and (pages >= 0).all() and (pages < 66).all()
        assert ((lay.kv_last_page_len >= 1) & (lay.kv_last_page_len <= BT)).all()
        seq = lay.seq_lens
        assert (seq == BT * (np.diff(lay.kv_indptr) - 1) + lay.kv_last_page_len).all()
        # The scheduler's own counts: a prefill attends to its session's tokens less the one it
        # samples; a decode to tokens_at(step), whose sum is the context the step was priced for.
        admitted = {id(r) for r in step.admitted}
        expect = [
            max(1, r.sess.tokens - 1) if id(r) in admitted else r.tokens_at(sched.step)
            for r in runs
        ]
        assert seq.tolist() == expect
        decoding = np.array([id(r) not in admitted for r in runs], dtype=bool)
        assert int(seq[decoding].sum()) == sched.dec_ctx and decoding.sum() == step.decode_seqs
        qo = np.diff(lay.qo_indptr)
        assert (qo[decoding] == 1).all() and (qo <= seq).all()
        if step.admitted:
            # The query tokens are what the admission was priced for, less one per request whose
            # every token is recomputed (its last token is counted once here, twice there).
            short = priced[-1] - int(qo[~decoding].sum())
            assert 0 <= short <= int((qo[~decoding] == seq[~decoding]).sum())
            seen["prefill_iterations"] += 1
            seen["readmitted"] += sum(r.preemptions > 0 for r in step.admitted)
            if any(r.preemptions for r in step.admitted):
                # A fresh exporter knows a first re-admission's recompute without following.
                fresh = np.diff(layout_of(sched, step).qo_indptr)
                once = [i for i, r in enumerate(runs) if r.preemptions <= 1]
                assert fresh[once].tolist() == qo[once].tolist()
        # A running turn's pages keep their slots from one iteration to the next.
        now_tables = {}
        for i, r in enumerate(runs):
            table = pages[lay.kv_indptr[i] : lay.kv_indptr[i + 1]].tolist()
            old = previous.get(r.admit_seq)
            if old is not None:
                assert table[: len(old)] == old
            now_tables[r.admit_seq] = table
        previous.clear()
        previous.update(now_tables)

    res = simulate(
        SYNTHETIC,
        COST,
        memory(66, 40, unit),
        EngineConfig(max_batch_tokens=1024, max_running=16, prefetch=prefetch),
        on_iteration=hook,
    )
    assert seen["iterations"] == res.stats.steps > 1000
    assert seen["prefill_iterations"] == len(priced) > 0
    assert res.stats.preemptions > 0 and seen["readmitted"] == res.stats.preemptions
    assert res.turns.recomputed_tokens.sum() > 0 and res.turns.cpu_hit_tokens.sum() > 0


def test_the_hook_gives_the_ledger_of_one_event_per_iteration():
    mem, eng = memory(66, 40), EngineConfig(max_batch_tokens=1024, max_running=16)
    hooked = simulate(SYNTHETIC, COST, mem, eng, on_iteration=lambda *_: None)
    plain = simulate(SYNTHETIC, COST, mem, eng, decode_spans=False)
    cols = ["session_id", "turn", "admit_s", "finish_s", "recomputed_tokens", "preemptions"]
    assert hooked.turns[cols].equals(plain.turns[cols])
    assert hooked.stats.steps == plain.stats.steps


def test_without_the_step_an_admission_is_refused():
    errors = []

    def hook(sched, step, now):
        if step.admitted and not errors:
            with pytest.raises(ValueError, match="pass the Step") as info:
                LayoutExporter().layout(sched)
            errors.append(info.value)

    simulate(THREE, COST, memory(64), on_iteration=hook)
    assert errors


# --- the checker ----------------------------------------------------------------------------------
def i32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def hand_layout(**changes) -> PagedLayout:
    base = PagedLayout(
        kv_indptr=i32([0, 1, 2, 5]),
        kv_page_indices=i32([7, 0, 3, 4, 5]),
        kv_last_page_len=i32([1, 16, 1]),
        page_size=16,
        num_kv_heads=8,
        head_dim=128,
        max_num_pages=8,
        kv_layout="NHD",
        qo_indptr=i32([0, 1, 2, 7]),
    )
    return dataclasses.replace(
        base, **{k: i32(v) if isinstance(v, list) else v for k, v in changes.items()}
    )


def test_a_valid_layout_passes():
    lay = hand_layout()
    lay.check()
    assert lay.seq_lens.tolist() == [1, 16, 33] and lay.qo_lens.tolist() == [1, 1, 5]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"kv_layout": "NDH"}, "kv_layout must be one of"),
        ({"page_size": 0}, "page_size must be an integer >= 1"),
        ({"max_num_pages": -1}, "max_num_pages must be an integer >= 0"),
        ({"kv_indptr": np.array([0, 1, 2, 5])}, "kv_indptr must be int32"),
        (
            {"kv_last_page_len": np.array([1, 16, 1], dtype=np.int16)},
            "kv_last_page_len must be int32",
        ),
        ({"kv_indptr": [0, 1, 5]}, "kv_indptr must have num_requests + 1 = 4 entries"),
        ({"kv_indptr": [1, 1, 2, 5]}, "kv_indptr must start at 0"),
        ({"kv_indptr": [0, 3, 2, 5]}, "kv_indptr must be non-decreasing"),
        ({"kv_indptr": [0, 1, 1, 5]}, "every request needs at least one page"),
        ({"kv_indptr": [0, 1, 2, 4]}, "kv_indptr must end at len(kv_page_indices) = 5"),
        (
            {"kv_page_indices": [7, 0, 3, 4, 8]},
            "kv_page_indices must lie in [0, max_num_pages = 8)",
        ),
        ({"kv_page_indices": [7, 0, -1, 4, 5]}, "kv_page_indices must lie in [0, max_num_pages"),
        ({"kv_page_indices": [7, 0, 3, 4, 0]}, "kv_page_indices must not use a page twice"),
        ({"kv_last_page_len": [0, 16, 1]}, "kv_last_page_len must lie in [1, page_size = 16]"),
        ({"kv_last_page_len": [1, 17, 1]}, "kv_last_page_len must lie in [1, page_size = 16]"),
        ({"qo_indptr": [0, 1, 2]}, "qo_indptr must have num_requests + 1 = 4 entries"),
        ({"qo_indptr": [1, 1, 2, 7]}, "qo_indptr must start at 0"),
        ({"qo_indptr": [0, 1, 1, 7]}, "qo_indptr must give every request at least one query token"),
        ({"qo_indptr": [0, 2, 3, 8]}, "more query tokens than KV tokens"),
    ],
)
def test_check_names_the_broken_invariant(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        hand_layout(**changes).check()


def test_save_and_load_round_trip(tmp_path):
    for lay in (hand_layout(), hand_layout(qo_indptr=None, kv_layout="HND")):
        path = lay.save(tmp_path / "x.npz")
        back = PagedLayout.load(path)
        for name in ("kv_indptr", "kv_page_indices", "kv_last_page_len"):
            assert np.array_equal(getattr(back, name), getattr(lay, name))
            assert getattr(back, name).dtype == np.int32
        assert (
            back.page_size,
            back.num_kv_heads,
            back.head_dim,
            back.max_num_pages,
            back.kv_layout,
        ) == (16, 8, 128, 8, lay.kv_layout)
        if lay.qo_indptr is None:
            assert back.qo_indptr is None
        else:
            assert back.qo_indptr.tolist() == [0, 1, 2, 7]
    assert [p.name for p in tmp_path.iterdir()] == ["x.npz"]  # no temporary file left


def test_a_broken_layout_is_not_saved(tmp_path):
    with pytest.raises(ValueError, match="must not use a page twice"):
        hand_layout(kv_page_indices=[7, 0, 3, 4, 0]).save(tmp_path / "x.npz")
    assert list(tmp_path.iterdir()) == []


# --- kvsim export-layout ----------------------------------------------------------------------------
def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = kvsim(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_export_layout_writes_the_requested_iterations(tmp_path):
    rc, out, _ = run_cli(
        "export-layout",
        QUICKSTART,
        "--iterations",
        "40,0,3",
        "--out",
        str(tmp_path / "lay"),
        "--layout",
        "HND",
    )
    assert rc == 0 and "3 iterations of grid point 0" in out
    assert sorted(p.name for p in (tmp_path / "lay").iterdir()) == [
        "iter-0.npz",
        "iter-3.npz",
        "iter-40.npz",
    ]
    first = PagedLayout.load(tmp_path / "lay" / "iter-0.npz")
    assert first.kv_layout == "HND" and first.pool_shape[1:] == (2, 8, 16, 128)
    # The first iteration prefills a new session: every token of its prompt is a query.
    assert first.qo_lens.tolist() == first.seq_lens.tolist()
    assert first.max_num_pages == 512  # 1 GiB of 2 MiB pages
    later = PagedLayout.load(tmp_path / "lay" / "iter-3.npz")
    assert later.qo_lens.tolist() == [1] * later.num_requests


@pytest.fixture
def small_quickstart(tmp_path):
    """experiments/quickstart.yaml with 3 sessions: a run short enough to go to its end."""
    with open(QUICKSTART) as f:
        exp = yaml.safe_load(f)
    exp["trace"]["sessions"] = 3
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def test_export_layout_refuses_an_iteration_past_the_end(small_quickstart, tmp_path):
    out = tmp_path / "lay"
    rc, _, err = run_cli(
        "export-layout", str(small_quickstart), "--iterations", "2,99999999", "--out", str(out)
    )
    assert rc == 2
    m = re.search(r"iteration\(s\) 99999999 past the end of the run: .* ran (\d+) iterations", err)
    assert m and 2 < int(m.group(1)) < 99999999
    assert not out.exists()  # nothing written when any iteration is missing


def test_export_layout_refuses_a_point_outside_the_grid(tmp_path):
    rc, _, err = run_cli(
        "export-layout",
        QUICKSTART,
        "--iterations",
        "1",
        "--point",
        "18",
        "--out",
        str(tmp_path / "lay"),
    )
    assert rc == 2 and "--point 18" in err and "18 grid points" in err


def test_export_layout_rejects_a_malformed_iteration_list(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        kvsim(["export-layout", QUICKSTART, "--iterations", "3,x", "--out", str(tmp_path)])
    assert info.value.code == 2 and "comma-separated whole numbers" in capsys.readouterr().err
