"""Routers against cluster size: the figures of an experiment with a ``cluster`` section.

``routers_vs_replicas.png`` (or .pdf, .svg: the run's figure format) has three panels against the
number of replicas, one line per router: TTFT p50, TTFT p90 and the re-prefill rate (the history
tokens recomputed, a turn sent where its conversation's KV is not among them). It is drawn when
summary.csv has a ``router`` column. A line is one router at one value of every other grid label
that varies (``policy=lru``, ``gpu_kv_gb=1``, ... name it in the legend); seeds are averaged.
Points whose value is not finite, and rows with gpu_kv_gb = inf (the infinite-memory baseline), are
left out; a figure with no finite point is not written, and ``notes`` says so.

``store_vs_replicas.png`` is drawn when the cluster has a shared KV store axis
(``cluster.store.capacity_gb``, summary.csv's ``store_gb``) with at least two capacities, or a
store policy axis (``cluster.store.policy``, summary.csv's ``store_policy``) with at least two
policies: the re-prefill rate, the store hit rate (history tokens loaded from the store) and TTFT
p90 against the number of replicas, a line per (router, store: its capacity and policy). It is a figure of its own rather than
more line styles in ``routers_vs_replicas``: its panels put first what the store changes (the
recompute it saves, the share of history it serves, and what that does to TTFT's tail), and
its title says what is compared. In both figures a router keeps its colour and marker and a store
has its own line style (solid: the smallest capacity, usually 0 = no store; then dashed, dotted,
dash-dot, by capacity then policy), so ``routers_vs_replicas`` of such a run draws a line per
(router, store) too, never a mean over capacities or store policies.

``disagg_vs_colocated.png`` is drawn when the cluster has a prefill/decode disaggregation axis
(``cluster.disaggregation.prefill_replicas``, summary.csv's ``prefill_replicas``) with at least two
values: at equal GPU count (x: the number of replicas, prefill and decode together), TTFT p90, TBT
p90 (every decode iteration's, pooled over the replicas) and the re-prefill rate, a line per
(router, prefill pool): a router keeps its colour and marker, colocated (0) is solid with filled
markers, a prefill pool dashed (then dotted, dash-dot) with hollow ones. With a store axis too, each
store (capacity and policy) has its row of the three panels, so no line averages over stores.
``routers_vs_replicas`` of such a run splits its lines by the prefill pool as well.

It is drawn in the look of the run's other figures (``experiments.figure_style``: the page width,
the stamp under the panels); pyplot and the global backend are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.plot_points import drawable_points
from experiments.schema import LABEL_COLUMNS, NO_STORE_POLICY, store_policies_vary

CLUSTER_FIGURE = "routers_vs_replicas"  # .png, or the run's figure format
STORE_FIGURE = "store_vs_replicas"  # with a store axis of two capacities or more
SIZE_AXIS = "replicas"
STORE_AXIS = "store_gb"  # the cluster.store.capacity_gb axis (0: no store)
STORE_POLICY_AXIS = "store_policy"  # the cluster.store.policy axis ("none" where there is no store)
DISAGG_FIGURE = "disagg_vs_colocated"  # with a prefill_replicas axis of two values or more
PREFILL_AXIS = "prefill_replicas"  # the cluster.disaggregation.prefill_replicas axis (0: colocated)
GROUPS_AXIS = "groups"  # the cluster.groups axis: each point's fleet, by name
STORE_WRITE_AXIS = "store_write"  # the cluster.store.write axis ("none" where there is no store)
DELAY_AXIS = "kv_delay_ms"  # the cluster.kv_events.delay_ms axis
# The grid labels a line may be told apart by besides the router: seed is averaged over, and a
# cluster runs full KV without sparse decode, so budget and sparse never vary. Fleets of groups
# are lines of their own: a line joins points of one kind of replica only.
_LINE_LABELS = (
    *(c for c in LABEL_COLUMNS if c not in ("name", "budget", "sparse", "seed")),
    GROUPS_AXIS,
    STORE_WRITE_AXIS,
    DELAY_AXIS,
)
PANELS: tuple[tuple[str, str, bool], ...] = (  # column, axis title, a share (0 to 1)
    ("ttft_p50_s", "TTFT p50 (s)", False),
    ("ttft_p90_s", "TTFT p90 (s)", False),
    ("reprefill_rate", "re-prefill rate (% of history tokens)", True),
)
# The built-in routers' colour, marker and line style, the same in every run (a user's router:
# the look figure_style gives a name it does not know).
ROUTER_STYLES = {
    "round-robin": ("#1f77b4", "o", "-"),
    "least-loaded": ("#ff7f0e", "s", "--"),
    "session-affinity": ("#2ca02c", "^", "-."),
    "kv-aware": ("#d62728", "D", ":"),
    "least-time": ("#9467bd", "v", "-"),
}
STORE_PANELS: tuple[tuple[str, str, bool], ...] = (
    ("reprefill_rate", "re-prefill rate (% of history tokens)", True),
    ("store_hit_rate", "store hit rate (% of history tokens)", True),
    ("ttft_p90_s", "TTFT p90 (s)", False),
)
DISAGG_PANELS: tuple[tuple[str, str, bool], ...] = (
    ("ttft_p90_s", "TTFT p90 (s)", False),
    ("tbt_p90_s", "TBT p90 (s)", False),
    ("reprefill_rate", "re-prefill rate (% of history tokens)", True),
)
_DASHES = ("-", "--", ":", "-.")


def _varies(summary: pd.DataFrame, column: str) -> bool:
    """``column`` holds two values or more in ``summary``; a point without a store is no write
    of its own (``none``: store_gb tells it apart already)."""
    if column not in summary.columns:
        return False
    values = set(summary[column].dropna().map(str))
    if column == STORE_WRITE_AXIS:
        values.discard(NO_STORE_POLICY)
    return len(values) > 1


def has_cluster(summary: pd.DataFrame) -> bool:
    """The run's points ran on clusters: summary.csv has their router and replicas columns."""
    return {"router", SIZE_AXIS} <= set(summary.columns)


