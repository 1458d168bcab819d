"""`kvsim calibrate gpu-run`: the whole GPU calibration as one command, into one folder.

In order, each step an ordinary `kvsim` command run in this process, so the folder's README lists
exactly what ran and anyone can repeat one step by hand:
  1. `kvsim calibrate` for every target: Llama-3-8B, and one layer of Llama-3-70B's per-GPU shard
     at TP 4 and at TP 8 (those with a time budget, ``SHARDED_BUDGET_S``);
  2. `kvsim calibrate forward` against each profile just written;
  3. `pytest -m gpu tests/calibration` in a subprocess (its summary says what passed, and what was
     skipped and why: on a machine without CUDA every test skips, which is not a pass);
then the folder's README.md (``_calibrate_gpu_readme``). Every sweep appends to a raw CSV in the
folder, so the same command run again resumes where it stopped: finished sweeps are refitted from
their raw files without measuring (on a GPU the few-second overlap runs are measured again), the
forward replays and the tests run again.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from ._calibrate_gpu_readme import write_readme
from ._calibrate_gpu_steps import StepResult, Target

DEFAULT_TARGETS = ("llama-3-8b", "llama-3-70b@tp4", "llama-3-70b@tp8")
SHARDED_BUDGET_S = 400.0  # default budget of each TP-sharded sweep (an H100 needs ~370 s for one)
REPO = Path(__file__).resolve().parents[2]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def parse_target(text: str) -> tuple[str, int]:
    """ "llama-3-70b@tp4" -> ("llama-3-70b", 4); no "@tpK" is TP 1."""
    model, sep, tp = text.rpartition("@tp")
    if not sep:
        return text, 1
    if not tp.isdigit() or int(tp) < 1:
        raise ValueError(f"--models {text!r}: expected MODEL or MODEL@tpK with K >= 1")
    return model, int(tp)


def machine_slug(device: str) -> str:
    """ "h100-sxm" for an H100 (the hardware name the profiles use), else the device name; "cpu"."""
    if device == "cpu":
        return "cpu"
    import torch

    from calibration.local import recognised_gpu

    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {device}: torch.cuda.is_available() is False "
            f"(torch {torch.__version__}); use --device cpu"
        )
    name = torch.cuda.get_device_name(torch.device(device).index or 0)
    return recognised_gpu(name) or slug(name)


def targets_of(specs: list[str], machine: str) -> list[Target]:
    from costmodels import get_model

    out = []
    for spec in specs:
        model, tp = parse_target(spec)
        name = f"{machine}-{slug(get_model(model).name)}" + (f"-tp{tp}" if tp > 1 else "")
        out.append(Target(model, tp, name))
    if len({t.name for t in out}) < len(out):
        raise ValueError(f"--models {' '.join(specs)}: two targets share a name")
    return out


class _Tee:
    """stdout to the terminal and to a step's log file."""

    def __init__(self, *streams) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()


def run_kvsim(name: str, argv: list[str], logs: Path) -> StepResult:
    """One `kvsim` command in this process, its stdout also kept in ``logs/<name>.log``."""
    from experiments.cli import main

    command = shlex.join(["kvsim", *argv])
    print(f"\n$ {command}", flush=True)
    t0 = time.perf_counter()
    with open(logs / f"{name}.log", "w") as log, contextlib.redirect_stdout(_Tee(sys.stdout, log)):
        rc = main(argv)
    return StepResult(name, command, rc, time.perf_counter() - t0)


