"""The raw CSV of a sweep while it runs: every finished shape is appended and flushed at once, so an
interrupted sweep keeps what it measured, and a rerun with the same file skips those shapes.

Beside the CSV, ``<stem>.run.json`` records what the samples were measured with (device, torch,
dtype, attention backend, timing, grid, seed, model). A rerun that would measure differently
refuses to resume rather than fit two setups as one; ``--fresh`` starts the file over. A shape cut
short by the interruption (a partial last line, or the first of a token-level job's three rows
without the others) is dropped from the file and measured again.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from .samples import Sample
from .samples_io import COLUMNS, model_fields, parse_samples, sample_row
from .sweep_plan import Job, job_key


def run_record_path(raw: Path) -> Path:
    return raw.with_name(raw.stem + ".run.json")


class RawSweep:
    """Open with ``RawSweep.open``; ``done`` holds the samples of the jobs already in the file."""

    def __init__(self, path: Path, done: dict[tuple, tuple[Sample, ...]]) -> None:
        self.path = path
        self.done = done
        self._file = open(path, "a", newline="")
        self._csv = csv.writer(self._file)

    @classmethod
    def open(
        cls, path: str | Path, run: dict, jobs: Sequence[Job], fresh: bool = False
    ) -> "RawSweep":
        """Start ``path`` (new, empty or ``fresh``) or resume it: ``run`` is this sweep's record,
        ``jobs`` its plan; what the file holds must be shapes of that plan measured the same way."""
        path = Path(path)
        record = run_record_path(path)
        if fresh or not path.exists() or path.stat().st_size == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            _replace_file(record, json.dumps(run, indent=1, sort_keys=True) + "\n")
            _replace_file(path, _csv_text([]))
            return cls(path, {})
        _check_record(path, record, run)
        text = path.read_text()
        complete = text[: text.rfind("\n") + 1]  # a line cut short by the interruption is dropped
        done, rows = _complete_jobs(complete, str(path), jobs)
        if len(rows) != complete.count("\n") - 1:  # dropped rows: write back only complete jobs
            _replace_file(path, _csv_text(rows))
        elif complete != text:
            _replace_file(path, complete)
        return cls(path, done)

    def append(self, samples: Sequence[Sample]) -> None:
        """One finished job's samples, on disk before the next job starts."""
        self._csv.writerows(sample_row(s) for s in samples)
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "RawSweep":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _csv_text(rows: Sequence[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLUMNS)
    w.writerows(rows)
    return buf.getvalue()


def _replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a kill mid-write leaves the old file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _check_record(path: Path, record: Path, run: dict) -> None:
    if not record.exists():
        raise ValueError(
            f"{path} exists without {record.name}, so what its samples were measured with is "
            "unknown: pass --fresh to start it over, or another --raw file"
        )
    old = json.loads(record.read_text())
    diff = [
        f"{k}: {old.get(k)!r} then, {run.get(k)!r} now"
        for k in sorted(set(old) | set(run))
        if old.get(k) != run.get(k)
    ]
    if diff:
        raise ValueError(
            f"cannot resume {path}: it was measured differently ("
            + "; ".join(diff)
            + "); pass --fresh to start it over, or the options of that run"
        )


def _complete_jobs(
    text: str, origin: str, jobs: Sequence[Job]
) -> tuple[dict[tuple, tuple[Sample, ...]], list[list]]:
    """The finished jobs in ``text`` (by key, their samples carrying the plan's model) and their
    rows in file order; rows of a job cut short are left out."""
    header = next(csv.reader(io.StringIO(text)), None)
    if header != COLUMNS:
        raise ValueError(f"{origin}: not a raw sample file of this version (its columns differ)")
    planned = {j.key: j for j in jobs}
    by_job: dict[tuple, list[Sample]] = {}
    for s in parse_samples(io.StringIO(text), origin):
        job = planned.get(job_key(s))
        if job is None or model_fields(s.model) != model_fields(job.model):
            raise ValueError(
                f"{origin} holds a shape this sweep does not plan ({s.term} {s.shape} on "
                f"{s.model.name}): it comes from other grid options; pass --fresh or those options"
            )
        by_job.setdefault(job.key, []).append(replace(s, model=job.model))
    done: dict[tuple, tuple[Sample, ...]] = {}
    for key, samples in by_job.items():
        terms = sorted(s.term for s in samples)
        if len(terms) > len(set(terms)):
            raise ValueError(f"{origin}: a shape appears twice ({samples[0].shape}); pass --fresh")
        if terms == sorted(planned[key].terms):
            done[key] = tuple(samples)
    rows = [sample_row(s) for samples in done.values() for s in samples]
    return done, rows
