"""Raw samples to and from CSV (`kvsim calibrate --raw FILE`): one row per measured shape, with the
model shard it ran on, so a sweep can be inspected or refitted without measuring again. A file
written before a shape column existed (``shape_pinned``) reads that column as its default."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from costmodels import ModelSpec

from .samples import Sample, Shape, Timing

_MODEL = [f.name for f in fields(ModelSpec) if f.name not in ("source", "max_context_tokens")]
_SHAPE = [f.name for f in fields(Shape)]
_SHAPE_DEFAULTS = {f.name: f.default for f in fields(Shape)}
COLUMNS = (
    ["term", "group", "kernel", "median_s", "p20_s", "p80_s", "reps"]
    + [f"shape_{k}" for k in _SHAPE]
    + [f"model_{k}" for k in _MODEL]
)


def _shape_field(name: str, text: str | None) -> Any:
    """One shape column parsed to its field's type; a column the file lacks (written before the
    field existed) reads as the field's default."""
    if text is None:
        return _SHAPE_DEFAULTS[name]
    if isinstance(_SHAPE_DEFAULTS[name], bool):
        if text not in ("True", "False"):
            raise ValueError(f"shape_{name}: expected True or False, got {text!r}")
        return text == "True"
    return int(text)


def model_fields(model: ModelSpec) -> tuple:
    """What a row keeps of a model: equal tuples mean the same shard as far as the fit can tell."""
    return tuple(getattr(model, k) for k in _MODEL)


def sample_row(s: Sample) -> list:
    """One CSV row; floats as ``repr`` so they read back bit for bit."""
    return (
        [
            s.term,
            s.group,
            s.kernel,
            repr(s.time.median_s),
            repr(s.time.p20_s),
            repr(s.time.p80_s),
            s.time.reps,
        ]
        + [getattr(s.shape, k) for k in _SHAPE]
        + list(model_fields(s.model))
    )


def write_samples_csv(samples: Sequence[Sample], path: str | Path) -> Path:
    p = Path(path)
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(sample_row(s) for s in samples)
    return p


def read_samples_csv(path: str | Path) -> list[Sample]:
    with open(path, newline="") as f:
        return parse_samples(f, str(path))


def parse_samples(lines: Iterable[str], origin: str) -> list[Sample]:
    """Samples from CSV text lines (header first); ``origin`` names them in the models' source."""
    out: list[Sample] = []
    models: dict[tuple, ModelSpec] = {}
    for r in csv.DictReader(lines):
        vals = tuple(r[f"model_{k}"] for k in _MODEL)
        if vals not in models:
            kw: dict[str, Any] = {  # each field parsed to its own type
                k: (
                    r[f"model_{k}"]
                    if k == "name"
                    else r[f"model_{k}"] == "True"
                    if k == "gated_mlp"
                    else int(r[f"model_{k}"])
                )
                for k in _MODEL
            }
            models[vals] = ModelSpec(**kw, source=f"raw samples {origin}")
        shape = Shape(**{k: _shape_field(k, r.get(f"shape_{k}")) for k in _SHAPE})
        t = Timing(float(r["median_s"]), float(r["p20_s"]), float(r["p80_s"]), int(r["reps"]))
        out.append(Sample(r["term"], shape, t, models[vals], r["group"], r["kernel"]))
    return out
