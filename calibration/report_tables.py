"""The tables a calibration run leaves for people: the held-out validation of a fit and the forward
replay, each as a CSV (every figure) and a Markdown table (what a README quotes).

Validation (`kvsim calibrate --validation FILE.csv`): one row per term and split (random,
extrapolation, transfer, and the layer-wise pipeline of a GPU run) with MAPE, p95, max, n, the
calibration target and whether it was met. Targets are for GPU kernels: a CPU run shows them
with "n/a (CPU)" instead of a verdict. Forward replay (`kvsim calibrate forward --report FILE.md`):
MAPE, p95 and max overall and by batch kind, and the worst shapes, from the replayed points.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import numpy as np

from costmodels import Profile

from .validate import ErrorStats, TermReport


@dataclass(frozen=True, slots=True)
class ValidationRow:
    term: str
    split: str  # "random" | "extrapolation" | "transfer" | "pipeline"
    mape: float  # fractions: 0.05 = 5 %; NaN when not computed
    p95_ape: float
    max_ape: float
    n: int  # held-out shapes
    train_n: int
    target: float | None  # the term's calibration target (MAPE below it), if it has one
    met: str  # "yes" | "no" | "n/a (CPU)" | "" (no target)
    description: str  # what was held out, with the thresholds used


def validation_rows(
    reports: Sequence[TermReport],
    profile: Profile | None = None,
    targets: Mapping[str, float] | None = None,
    verdicts: bool = True,
) -> list[ValidationRow]:
    """Rows of ``reports``, plus the profile's pipeline check when it has one."""
    targets = targets or {}
    rows = []
    for r in reports:
        t = r.test
        tgt = targets.get(r.term)
        rows.append(
            ValidationRow(
                r.term,
                r.split.name,
                t.mape,
                t.p95_ape,
                t.max_ape,
                t.n,
                r.train_n,
                tgt,
                _verdict(t.mape, tgt, verdicts),
                r.split.description,
            )
        )
    pipe = profile.validation.get("pipeline") if profile is not None else None
    if pipe is not None:
        rows.append(
            ValidationRow(
                "pipeline",
                "pipeline",
                pipe.mape,
                math.nan,
                pipe.max_ape,
                pipe.n,
                0,
                None,
                "",
                pipe.split,
            )
        )
    return rows


def _verdict(mape: float, target: float | None, verdicts: bool) -> str:
    if target is None:
        return ""
    if not verdicts:
        return "n/a (CPU)"
    return "yes" if mape < target else "no"


def write_validation_csv(rows: Sequence[ValidationRow], path: str | Path) -> Path:
    p = Path(path)
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([fl.name for fl in fields(ValidationRow)])
        for r in rows:
            w.writerow(["" if v is None else v for v in astuple(r)])
    return p


def read_validation_csv(path: str | Path) -> list[ValidationRow]:
    with open(path, newline="") as f:
        return [
            ValidationRow(
                r["term"],
                r["split"],
                float(r["mape"]),
                float(r["p95_ape"]),
                float(r["max_ape"]),
                int(r["n"]),
                int(r["train_n"]),
                float(r["target"]) if r["target"] else None,
                r["met"],
                r["description"],
            )
            for r in csv.DictReader(f)
        ]


def _pct(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.1%}"


def validation_markdown(rows: Sequence[ValidationRow]) -> str:
    lines = [
        "| term | split | MAPE | p95 | max | n | target | met? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tgt = f"< {r.target:.0%}" if r.target is not None else "(none)"
        lines.append(
            f"| {r.term} | {r.split} | {_pct(r.mape)} | {_pct(r.p95_ape)} | {_pct(r.max_ape)} "
            f"| {r.n} | {tgt} | {r.met} |"
        )
    return "\n".join(lines) + "\n"


def write_validation_tables(
    rows: Sequence[ValidationRow], csv_path: str | Path
) -> tuple[Path, Path]:
    """``csv_path`` and the Markdown table beside it (same stem, ``.md``)."""
    c = write_validation_csv(rows, csv_path)
    md = c.with_suffix(".md")
    md.write_text(validation_markdown(rows))
    return c, md


# --- forward replay -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ForwardRow:
    """One replayed batch, as `kvsim calibrate forward --points` writes it."""

    kind: str  # "prefill" | "decode" | "mixed"
    tokens: int
    prefill_seqs: int
    decode_seqs: int
    decode_ctx_tokens: int
    measured_s: float
    predicted_s: float


def read_forward_points(path: str | Path) -> list[ForwardRow]:
    with open(path, newline="") as f:
        return [
            ForwardRow(
                r["kind"],
                int(r["tokens"]),
                int(r["prefill_seqs"]),
                int(r["decode_seqs"]),
                int(r["decode_ctx_tokens"]),
                float(r["measured_s"]),
                float(r["predicted_s"]),
            )
            for r in csv.DictReader(f)
        ]


def forward_stats(rows: Sequence[ForwardRow]) -> list[tuple[str, ErrorStats]]:
    """("all", stats) and one entry per batch kind."""
    out = []
    for kind in ["all"] + sorted({r.kind for r in rows}):
        sel = [r for r in rows if kind == "all" or r.kind == kind]
        meas = np.array([r.measured_s for r in sel])
        pred = np.array([r.predicted_s for r in sel])
        out.append((kind, ErrorStats.of(pred, meas)))
    return out


def forward_markdown(rows: Sequence[ForwardRow], worst: int = 10) -> str:
    lines = ["| batches | n | MAPE | p95 | max |", "|---|---|---|---|---|"]
    for kind, e in forward_stats(rows):
        lines.append(f"| {kind} | {e.n} | {_pct(e.mape)} | {_pct(e.p95_ape)} | {_pct(e.max_ape)} |")
    lines += [
        "",
        f"The {min(worst, len(rows))} worst shapes:",
        "",
        "| kind | tokens | prefill seqs | decode seqs | decode ctx | measured | predicted "
        "| error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: -abs(r.predicted_s / r.measured_s - 1))[:worst]:
        lines.append(
            f"| {r.kind} | {r.tokens} | {r.prefill_seqs} | {r.decode_seqs} | {r.decode_ctx_tokens} "
            f"| {r.measured_s * 1e6:.1f} us | {r.predicted_s * 1e6:.1f} us "
            f"| {r.predicted_s / r.measured_s - 1:+.1%} |"
        )
    return "\n".join(lines) + "\n"


def forward_rows(points) -> list[ForwardRow]:
    """Rows of replayed points (``validate_forward.ForwardPoint``s)."""
    return [
        ForwardRow(
            p.kind,
            p.shape.tokens,
            p.shape.prefill_seqs,
            p.shape.decode_seqs,
            p.shape.decode_ctx_tokens,
            p.measured_s,
            p.predicted_s,
        )
        for p in points
    ]