# A line's store: (capacity, store policy), each None where that axis does not vary.
StoreKey = tuple[float | None, str | None]


def _store_labels(summary: pd.DataFrame) -> list[str]:
    """The store's labels that vary in ``summary``: its capacity where two values are there, its
    policy where two policies are (a point without a store, ``none``, is no policy: the lines of
    one policy at capacities 0 and 64 are told apart by capacity alone)."""
    out = []
    if STORE_AXIS in summary.columns and summary[STORE_AXIS].map(str).nunique() > 1:
        out.append(STORE_AXIS)
    if store_policies_vary(summary):
        out.append(STORE_POLICY_AXIS)
    return out


def _store_key(named: Mapping[str, object]) -> StoreKey | None:
    """The store of a line from its varying labels; None when no store label varies."""
    gb, policy = named.get(STORE_AXIS), named.get(STORE_POLICY_AXIS)
    if gb is None and policy is None:
        return None
    return (None if gb is None else float(str(gb)), None if policy is None else str(policy))


def store_variants(summary: pd.DataFrame) -> list[StoreKey]:
    """The stores the run's points vary over, as line keys (``_store_key``), ascending by
    capacity then policy; none without a store axis of two capacities or two policies."""
    labels = _store_labels(summary)
    if not labels:
        return []
    rows = summary[labels].dropna().drop_duplicates()
    keys: set[StoreKey] = set()
    for r in rows.itertuples(index=False):
        k = _store_key(dict(zip(labels, r)))
        if k is not None and (k[0] is None or math.isfinite(k[0])):
            keys.add(k)
    return sorted(keys, key=lambda k: (k[0] if k[0] is not None else -1.0, k[1] or ""))


