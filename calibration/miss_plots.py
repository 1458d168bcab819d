"""Predicted against measured, for every held-out report that misses its target.

One PNG per (source, term, split): the held-out shapes on log-log axes, the y = x line and the
target band around it, points coloured by the shape's size, and the worst shapes named. What a
reader needs to see which shapes miss and by how much (``kvsim calibrate fit --plots DIR``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .samples import Sample
from .validate import TermReport

WORST = 6  # shapes named on each plot


def describe(s: Sample) -> str:
    """A shape in the words of its term: what a reader looks up in the table."""
    sh = s.shape
    if s.term == "prefill_attn":
        return f"{s.model.name} S={sh.seqs} new={sh.n_new} ctx={sh.n_ctx}"
    if s.term == "decode_attn":
        return f"{s.model.name} B={sh.seqs} ctx={sh.n_ctx}"
    if s.term in ("h2d", "d2h"):
        return f"{sh.nbytes} B in {sh.copies} copies"
    return f"{s.model.name} N={sh.tokens}"


def size_of(s: Sample) -> float:
    """The colour scale: the work's size in its term's natural unit."""
    sh = s.shape
    if s.term == "prefill_attn":
        return float(sh.seqs * sh.n_new)
    if s.term == "decode_attn":
        return float(sh.seqs * sh.n_ctx)
    if s.term in ("h2d", "d2h"):
        return float(sh.nbytes)
    return float(sh.tokens)


def missed(reports: Sequence[TermReport], targets: dict[str, float]) -> list[TermReport]:
    """Reports over their term's target that have held-out points to draw."""
    return [r for r in reports if r.term in targets and r.test.mape >= targets[r.term] and r.points]


def figure(report: TermReport, target: float):
    """The figure of one report (not saved), so a caller can inspect or save it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = np.array([s.time.median_s for s, _ in report.points]) * 1e6
    p = np.array([pred for _, pred in report.points]) * 1e6
    size = np.array([size_of(s) for s, _ in report.points])
    ape = np.abs(p - y) / y
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    sc = ax.scatter(y, p, c=np.log10(np.maximum(size, 1)), s=14, cmap="viridis", alpha=0.8)
    fig.colorbar(sc, ax=ax, label="log10 size (tokens, keys or bytes)")
    lo, hi = min(y.min(), p.min()) * 0.8, max(y.max(), p.max()) * 1.25
    line = np.array([lo, hi])
    ax.plot(line, line, color="black", lw=1, label="predicted = measured")
    ax.fill_between(
        line,
        line * (1 - target),
        line * (1 + target),
        color="grey",
        alpha=0.2,
        label=f"within {target:.0%}",
    )
    for i in np.argsort(ape)[::-1][:WORST]:
        ax.annotate(
            f"{describe(report.points[i][0])} ({(p[i] - y[i]) / y[i]:+.0%})",
            (y[i], p[i]),
            fontsize=6,
            xytext=(4, -8),
            textcoords="offset points",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel="measured (us)",
        ylabel="predicted (us)",
    )
    ax.set_title(
        f"{report.source}: {report.term}, {report.split.name} held-out\n"
        f"MAPE {report.test.mape:.1%} (target {target:.0%}), max {report.test.max_ape:.0%}, "
        f"n={report.test.n}",
        fontsize=9,
    )
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return fig


def file_name(report: TermReport) -> str:
    stem = f"{report.source}__{report.term}__{report.split.name}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("_") + ".png"


def write_miss_plots(
    reports: Sequence[TermReport], targets: dict[str, float], out_dir: str | os.PathLike[str]
) -> list[Path]:
    """One PNG per missed report in ``out_dir`` (created), each written atomically."""
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for r in missed(reports, targets):
        fig = figure(r, targets[r.term])
        path = out / file_name(r)
        fd, tmp = tempfile.mkstemp(dir=out, suffix=".png.part")
        os.close(fd)
        try:
            fig.savefig(tmp, dpi=110, format="png")
            os.replace(tmp, path)
        finally:
            plt.close(fig)
            if os.path.exists(tmp):
                os.unlink(tmp)
        written.append(path)
    return written


def measured_reports(name: str = "h100-sxm-llama3-8b") -> list[TermReport]:
    """The held-out reports of a committed GPU sweep, refitted from ``calibration/measured/``
    with the forms its profile was fitted in (sources named ``measured-<name>``)."""
    import dataclasses

    from costmodels import load_profile

    from .env import EnvInfo
    from .local import calibrate
    from .measure import Measurements
    from .measure_attention import AttentionBackend
    from .samples_io import read_samples_csv

    p = load_profile(name)
    here = Path(__file__).resolve().parent / "measured"
    samples = read_samples_csv(here / f"{name}-samples.csv")
    model = next(s.model for s in samples if s.group == "shard/1")
    m = p.meta
    env = EnvInfo("cuda", m.gpu, m.torch, m.cuda, m.driver, None, m.date or "")
    meas = Measurements(
        tuple(samples), model, "bf16", env, AttentionBackend("sdpa"), "full", None, (), 0.0
    )
    reports = calibrate(meas, name).reports
    return [dataclasses.replace(r, source=f"measured-{name}") for r in reports]


# The measured profiles committed with their samples (calibration/measured/<name>-samples.csv).
MEASURED_PROFILES = (
    "h100-sxm-llama3-8b",
    "h100-sxm-llama3-70b-tp4",
    "h100-sxm-llama3-70b-tp8",
    "h200-llama3-8b",
)


def lm_head_figure(reports_by_profile: dict[str, Sequence[TermReport]]):
    """The LM head of each measured profile against its rows: the measured points, and the price
    the profile gives them (its layer GEMM constants, the transfer check) as a line. Not saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodels import CostModel, load_profile

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, (name, reports) in enumerate(reports_by_profile.items()):
        colour = f"C{i % 10}"  # one per profile: a profile added is never left out
        (head,) = [r for r in reports if r.term == "lm_head"]
        measured = sorted((s for s, _ in head.points), key=lambda s: s.shape.tokens)
        rows = [s.shape.tokens for s in measured]
        label = f"{name} (MAPE {head.test.mape:.1%})"
        ax.plot(rows, [s.time.median_s * 1e6 for s in measured], "o", color=colour, label=label)
        # The sample's model is the shard the kernel ran on, so the price is at tp 1.
        cost = CostModel(measured[0].model, load_profile(name))
        line = np.geomspace(1, max(rows), 80)
        ax.plot(line, [cost.lm_head_s(int(r)) * 1e6 for r in line], "-", color=colour, alpha=0.6)
    ax.plot([], [], "-", color="grey", label="priced: max(weight read, FLOPs), layer constants")
    ax.set(xscale="log", yscale="log", xlabel="rows through the LM head", ylabel="time (us)")
    ax.set_title("LM head: measured (points) against its price (lines)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


if __name__ == "__main__":  # python -m calibration.miss_plots DIR: the measured sweeps' misses
    import sys

    import matplotlib.pyplot as plt

    from .public_profiles import TARGETS

    for path in write_miss_plots(measured_reports(), TARGETS, sys.argv[1]):
        print(path)
    fig = lm_head_figure({name: measured_reports(name) for name in MEASURED_PROFILES})
    fig.savefig(Path(sys.argv[1]) / "measured__lm_head__transfer.png", dpi=110)
    plt.close(fig)
    print(Path(sys.argv[1]) / "measured__lm_head__transfer.png")