def run_pytest(out: Path, device: str) -> StepResult:
    """`pytest -m gpu tests/calibration` in a subprocess; ``pytest-gpu.txt`` gets its summary first,
    then its whole output."""
    args = ["-m", "pytest", "-m", "gpu", "tests/calibration", "-q", "-rA", "-p", "no:cacheprovider"]
    command = shlex.join(["python", *args])
    print(f"\n$ {command}", flush=True)
    t0 = time.perf_counter()
    if not (REPO / "tests" / "calibration").is_dir():
        rc, text = (
            1,
            f"not run: no tests/calibration in {REPO} (kvsim installed without its sources)",
        )
        summary = text
    elif importlib.util.find_spec("pytest") is None:
        rc, text = 1, "not run: pytest is not installed (pip install -e '.[dev]')"
        summary = text
    else:
        with tempfile.TemporaryDirectory() as tmp:
            xml = Path(tmp) / "junit.xml"
            proc = subprocess.run(
                [sys.executable, *args, f"--junitxml={xml}"],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            text = proc.stdout + proc.stderr
            rc, summary = junit_verdict(xml, proc.returncode, device)
    print(summary)
    (out / "pytest-gpu.txt").write_text(f"$ {command}\n{summary}\n\n{text}")
    return StepResult("pytest-gpu", command, rc, time.perf_counter() - t0, summary)


def junit_verdict(xml: Path, rc: int, device: str) -> tuple[int, str]:
    """The step's status and one line: counts, skip reasons. On a CUDA run a step where nothing
    passed fails: skipped GPU tests are not a pass."""
    if not xml.exists():
        return rc or 1, f"pytest wrote no report (exit status {rc}): see the output below"
    status: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for case in ET.parse(xml).getroot().iter("testcase"):
        tags = {child.tag: child for child in case}
        kind = next((k for k in ("failure", "error", "skipped") if k in tags), "passed")
        status[kind] += 1
        if kind == "skipped":
            reasons[tags["skipped"].get("message", "no reason given")] += 1
    line = (
        f"{status['passed']} passed, {status['failure']} failed, {status['error']} errors, "
        f"{status['skipped']} skipped (pytest exit status {rc})"
    )
    if reasons:
        line += "; skipped: " + "; ".join(f"{n} x {why}" for why, n in reasons.items())
    if status["passed"] == 0:
        line += "; no GPU test passed, so this is not a pass"
        if device != "cpu":
            rc = rc or 1
    return rc, line


def gpu_run(args: argparse.Namespace) -> int:
    from experiments.cli import EXIT_INTERRUPTED, EXIT_TERMINATED

    device = args.device or "cuda"
    machine = machine_slug(device)
    today = dt.date.today().isoformat()
    out = Path(args.out or f"calibration/measured/{machine}-{today}")
    targets = targets_of(args.models or list(DEFAULT_TARGETS), machine)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    budget = SHARDED_BUDGET_S if args.budget_s is None else args.budget_s
    common = ["--device", device, "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
    if device == "cpu":  # the CPU's timing settings, spelled out in every step
        common += ["--threads", str(args.threads), "--cpu-flush-mb", str(args.cpu_flush_mb)]
    steps: list[StepResult] = []
    t0 = time.perf_counter()
    print(f"calibration run on {machine} into {out}: " + ", ".join(t.name for t in targets))

    def finish() -> int:
        readme = write_readme(out, machine, targets, steps, time.perf_counter() - t0)
        failed = [s.name for s in steps if s.rc != 0]
        print(f"\n{readme}" + (f"; failed: {', '.join(failed)}" if failed else ""))
        return 1 if failed else 0

    for t in targets:
        argv = ["calibrate", *common, "--model", t.model, "--tp", str(t.tp), "--name", t.name]
        argv += ["--attention", args.attention, "--force"]
        argv += ["--out", str(out / f"{t.name}.yaml"), "--raw", str(out / f"{t.name}-samples.csv")]
        argv += ["--validation", str(out / f"{t.name}-validation.csv")]
        if t.tp > 1 and budget > 0:
            argv += ["--budget-s", f"{budget:g}"]
        if args.fresh:
            argv.append("--fresh")
        steps.append(run_kvsim(f"measure-{t.name}", argv, logs))
        if steps[-1].rc != 0:
            return finish()
    for t in targets:
        argv = ["calibrate", "forward", *common, "--model", t.model, "--tp", str(t.tp)]
        argv += ["--profile", str(out / f"{t.name}.yaml"), "--shapes", str(args.shapes)]
        argv += ["--attention", args.attention]
        argv += ["--points", str(out / f"{t.name}-forward.csv")]
        argv += ["--report", str(out / f"{t.name}-forward.md")]
        steps.append(run_kvsim(f"forward-{t.name}", argv, logs))
        if steps[-1].rc in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            return finish()
    steps.append(run_pytest(out, device))
    return finish()
