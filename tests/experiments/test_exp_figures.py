"""The figures as a reader of a paper meets them, checked by what they are made of, not their
pixels: their size in inches and pixels, their panel titles (words, not config keys), the stamp
naming the run, a look per policy that is the same in every figure, series that coincide drawn
side by side, capacity ticks as plain numbers, the layer-wise grid laid out in a grid, and the
file format asked for (PDF and SVG headers)."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest
from exp_fakes import TINY
from matplotlib.figure import Figure

from experiments import plots
from experiments.cli import main
from experiments.design_plots import budget_figure
from experiments.version import kvsim_version

CONFIG_KEYS = (
    "cpu_kv_gb",
    "gpu_kv_gb",
    "pipelining =",
    "evict_unit",
    "block_tokens",
    "True",
    " = ",
)

RESOLVED = {
    "kvsim_version": kvsim_version(),
    "name": "paper",
    "traces_loaded": [{"label": "synthetic", "sessions": 150, "turns": 677}],
}


def _summary(
    policies=("lru", "pensieve", "belady"),
    same=("lru", "belady"),
    facets: dict | None = None,
) -> pd.DataFrame:
    """A summary over 1, 2, 4 GiB and the ``facets`` (default: CPU tier 0 or 16 GiB, pipelining
    on or off); the ``same`` policies have identical values everywhere."""
    facets = facets or {"cpu_kv_gb": [0.0, 16.0], "pipelining": [True, False]}
    grid = pd.MultiIndex.from_product(list(facets.values()), names=list(facets)).to_frame(
        index=False
    )
    rows = []
    for combo in grid.to_dict("records"):
        for k, pol in enumerate(policies):
            for cap in (1.0, 2.0, 4.0):
                v = 0.5 / cap + (0 if pol in same else 0.1 * (k + 1))
                base = dict(
                    name="paper",
                    model="llama-3-8b",
                    hardware="h100-sxm",
                    tp=1,
                    trace="synthetic",
                    block_tokens=16,
                    evict_unit="block",
                    turns=677,
                    sessions=150,
                )
                rows.append(
                    {
                        **base,
                        **combo,
                        "policy": pol,
                        "gpu_kv_gb": cap,
                        "reprefill_rate": v,
                        "jain_service": 1 - v / 2,
                        "gpu_hit_rate": 0.9 - v,
                        "cpu_hit_rate": 0.1,
                    }
                )
    return pd.DataFrame(rows)


def _turns(summary: pd.DataFrame) -> pd.DataFrame:
    labels = summary.drop(columns=["reprefill_rate", "jain_service"]).drop_duplicates()
    return pd.concat(
        [labels.assign(ttft_s=t) for t in np.geomspace(0.01, 2.0, 20)], ignore_index=True
    )


def _draw(tmp_path, summary=None, **kwargs) -> list:
    summary = _summary() if summary is None else summary
    tmp_path.mkdir(parents=True, exist_ok=True)
    return plots.make_plots(summary, _turns(summary), tmp_path, [], **kwargs)


def _by_name(figures: list[Figure], written: list) -> dict[str, Figure]:
    return {p.stem: f for p, f in zip(written, figures, strict=True)}


def _png_size_and_dpi(data: bytes) -> tuple[int, int, float]:
    """(width px, height px, dots per inch) from a PNG's IHDR and pHYs chunks."""
    width, height = struct.unpack(">II", data[16:24])
    at = data.index(b"pHYs")
    per_metre = struct.unpack(">I", data[at + 4 : at + 8])[0]
    return width, height, per_metre * 0.0254


def _titles(fig: Figure) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]


def _stamp(fig: Figure) -> str:
    texts = [t.get_text() for t in fig.texts if t.get_gid() == "stamp"]
    assert len(texts) == 1, "one stamp per figure"
    return texts[0]


# ---------------------------------------------------------------------------------------------


def test_figures_are_as_wide_as_a_paper_column_or_page(tmp_path, drawn):
    written = _draw(tmp_path)
    assert len(written) == 4
    for path, fig in zip(written, drawn, strict=True):
        w_in, h_in = fig.get_size_inches()
        assert w_in in (3.5, 7.0) and h_in <= 9.0, (path.name, w_in, h_in)
        width, height, dpi = _png_size_and_dpi(path.read_bytes())
        assert round(dpi) == 200
        assert (width, height) == (round(w_in * 200), round(h_in * 200)), path.name
    # one panel: one column wide
    one = _summary(facets={"cpu_kv_gb": [16.0]})
    drawn.clear()
    _draw(tmp_path / "one", one)
    assert {tuple(f.get_size_inches().round(2))[0] for f in drawn} == {3.5}


def test_panel_titles_are_words_not_config_keys(tmp_path, drawn):
    written = _draw(tmp_path)
    figs = _by_name(drawn, written)
    for name, fig in figs.items():
        titles = _titles(fig)
        assert len(titles) == 4, name
        for title in titles:
            assert not any(key in title for key in CONFIG_KEYS), (name, title)
    flat = [t.replace("\n", " ") for t in _titles(figs["reprefill_vs_capacity"])]
    assert flat == [
        "layer pipelining on, no CPU tier",
        "layer pipelining off, no CPU tier",
        "layer pipelining on, CPU tier: 16 GiB",
        "layer pipelining off, CPU tier: 16 GiB",
    ]


