"""Two results folders side by side (`kvsim compare A B`).

Rows are matched on the grid labels of summary.csv that both folders vary, ``policy`` always among
them. A label only one folder varies is resolved one of two ways, and said so: when the other folder
holds a single value of it that the first also has, the first is compared at that value only (like
with like); otherwise every value of it is compared with the other folder's row, and the label
becomes a column of the table. Labels both folders hold at one value each, different, are what the
comparison is about (``hardware: h100-sxm (A), h200 (B)``), as are the settings of
config.resolved.yaml that no label shows (``engine.chunked_prefill``).

Refused, with one line: a folder without summary.csv or config.resolved.yaml; a column that holds
numbers on one side and text on the other; a matched label that names different things on the two
sides (a trace label for two different traces, a model or GPU name for two different files);
metrics one folder lacks when asked for by name; and no grid point in common.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.results import CONFIG_FILE, SUMMARY_FILE
from experiments.schema import ALL_LABEL_COLUMNS, store_policies_vary

# The metrics the README and docs/results.md read first, in that order.
HEADLINE_METRICS: tuple[str, ...] = (
    "reprefill_rate",
    "gpu_hit_rate",
    "cpu_hit_rate",
    "jain_service",
    "ttft_p50_s",
    "ttft_p99_s",
    "tbt_p50_s",
    "tbt_p99_s",
)
# Metrics drawn by --plot when none are named (one panel each).
PLOT_METRICS: tuple[str, ...] = ("reprefill_rate", "gpu_hit_rate", "jain_service", "ttft_p50_s")
AXES: tuple[str, ...] = tuple(c for c in ALL_LABEL_COLUMNS if c != "name")
# The key of config.resolved.yaml each grid label comes from.
CONFIG_KEYS: dict[str, str] = {
    "policy": "policies",
    "engine": "engine.kind",
    "model": "model",
    "hardware": "hardware",
    "tp": "tp",
    "trace": "trace",
    "gpu_kv_gb": "memory.gpu_kv_gb",
    "cpu_kv_gb": "memory.cpu_kv_gb",
    "block_tokens": "memory.block_tokens",
    "evict_unit": "memory.evict_unit",
    "pipelining": "engine.pipelining",
    "budget": "budgets",
    "sparse": "sparse",
    "seed": "seeds",
    "router": "cluster.router",
    "replicas": "cluster.replicas",
    "groups": "cluster.groups",
    "store_gb": "cluster.store.capacity_gb",
    "store_policy": "cluster.store.policy",
    "store_write": "cluster.store.write",
    "prefill_replicas": "cluster.disaggregation.prefill_replicas",
    "kv_delay_ms": "cluster.kv_events.delay_ms",
    "time_scale": "trace[].time_scale",  # [] stands for any index of the trace list
}
# Settings of config.resolved.yaml that cannot change a metric (or are recorded elsewhere).
_NOT_SETTINGS = (
    "name",
    "kvsim_version",
    "traces_loaded",
    "executor",
    "targets",
    "step_log",
    "figures",
)
_SHARES = {"turns_with_reprefill", "gpu_util", "throughput_impact"}  # fractions without _rate
MAX_SETTINGS_SHOWN = 8


@dataclass(frozen=True)
class ResultsFolder:
    path: Path
    summary: pd.DataFrame
    config: dict[str, Any]

    @property
    def title(self) -> str:
        names = self.summary["name"].dropna().unique() if "name" in self.summary else []
        name = str(names[0]) if len(names) == 1 else self.path.name
        n = len(self.summary)
        return f"{self.path} ({name}, {n} grid point{'s' if n != 1 else ''})"


@dataclass(frozen=True)
class Comparison:
    a: ResultsFolder
    b: ResultsFolder
    matched_on: list[str]  # labels both vary (policy first)
    columns: list[str]  # the labels that tell the table's points apart (matched_on + one-sided)
    metrics: list[str]
    points: pd.DataFrame  # one row per matched point: columns, then <metric>_a, <metric>_b
    notes: list[str] = field(default_factory=list)  # lines printed above the table
    unmatched: tuple[int, int] = (0, 0)  # rows of A, of B without a partner

    def long_table(self) -> pd.DataFrame:
        """One row per point and metric: the label columns, metric, A, B, B-A, (B-A)/|A|."""
        rows = []
        for _, p in self.points.iterrows():
            for m in self.metrics:
                a, b = float(p[f"{m}_a"]), float(p[f"{m}_b"])
                rows.append(
                    {
                        **{c: p[c] for c in self.columns},
                        "metric": m,
                        "A": a,
                        "B": b,
                        "B-A": b - a,
                        "change": _relative(a, b),
                    }
                )
        return pd.DataFrame(rows, columns=[*self.columns, "metric", "A", "B", "B-A", "change"])


def read_folder(path: str | os.PathLike) -> ResultsFolder:
    """summary.csv and config.resolved.yaml of a results folder; ValueError naming the missing file."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder (a results folder of kvsim run)")
    for name in (SUMMARY_FILE, CONFIG_FILE):
        if not (folder / name).is_file():
            raise ValueError(
                f"{folder / name}: no such file ({folder} is not a results folder of kvsim run)"
            )
    try:
        summary = pd.read_csv(folder / SUMMARY_FILE)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as exc:
        raise ValueError(f"{folder / SUMMARY_FILE}: not a summary table ({exc})") from None
    if "policy" not in summary.columns:
        raise ValueError(f"{folder / SUMMARY_FILE}: no policy column (not a summary of kvsim run)")
    try:
        config = yaml.safe_load((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{folder / CONFIG_FILE}: not YAML ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{folder / CONFIG_FILE}: not a mapping (not written by kvsim run)")
    return ResultsFolder(folder, summary, config)


def compare(a: ResultsFolder, b: ResultsFolder, metrics: Sequence[str] | None = None) -> Comparison:
    """Match the grid points of ``a`` and ``b`` and pair their ``metrics`` (default: the headline
    metrics both have, with ``rejected_turns`` when either side rejected any)."""
    notes: list[str] = []
    va, vb = _varying(a.summary), _varying(b.summary)
    matched_on = [c for c in AXES if c in va and c in vb]
    sa, sb = a.summary.copy(), b.summary.copy()
    extra_a: list[str] = []
    extra_b: list[str] = []
    for axis in AXES:
        if axis in matched_on or (axis not in va and axis not in vb):
            continue
        side, mine, other, extra = ("A", sa, sb, extra_a) if axis in va else ("B", sb, sa, extra_b)
        other_name = "B" if side == "A" else "A"
        values = _values(mine[axis])
        head = f"{axis}: an axis of {side} only ({', '.join(values)})"
        if axis not in other.columns:
            extra.append(axis)
            notes.append(f"{head}; {other_name} has no {axis} column: each compared with it")
            continue
        theirs = _values(other[axis])[0]
        if theirs in values:
            keep = mine[axis].map(_key) == theirs
            if side == "A":
                sa = sa[keep]
            else:
                sb = sb[keep]
            notes.append(f"{head}; {other_name} has {theirs}: compared at {axis} = {theirs} only")
        else:
            extra.append(axis)
            notes.append(f"{head}; {other_name} has {theirs}: each compared with it")
    differ = [
        c
        for c in AXES
        if c not in va
        and c not in vb
        and c in a.summary
        and c in b.summary
        and _values(a.summary[c]) != _values(b.summary[c])
    ]
    if differ:
        notes.append(
            "one value each, different: "
            + "; ".join(
                f"{c}: {_values(a.summary[c])[0]} (A), {_values(b.summary[c])[0]} (B)"
                for c in differ
            )
        )
    # the settings no label shows: a label's own key only where both hold one value, the same
    # label (two traces both labelled synthetic, of different sizes)
    shown_by_labels = {CONFIG_KEYS.get(c, c) for c in (*va, *vb, *differ)}
    settings = _settings_differ(a.config, b.config, shown_by_labels)
    if settings:
        shown = settings[:MAX_SETTINGS_SHOWN]
        more = len(settings) - len(shown)
        notes.append(
            "settings that differ: "
            + "; ".join(shown)
            + (f"; and {more} more (diff the two config.resolved.yaml)" if more else "")
        )
    va_ver, vb_ver = a.config.get("kvsim_version"), b.config.get("kvsim_version")
    if va_ver != vb_ver:
        notes.append(f"written by kvsim {va_ver} (A) and {vb_ver} (B)")

    chosen = _metrics(a.summary, b.summary, metrics)
    for col in [*matched_on, *chosen]:
        _same_kind(col, a.summary[col], b.summary[col])
    for m in chosen:
        if not _numeric(a.summary[m]):
            raise ValueError(f"column {m!r} holds no numbers to compare")
    _same_meaning(matched_on, sa, sb, a.config, b.config)

    left = _keyed(sa, matched_on, extra_a, chosen, "A", a.path)
    right = _keyed(sb, matched_on, extra_b, chosen, "B", b.path)
    points = left.merge(right, on="_key")
    if points.empty:
        raise ValueError(
            f"nothing to match: no grid point of {a.path} has the {', '.join(matched_on)} of one "
            f"of {b.path} "
            f"(A: {_sample(left['_key'])}; B: {_sample(right['_key'])})"
        )
    for c in matched_on:
        points[c] = points[f"{c}_a"]
    columns = [*matched_on, *extra_a, *extra_b]
    for c in extra_a:
        points[c] = points[f"{c}_a"]
    for c in extra_b:
        points[c] = points[f"{c}_b"]
    kept = [f"{m}_{s}" for m in chosen for s in "ab"]
    kept += [c for c in ("rejected_turns_a", "rejected_turns_b") if c in points and c not in kept]
    points = points[[*columns, *kept]]
    unmatched = (
        int((~left["_key"].isin(right["_key"])).sum()),
        int((~right["_key"].isin(left["_key"])).sum()),
    )
    return Comparison(
        a, b, matched_on, columns, chosen, points.reset_index(drop=True), notes, unmatched
    )


def render(comp: Comparison) -> str:
    """The text `kvsim compare` prints: the two folders, what was matched and how, then one line
    per point and metric (A, B, B-A, relative change)."""
    lines = [f"A: {comp.a.title}", f"B: {comp.b.title}"]
    n = len(comp.points)
    left = []
    if comp.unmatched[0]:
        left.append(f"{comp.unmatched[0]} of A")
    if comp.unmatched[1]:
        left.append(f"{comp.unmatched[1]} of B")
    lines.append(
        f"matched on: {', '.join(comp.matched_on)} ({n} point{'s' if n != 1 else ''}"
        + (f"; without a match: {', '.join(left)}" if left else "")
        + ")"
    )
    lines += comp.notes
    table = comp.long_table()
    cells: list[list[str]] = []
    previous: tuple[str, ...] | None = None
    for _, row in table.iterrows():
        labels = tuple(_key(row[c]) for c in comp.columns)
        shown = [""] * len(labels) if labels == previous else list(labels)
        previous = labels
        m = str(row["metric"])
        cells.append(
            [
                *shown,
                m,
                _fmt(m, row["A"]),
                _fmt(m, row["B"]),
                _fmt_diff(m, row["B-A"]),
                _fmt_change(row["change"]),
            ]
        )
    header = [*comp.columns, "metric", "A", "B", "B-A", "change"]
    lines.append("")
    lines += _align(header, cells, right_from=len(comp.columns) + 1)
    lines.append("(change: (B - A) / |A|; pp: percentage points)")
    rejected = [f"rejected_turns_{s}" for s in "ab" if f"rejected_turns_{s}" in comp.points]
    if any((comp.points[c] > 0).any() for c in rejected):
        lines.append(
            "note: some points rejected turns (rejected_turns > 0): their metrics cover fewer "
            "turns; compare only where it is 0 on both sides"
        )
    return "\n".join(lines)


def plot(
    comp: Comparison,
    out: str | os.PathLike,
    metrics: Sequence[str] | None = None,
    fmt: str | None = None,
) -> Path:
    """A against B, one panel per metric, one dot per matched point (a policy's colour and marker
    as in every kvsim figure), with the diagonal B = A: a dot above it is higher in B. Drawn like
    the results folder's figures (``figure_style``: paper sizes, one legend, a stamp naming both
    runs) and written in ``fmt`` (png, pdf or svg; default: the file's suffix, else png).
    Returns the path written; matplotlib is imported here."""
    from experiments import figure_style as fs

    out = Path(out)
    if out.is_dir():
        raise ValueError(f"{out}: is a folder; --plot takes the file name of the figure")
    fmt = fs.check_format(fmt or out.suffix or fs.DEFAULT_FORMAT)
    chosen = [m for m in (metrics or PLOT_METRICS) if m in comp.metrics] or comp.metrics[:4]
    policies = list(dict.fromkeys(comp.points["policy"].map(_key)))
    handles: dict[str, Any] = {}
    with fs.style():
        fig, axes, _, panel_w = fs.grid(len(chosen))
        for ax, m in zip(axes, chosen):
            xa = comp.points[f"{m}_a"].astype(float)
            yb = comp.points[f"{m}_b"].astype(float)
            finite = pd.concat([xa, yb])
            finite = finite[finite.map(math.isfinite)]
            if not finite.empty:
                lo, hi = float(finite.min()), float(finite.max())
                pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 0.05
                diag = ax.plot(
                    [lo - pad, hi + pad], [lo - pad, hi + pad], color="0.6", lw=0.8, ls="--"
                )
                handles.setdefault("B = A", diag[0])
                ax.set_xlim(lo - pad, hi + pad)
                ax.set_ylim(lo - pad, hi + pad)
                ax.set_aspect("equal", adjustable="box")
            for i, p in enumerate(policies):
                sel = comp.points["policy"].map(_key) == p
                st = fs.series_style(p, i)
                (dots,) = ax.plot(
                    xa[sel],
                    yb[sel],
                    ls="none",
                    marker=st["marker"],
                    color=st["color"],
                    markersize=st["markersize"],
                    markeredgewidth=st["markeredgewidth"],
                    zorder=st["zorder"],
                    alpha=0.85,
                    label=p,
                )
                handles.setdefault(p, dots)
            if _is_share(m):
                from matplotlib.ticker import PercentFormatter

                ax.xaxis.set_major_formatter(PercentFormatter(1.0))
                ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_title(_plot_title(m))
            ax.set_xlabel(f"A: {comp.a.path.name}")
            ax.set_ylabel(f"B: {comp.b.path.name}")
            ax.grid(True, alpha=0.3)
        title = f"B against A, one dot per matched point (matched on {', '.join(comp.matched_on)})"
        stamp = fs.compare_stamp(
            fs.stamp_parts(comp.a.summary, comp.a.config),
            fs.stamp_parts(comp.b.summary, comp.b.config),
        )
        # policies first, the diagonal last, in the legend
        order = [*policies, "B = A"]
        labels = [k for k in order if k in handles]
        fs.finish(fig, title, [handles[k] for k in labels], labels, stamp)
        return fs.save(fig, out, fmt, title=title)


# The metrics' names on the compare figure's panels (any other: the column's name).
_PLOT_TITLES = {
    "reprefill_rate": "re-prefill rate (% of history tokens)",
    "gpu_hit_rate": "GPU hit rate (% of history tokens)",
    "cpu_hit_rate": "CPU hit rate (% of history tokens)",
    "jain_service": "Jain's index of 1 / mean TTFT slowdown",
    "ttft_p50_s": "median TTFT (s)",
    "ttft_p99_s": "p99 TTFT (s)",
    "tbt_p50_s": "median time between tokens (s)",
    "tbt_p99_s": "p99 time between tokens (s)",
}


def _plot_title(metric: str) -> str:
    return _PLOT_TITLES.get(metric, metric)


# ---------------------------------------------------------------------------------------------
# Matching


def _varying(summary: pd.DataFrame) -> set[str]:
    """The grid labels that take more than one value (policy always counts)."""
    out = {c for c in AXES if c in summary and summary[c].map(_key).nunique() > 1}
    if not store_policies_vary(summary):  # "none" and one policy: store_gb's points
        out.discard("store_policy")
    return out | {"policy"}


def _values(column: pd.Series) -> list[str]:
    return list(dict.fromkeys(column.map(_key)))


def _key(v: Any) -> str:
    """A label value as text that is equal on both sides (1 and 1.0 are one capacity)."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{float(v):g}"
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return str(v)


def _keyed(
    s: pd.DataFrame,
    key: list[str],
    extra: list[str],
    metrics: list[str],
    side: str,
    path: Path,
) -> pd.DataFrame:
    out = pd.DataFrame({c: s[c].map(_key) for c in [*key, *extra]})
    out["_key"] = ["\x1f".join(t) for t in zip(*(out[c] for c in key))] if key else ""
    ident = out[[*key, *extra]].astype(str).agg("\x1f".join, axis=1)
    if ident.duplicated().any():
        dup = out[ident.duplicated(keep=False)].iloc[0]
        shown = ", ".join(f"{c}={dup[c]}" for c in [*key, *extra])
        raise ValueError(
            f"{path / SUMMARY_FILE}: two grid points of {side} have the same labels ({shown}); "
            "their summary rows cannot be told apart"
        )
    for m in metrics:
        out[m] = pd.to_numeric(s[m], errors="coerce").to_numpy()
    if "rejected_turns" in s and "rejected_turns" not in metrics:
        out["rejected_turns"] = pd.to_numeric(s["rejected_turns"], errors="coerce").to_numpy()
    suffix = side.lower()
    out = out.rename(columns={c: f"{c}_{suffix}" for c in out.columns if c != "_key"})
    return out.reset_index(drop=True)


def _sample(keys: pd.Series, n: int = 3) -> str:
    vals = [k.replace("\x1f", "/") for k in dict.fromkeys(keys)]
    return ", ".join(vals[:n]) + (f", ... ({len(vals)} in all)" if len(vals) > n else "")


def _metrics(a: pd.DataFrame, b: pd.DataFrame, asked: Sequence[str] | None) -> list[str]:
    numeric = [c for c in a.columns if c in b.columns and _is_metric(c)]
    if asked:
        for m in asked:
            missing = [side for side, s in (("A", a), ("B", b)) if m not in s.columns]
            if missing:
                raise ValueError(
                    f"no column {m!r} in the summary of {' and '.join(missing)}; "
                    f"metrics both have: {', '.join(numeric)}"
                )
            if not _is_metric(m):
                raise ValueError(f"{m!r} is a grid label or a verdict, not a metric to compare")
        return list(dict.fromkeys(asked))
    chosen = [m for m in HEADLINE_METRICS if m in a.columns and m in b.columns]
    rejected = [
        s["rejected_turns"]
        for s in (a, b)
        if "rejected_turns" in s and s["rejected_turns"].dtype.kind in "iuf"
    ]
    if any((r > 0).any() for r in rejected) and "rejected_turns" in a and "rejected_turns" in b:
        chosen.append("rejected_turns")
    if not chosen:
        raise ValueError("the two summaries have none of the headline metrics in common")
    return chosen


def _is_metric(column: str) -> bool:
    return column not in ALL_LABEL_COLUMNS and not column.startswith("pass_")


def _same_kind(column: str, a: pd.Series, b: pd.Series) -> None:
    """Refuse a column that holds numbers on one side and text on the other."""
    na, nb = _numeric(a), _numeric(b)
    if na != nb:
        what = {True: "numbers", False: "text"}
        raise ValueError(f"column {column!r} differs in meaning: {what[na]} in A, {what[nb]} in B")


def _numeric(s: pd.Series) -> bool:
    if s.dtype.kind in "iuf":
        return True
    if s.dtype.kind == "b":
        return False
    return bool(pd.to_numeric(s.dropna(), errors="coerce").notna().all()) and s.notna().any()


def _same_meaning(
    matched: Iterable[str],
    sa: pd.DataFrame,
    sb: pd.DataFrame,
    ca: Mapping[str, Any],
    cb: Mapping[str, Any],
) -> None:
    """A matched label must name the same thing on both sides: the same trace (what it loaded to),
    the same model or GPU (the same registered name or file)."""
    for col in matched:
        if col == "trace":
            ma, mb = _trace_meanings(ca), _trace_meanings(cb)
        elif col in ("model", "hardware"):
            ma, mb = _name_meanings(ca.get(col)), _name_meanings(cb.get(col))
        else:
            continue
        shared = set(sa[col].map(_key)) & set(sb[col].map(_key))
        for label in sorted(shared):
            if label in ma and label in mb and ma[label] != mb[label]:
                raise ValueError(
                    f"column {col!r} differs in meaning: {label!r} is {ma[label]} in A, "
                    f"{mb[label]} in B"
                )


def _trace_meanings(config: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for t in config.get("traces_loaded") or []:
        if isinstance(t, dict) and "label" in t:
            out[str(t["label"])] = (
                f"{t.get('source', '?')} ({t.get('sessions', '?')} sessions, "
                f"{t.get('turns', '?')} turns)"
            )
    return out


def _name_meanings(entries: Any) -> dict[str, str]:
    if not isinstance(entries, list):
        entries = [entries] if entries is not None else []
    out = {}
    for e in entries:
        text = str(e)
        label = Path(text).stem if os.path.isabs(text) else text
        out[label] = text
    return out


def _settings_differ(ca: Mapping[str, Any], cb: Mapping[str, Any], shown: set[str]) -> list[str]:
    """The settings of the two resolved configs that differ, but for the keys in ``shown``."""
    skip = set(_NOT_SETTINGS) | shown
    fa, fb = dict(_flatten(ca, "", skip)), dict(_flatten(cb, "", skip))
    out = []
    for k in dict.fromkeys([*fa, *fb]):
        x, y = fa.get(k, "(unset)"), fb.get(k, "(unset)")
        if x != y:
            out.append(f"{k}: {x} (A), {y} (B)")
    return out


def _flatten(node: Any, prefix: str, skip: set[str]) -> Iterable[tuple[str, str]]:
    if prefix in skip or re.sub(r"\[\d+\]", "[]", prefix) in skip:
        return
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k), skip)
    elif isinstance(node, list) and node and all(isinstance(x, dict) for x in node):
        for i, v in enumerate(node):
            yield from _flatten(v, f"{prefix}[{i}]", skip)
    else:
        yield (
            prefix,
            yaml.safe_dump(node, default_flow_style=True).strip().removesuffix("...").strip(),
        )


# ---------------------------------------------------------------------------------------------
# Formatting


def _relative(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return math.nan
    if a == 0:
        return 0.0 if b == 0 else math.nan
    return (b - a) / abs(a)


def _is_share(metric: str) -> bool:
    return metric.endswith(("_rate", "_share")) or metric in _SHARES


def _fmt(metric: str, v: float) -> str:
    if math.isnan(v):
        return "-"
    if _is_share(metric):
        return f"{v:.1%}"
    if metric.startswith("jain"):
        return f"{v:.3f}"
    return f"{v:.4g}"


def _fmt_diff(metric: str, d: float) -> str:
    if math.isnan(d):
        return "-"
    if _is_share(metric):
        return f"{d * 100:+.1f} pp"
    if metric.startswith("jain"):
        return f"{d:+.3f}"
    return f"{d:+.4g}"


def _fmt_change(r: float) -> str:
    return "-" if math.isnan(r) else f"{r:+.1%}"


def _align(header: list[str], rows: list[list[str]], right_from: int) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        out = [
            c.rjust(w) if i >= right_from else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(out).rstrip()

    return [line(header), *(line(r) for r in rows)]
