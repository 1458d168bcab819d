"""`kvsim calibrate gpu-run`, the one command of a GPU calibration, run on the CPU with a tiny model:
every file it promises is in the folder, the README states the machine, the commands and the
numbers, and the GPU tests it ran are reported as skipped (with the reason), not as a pass."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from costmodels import load_profile

pytest.importorskip("torch")

# long module fixtures (a whole calibration run): in the slow run (.ci/run), not the default
pytestmark = pytest.mark.slow


NAMES = ("cpu-tiny-test", "cpu-tiny-test-tp2")
SUFFIXES = (
    ".yaml",
    "-samples.csv",
    "-samples.run.json",
    "-validation.csv",
    "-validation.md",
    "-forward.csv",
    "-forward.md",
)


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory, tiny_model_path):
    """(exit status, output folder, stdout) of one gpu-run on the CPU."""
    from experiments.cli import main

    out = tmp_path_factory.mktemp("gpu-run") / "cpu-run"
    tiny = str(tiny_model_path)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(
            ["calibrate", "gpu-run", "--device", "cpu", "--models", tiny, f"{tiny}@tp2"]
            # No cache-flush stand-in: this tests the plumbing, and it is 3x faster without.
            + ["--quick", "--shapes", "8", "--cpu-flush-mb", "0", "--out", str(out)]
        )
    return rc, out, buf.getvalue()


def test_every_file_is_written(gpu_run) -> None:
    rc, out, text = gpu_run
    assert rc == 0, text
    want = {f"{n}{s}" for n in NAMES for s in SUFFIXES} | {"README.md", "pytest-gpu.txt"}
    assert want <= {p.name for p in out.iterdir()}
    logs = {p.name for p in (out / "logs").iterdir()}
    assert {f"measure-{n}.log" for n in NAMES} | {f"forward-{n}.log" for n in NAMES} <= logs


def test_the_tp_target_is_one_layer_of_the_shard_within_a_budget(gpu_run) -> None:
    from calibration.samples_io import read_samples_csv

    _, out, _ = gpu_run
    p = load_profile(str(out / "cpu-tiny-test-tp2.yaml"))
    assert "--tp 2" in p.meta.source and "--budget-s 400" in p.meta.source
    assert "measured model: tiny-test/tp2: L=4 h=256 Hq=2 K=1" in p.meta.notes
    samples = read_samples_csv(out / "cpu-tiny-test-tp2-samples.csv")
    assert {s.model.name for s in samples if s.term == "decode_attn"} == {"tiny-test/tp2"}


def test_the_validation_tables_hold_the_profiles_figures(gpu_run) -> None:
    from calibration.report_tables import read_validation_csv

    _, out, _ = gpu_run
    for name in NAMES:
        rows = read_validation_csv(out / f"{name}-validation.csv")
        p = load_profile(str(out / f"{name}.yaml"))
        random = {r.term: r for r in rows if r.split in ("random", "transfer")}
        for term, v in p.validation.items():
            assert random[term].mape == pytest.approx(v.mape, abs=1e-4), (name, term)
            assert random[term].n == v.n
        assert {(r.term, r.split) for r in rows} >= {
            ("linear", "extrapolation"),
            ("decode_attn", "extrapolation"),
        }
        md = (out / f"{name}-validation.md").read_text()
        assert md.startswith("| term | split | MAPE | p95 | max | n | target | met? |")
        # GPU targets are shown, but a CPU run gets no verdict on them.
        assert "| < 5% | n/a (CPU) |" in md and "| yes |" not in md and "| no |" not in md


def test_the_gpu_tests_are_reported_skipped_with_the_reason(gpu_run) -> None:
    _, out, _ = gpu_run
    summary = (out / "pytest-gpu.txt").read_text().splitlines()[1]
    skipped = re.match(r"0 passed, 0 failed, 0 errors, (\d+) skipped", summary)
    assert skipped and int(skipped.group(1)) >= 6  # test_cal_gpu's six, and any others
    assert "needs CUDA (torch.cuda.is_available() is False)" in summary
    assert "not a pass" in summary


def test_the_readme_states_machine_commands_and_numbers(gpu_run) -> None:
    _, out, _ = gpu_run
    text = (out / "README.md").read_text()
    assert "Device: **cpu: " in text and "torch 2." in text
    for line in (
        "kvsim calibrate --device cpu --seed 0 --quick --threads 1 --cpu-flush-mb 0 --model",
        "kvsim calibrate forward --device cpu",
        "python -m pytest -m gpu tests/calibration",
    ):
        assert line in text
    assert "| linear | " in text and "Forward replay (8 simulated batch shapes" in text
    assert re.search(r"0 passed, .* \d+ skipped .*not a pass", text)
    assert "never the raw samples alone" in text


def test_the_same_command_resumes_a_finished_sweep_without_measuring(gpu_run) -> None:
    """A step of the README run again: its finished sweep is refitted from the raw file."""
    import shlex

    from experiments.cli import main

    _, out, _ = gpu_run
    line = next(
        s
        for s in (out / "README.md").read_text().split("`")
        if s.startswith("kvsim calibrate --device cpu") and "tp2" in s
    )
    before = load_profile(str(out / "cpu-tiny-test-tp2.yaml"))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(shlex.split(line)[1:]) == 0
    done, total = re.search(
        r"resuming .*: (\d+) of (\d+) shapes already measured", buf.getvalue()
    ).groups()
    assert done == total
    after = load_profile(str(out / "cpu-tiny-test-tp2.yaml"))
    for term in ("linear", "prefill_attn", "decode_attn", "h2d", "d2h"):
        assert getattr(after, term) == getattr(before, term), term
