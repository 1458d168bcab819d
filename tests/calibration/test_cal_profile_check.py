"""Every fitted term of every committed profile, recomputed (``calibration.profile_check``), equals
what the profile files and docs/cost-model.md claim: the generated table, each profile's
``validation`` block and notes, and the figures quoted in the guide's prose and tables. A stale
figure anywhere fails here. The public profiles need ../shared/data (skipped without it); the
measured profiles are refitted from calibration/measured/ and always checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cal_helpers import needs_data

from calibration.profile_check import (
    DEFAULT_THRESHOLD,
    TermCheck,
    check_profiles,
    markdown_checks,
    measured_checks,
)
from costmodels import load_profile

# long module fixtures (a whole calibration run): in the slow run (.ci/run), not the default
pytestmark = pytest.mark.slow


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "cost-model.md"
SHARDS = ("h100-sxm-llama3-70b-tp4", "h100-sxm-llama3-70b-tp8")
H200 = "h200-llama3-8b"
BEGIN, END = "<!-- profile-check: begin", "<!-- profile-check: end -->"


@pytest.fixture(scope="module")
def measured() -> list[TermCheck]:
    return measured_checks()


def _guide_table_rows() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) : text.index(END)]
    return [line for line in block.splitlines() if line.startswith("|")]


def _same(doc: str, value: float) -> bool:
    """A percentage as the guide prints it (its own number of decimals) against a fraction."""
    decimals = len(doc.split(".")[1]) if "." in doc else 0
    return round(value * 100, decimals) == float(doc)


def _check_profile_file(c: TermCheck) -> None:
    """The profile's validation block holds the random split (or the transfer) of the term, and
    its notes every split, as ``report_lines`` wrote them."""
    p = load_profile(c.profile)
    notes = p.meta.notes or ""
    entry = c.random or c.transfer
    if c.term in p.validation and entry is not None:
        v = p.validation[c.term]
        if c.term == "layer":
            # The whole layer prices the KV write as an add at 8192 B rows, a row size the public
            # tables never time, so its floor is wherever the add's fit stopped on a line the
            # tables leave free (0.768 or 0.777 us on two machines): its APEs move by about 1e-5
            # (max 0.301876 / 0.301846), one unit of the 4 written decimals.
            assert v.n == entry.n
            assert v.mape == pytest.approx(entry.mape, abs=1e-4)
            assert v.max_ape == pytest.approx(entry.max_ape, abs=1e-4)
        else:
            assert (v.mape, v.max_ape, v.n) == (
                round(entry.mape, 4),
                round(entry.max_ape, 4),
                entry.n,
            )
    for split, s in c.stats():
        if c.term == "gemm" and c.profile in ("a100-vidur", "h100-public"):
            continue  # the public profiles' notes carry the linear and elementwise lines
        line = f"MAPE {s.mape:.1%}, p95 {s.p95_ape:.1%}, max {s.max_ape:.1%}, n={s.n}"
        flat = " ".join(notes.split())
        pattern = rf"{c.term} \[[^\]]*{split if split != 'transfer' else ''}[^\]]*\]: {line}"
        assert re.search(pattern, flat), (c.profile, c.term, split, line)


def _of(checks: list[TermCheck], profile: str) -> dict[str, TermCheck]:
    return {c.term: c for c in checks if c.profile == profile}


def test_measured_rows_of_the_guide_are_recomputed(measured) -> None:
    assert {c.profile for c in measured} == {"h100-sxm-llama3-8b", *SHARDS, H200}
    want = markdown_checks(measured).splitlines()[2:]
    names = {c.profile for c in measured}
    got = [r for r in _guide_table_rows() if r.split("|")[1].strip() in names]
    assert got == want


def test_measured_profile_file_states_the_recomputed_errors(measured) -> None:
    assert {c.term for c in measured} >= {"linear", "prefill_attn", "decode_attn", "h2d", "d2h"}
    for c in measured:
        _check_profile_file(c)


def test_thresholds_and_verdicts(measured) -> None:
    by = _of(measured, "h100-sxm-llama3-8b")
    assert by["decode_attn"].threshold == 0.10 and by["h2d"].threshold == DEFAULT_THRESHOLD
    for c in measured:
        over = [s for s, st in c.stats() if st.mape >= c.threshold]
        assert c.verdict == ("PASS" if not over else "over: " + ", ".join(over))


def test_measured_figures_quoted_in_the_guide(measured) -> None:
    """The profile paragraph and the refit table quote random / extrapolation MAPE (max APE)."""
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    by = _of(measured, "h100-sxm-llama3-8b")
    quoted = {
        "GEMMs": "gemm",
        "linear (GEMMs + elementwise)": "linear",
        "elementwise": "elementwise",
        "prefill attention": "prefill_attn",
        "decode attention": "decode_attn",
        "H2D copies": "h2d",
        "D2H": "d2h",
    }
    para = text[text.index("Its held-out MAPE (random 20 % of shapes") :]
    for label, term in quoted.items():
        m = re.search(re.escape(label) + r" ([\d.]+) / ([\d.]+) %", para)
        assert m, label
        c = by[term]
        assert c.random is not None and c.extrapolation is not None
        assert _same(m.group(1), c.random.mape) and _same(m.group(2), c.extrapolation.mape), label
    # The refit table's "after" column: **random / extrapolation %** (max random / max extrap.).
    refit = text[text.index("## The measured H100 profile, refitted") :]
    for label, term in (("h2d", "h2d"), ("d2h", "d2h"), ("prefill attention", "prefill_attn")):
        row = re.search(rf"\| {re.escape(label)} \|[^|]*\|([^|]*)\|", refit)
        assert row, label
        m = re.search(r"([\d.]+) / ([\d.]+) %\**\s*\(([\d.]+) / ([\d.]+)\)", row.group(1))
        assert m, (label, row.group(1))
        c = by[term]
        assert c.random is not None and c.extrapolation is not None
        figures = (c.random.mape, c.extrapolation.mape, c.random.max_ape, c.extrapolation.max_ape)
        assert all(_same(d, v) for d, v in zip(m.groups(), figures, strict=True)), label


def test_70b_shard_figures_quoted_in_the_guide(measured) -> None:
    """The 70B section's table: per term, TP 4 and TP 8 as random / extrapolation % (max APEs)."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## Llama-3-70B shards on the H100 (TP 4 and TP 8)") :]
    rows = {}
    for line in section.splitlines()[:40]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4:
            rows[cells[0]] = cells
    quoted = {
        "GEMMs": "gemm",
        "elementwise": "elementwise",
        "linear (GEMMs + elementwise)": "linear",
        "prefill attention": "prefill_attn",
        "decode attention": "decode_attn",
        "H2D copies": "h2d",
        "D2H copies": "d2h",
    }
    for label, term in quoted.items():
        for col, profile in enumerate(SHARDS, start=1):
            c = _of(measured, profile)[term]
            m = re.fullmatch(r"([\d.]+) / ([\d.]+) % \(([\d.]+) / ([\d.]+)\)", rows[label][col])
            assert m and c.random is not None and c.extrapolation is not None, (label, profile)
            want = (c.random.mape, c.extrapolation.mape, c.random.max_ape, c.extrapolation.max_ape)
            assert all(_same(d, v) for d, v in zip(m.groups(), want, strict=True)), (label, profile)
    for col, profile in enumerate(SHARDS, start=1):
        t = _of(measured, profile)["lm_head"].transfer
        m = re.fullmatch(r"([\d.]+) % \(([\d.]+)\)", rows["LM head (transfer)"][col])
        assert m and t is not None and _same(m.group(1), t.mape) and _same(m.group(2), t.max_ape)


