"""Gantt-style figure of one iteration priced by `kvsim cost`: the H2D copy stream against the
compute stream, one bar per layer on each, the compute stream's waits for copies marked, the LM
head and step overhead after the last layer, and the D2H stream on a lane of its own when the
iteration has one. Drawn from the result of ``experiments.commands.cost.price`` (its
``schedule``); matplotlib's Agg canvas, pyplot and the global backend left alone.

Every bar carries a gid naming what it is (``copy-l``, ``compute-l``, ``wait-l``, ``head``,
``d2h``), so a reader of the figure, a test included, can count them.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from experiments import figure_style as fs
from experiments.version import kvsim_version

_COPY, _COMPUTE, _WAITED, _WAIT, _HEAD, _D2H = (
    "tab:blue",
    "tab:green",
    "tab:orange",
    "tab:red",
    "tab:gray",
    "tab:purple",
)


def timeline_figure(r: dict) -> Figure:
    """The figure of a ``kvsim cost`` result, not yet saved: as wide as a page, in kvsim's figure
    style (``experiments.figure_style``), stamped with the model, GPU profile and kvsim version."""
    with fs.style():
        return _timeline(r)


def _timeline(r: dict) -> Figure:
    sched = r["schedule"]
    rows = sched["layers"]
    has_d2h = r["d2h_s"] > 0
    lanes = ["H2D copy", "compute"] + (["D2H copy"] if has_d2h else [])
    y = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}  # first lane on top
    fig = Figure(figsize=(fs.DOUBLE_COLUMN_IN, 1.55 + 0.42 * len(lanes)), dpi=fs.PNG_DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    end_ms = max(r["total_s"], sched["layers_end_s"]) * 1e3
    label_min_ms = 0.02 * end_ms  # narrower bars go unlabelled

    def bar(lane: str, start_s: float, width_s: float, color: str, gid: str, **kw) -> None:
        (patch,) = ax.barh(
            y[lane], width_s * 1e3, left=start_s * 1e3, height=0.6, color=color, **kw
        ).patches
        patch.set_gid(gid)

    def label(lane: str, start_s: float, width_s: float, text: str) -> None:
        if width_s * 1e3 >= label_min_ms:
            mid = (start_s + width_s / 2) * 1e3
            ax.text(
                mid, y[lane], text, ha="center", va="center", fontsize=fs.STAMP_PT, color="white"
            )

    for row in rows:
        layer = row["layer"]
        shade = 1.0 if layer % 2 == 0 else 0.7  # neighbours told apart
        copy_w = row["copy_end_s"] - row["copy_start_s"]
        if copy_w > 0:
            bar("H2D copy", row["copy_start_s"], copy_w, _COPY, f"copy-{layer}", alpha=shade)
            label("H2D copy", row["copy_start_s"], copy_w, str(layer))
        if row["wait_s"] > 0:
            bar(
                "compute",
                row["compute_start_s"] - row["wait_s"],
                row["wait_s"],
                "none",
                f"wait-{layer}",
                edgecolor=_WAIT,
                hatch="///",
                linewidth=0.6,
            )
        comp_w = row["compute_end_s"] - row["compute_start_s"]
        color = _WAITED if row["critical"] == "copy" else _COMPUTE
        bar("compute", row["compute_start_s"], comp_w, color, f"compute-{layer}", alpha=shade)
        label("compute", row["compute_start_s"], comp_w, str(layer))
    head_w = r["lm_head_s"] + r["step_overhead_s"]
    if head_w > 0:
        bar("compute", sched["layers_end_s"], head_w, _HEAD, "head")
    if has_d2h:
        bar("D2H copy", 0.0, r["d2h_s"], _D2H, "d2h")
    if r["h2d_s"] == 0:
        ax.text(0, y["H2D copy"], " no H2D copies", va="center", fontsize=fs.TICK_PT, color="0.4")
    else:
        ax.axvline(sched["copies_end_s"] * 1e3, color="0.3", linestyle=":", linewidth=1)

    ax.set_yticks([y[name] for name in lanes], lanes)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlim(0, end_ms * 1.01)
    ax.set_xlabel("ms from the start of the iteration")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    waited = sum(row["critical"] == "copy" for row in rows)
    waited = f" ({waited} of {len(rows)} layers waited for their copy)" if r["h2d_s"] else ""
    title = (
        f"{r['model']} on {r['profile']}: one iteration, "
        f"{'copies pipelined with the layers' if sched['pipelined'] else 'copies before layer 0'}\n"
        f"{_work(r['shape'])}; total {r['total_s'] * 1e3:.2f} ms, of which stall "
        f"{r['stall_s'] * 1e3:.2f} ms{waited}"
    )
    chars = int(fs.DOUBLE_COLUMN_IN * 72 / (fs.TITLE_PT * 0.58))
    ax.set_title(
        "\n".join(textwrap.fill(line, chars) for line in title.split("\n")), fontsize=fs.TITLE_PT
    )
    handles: list[Artist] = [
        Patch(color=_COPY, label="H2D copy of layer l"),
        Patch(color=_COMPUTE, label="layer l compute"),
        Patch(color=_WAITED, label="layer l compute, started when its copy was in"),
        Patch(facecolor="none", edgecolor=_WAIT, hatch="///", label="compute waiting for a copy"),
        Patch(color=_HEAD, label="LM head + step overhead"),
    ]
    if r["h2d_s"]:
        slow = sched["compute_slowdown"]
        text = "all H2D copies in" + (f" (compute {slow:.1%} slower before)" if slow else "")
        handles.append(Line2D([], [], color="0.3", linestyle=":", label=text))
    if has_d2h:
        handles.append(Patch(color=_D2H, label="D2H copy (own engine)"))
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, fs.STAMP_IN / fig.get_figheight()),
        ncol=3,
        fontsize=fs.STAMP_PT + 0.5,
        frameon=False,
        columnspacing=1.0,
    )
    fs.add_stamp(
        fig,
        f"{r['model']} · {r['profile']} · one iteration priced by kvsim cost · "
        f"kvsim {kvsim_version()}",
    )
    legend_in = 0.05 + 0.14 * -(-len(handles) // 3)
    fig.tight_layout(rect=(0, (fs.STAMP_IN + legend_in) / fig.get_figheight(), 1, 1))
    return fig


def _work(sh: dict) -> str:
    parts = []
    if sh["prefill_tokens"]:
        parts.append(f"prefill {sh['prefill_tokens']} tokens in {sh['prefill_seqs']} seq(s)")
    if sh["decode_seqs"]:
        parts.append(f"decode {sh['decode_seqs']} seq(s) over {sh['decode_ctx_tokens']} tokens")
    if sh["swap_bytes"]:
        parts.append(f"{sh['direction'].upper()} {sh['swap_bytes'] / 2**20:.0f} MiB")
    return ", ".join(parts)


def write_timeline(r: dict, path: str | os.PathLike[str]) -> Path:
    """Draw the figure to ``path``: a PDF or SVG (vector) when its name ends so, else a PNG;
    written to a temporary file beside it, then renamed, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = timeline_figure(r)
    suffix = path.suffix.lower().lstrip(".")
    fmt = suffix if suffix in fs.FORMATS else "png"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".{fmt}", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f, fs.style():
            fig.savefig(f, format=fmt, dpi=fs.PNG_DPI, metadata=fs.file_metadata(fig, fmt))
        os.chmod(tmp, 0o644)  # mkstemp's 0600 is for the temporary file, not the figure
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone already unless something failed
    return path
