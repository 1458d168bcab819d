"""One look for every figure kvsim draws: sizes a paper can take, font sizes, a fixed colour,
marker and line style per policy, panel titles in words, capacity ticks as plain numbers, a stamp
naming what the figure shows, and the file formats.

* Sizes: ``SINGLE_COLUMN_IN`` (3.5 in) for one panel, ``DOUBLE_COLUMN_IN`` (7 in) for more;
  PNGs at ``PNG_DPI``. Fonts are sized for those widths (8 pt text, 7 pt ticks).
* ``policy_style(name)``: the same colour, marker and dash for a policy in every figure; the
  offline bounds (Belady, cost-aware Belady) black or grey and dashed.
* ``panel_title(where)``: ``{"cpu_kv_gb": 16}`` reads "CPU tier: 16 GiB", ``{"pipelining": True}``
  "layer pipelining on".
* ``capacity_axis(ax, caps)``: a log2 axis ticked at the capacities, labelled 1, 2, 4 (never 2^0).
* ``dodge(series)``: a small horizontal offset per series, on a log2 axis, where two series would
  draw over each other.
* ``run_stamp(summary, resolved)`` and ``add_stamp``: model, hardware, trace and kvsim version in
  small grey type under the axes (gid ``stamp``); ``compare_stamp`` for a figure of two runs.
* ``save(fig, path, fmt)``: PNG, PDF or SVG (text kept as text, fonts embedded as TrueType);
  ``formats`` reads the YAML's ``figures.format`` (one of them, or a list).

Matplotlib's global state is left alone: ``style()`` applies the settings in a context.
"""

from __future__ import annotations

import math
import re
import textwrap
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

SINGLE_COLUMN_IN = 3.5
DOUBLE_COLUMN_IN = 7.0
PNG_DPI = 200
FORMATS = ("png", "pdf", "svg")
DEFAULT_FORMAT = "png"

FONT_PT = 8.0
TITLE_PT = 8.0
SUPTITLE_PT = 9.0
TICK_PT = 7.0
LEGEND_PT = 7.0
STAMP_PT = 5.5
STAMP_GID = "stamp"
STAMP_IN = (STAMP_PT + 4) / 72  # the stamp's line, under the axes
STAMP_LINE_IN = STAMP_PT * 1.25 / 72  # each further line of a stamp
MIN_PANEL_IN = 1.6  # the least height of a row of panels, where a long legend takes room

RC: dict[str, Any] = {
    "font.size": FONT_PT,
    "axes.titlesize": TITLE_PT,
    "axes.labelsize": FONT_PT,
    "xtick.labelsize": TICK_PT,
    "ytick.labelsize": TICK_PT,
    "legend.fontsize": LEGEND_PT,
    "figure.titlesize": SUPTITLE_PT,
    "figure.labelsize": FONT_PT,
    "axes.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 3.0,
    "ytick.major.size": 3.0,
    "lines.linewidth": 1.2,
    "lines.markersize": 4.5,
    "grid.linewidth": 0.5,
    "legend.frameon": False,
    "legend.handlelength": 2.6,
    "savefig.dpi": PNG_DPI,
    "pdf.fonttype": 42,  # TrueType in PDFs (no Type 3 fonts)
    "ps.fonttype": 42,
    "svg.fonttype": "none",  # text stays text in SVGs
    "svg.hashsalt": "kvsim",  # the same figure, the same SVG
}


@contextmanager
def style() -> Iterator[None]:
    """Matplotlib's settings for kvsim's figures, for the figures made (and saved) inside."""
    import matplotlib

    with matplotlib.rc_context(cast(Any, RC)):
        yield


# --- policies ---------------------------------------------------------------------------------

# name: (colour, marker, linestyle); the offline bounds black/grey and dashed
POLICY_STYLES: dict[str, tuple[str, str, str]] = {
    "lru": ("#1f77b4", "o", "-"),
    "fifo": ("#ff7f0e", "s", "-"),
    "pensieve": ("#2ca02c", "^", "-"),
    "pensieve-flat": ("#98df8a", "v", "-."),
    "pensieve-physics": ("#17becf", "D", "-."),
    "pensieve-depth": ("#9467bd", "P", "-."),
    "predictive": ("#d62728", "X", "-"),
    "s3fifo": ("#8c564b", "h", "-"),
    "arc": ("#e377c2", "p", ":"),
    "clock": ("#bcbd22", "d", ":"),
    "lfu": ("#7f7f7f", "<", ":"),
    "sieve": ("#aec7e8", ">", ":"),
    "slru": ("#ffbb78", "8", ":"),
    "twoq": ("#c5b0d5", "H", ":"),
    "qos": ("#c49c94", "o", "-."),
    "session-aware": ("#f7b6d2", "s", "-."),
    "belady": ("black", "*", "--"),
    "cost-belady": ("0.45", "x", "--"),
}
_FALLBACK_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")
FALLBACK_MARKERS = ("o", "s", "^", "D", "v", "P")


