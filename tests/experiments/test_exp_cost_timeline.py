"""The `kvsim cost --timeline` figure: one bar per layer on the copy and the compute lane, a
hatched bar for each wait of the compute stream, the LM head after the layers, D2H on a lane of its
own; written as a PNG, atomically, into a folder it creates."""

from __future__ import annotations

from collections import Counter

import matplotlib.image
import pytest
from cost_hand import cost_argv

from experiments.cli import build_parser, main
from experiments.commands.cost import price
from experiments.cost_timeline import timeline_figure, write_timeline


@pytest.fixture
def cost_args(tmp_path):
    return lambda *extra: cost_argv(tmp_path, *extra)


def _bars(fig) -> Counter:
    """Bars of each kind, by the gid prefix the figure gives them (``copy-0`` -> ``copy``)."""
    (ax,) = fig.axes
    return Counter(p.get_gid().split("-")[0] for p in ax.patches if p.get_gid())


def test_copy_bound_every_layer_waits(cost_args) -> None:
    # A 4-sequence decode (~0.25 ms a layer) under 96 MiB of swap-in (~1.3 ms a layer).
    args = build_parser().parse_args(
        cost_args("--decode-batch", "4", "--decode-ctx", "1000", "--swap-bytes", str(96 << 20))
    )
    r = price(args)
    assert [row["critical"] for row in r["schedule"]["layers"]] == ["copy"] * 3
    fig = timeline_figure(r)
    assert _bars(fig) == {"copy": 3, "compute": 3, "wait": 3, "head": 1}
    lanes = {p.get_gid().split("-")[0]: p.get_y() for p in fig.axes[0].patches if p.get_gid()}
    assert lanes["copy"] > lanes["compute"] == lanes["wait"] == lanes["head"]  # copies on top


def test_compute_bound_only_layer_zero_waits(cost_args) -> None:
    args = build_parser().parse_args(
        cost_args("--prefill", "1024", "--ctx", "4096", "--swap-bytes", str(4 << 20))
    )
    r = price(args)
    assert [row["critical"] for row in r["schedule"]["layers"]] == ["copy", "compute", "compute"]
    assert _bars(timeline_figure(r)) == {"copy": 3, "compute": 3, "wait": 1, "head": 1}


def test_d2h_on_a_lane_of_its_own(cost_args) -> None:
    args = build_parser().parse_args(
        cost_args("--prefill", "64", "--swap-bytes", str(1 << 20), "--direction", "d2h")
    )
    fig = timeline_figure(price(args))
    assert _bars(fig) == {"compute": 3, "head": 1, "d2h": 1}  # no H2D: no copy bars, no waits
    assert len(fig.axes[0].get_yticks()) == 3


def test_writes_a_png_atomically_into_a_new_folder(cost_args, tmp_path) -> None:
    args = build_parser().parse_args(cost_args("--prefill", "512", "--swap-bytes", str(8 << 20)))
    path = write_timeline(price(args), tmp_path / "a" / "b" / "timeline.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    assert width > 1000 and height > 200
    assert [p.name for p in path.parent.iterdir()] == ["timeline.png"]  # no temporary file left


def test_the_command_writes_it_and_keeps_json_clean(cost_args, tmp_path, capsys) -> None:
    import json

    out = tmp_path / "figs" / "t.png"
    assert (
        main(
            cost_args(
                "--prefill", "512", "--swap-bytes", "1000000", "--timeline", str(out), "--json"
            )
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["schedule"]["layers"]
    assert out.stat().st_size > 0
    assert main(cost_args("--prefill", "512", "--timeline", str(out))) == 0
    assert f"timeline: {out}" in capsys.readouterr().out