@needs_data
@pytest.mark.data
def test_every_row_of_the_guide_is_recomputed(public_fit) -> None:
    want = markdown_checks(check_profiles(public_fit)).splitlines()
    assert _guide_table_rows() == want
    names = {line.split("|")[1].strip() for line in want[2:]}
    assert names == {"a100-vidur", "h100-public", "h100-sxm-llama3-8b", *SHARDS, H200}


@needs_data
@pytest.mark.data
def test_public_profile_files_state_the_recomputed_errors(public_fit) -> None:
    checks = [c for c in check_profiles(public_fit, measured=()) if c.stats()]
    assert {c.profile for c in checks} == {"a100-vidur", "h100-public"}
    for c in checks:
        _check_profile_file(c)


@needs_data
@pytest.mark.data
def test_public_figures_quoted_in_the_guide(public_fit) -> None:
    """The guide's "Held-out error of every term" table: each profile's term, by its label."""
    checks = {(c.profile, c.term): c for c in check_profiles(public_fit, measured=())}
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("## Held-out error of every term, both GPUs")
    rows = {}
    for line in text[start:].splitlines()[:20]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4:
            rows[cells[0].split(" (")[0]] = cells
    quoted = (  # (row, column: 1 = A100, 2 = H100, the source's label in the cell, profile, term)
        ("GEMMs", 1, "Vidur", "a100-vidur", "gemm"),
        ("GEMMs", 2, "Vidur", "h100-public", "gemm"),
        ("elementwise", 1, "Vidur", "a100-vidur", "elementwise"),
        ("elementwise", 2, "Vidur", "h100-public", "elementwise"),
        ("prefill attention", 1, "FlashInfer sample", "a100-vidur", "prefill_attn"),
        ("prefill attention", 2, "unfused 8B op", "h100-public", "prefill_attn"),
        ("decode attention", 1, "FlashInfer", "a100-vidur", "decode_attn"),
    )
    for row, col, label, profile, term in quoted:
        cell = rows[row][col]
        m = re.search(
            r"\**([\d.]+)\**\s*/\s*\**([\d.]+)\**\s*%\**\s*\(" + re.escape(label) + r"[),]", cell
        )
        assert m, (row, label, cell)
        c = checks[(profile, term)]
        assert c.random is not None and c.extrapolation is not None
        assert _same(m.group(1), c.random.mape), (profile, term)
        assert _same(m.group(2), c.extrapolation.mape), (profile, term)


@needs_data
@pytest.mark.data
def test_cli_fit_prints_every_profile_term(capsys) -> None:
    from cal_helpers import DATA

    from experiments.cli import main

    args = ["calibrate", "fit", "--data", str(DATA), "--source", "a100-vidur-flashinfer"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "every fitted term of every committed profile" in out
    for profile in ("h100-sxm-llama3-8b", *SHARDS, H200):
        rows = [line.split() for line in out.splitlines() if line.startswith(profile + " ")]
        assert [r[1] for r in rows] == list(_of(measured_checks(), profile)), profile
        assert all(r[-1] == "PASS" or "over:" in r for r in rows)
    assert main([*args, "--no-profiles"]) == 0
    assert "every fitted term" not in capsys.readouterr().out
