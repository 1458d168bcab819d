"""The shared figure layout (``experiments.figure_style.finish``): title, legend and stamp around
panels that the constrained layout fills."""

from __future__ import annotations

import pytest

from experiments import figure_style as fs


def _finished(entries: int, tmp_path):
    with fs.style():
        fig, axes, _, _ = fs.grid(2)
        handles = [axes[0].plot([1, 2], [i, i + 1])[0] for i in range(entries)]
        labels = [f"least-time, groups=1xH100+2xA100, prefill {i}" for i in range(entries)]
        fs.finish(fig, "routers against cluster size", handles, labels, "llama-3-8b · h100-sxm")
        fs.save(fig, tmp_path / "f.png", "png", "t")  # lays the figure out
        return fig, axes


@pytest.mark.parametrize("entries", [3, 40])
def test_the_legend_sits_above_the_panels_however_long(entries, tmp_path):
    fig, axes = _finished(entries, tmp_path)
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    top_of_panels = max(ax.get_tightbbox(renderer).y1 for ax in axes)
    assert legend.y0 >= top_of_panels - 1
    assert min(ax.get_position().height for ax in axes) * fig.get_figheight() > 1.0  # inches
    assert fig.texts[-1].get_gid() == fs.STAMP_GID


def test_a_short_legend_keeps_the_figure_size(tmp_path):
    with fs.style():
        height = fs.grid(2)[0].get_figheight()
    fig, _ = _finished(3, tmp_path)
    assert fig.get_figheight() == height
