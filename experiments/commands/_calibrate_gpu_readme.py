"""The README.md of a `kvsim calibrate gpu-run` folder, written from the files in it: the machine
(from the profiles' meta), the commands that ran, the headline numbers (fitted constants, held-out
error per term, forward replay, GPU tests) and what to commit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from calibration.report_tables import (
    ValidationRow,
    forward_stats,
    read_forward_points,
    read_validation_csv,
)
from costmodels import Profile, get_model, load_profile

from ._calibrate_gpu_steps import StepResult, Target


def _pct(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.1%}"


def machine_lines(p: Profile) -> list[str]:
    m = p.meta
    parts = [
        f"Device: **{m.gpu}**",
        f"driver {m.driver or 'n/a'}",
        f"CUDA {m.cuda or 'n/a'}",
        f"torch {m.torch or 'n/a'}",
        f"FlashInfer {m.flashinfer or 'not installed'}",
        f"{m.dtype}",
        f"measured {m.date or 'n/a'}",
    ]
    lines = [", ".join(parts) + ".", "", f"Kernels: {m.backend}."]
    clocks = [n for n in (m.notes or "").splitlines() if n.startswith("nvidia-smi")]
    if clocks:
        lines += ["", clocks[0] + "."]
    return lines


def constants_line(p: Profile) -> str:
    lin, pf, dec = p.linear, p.prefill_attn, p.decode_attn
    return (
        f"linear tau {lin.tau_s * 1e6:.3g} us, weight_bw {lin.weight_bw_Bps / 1e12:.3g} TB/s, "
        f"flops {lin.flops / 1e12:.3g} T, elementwise_bw {lin.elementwise_bw_Bps / 1e12:.3g} TB/s; "
        f"prefill tau {pf.tau_s * 1e6:.3g} us, flops {pf.flops / 1e12:.3g} T; "
        f"decode tau {dec.tau_s * 1e6:.3g} us, kv_bw {dec.kv_bw_Bps / 1e12:.3g} TB/s; "
        f"h2d {p.h2d.bw_Bps / 1e9:.3g} GB/s, d2h {p.d2h.bw_Bps / 1e9:.3g} GB/s; "
        f"compute_slowdown {p.overlap.compute_slowdown:.3g}"
    )


def headline_table(rows: Sequence[ValidationRow]) -> list[str]:
    """One line per term: random and extrapolation MAPE (max APE in brackets), target, met?"""
    lines = [
        "| term | random 20 % | extrapolation | target | met? (random / extrapolation) |",
        "|---|---|---|---|---|",
    ]
    terms = list(dict.fromkeys(r.term for r in rows))
    for term in terms:
        by = {r.split: r for r in rows if r.term == term}
        first = next(iter(by.values()))
        cell = {k: f"{_pct(r.mape)} ({_pct(r.max_ape)})" if r.n else "" for k, r in by.items()}
        rnd = cell.get("random") or cell.get("transfer") or cell.get("pipeline", "")
        tgt = f"< {first.target:.0%}" if first.target is not None else "(none)"
        met = " / ".join(r.met for k, r in by.items() if k in ("random", "extrapolation") and r.met)
        lines.append(f"| {term} | {rnd} | {cell.get('extrapolation', '')} | {tgt} | {met} |")
    return lines


def target_section(out: Path, t: Target) -> list[str]:
    model = get_model(t.model)
    what = f"one layer of {model.name}" + (
        f", the per-GPU shard at tensor parallelism {t.tp}" if t.tp > 1 else ""
    )
    lines = [f"### `{t.name}`: {what}", ""]
    yaml = out / f"{t.name}.yaml"
    if not yaml.exists():
        return lines + ["No profile was written (the step failed or did not run).", ""]
    p = load_profile(str(yaml))
    lines += [p.meta.source + ".", "", "Constants (per layer): " + constants_line(p) + ".", ""]
    skipped = [
        n[len("skipped: ") :]
        for n in (p.meta.notes or "").splitlines()
        if n.startswith("skipped: ")
    ]
    if skipped:
        lines += ["Not measured: " + "; ".join(skipped) + ".", ""]
    val = out / f"{t.name}-validation.csv"
    if val.exists():
        lines += ["Held-out error (MAPE, max APE in brackets):", ""]
        lines += headline_table(read_validation_csv(val)) + [""]
        lines += [f"Every split with p95 and n: `{t.name}-validation.md`.", ""]
    fwd = out / f"{t.name}-forward.csv"
    if fwd.exists():
        stats = dict(forward_stats(read_forward_points(fwd)))
        a = stats.pop("all")
        kinds = ", ".join(f"{k} {_pct(e.mape)} (n={e.n})" for k, e in stats.items())
        lines += [
            f"Forward replay ({a.n} simulated batch shapes as real one-layer forwards): "
            f"**{_pct(a.mape)} MAPE** (p95 {_pct(a.p95_ape)}, max {_pct(a.max_ape)}); {kinds}. "
            f"Worst shapes: `{t.name}-forward.md`.",
            "",
        ]
    return lines


def write_readme(
    out: Path, machine: str, targets: Sequence[Target], steps: Sequence[StepResult], wall_s: float
) -> Path:
    first = next(
        (out / f"{t.name}.yaml" for t in targets if (out / f"{t.name}.yaml").exists()), None
    )
    lines = [f"# Calibration run: {machine}", ""]
    lines += machine_lines(load_profile(str(first))) if first else ["No profile was written."]
    lines += [
        "",
        "Written by `kvsim calibrate gpu-run`; to repeat one step, run its line below (the "
        "folder's "
        "raw sample files make a sweep resume where it stopped).",
        "",
        "## Commands",
        "",
        "| step | exit | seconds |",
        "|---|---|---|",
    ]
    lines += [f"| `{s.command}` | {s.rc} | {s.wall_s:.0f} |" for s in steps]
    lines += ["", f"Total: {wall_s:.0f} s.", "", "## Headline numbers", ""]
    for t in targets:
        lines += target_section(out, t)
    pytest = next((s for s in steps if s.name == "pytest-gpu"), None)
    lines += ["## GPU tests", ""]
    lines += [
        f"`{pytest.command}`: {pytest.summary}. Output: `pytest-gpu.txt`."
        if pytest
        else "Not run (an earlier step failed)."
    ]
    lines += [
        "",
        "## Files",
        "",
        "| file | what |",
        "|---|---|",
        "| `NAME.yaml` | the fitted profile (`hardware: path/to/NAME.yaml` in an experiment) |",
        "| `NAME-validation.csv`, `.md` | held-out error of every term and split |",
        "| `NAME-forward.csv`, `.md` | simulated batch shapes replayed as one-layer forwards |",
        "| `NAME-samples.csv` | every measured shape (refit without measuring); "
        "`NAME-samples.run.json` says what it was measured with |",
        "| `pytest-gpu.txt` | the GPU tests' summary and output |",
        "| `logs/` | each step's printed output |",
        "",
        "Commit the profiles, the validation and forward tables and this README, with the raw "
        "samples they were fitted from; never the raw samples alone.",
        "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path