def policy_style(name: str) -> dict[str, Any]:
    """Colour, marker and linestyle of a policy, the same in every figure (a policy not listed,
    a user's class say, gets one chosen from its name)."""
    if name in POLICY_STYLES:
        colour, marker, ls = POLICY_STYLES[name]
    else:
        h = zlib.crc32(name.encode())
        colour = _FALLBACK_COLOURS[h % len(_FALLBACK_COLOURS)]
        marker = FALLBACK_MARKERS[(h // 7) % len(FALLBACK_MARKERS)]
        ls = "-"
    return {"color": colour, "marker": marker, "linestyle": ls}


def series_style(name: str, i: int) -> dict[str, Any]:
    """``policy_style`` plus a size by draw order: later series are drawn smaller on top, so
    series that coincide stay visible (the first one's marker rings the next)."""
    return {
        **policy_style(name),
        "markersize": max(3.0, 6.5 - 0.8 * i),
        "linewidth": max(0.9, 1.6 - 0.15 * i),
        "markeredgewidth": 0.6,
        "zorder": 2.0 + 0.1 * i,
    }


def dodge(
    series: Sequence[tuple[Sequence[float], Sequence[float]]],
    span: float | None = None,
    rel_tol: float = 0.03,
):
    """Factors to multiply each series' x by (a log axis): all 1 when no two series share a point
    (same x, y within ``rel_tol`` of ``span``, the y axis' range, about a marker's height; default
    the data's range), else a spread of 0.05 octave per series around the true x, so that series
    that coincide sit side by side."""
    pts: list[tuple[float, float]] = []
    for xs, ys in series:
        pts += [(float(x), float(y)) for x, y in zip(xs, ys) if math.isfinite(float(y))]
    ys_all = [y for _, y in pts]
    if not pts:
        return [1.0] * len(series)
    if span is None:
        span = max(max(ys_all) - min(ys_all), abs(max(ys_all)), 1e-12)
    clash = False
    for a in range(len(series)):
        for b in range(a + 1, len(series)):
            xa = dict(zip(map(float, series[a][0]), map(float, series[a][1])))
            for x, y in zip(map(float, series[b][0]), map(float, series[b][1])):
                if x in xa and math.isfinite(y) and abs(xa[x] - y) <= rel_tol * span:
                    clash = True
    if not clash:
        return [1.0] * len(series)
    n = len(series)
    return [2.0 ** ((i - (n - 1) / 2) * 0.05) for i in range(n)]


# --- panel titles -----------------------------------------------------------------------------

MODEL_NAMES = {
    "llama-3-8b": "Llama-3-8B",
    "llama-3.1-8b": "Llama-3.1-8B",
    "llama-3-70b": "Llama-3-70B",
    "llama-3.1-70b": "Llama-3.1-70B",
    "opt-13b": "OPT-13B",
}
HARDWARE_NAMES = {"h100-sxm": "H100 SXM", "a100-sxm": "A100 SXM", "h200-sxm": "H200 SXM"}
ENGINE_NAMES = {"kvsim": "kvsim engine", "vllm-v1": "vLLM v1 engine"}
EVICT_UNITS = {"block": "evict by page", "layer_block": "evict by page-layer"}


def _num(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _true(v: object) -> bool:
    return v is True or str(v).lower() in ("true", "1", "on", "yes")


def describe(dim: str, value: object) -> str:
    """One grid label in words: ``describe("cpu_kv_gb", 16.0)`` is "CPU tier: 16 GiB"."""
    if dim == "cpu_kv_gb":
        return "no CPU tier" if float(value) == 0 else f"CPU tier: {float(value):g} GiB"  # type: ignore[arg-type]
    if dim == "gpu_kv_gb":
        return f"GPU KV: {float(value):g} GiB"  # type: ignore[arg-type]
    if dim == "pipelining":
        return "layer pipelining " + ("on" if _true(value) else "off")
    if dim == "evict_unit":
        return EVICT_UNITS.get(str(value), f"evict unit: {value}")
    if dim == "block_tokens":
        return f"{_num(value)}-token pages"
    if dim == "model":
        return MODEL_NAMES.get(str(value), str(value))
    if dim == "hardware":
        return HARDWARE_NAMES.get(str(value), str(value))
    if dim == "tp":
        return "1 GPU" if str(value) == "1" else f"{_num(value)} GPUs (tensor parallel)"
    if dim == "engine":
        return ENGINE_NAMES.get(str(value), f"{value} engine")
    if dim == "trace":
        return f"trace {value}"
    if dim == "time_scale":
        return f"arrivals x{1 / float(value):g} as fast"  # type: ignore[arg-type]
    if dim == "budget":
        return "full KV" if str(value) == "full" else f"token budget {value}"
    if dim == "sparse":
        return "no sparse decode" if str(value) == "off" else f"sparse decode {value}"
    if dim == "policy":
        return str(value)
    if dim == "router":
        return f"router {value}"
    if dim == "replicas":
        return "1 replica" if str(value) == "1" else f"{_num(value)} replicas"
    if dim == "store_gb":  # a cluster's shared KV store (GB = 1e9 bytes)
        return "no store" if float(str(value)) == 0 else f"store: {float(str(value)):g} GB"
    if dim == "store_policy":  # the store's eviction policy ("none": no store at that point)
        return "no store" if str(value) == "none" else f"store policy {value}"
    if dim == "prefill_replicas":  # a cluster's prefill pool (0: colocated)
        n = int(float(str(value)))
        return "colocated" if n == 0 else f"{n} prefill replica" + ("" if n == 1 else "s")
    return f"{dim.replace('_', ' ')}: {_num(value)}"


def panel_title(where: Mapping[str, object], width_in: float | None = None) -> str:
    """The words of a panel's grid labels, joined by commas; wrapped (at the commas) to fit a
    panel ``width_in`` inches wide."""
    text = ", ".join(dict.fromkeys(describe(d, v) for d, v in where.items()))  # "no store" once
    if width_in is None:
        return text
    chars = max(16, int(width_in * 72 / (TITLE_PT * 0.6)))
    lines = textwrap.wrap(text, chars, break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines) if text else text


# --- axes -------------------------------------------------------------------------------------


def capacity_axis(ax, caps: Sequence[float], label: str = "GPU KV capacity (GiB)") -> None:
    """A log2 axis ticked at the capacities, labelled as plain numbers (1, 2, 4), with room
    either side for markers and dodged series."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    caps = sorted(float(c) for c in caps)
    ax.set_xscale("log", base=2)
    # Limits from the capacities, not from the data: a panel with nothing drawn has no data
    # limits, and a log axis cannot autoscale from none.
    lo, hi = caps[0], caps[-1]
    ax.set_xlim(lo / 1.3, hi * 1.3)
    ax.xaxis.set_major_locator(FixedLocator(caps))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(label)
    ax.grid(True, alpha=0.3)


# --- layout -----------------------------------------------------------------------------------


def columns(n: int, max_cols: int = 4) -> int:
    """Columns for ``n`` panels: 1, 2, 3 (3, 5, 6, 9 panels), else up to ``max_cols``."""
    if n <= 2:
        return n
    if n in (3, 5, 6, 9):
        return min(3, max_cols)
    return min(4, max_cols) if n != 4 else 2


def grid(n: int, *, max_cols: int = 4, panel_h: float | None = None, header_in: float = 0.75):
    """A figure of ``n`` panels (the unused ones hidden) as wide as a paper column (one panel)
    or the page (more): (figure, axes, columns, panel width in inches)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = max(1, columns(n, max_cols))
    rows = math.ceil(n / cols)
    width = SINGLE_COLUMN_IN if cols == 1 else DOUBLE_COLUMN_IN
    panel_w = width / cols
    if panel_h is None:
        panel_h = min(2.6, max(1.9, panel_w * 0.78))
    fig = Figure(figsize=(width, panel_h * rows + header_in + 0.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n], cols, panel_w


def finish(fig, title: str, handles: list, labels: list, stamp: str | None = None) -> None:
    """The title and one legend above the panels, the stamp below them: the title and legend
    are placed here, in inches from the top, and the panels (constrained layout) fill the rest.
    A legend too tall for the room the figure left makes the figure taller, so that each row of
    panels keeps ``MIN_PANEL_IN`` (the layout cannot place panels in no room)."""
    width_in = fig.get_figwidth()
    title_lines: list[str] = []
    if title:
        chars = max(20, int(width_in * 72 / (SUPTITLE_PT * 0.56)))
        title_lines = textwrap.wrap(title, chars)
    title_in = len(title_lines) * SUPTITLE_PT * 1.25 / 72 + 0.03 if title_lines else 0.0
    ncol = legend_rows = 0
    if handles:
        per_entry = max(len(str(lab)) for lab in labels) * LEGEND_PT * 0.55 / 72 + 0.5
        ncol = max(1, min(len(handles), int(width_in * 0.96 / per_entry)))
        legend_rows = math.ceil(len(handles) / ncol)
    legend_in = legend_rows * LEGEND_PT * 1.95 / 72 + 0.08 if handles else 0.0
    bottom_in = 0.0
    if stamp:
        stamp_lines = len(_stamp_lines(width_in, stamp))
        bottom_in = stamp_lines * STAMP_LINE_IN + (STAMP_IN - STAMP_LINE_IN)
    top_in = 0.04
    panel_rows = max(
        (ax.get_gridspec().nrows for ax in fig.axes if ax.get_subplotspec()), default=1
    )
    height = max(
        fig.get_figheight(), top_in + title_in + legend_in + bottom_in + panel_rows * MIN_PANEL_IN
    )
    fig.set_figheight(height)
    if title_lines:
        fig.suptitle(
            "\n".join(title_lines),
            fontweight="bold",
            x=0.5,
            y=1 - top_in / height,
            va="top",
            in_layout=False,
        )
        top_in += title_in
    if handles:
        leg = fig.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, 1 - top_in / height),
            ncol=ncol,
            fontsize=LEGEND_PT,
            borderaxespad=0.0,
            borderpad=0.2,
            columnspacing=1.2,
            handletextpad=0.5,
        )
        leg.set_in_layout(False)
        top_in += legend_in
    if stamp:
        add_stamp(fig, stamp)  # last: the figure's last text (``fig.texts[-1]``) is its stamp
    engine = fig.get_layout_engine()
    if engine is not None and hasattr(engine, "set"):
        engine.set(rect=(0, bottom_in / height, 1, 1 - top_in / height))


def add_stamp(fig, text: str) -> int:
    """``text`` in small grey type at the figure's bottom left, under the axes (gid ``stamp``),
    broken at its " · " into lines as wide as the figure; the number of lines."""
    lines = _stamp_lines(fig.get_figwidth(), text)
    fig.text(
        0.005,
        0.004,
        "\n".join(lines),
        ha="left",
        va="bottom",
        fontsize=STAMP_PT,
        color="0.4",
        gid=STAMP_GID,
        in_layout=False,
    )
    return len(lines)


def _stamp_lines(width_in: float, text: str) -> list[str]:
    chars = int(width_in * 72 / (STAMP_PT * 0.55))
    lines: list[str] = []
    for part in text.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= chars:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return lines


# --- the stamp --------------------------------------------------------------------------------


def _values(summary, column: str) -> list[str]:
    if summary is None or column not in getattr(summary, "columns", ()):
        return []
    return [str(v) for v in dict.fromkeys(summary[column].dropna())]


def _listed(resolved: Mapping[str, Any] | None, key: str) -> list[str]:
    v = (resolved or {}).get(key)
    if v is None:
        return []
    return [str(x) for x in (v if isinstance(v, list) else [v])]


def stamp_parts(summary=None, resolved: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The pieces of ``run_stamp``, by what they name (``name``, ``model``, ``hardware``,
    ``trace``, ``version``); a piece nothing tells is left out."""
    from experiments.version import kvsim_version

    parts: dict[str, str] = {}
    name = (resolved or {}).get("name") or next(iter(_values(summary, "name")), None)
    if name:
        parts["name"] = str(name)
    models = _values(summary, "model") or _listed(resolved, "model")
    if models:
        parts["model"] = ", ".join(models)
    hw = _values(summary, "hardware") or _listed(resolved, "hardware")
    tps = sorted({int(float(t)) for t in (_values(summary, "tp") or _listed(resolved, "tp"))})
    if hw:
        tp = f" x{tps[0]} (TP)" if tps == [tps[0]] and tps[0] > 1 else ""
        tp = tp or (f" (TP {', '.join(map(str, tps))})" if len(tps) > 1 else "")
        parts["hardware"] = ", ".join(hw) + tp
    loaded = (resolved or {}).get("traces_loaded") or []
    if loaded:
        parts["trace"] = "trace " + _traces_text(loaded)
    else:
        labels = _values(summary, "trace")
        if labels:
            size = ""
            if summary is not None and {"sessions", "turns"} <= set(summary.columns):
                size = (
                    f" ({int(summary['sessions'].max())} sessions, "
                    f"{int(summary['turns'].max())} turns)"
                )
            parts["trace"] = "trace " + ", ".join(labels) + size
    now = kvsim_version()
    ran = (resolved or {}).get("kvsim_version")
    version = f"kvsim {ran}" if ran else f"kvsim {now}"
    if ran and str(ran) != now:
        version += f" (drawn by {now})"
    parts["version"] = version
    return parts


def run_stamp(summary=None, resolved: Mapping[str, Any] | None = None) -> str:
    """What a results folder's figures show, in one line: the experiment, model(s), hardware (and
    tensor parallelism), trace(s) and their size (a request-rate sweep's rates named once, after
    its trace), the kvsim version that ran it (and the one that drew the figure when they
    differ). From the run's config (``config.resolved.yaml``) where given, else from the
    summary's labels."""
    return " · ".join(stamp_parts(summary, resolved).values())


def compare_stamp(a: Mapping[str, str], b: Mapping[str, str]) -> str:
    """The stamp of a figure of two runs, from their ``stamp_parts``: a piece the two share is
    said once, one that differs as ``x (A), y (B)`` (as ``kvsim compare`` names what differs)."""
    out = []
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key, "-"), b.get(key, "-")
        out.append(x if x == y else f"{x} (A), {y} (B)")
    return " · ".join(out)


def _traces_text(loaded: Sequence[Mapping[str, Any]]) -> str:
    """The traces of ``traces_loaded``: each named once with its size; a trace drawn more than once
    (``label[0]``, ``label[1]``) with its count; the rates of a request-rate sweep (one entry per
    ``time_scale``, the same trace) after it, in the words of the figures' panels."""
    draws: dict[str, set[str]] = {}
    scales: dict[str, list[float]] = {}
    for i, t in enumerate(loaded):
        label = re.sub(r"\[\d+\]$", "", str(t.get("label", t.get("source", "?"))))
        key = f"{label} ({t.get('sessions', '?')} sessions, {t.get('turns', '?')} turns)"
        draws.setdefault(key, set()).add(str(t.get("where", t.get("label", i))))
        scale = float(t.get("time_scale", 1.0))
        if scale not in scales.setdefault(key, []):
            scales[key].append(scale)
    traces = []
    for key, where in draws.items():
        text = key + (f" x{len(where)}" if len(where) > 1 else "")
        if scales[key] != [1.0]:
            speeds = ", ".join(f"x{1 / s:g}" for s in sorted(scales[key], reverse=True))
            text += f", arrivals {speeds} as fast"
        traces.append(text)
    if len(traces) > 2:
        traces = [*traces[:2], f"+{len(traces) - 2} more"]
    return "; ".join(traces)


# --- files ------------------------------------------------------------------------------------


def check_format(fmt: str) -> str:
    fmt = fmt.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ValueError(f"figure format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return fmt


def formats(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """The formats of a ``figures.format`` value (one format or a list of them; none: PNG), each
    once, in the order given."""
    if spec is None:
        return (DEFAULT_FORMAT,)
    items = [spec] if isinstance(spec, str) else list(spec)
    if not items:
        raise ValueError(f"no figure format: expected one of {', '.join(FORMATS)}")
    return tuple(dict.fromkeys(check_format(f) for f in items))


def with_format(path: str | Path, fmt: str) -> Path:
    """``path`` with the suffix of ``fmt``."""
    return Path(path).with_suffix("." + check_format(fmt))


def save(fig, path: str | Path, fmt: str | None = None, title: str = "") -> Path:
    """Write ``fig`` to ``path`` in ``fmt`` (default: the path's suffix, else PNG; the suffix
    follows the format), PNGs at ``PNG_DPI``; the title and stamp go into the file's metadata.
    Returns the path written."""
    path = Path(path)
    fmt = check_format(fmt or path.suffix or DEFAULT_FORMAT)
    path = with_format(path, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    with style():
        fig.savefig(path, format=fmt, dpi=PNG_DPI, metadata=file_metadata(fig, fmt, title))
    return path


def file_metadata(fig, fmt: str, title: str = "") -> dict[str, Any]:
    """The title and stamp of ``fig`` as the metadata ``savefig`` writes into a ``fmt`` file (no
    dates, so a figure drawn again from the same data is the same file)."""
    stamp = next((t.get_text() for t in fig.texts if t.get_gid() == STAMP_GID), "")
    if fmt == "png":
        return {"Title": title, "Description": stamp, "Software": "kvsim (matplotlib)"}
    if fmt == "pdf":
        return {"Title": title, "Subject": stamp, "Creator": "kvsim", "CreationDate": None}
    return {"Title": title, "Description": stamp, "Date": None}
