"""Start-up: a run that draws no figure never imports matplotlib, a quiet one no progress bar
(tqdm), a kvsim-engine one not vLLM's engine (checked in a fresh interpreter, where nothing else
has imported them). A command imports only its own command module; a one-worker run of a
synthetic trace without a step log imports no worker pool, file-trace reader, tokenizer, figure
style or step log, and a checkout reads its version without importlib.metadata."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
name: no-figures
trace: {kind: synthetic, sessions: 5, seed: 1}
model: llama-3-8b
hardware: h100-sxm
memory: {gpu_kv_gb: %s, cpu_kv_gb: 0, block_tokens: 16, evict_unit: block}
policies: [lru]
seeds: [1]
"""


def _run(tmp_path: Path, gpu_kv_gb: str) -> tuple[str, Path]:
    cfg = tmp_path / f"exp_{gpu_kv_gb}.yaml"
    cfg.write_text(CONFIG % gpu_kv_gb, encoding="utf-8")
    out = tmp_path / f"out_{gpu_kv_gb}"
    code = (
        "import sys; from experiments.cli import main; "
        f"rc = main(['run', {str(cfg)!r}, '--out', {str(out)!r}, '--quiet']); "
        "print(rc, 'matplotlib' in sys.modules, 'tqdm' in sys.modules, 'sim.vllm_v1' in sys.modules)"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return got.stdout.strip().splitlines()[-1], out


def test_a_run_without_figures_does_not_import_matplotlib(tmp_path):
    line, out = _run(tmp_path, ".inf")
    assert line == "0 False False False"
    assert (out / "summary.csv").is_file() and not any((out / "plots").iterdir())


def test_a_run_with_figures_draws_them(tmp_path):
    line, out = _run(tmp_path, "0.5")
    assert line == "0 True False False"
    assert (out / "plots" / "reprefill_vs_capacity.png").is_file()


# Modules a one-worker `kvsim run` of a synthetic trace that draws no figure and writes no step
# log has no use for: each is imported where it is needed, never at start-up.
NOT_AT_START = (
    "experiments.commands.list",  # another command's module (and the choices it imports)
    "experiments.commands.trace",
    "experiments.choices",
    "experiments.worker_pool",  # one worker: no pool (nor multiprocessing's connection)
    "experiments.figure_style",  # no figure
    "sim.step_log",  # no step log
    "traces.jsonl",  # a synthetic trace: no file reader, no tokenizer
    "traces.sharegpt",
    "traces.mooncake",
    "traces.tokenize",
    "sim.parts.offload",  # engine parts the config does not ask for (sparse decode's own cost
    "sim.offload",  # model, ring buffers), chunked prefill, prefetch, a streamed trace
    "costmodels.sparse_decode",
    "costmodels.ring_buffer",
    "sim.parts.chunked",
    "sim.parts.prefetch",
    "sim.parts.stream",
)


def test_a_run_imports_only_what_it_uses(tmp_path):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(CONFIG % ".inf", encoding="utf-8")
    out = tmp_path / "out"
    code = (
        "import sys; from experiments.cli import main; "
        f"rc = main(['run', {str(cfg)!r}, '--out', {str(out)!r}, '--quiet']); "
        f"print(rc, [m for m in {NOT_AT_START!r} if m in sys.modules])"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert got.stdout.strip().splitlines()[-1] == "0 []"


def test_every_command_module_is_found_by_its_command_name():
    """The CLI imports only the module a command names (``bench-policies`` is
    ``experiments/commands/bench_policies.py``): each module must add the command its name says."""
    from experiments.cli import _command_modules, build_parser

    for name, mod in _command_modules():
        command = name.replace("_", "-")
        parser = build_parser(command)
        sub = next(a for a in parser._actions if a.dest == "command")
        assert list(sub.choices) == [command], (name, list(sub.choices))
    everything = build_parser("--help")
    sub = next(a for a in everything._actions if a.dest == "command")
    assert len(sub.choices) == len(_command_modules()) > 1


def test_start_up_objects_are_frozen_only_while_an_experiment_runs(tmp_path, monkeypatch):
    """run_experiment keeps the objects that existed before it out of the GC's scans while it runs
    (gc.freeze) and hands them back after, also when the run is interrupted; objects its caller
    froze stay frozen."""
    import gc

    import pytest

    from experiments import executor
    from experiments.runner import run_experiment
    from experiments.schema import parse_experiment

    exp = parse_experiment(
        {
            "name": "frozen",
            "trace": {"kind": "synthetic", "sessions": 3, "seed": 1},
            "model": "llama-3-8b",
            "hardware": "h100-sxm",
            "memory": {"gpu_kv_gb": 1.0, "cpu_kv_gb": 0},
            "policies": ["lru"],
        }
    )
    real, seen = executor.run_point, []

    def watched(index, point, debug=False, progress=None, ledger_dir=None):
        seen.append(gc.get_freeze_count())
        return real(index, point, debug, progress, ledger_dir)

    monkeypatch.setattr(executor, "run_point", watched)
    assert gc.get_freeze_count() == 0
    run_experiment(exp, tmp_path / "out", show_progress=False)
    assert seen[0] > 10_000 and gc.get_freeze_count() == 0

    def interrupted(index, point, debug=False, progress=None, ledger_dir=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(executor, "run_point", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, tmp_path / "again", show_progress=False)
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a caller's own frozen objects stay frozen
    try:
        with pytest.raises(KeyboardInterrupt):
            run_experiment(exp, tmp_path / "third", show_progress=False)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
