"""The figures' file format as an experiment setting (``figures: {format: ...}``), what `kvsim report`
does with PDF and SVG figures, `kvsim compare --plot` drawn like every other figure, the stamp of a
request-rate sweep, and notebooks/layerwise_figure.py in the same style."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.figure import Figure
from test_exp_compare import CONFIG, two_by_two, write_folder

from experiments import figure_style as fs
from experiments.cli import main
from experiments.schema import ConfigError, parse_experiment

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "name": "fmt",
    "trace": {"kind": "synthetic", "sessions": 4, "seed": 1},
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "memory": {"gpu_kv_gb": [1, 2], "cpu_kv_gb": 0},
    "policies": ["lru", "fifo"],
}
SMALL = """
name: small
trace: {kind: synthetic, sessions: 4, seed: 3}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: [1, 2], cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
policies: [lru, fifo]
"""


def _stamp(fig: Figure) -> str:
    texts = [t.get_text() for t in fig.texts if t.get_gid() == fs.STAMP_GID]
    assert len(texts) == 1, "one stamp per figure"
    return texts[0]


# --- the figures: section ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "formats", "resolved"),
    [
        (None, ("png",), {"format": "png"}),
        ({"format": "pdf"}, ("pdf",), {"format": "pdf"}),
        ({"format": ["svg", "png"]}, ("svg", "png"), {"format": ["svg", "png"]}),
    ],
)
def test_the_figures_format_is_a_yaml_key_recorded_in_the_resolved_config(
    section, formats, resolved
):
    exp = parse_experiment(BASE if section is None else {**BASE, "figures": section})
    assert exp.figures.formats() == formats
    assert exp.resolved()["figures"] == resolved


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"format": "jpg"}, "figures.format: 'jpg' is not one of png, pdf, svg"),
        ({"format": ["png", "jpg"]}, "figures.format: 'jpg' is not one of png, pdf, svg"),
        ({"format": []}, "figures.format: must not be empty"),
        ({"format": ["pdf", "pdf"]}, "figures.format: lists a format twice"),
        ({"fmt": "pdf"}, "figures.fmt: unknown key (did you mean 'format'?)"),
    ],
)
def test_a_bad_figures_format_is_an_error_naming_the_key(section, message):
    with pytest.raises(ConfigError) as err:
        parse_experiment({**BASE, "figures": section}, source="bad.yaml")
    assert f"bad.yaml: {message}" in str(err.value)


def test_kvsim_run_writes_every_format_the_yaml_lists(fake_backend, write_yaml, tmp_path, capsys):
    cfg = write_yaml(SMALL + "figures: {format: [pdf, svg]}\n")
    out = tmp_path / "both"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    names = sorted(p.name for p in (out / "plots").iterdir())
    stems = sorted({Path(n).stem for n in names})
    assert stems and names == sorted(f"{s}.{f}" for s in stems for f in ("pdf", "svg"))
    assert (out / "plots" / f"{stems[0]}.pdf").read_bytes().startswith(b"%PDF-")
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["figures"] == {"format": ["pdf", "svg"]}
    assert f"{len(names)} plots in plots/" in capsys.readouterr().out


def test_a_failure_drawing_a_later_format_leaves_no_results_folder(
    fake_backend, write_yaml, tmp_path, monkeypatch
):
    """Every format is drawn inside the folder before it is moved into place: a crash while
    drawing the second leaves nothing half-written (no folder, no temporary one)."""
    from experiments import results

    real = results._draw

    def fail_on_svg(*args, fmt="png", **kwargs):
        if fmt == "svg":
            raise RuntimeError("drawing failed")
        return real(*args, fmt=fmt, **kwargs)

    monkeypatch.setattr(results, "_draw", fail_on_svg)
    cfg = write_yaml(SMALL + "figures: {format: [pdf, svg]}\n")
    out = tmp_path / "res" / "both"
    with pytest.raises(RuntimeError, match="drawing failed"):
        main(["run", str(cfg), "--out", str(out), "--quiet", "--debug"])
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir() if ".tmp-" in p.name] == []


def test_the_format_flag_overrides_the_yaml(fake_backend, write_yaml, tmp_path, capsys):
    cfg = write_yaml(SMALL + "figures: {format: pdf}\n")
    flag = tmp_path / "flag"
    assert main(["run", str(cfg), "--out", str(flag), "--quiet", "--format", "png"]) == 0
    assert {p.suffix for p in (flag / "plots").iterdir()} == {".png"}
    resolved = yaml.safe_load((flag / "config.resolved.yaml").read_text())
    assert resolved["figures"] == {"format": "png"}  # what was written, not what the YAML said


def test_without_the_section_the_figures_are_pngs_as_before(
    fake_backend, write_yaml, tmp_path, capsys
):
    out = tmp_path / "plain"
    assert main(["run", str(write_yaml(SMALL)), "--out", str(out), "--quiet"]) == 0
    assert {p.suffix for p in (out / "plots").iterdir()} == {".png"}
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["figures"] == {"format": "png"}


def test_the_figures_format_is_no_setting_that_compare_names(tmp_path, capsys):
    a = write_folder(tmp_path / "a", two_by_two({("lru", 1.0): 0.5}))
    b = write_folder(
        tmp_path / "b", two_by_two({("lru", 1.0): 0.4}), {**CONFIG, "figures": {"format": "pdf"}}
    )
    assert main(["compare", str(a), str(b)]) == 0
    assert "figures.format" not in capsys.readouterr().out


# --- kvsim report with PDF and SVG figures ----------------------------------------------------

SVG = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


def _folder_with(tmp_path, files: dict[str, bytes]) -> Path:
    folder = write_folder(tmp_path / "res", two_by_two({("lru", 1.0): 0.5}))
    (folder / "plots").mkdir()
    for name, data in files.items():
        (folder / "plots" / name).write_bytes(data)
    return folder


def test_report_embeds_svg_and_links_pdf(tmp_path, capsys):
    folder = _folder_with(
        tmp_path,
        {"a.pdf": b"%PDF-1.4 a", "b.svg": SVG, "c.png": PNG, "c.pdf": b"%PDF-1.4 c"},
    )
    assert main(["report", str(folder)]) == 0
    assert "3 plots" in capsys.readouterr().out  # figures, not files
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert 'data-file="b.svg"' in page and "data:image/svg+xml;base64," in page
    assert 'data-file="c.png"' in page and "data:image/png;base64," in page
    # the PDFs are linked where they are, from the page beside the folder
    assert '<a href="plots/a.pdf" data-file="a.pdf">' in page
    assert '<a href="plots/c.pdf" data-file="c.pdf">' in page
    assert "application/pdf" not in page  # not embedded

    out = tmp_path / "pages" / "r.html"
    assert main(["report", str(folder), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert '<a href="../res/plots/a.pdf"' in page
    assert (out.parent / "../res/plots/a.pdf").resolve().read_bytes() == b"%PDF-1.4 a"


def test_report_of_pdf_figures_only_is_not_empty(tmp_path, capsys):
    folder = _folder_with(tmp_path, {"ttft_cdf.pdf": b"%PDF-1.4"})
    assert main(["report", str(folder)]) == 0
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "plots/ holds no figures" not in page
    assert '<a href="plots/ttft_cdf.pdf"' in page and "not embedded" in page


# --- kvsim compare --plot ---------------------------------------------------------------------


def test_compare_plot_is_drawn_like_the_other_figures(tmp_path, drawn, capsys):
    points = {("lru", 1.0): 0.5, ("lru", 2.0): 0.25, ("arc", 1.0): 0.4, ("arc", 2.0): 0.2}
    a = write_folder(tmp_path / "a", two_by_two(points))
    b = write_folder(tmp_path / "b", two_by_two(points), {**CONFIG, "kvsim_version": "9.9"})
    svg = tmp_path / "cmp.svg"
    assert main(["compare", str(a), str(b), "--plot", str(svg)]) == 0
    assert svg.read_bytes().startswith(b"<?xml")  # the format of the file's suffix
    (fig,) = drawn
    assert fig.get_figwidth() == fs.DOUBLE_COLUMN_IN  # four panels: a page wide
    stamp = _stamp(fig)
    assert "exp" in stamp and "llama-3-8b" in stamp and "synthetic (20 sessions" in stamp
    assert "kvsim 0.1.0 (A), kvsim 9.9" in stamp and stamp.count("llama-3-8b") == 1
    looks = {
        line.get_label(): (line.get_color(), line.get_marker())
        for ax in fig.axes
        for line in ax.lines
        if not line.get_label().startswith("_")
    }
    for pol in ("lru", "arc"):
        st = fs.policy_style(pol)
        assert looks[pol] == (st["color"], st["marker"]), pol
    assert [ax.get_title() for ax in fig.axes][0] == "re-prefill rate (% of history tokens)"

    pdf = tmp_path / "cmp.png"
    assert main(["compare", str(a), str(b), "--plot", str(pdf), "--format", "pdf"]) == 0
    assert (tmp_path / "cmp.pdf").read_bytes().startswith(b"%PDF-")


# --- the stamp of a request-rate sweep --------------------------------------------------------


def test_a_rate_sweep_names_its_trace_once_with_its_rates():
    loaded = [
        {"where": "trace", "label": "synthetic", "sessions": 8, "turns": 20, "time_scale": s}
        for s in (1.0, 0.5, 0.25)
    ]
    stamp = fs.run_stamp(None, {"name": "sweep", "traces_loaded": loaded})
    assert "trace synthetic (8 sessions, 20 turns), arrivals x1, x2, x4 as fast" in stamp
    assert stamp.count("synthetic") == 1 and " x3" not in stamp


def test_a_trace_drawn_twice_is_still_counted():
    loaded = [
        {"where": f"trace[{i}]", "label": f"synthetic[{i}]", "sessions": 8, "turns": 20}
        for i in range(2)
    ]
    stamp = fs.run_stamp(None, {"traces_loaded": loaded})
    assert "trace synthetic (8 sessions, 20 turns) x2 ·" in stamp and "arrivals" not in stamp


# --- notebooks/layerwise_figure.py ------------------------------------------------------------


def test_the_layerwise_figure_is_drawn_in_the_figures_style(tmp_path, drawn):
    spec = importlib.util.spec_from_file_location(
        "layerwise_figure", ROOT / "notebooks" / "layerwise_figure.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [
        {"model": m, "gpu_kv_gb": 2.0, "policy": p, "evict_unit": u, "pipelining": pipe,
         "ttft_ms": 10.0, "stall_ms": 1.0, "reprefill_%": 0.0}
        for m in ("llama-3-8b", "opt-13b")
        for p in ("lru", "pensieve")
        for u in ("block", "layer_block")
        for pipe in (True, False)
    ]  # fmt: skip
    path = module.figure(pd.DataFrame(rows), tmp_path / "lw.svg")
    assert path.suffix == ".svg" and path.read_bytes().startswith(b"<?xml")
    (fig,) = drawn
    assert fig.get_figwidth() == fs.DOUBLE_COLUMN_IN
    assert "llama-3-8b, opt-13b" in _stamp(fig)
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
    assert labels == ["Llama-3-8B\nGPU KV: 2 GiB", "OPT-13B\nGPU KV: 2 GiB"]  # words