def router_lines(
    summary: pd.DataFrame, column: str
) -> dict[tuple[str, StoreKey | None, str], pd.Series]:
    """Each line of one panel: (router, store or None, legend text) -> ``column`` by replicas
    (ascending), the mean over seeds, non-finite values left out. A store capacity or store
    policy that varies splits the lines as any other varying label does (the store named once
    in the legend: ``store 64 GB (lru)``)."""
    stores = _store_labels(summary)
    labels = [*_LINE_LABELS, *stores, PREFILL_AXIS]
    others = [c for c in labels if c in stores or _varies(summary, c)]
    rows = summary[np.isfinite(summary[column].astype(float))]
    out: dict[tuple[str, StoreKey | None, str], pd.Series] = {}
    for key, group in rows.groupby(["router", *others], sort=False, dropna=False):
        values = key if isinstance(key, tuple) else (key,)
        named = dict(zip(others, values[1:]))
        store = _store_key(named)
        parts = [str(values[0])]
        for c, v in named.items():
            if c not in stores:
                parts.append(_name(c, v))
            elif c == stores[0] and store is not None:  # the store once, where it first varies
                parts.append(store_name(store))
        series = group.groupby(SIZE_AXIS)[column].mean().astype(float).sort_index()
        out[(str(values[0]), store, ", ".join(parts))] = series
    return out


def store_name(store: StoreKey) -> str:
    """A line's store in words: ``no store``, ``store 64 GB``, ``store 64 GB (lru)``, ``store
    lru``."""
    gb, policy = store
    if (gb is not None and gb == 0) or policy == NO_STORE_POLICY:
        return "no store"
    if gb is None:
        return f"store {policy}"
    return _name(STORE_AXIS, gb) + ("" if policy is None else f" ({policy})")


def router_style(router: str, variant: int, i: int, dash: str | None = None) -> dict[str, Any]:
    """A router's look; the lines of one router told apart by their dashes: ``dash`` (a store
    capacity's) where given, with hollow markers for further lines of the same dash."""
    from experiments import figure_style as fs

    look = fs.series_style(router, i)
    if router in ROUTER_STYLES:
        look["color"], look["marker"], look["linestyle"] = ROUTER_STYLES[router]
    if dash is not None:
        look["linestyle"] = dash
        if variant:
            look["markerfacecolor"] = "none"
    elif variant:
        look["linestyle"] = _DASHES[variant % len(_DASHES)]
    return look


