"""Long sweeps survive: every finished shape is in the raw CSV at once, an interrupted sweep resumes
from it (skipping what is there) and ends with the profile an uninterrupted run gives. CPU, tiny
model, quick grid; a deterministic timer stands in for the clock so two runs can be compared."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from calibration.grids import quick_grid
from calibration.samples import Timing
from calibration.samples_io import read_samples_csv
from calibration.sweep_plan import job_key
from calibration.timing import TimingConfig
from costmodels import get_model

torch = pytest.importorskip("torch")


class SizeTimer:
    """Runs the closure once and 'times' it by the size of its result: the same shape always
    gets the same time, whatever the order or the run."""

    kind = "cpu"
    eager_fallbacks: tuple[str, ...] = ()

    def describe(self) -> str:
        return "size-based test timer"

    def measure(self, fn, graph=None) -> Timing:
        out = fn()
        n = out.numel() if hasattr(out, "numel") else 0
        t = 2e-6 + 1e-10 * n
        return Timing(t, t, t, 1)


class Stop(Exception):
    """Stands in for whatever ends a sweep early (a time limit, a crash)."""


def _cfg(tiny_model_path, raw, **kw):
    from calibration.measure import MeasureConfig

    return MeasureConfig(
        device="cpu",
        model=get_model(str(tiny_model_path)),
        dtype="fp32",
        grid=quick_grid(),
        timing=TimingConfig.quick(),
        raw=raw,
        **kw,
    )


def _run(cfg, stop_after: int | None = None, stream=None):
    from calibration.measure import run_measurements

    measured = []

    def hook(done: int, total: int) -> None:
        measured.append(done)
        if stop_after is not None and len(measured) == stop_after:
            raise Stop

    m = run_measurements(
        cfg,
        log=lambda _: None,
        timer=SizeTimer(),
        on_shape=hook,
        progress_stream=stream or io.StringIO(),
    )
    return m, measured


def _profile(m):
    from calibration.local import calibrate

    p = calibrate(m, "resume-test", seed=0, source="fit: test").profile
    return dataclasses.replace(p, meta=dataclasses.replace(p.meta, date=None))


def test_an_interrupted_sweep_has_its_finished_shapes_on_disk(tmp_path, tiny_model_path) -> None:
    from calibration.measure import run_measurements

    raw = tmp_path / "s.csv"
    on_disk = []

    def look_then_stop(done: int, total: int) -> None:
        # Read by another handle while the sweep runs: each shape is there as soon as it is done.
        on_disk.append(len({job_key(s) for s in read_samples_csv(raw)}))
        if done == 7:
            raise Stop

    with pytest.raises(Stop):
        run_measurements(
            _cfg(tiny_model_path, raw),
            log=lambda _: None,
            timer=SizeTimer(),
            on_shape=look_then_stop,
            progress_stream=io.StringIO(),
        )
    assert on_disk == [1, 2, 3, 4, 5, 6, 7]
    samples = read_samples_csv(raw)
    # Token-level jobs write their three samples together, never one without the others.
    tokens = [s for s in samples if s.term in ("gemm", "elementwise", "linear")]
    assert len(tokens) == 3 * len({job_key(s) for s in tokens})
    record = json.loads((tmp_path / "s.run.json").read_text())
    assert record["device"] and record["dtype"] == "fp32" and record["seed"] == 0


def test_a_resumed_sweep_skips_done_shapes_and_fits_what_an_uninterrupted_one_fits(
    tmp_path, tiny_model_path
) -> None:
    whole, measured_whole = _run(_cfg(tiny_model_path, tmp_path / "whole.csv"))
    total = len(measured_whole)
    raw = tmp_path / "cut.csv"
    with pytest.raises(Stop):
        _run(_cfg(tiny_model_path, raw), stop_after=20)
    resumed, measured = _run(_cfg(tiny_model_path, raw))
    assert len(measured) == total - 20 and measured[0] == 21  # counted on from the first 20
    assert resumed.resumed == 20 and whole.resumed == 0
    assert resumed.samples == whole.samples  # same shapes, same order, same values
    assert raw.read_text() == (tmp_path / "whole.csv").read_text()
    assert _profile(resumed) == _profile(whole)
    again, measured_again = _run(_cfg(tiny_model_path, raw))  # nothing left: refit only
    assert measured_again == [] and again.samples == whole.samples


def test_a_shape_cut_short_is_measured_again(tmp_path, tiny_model_path) -> None:
    raw = tmp_path / "s.csv"
    with pytest.raises(Stop):
        _run(_cfg(tiny_model_path, raw), stop_after=5)
    lines = raw.read_text().splitlines(keepends=True)
    assert lines[-3].startswith(
        "gemm,"
    )  # the fifth shape is token-level: gemm, elementwise, linear
    # Its first row without the other two, then half a line: an interruption mid-write.
    raw.write_text("".join(lines[:-2]) + lines[-1][:30])
    with pytest.raises(Stop):
        _run(_cfg(tiny_model_path, raw), stop_after=1)
    text = raw.read_text()
    assert text.endswith("\n")
    samples = read_samples_csv(raw)
    assert len({job_key(s) for s in samples}) == 5 and len(samples) == 15  # each row once


def test_resuming_with_other_settings_is_refused_unless_fresh(tmp_path, tiny_model_path) -> None:
    raw = tmp_path / "s.csv"
    with pytest.raises(Stop):
        _run(_cfg(tiny_model_path, raw), stop_after=3)
    with pytest.raises(ValueError, match=r"seed: 0 then, 1 now.*--fresh"):
        _run(_cfg(tiny_model_path, raw, seed=1))
    with pytest.raises(ValueError, match="shapes: .* then"):
        small = dataclasses.replace(quick_grid(), gemm_tokens=(1, 8, 32))
        _run(dataclasses.replace(_cfg(tiny_model_path, raw), grid=small))
    kept = raw.read_text()
    first = kept.splitlines()[1].split(",")
    first[7] = "12345"  # shape_tokens: a shape no plan of this grid has
    raw.write_text(kept + ",".join(first) + "\n")
    with pytest.raises(ValueError, match="does not plan"):
        _run(_cfg(tiny_model_path, raw))
    m, measured = _run(_cfg(tiny_model_path, raw, seed=1, fresh=True), stop_after=None)
    assert m.resumed == 0 and len(measured) == len({job_key(s) for s in m.samples})
    (tmp_path / "s.run.json").unlink()
    with pytest.raises(ValueError, match="unknown"):
        _run(_cfg(tiny_model_path, raw, seed=1))


def test_progress_and_the_resume_hint_go_to_stderr(tmp_path, tiny_model_path) -> None:
    from calibration.measure import run_measurements

    raw = tmp_path / "s.csv"
    stream = io.StringIO()

    def interrupt(done: int, total: int) -> None:
        if done == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_measurements(
            _cfg(tiny_model_path, raw),
            log=lambda _: None,
            timer=SizeTimer(),
            on_shape=interrupt,
            progress_stream=stream,
        )
    text = stream.getvalue()
    total = int(text.split("/")[1].split()[0])
    assert f"[tiny-test] 28/{total} shapes (" in text and "s elapsed, ETA " in text
    assert f"30 of {total} shapes are in {raw}; the same command resumes" in text