@pytest.mark.slow
def test_every_figure_is_stamped_with_model_hardware_trace_and_version(tmp_path, drawn):
    written = _draw(tmp_path, resolved=RESOLVED)
    for path, fig in zip(written, drawn, strict=True):
        stamp = _stamp(fig)
        for part in ("llama-3-8b", "h100-sxm", "synthetic (150 sessions, 677 turns)"):
            assert part in stamp, (path.name, stamp)
        assert f"kvsim {kvsim_version()}" in stamp
        # the stamp sits under the axes
        box = fig.texts[-1].get_window_extent(fig.canvas.get_renderer())
        lowest = min(ax.get_tightbbox().y0 for ax in fig.axes if ax.get_visible())
        assert box.y1 <= lowest + 1, path.name
        assert b"kvsim " + kvsim_version().encode() in path.read_bytes()  # in its metadata too


def test_without_the_config_the_stamp_comes_from_the_summary(tmp_path, drawn):
    _draw(tmp_path)
    stamp = _stamp(drawn[0])
    assert "llama-3-8b" in stamp and "h100-sxm" in stamp and "synthetic" in stamp
    assert "150 sessions" in stamp and f"kvsim {kvsim_version()}" in stamp


def test_policies_that_coincide_are_drawn_side_by_side(tmp_path, drawn):
    written = _draw(tmp_path)
    fig = _by_name(drawn, written)["reprefill_vs_capacity"]
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert set(lines) == {"lru", "pensieve", "belady"}
    for ln in lines.values():
        assert ln.get_marker() not in (None, "None", "", " ")
        assert len(ln.get_xdata()) == 3
    lru, belady = lines["lru"], lines["belady"]
    assert np.allclose(lru.get_ydata(), belady.get_ydata())  # the same values...
    x_lru = np.asarray(lru.get_xdata(), dtype=float)
    x_bel = np.asarray(belady.get_xdata(), dtype=float)
    assert (x_lru != x_bel).all()  # ...drawn apart
    assert np.allclose(np.log2(x_lru), np.log2([1, 2, 4]), atol=0.15)  # by a little
    assert lru.get_markersize() != belady.get_markersize()
    assert lru.get_marker() != belady.get_marker()
    # the TTFT CDFs coincide: each policy's markers sit at its own places along the curve
    cdf = _by_name(drawn, written)["ttft_cdf"].axes[0]
    marks = [ln for ln in cdf.get_lines() if ln.get_linestyle() == "None"]
    assert len(marks) == 3
    ys = [tuple(np.round(ln.get_ydata(), 6)) for ln in marks]
    assert len(set(ys)) == 3


def test_series_close_to_each_other_on_the_axis_are_set_apart(tmp_path, drawn):
    """Near 0 % in the CPU tier's panel, on an axis that goes to 100 % for the other panel: LRU at
    0.5 % and Belady at 0 would draw one marker over the other."""
    summary = _summary(facets={"cpu_kv_gb": [0.0, 16.0]})
    cpu = summary["cpu_kv_gb"] > 0
    summary.loc[cpu, "reprefill_rate"] = summary.loc[cpu, "policy"].map(
        {"lru": 0.005, "belady": 0.0, "pensieve": 0.04}
    )
    summary.loc[~cpu, "reprefill_rate"] = 0.9
    written = _draw(tmp_path, summary)
    ax = _by_name(drawn, written)["reprefill_vs_capacity"].axes[1]
    x = {ln.get_label(): tuple(ln.get_xdata()) for ln in ax.get_lines()}
    assert x["lru"] != x["belady"]
    assert ax.get_ylim()[0] < 0  # a series at 0 is drawn above the axis line, not on it