def cluster_figures(
    summary: pd.DataFrame,
    out_dir: str | Path,
    notes: list[str],
    fmt: str = "png",
    resolved: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``CLUSTER_FIGURE``.``fmt`` into ``out_dir`` when the run ran clusters,
    ``STORE_FIGURE``.``fmt`` when they had two store capacities or store policies or more, and
    ``DISAGG_FIGURE``.``fmt`` when they had two prefill pool sizes or more; the paths written.
    ``resolved``: the run's config.resolved.yaml, for the stamp under the panels."""
    if not has_cluster(summary):
        return []
    rows = drawable_points(summary)
    rows = rows[rows["router"].notna()]
    out = _figure(
        rows,
        PANELS,
        CLUSTER_FIGURE,
        "Routers against cluster size: TTFT and re-prefill",
        "TTFT or re-prefill rate",
        Path(out_dir),
        notes,
        fmt,
        resolved,
        summary,
    )
    if len(store_variants(rows)) >= 2:
        out += _figure(
            rows,
            STORE_PANELS,
            STORE_FIGURE,
            "A shared KV store against cluster size: re-prefill, store hits and TTFT p90",
            "re-prefill rate, store hit rate or TTFT p90",
            Path(out_dir),
            notes,
            fmt,
            resolved,
            summary,
        )
    if len(prefill_counts(rows)) >= 2:
        out += _disagg_figure(rows, Path(out_dir), notes, fmt, resolved, summary)
    return out


def prefill_counts(summary: pd.DataFrame) -> list[int]:
    """The prefill pool sizes of the run's points, ascending (none without a disaggregation
    axis; 0: colocated)."""
    if PREFILL_AXIS not in summary.columns:
        return []
    return sorted({int(v) for v in summary[PREFILL_AXIS].dropna()})


def disagg_lines(summary: pd.DataFrame, column: str) -> dict[tuple[str, int, str], pd.Series]:
    """Each line of one panel of ``DISAGG_FIGURE`` (the rows of one store capacity): (router,
    prefill pool, legend text) -> ``column`` by replicas (ascending), the mean over seeds,
    non-finite values left out; any other label that varies splits the lines and is named."""
    others = [c for c in _LINE_LABELS if _varies(summary, c)]
    rows = summary[np.isfinite(summary[column].astype(float))]
    out: dict[tuple[str, int, str], pd.Series] = {}
    for key, group in rows.groupby(["router", PREFILL_AXIS, *others], sort=True, dropna=False):
        router, prefill, *rest = key
        named = [_name(PREFILL_AXIS, prefill), *(_name(c, v) for c, v in zip(others, rest))]
        series = group.groupby(SIZE_AXIS)[column].mean().astype(float).sort_index()
        out[(str(router), int(prefill), ", ".join([str(router), *named]))] = series
    return out


def _disagg_figure(
    rows: pd.DataFrame,
    out_dir: Path,
    notes: list[str],
    fmt: str,
    resolved: Mapping[str, Any] | None,
    summary: pd.DataFrame,
) -> list[Path]:
    """``DISAGG_FIGURE``: the three ``DISAGG_PANELS`` against replicas, a row of them per store
    (capacity and policy; one row without a store axis), a line per (router, prefill pool)."""
    stores: list[StoreKey | None] = list(store_variants(rows)) or [None]
    panels = []
    for store in stores:
        part = rows if store is None else _store_rows(rows, store)
        for col, head, share in DISAGG_PANELS:
            lines = disagg_lines(part, col) if col in part.columns else {}
            where = "" if store is None else f"\n{store_name(store)}"
            panels.append((head + where, share, lines))
    if not any(lines for *_, lines in panels):
        notes.append(f"plots: {DISAGG_FIGURE}.{fmt}: no finite TTFT, TBT or re-prefill rate")
        return []
    from matplotlib.lines import Line2D

    from experiments import figure_style as fs

    sizes = sorted(set(rows[SIZE_AXIS].astype(float)))
    pools = prefill_counts(rows)
    dashes = {n: _DASHES[i % len(_DASHES)] for i, n in enumerate(pools)}
    title = "Prefill/decode disaggregation against colocated replicas, at equal GPU count"
    with fs.style():
        fig, axes, _, _ = fs.grid(len(panels), max_cols=len(DISAGG_PANELS))
        handles: dict[str, Any] = {}
        plain = True  # lines told apart by router and prefill pool only
        for ax, (head, share, lines) in zip(axes, panels):
            for i, ((router, prefill, name), series) in enumerate(lines.items()):
                look = router_style(router, 1 if prefill else 0, i, dashes[prefill])
                (handles[name],) = ax.plot(series.index, series.to_numpy(), label=name, **look)
                plain = plain and name == f"{router}, {_name(PREFILL_AXIS, prefill)}"
            _finish_panel(ax, head, share, sizes, "replicas (GPUs, both pools)", bool(lines))
        if plain:  # a key of each router and each prefill pool, not of every pair
            key: dict[str, Any] = {}
            for *_, lines in panels:
                for router, _, _ in lines:
                    if router not in key:
                        key[router] = Line2D([], [], **router_style(router, 0, len(key), "-"))
            for n, dash in dashes.items():
                grey: dict[str, Any] = {"color": "0.35", "linestyle": dash, "linewidth": 1.4}
                key[_name(PREFILL_AXIS, n)] = Line2D([], [], **grey)
            handles = key
        fs.finish(
            fig, title, list(handles.values()), list(handles), fs.run_stamp(summary, resolved)
        )
        path = fs.save(fig, out_dir / f"{DISAGG_FIGURE}.{fmt}", fmt, title)
    return [path]


def _figure(
    rows: pd.DataFrame,
    panel_specs: tuple[tuple[str, str, bool], ...],
    stem: str,
    title: str,
    measured: str,
    out_dir: Path,
    notes: list[str],
    fmt: str,
    resolved: Mapping[str, Any] | None,
    summary: pd.DataFrame,
) -> list[Path]:
    """One figure of panels against replicas, a line per router (and store capacity, and any
    other label that varies); nothing written when no panel has a finite point."""
    panels = [
        (col, head, share, router_lines(rows, col) if col in rows.columns else {})
        for col, head, share in panel_specs
    ]
    if not any(lines for *_, lines in panels):
        notes.append(f"plots: {stem}.{fmt}: no finite {measured}")
        return []
    from experiments import figure_style as fs

    sizes = sorted(set(rows[SIZE_AXIS].astype(float)))
    stores = store_variants(rows)
    dashes = {key: _DASHES[i % len(_DASHES)] for i, key in enumerate(stores)}
    with fs.style():
        fig, axes, _, _ = fs.grid(len(panels))
        handles: dict[str, Any] = {}
        for ax, (_, head, share, lines) in zip(axes, panels):
            variants: dict[tuple[str, StoreKey | None], int] = {}
            for i, ((router, store, name), series) in enumerate(lines.items()):
                n = variants[router, store] = variants.get((router, store), -1) + 1
                dash = dashes.get(store) if store is not None and len(stores) > 1 else None
                look = router_style(router, n, i, dash)
                (handles[name],) = ax.plot(series.index, series.to_numpy(), label=name, **look)
            _finish_panel(ax, head, share, sizes, "replicas (cluster size)", bool(lines))
        if len(stores) > 1 and all(
            store is not None and name == f"{router}, {store_name(store)}"
            for *_, lines in panels
            for router, store, name in lines
        ):  # lines told apart by router and store only: a key of each, not of every pair
            handles = _key_handles(panels, dashes)
        fs.finish(
            fig, title, list(handles.values()), list(handles), fs.run_stamp(summary, resolved)
        )
        path = fs.save(fig, out_dir / f"{stem}.{fmt}", fmt, title)
    return [path]


def _finish_panel(ax, head: str, share: bool, sizes, xlabel: str, drawn: bool) -> None:
    """A panel's title, cluster-size axis and y range from 0 (a share as percent); "no data"
    where no line was drawn."""
    from matplotlib.ticker import PercentFormatter  # here: a run without figures never imports it

    from experiments import figure_style as fs

    if not drawn:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
    ax.set_title(head)
    fs.capacity_axis(ax, sizes, xlabel)
    if share:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(bottom=0)


def _key_handles(panels: list, dashes: Mapping[StoreKey, str]) -> dict[str, Any]:
    """A legend of the routers (their colour and marker, solid) and then the stores (capacity
    and policy: their line style, in grey)."""
    from matplotlib.lines import Line2D

    out: dict[str, Any] = {}
    for *_, lines in panels:
        for router, _, _ in lines:
            if router not in out:
                look = router_style(router, 0, len(out), "-")
                out[router] = Line2D([], [], **look)
    for store, dash in dashes.items():
        grey: dict[str, Any] = {"color": "0.35", "linestyle": dash, "linewidth": 1.4}
        out[store_name(store)] = Line2D([], [], **grey)
    return out


def _store_rows(rows: pd.DataFrame, store: StoreKey) -> pd.DataFrame:
    """The rows of one store (``store_variants``' key: the labels that are None do not vary)."""
    gb, policy = store
    mask = np.ones(len(rows), dtype=bool)
    if gb is not None:
        mask &= rows[STORE_AXIS].astype(float).to_numpy() == gb
    if policy is not None:
        mask &= rows[STORE_POLICY_AXIS].map(str).to_numpy() == policy
    return rows[mask]


def _name(column: str, value: object) -> str:
    """A line's label value in its legend: ``policy=lru``; a store capacity as ``store 64 GB``,
    0 as ``no store``; a prefill pool as ``1 prefill replica``, 0 as ``colocated``; a fleet of
    groups by its name; a delay as ``KV events 50 ms late``; a store's write as ``store writes at
    eviction``."""
    if column == STORE_AXIS:
        gb = float(str(value))
        return "no store" if gb == 0 else f"store {_plain(gb)} GB"
    if column == PREFILL_AXIS:
        n = int(float(str(value)))
        return "colocated" if n == 0 else f"{n} prefill replica" + ("" if n == 1 else "s")
    if column == GROUPS_AXIS:  # the fleet's name says what it is
        return str(value)
    if column == DELAY_AXIS:
        return f"KV events {_plain(float(str(value)))} ms late"
    if column == STORE_WRITE_AXIS:
        return "no store writes" if str(value) == NO_STORE_POLICY else f"store writes at {value}"
    return f"{column}={_plain(value)}"


def _plain(v: object) -> str:
    if isinstance(v, float) and not math.isinf(v) and v == int(v):
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)
