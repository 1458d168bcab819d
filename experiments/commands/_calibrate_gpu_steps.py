"""What a `kvsim calibrate gpu-run` works on and what each of its steps gave: the run makes
them, the folder's README reads them, so they live apart from both."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Target:
    model: str  # as given: a model name or a spec YAML
    tp: int
    name: str  # profile name and the stem of its files


@dataclass(frozen=True, slots=True)
class StepResult:
    name: str
    command: str  # the shell line that repeats it
    rc: int
    wall_s: float
    summary: str = ""  # pytest: counts, and why tests were skipped