def test_series_that_differ_are_not_moved(tmp_path, drawn):
    summary = _summary(same=())
    _draw(tmp_path, summary)
    ax = drawn[0].axes[0]
    for ln in ax.get_lines():
        if not ln.get_label().startswith("_"):
            assert list(ln.get_xdata()) == [1.0, 2.0, 4.0]


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_a_policy_looks_the_same_in_every_figure(tmp_path, drawn):
    _draw(tmp_path / "a", _summary(policies=("lru", "belady")))
    first = {ln.get_label(): ln for ln in drawn[0].axes[0].get_lines()}
    drawn.clear()
    _draw(tmp_path / "b", _summary(policies=("belady", "fifo", "lru")))
    second = {ln.get_label(): ln for ln in drawn[0].axes[0].get_lines()}
    for pol in ("lru", "belady"):
        a, b = first[pol], second[pol]
        assert (a.get_color(), a.get_marker(), a.get_linestyle()) == (
            b.get_color(),
            b.get_marker(),
            b.get_linestyle(),
        ), pol


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_capacity_ticks_are_plain_numbers_in_every_figure(tmp_path, drawn):
    written = _draw(tmp_path)
    for path, fig in zip(written, drawn, strict=True):
        fig.canvas.draw()
        if path.stem in ("reprefill_vs_capacity", "jain_vs_capacity"):
            for ax in fig.axes:
                if ax.get_visible():
                    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    summary = _summary(facets={"budget": ["full", "streaming-256"]})
    summary["pruned_share"] = 0.1
    summary["relevant_pruned_share"] = 0.05
    drawn.clear()
    assert budget_figure(summary, tmp_path / "budget.png") is not None
    right = drawn[0].axes[1]
    drawn[0].canvas.draw()
    assert [t.get_text() for t in right.get_xticklabels()] == ["1", "2", "4"]


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_the_layerwise_grid_is_a_grid_of_readable_panels(tmp_path, drawn):
    """12 combinations (3 models x 2 eviction units x pipelining on/off) and 6 policies: one
    panel per combination in a grid, on a page, every title inside the figure."""
    policies = ("lru", "fifo", "pensieve-flat", "pensieve", "pensieve-physics", "pensieve-depth")
    facets = {
        "model": ["llama-3-8b", "llama-3-70b", "opt-13b"],
        "evict_unit": ["block", "layer_block"],
        "pipelining": [True, False],
    }
    summary = _summary(policies=policies, facets=facets)
    summary["cpu_kv_gb"] = 16.0
    written = _draw(tmp_path, summary)
    fig = _by_name(drawn, written)["hit_rate_by_tier"]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 12
    assert len({round(ax.get_position().x0, 3) for ax in panels}) >= 3  # columns, not one
    w_in, h_in = fig.get_size_inches()
    assert w_in <= 7.0 and h_in <= 9.0
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    for ax in panels:
        box = ax.title.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width and box.y1 <= height, ax.get_title()
        assert "=" not in ax.get_title()
    # every policy's bar is there: 6 policies x 3 capacities x 3 tiers per panel
    assert all(len(ax.patches) == 6 * 3 * 3 for ax in panels)


@pytest.mark.parametrize(
    ("fmt", "head"), [("pdf", b"%PDF-"), ("svg", b"<?xml"), ("png", b"\x89PNG")]
)
@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_figures_in_the_format_asked_for(tmp_path, fmt, head):
    written = _draw(tmp_path, resolved=RESOLVED, fmt=fmt)
    assert len(written) == 4
    for path in written:
        assert path.suffix == f".{fmt}"
        data = path.read_bytes()
        assert data.startswith(head), path.name
    if fmt == "svg":  # text stays text: the titles and the stamp can be found, and edited
        svg = written[0].read_text(encoding="utf-8")
        assert "CPU tier: 16 GiB" in svg and "h100-sxm" in svg


@pytest.mark.slow  # long: in the slow run (.ci/run), out of the default one
def test_kvsim_run_and_plot_write_the_format_asked_for(fake_backend, write_yaml, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(write_yaml(TINY)), "--out", str(out), "--format", "pdf"]) == 0
    figures = sorted((out / "plots").iterdir())
    assert figures and all(p.suffix == ".pdf" for p in figures)
    assert all(p.read_bytes().startswith(b"%PDF-") for p in figures)
    assert main(["plot", str(out), "--format", "svg"]) == 0
    figures = sorted((out / "plots").iterdir())
    assert figures and all(p.suffix == ".svg" for p in figures)
    svg = figures[0].read_text(encoding="utf-8")
    assert "tiny" in svg and "llama-3-8b" in svg  # the stamp, from the folder's config
    assert main(["plot", str(out)]) == 0  # by default, the formats kvsim run wrote
    assert all(p.suffix == ".pdf" for p in (out / "plots").iterdir())


def test_kvsim_plot_draws_the_request_rate_figure_again(tmp_path, capsys):
    """A request-rate sweep's latency_vs_load figure is drawn again too, in the format asked for
    (plots/ is replaced as a whole: a figure not drawn again would be lost)."""
    summary = _summary(policies=("lru", "fifo"), facets={"time_scale": [1.0, 2.0]})
    for col in ("ttft_p50_s", "ttft_p90_s", "slo_attainment", "goodput_turns_s"):
        summary[col] = 0.5
    folder = tmp_path / "sweep"
    folder.mkdir()
    summary.to_csv(folder / "summary.csv", index=False)
    _turns(summary).to_parquet(folder / "turns.parquet", index=False)
    assert main(["plot", str(folder), "--format", "svg"]) == 0
    assert (folder / "plots" / "latency_vs_load.svg").read_bytes().startswith(b"<?xml")


def test_a_request_rate_sweep_draws_each_rate_in_its_own_panel(tmp_path, drawn):
    """Rates are not seeds: two time_scale values are two panels, never one pooled line."""
    summary = _summary(facets={"time_scale": [1.0, 0.5]})
    written = _draw(tmp_path, summary)
    fig = _by_name(drawn, written)["reprefill_vs_capacity"]
    flat = [t.replace("\n", " ") for t in _titles(fig)]
    assert flat == ["arrivals x1 as fast", "arrivals x2 as fast"]
