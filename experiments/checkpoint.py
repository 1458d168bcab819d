"""Finished grid points of a sweep, kept on disk as each one completes, so that an interrupted
sweep (Ctrl-C, SIGTERM, a killed worker, a crash) loses nothing it finished: the rerun of the
same config takes them from here and runs only the rest.

They live beside the results folder, in ``<out>.partial/``, one pickle per point named by a digest
of everything that decides its result (the grid point itself, the debug flag, the kvsim version):
a changed config or kvsim never reuses a stale point. Each file is written to a temporary name and
renamed, so a point is either whole or absent. The folder goes once the results are written.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.version import kvsim_version

if TYPE_CHECKING:  # types only: the executor imports pandas, which `kvsim run` needs only later
    from experiments.executor import PointResult
    from experiments.schema import GridPoint


def partial_dir(out: str | os.PathLike) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".partial")


class Checkpoints:
    def __init__(self, out: str | os.PathLike, debug: bool = False) -> None:
        self.dir = partial_dir(out)
        self.debug = debug

    def key(self, point: GridPoint) -> str:
        text = repr((point, self.debug, kvsim_version()))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def load(self, point: GridPoint) -> PointResult | None:
        path = self.dir / f"{self.key(point)}.pkl"
        if not path.is_file():
            return None
        from experiments.executor import PointResult

        with path.open("rb") as f:
            got = pickle.load(f)
        return got if isinstance(got, PointResult) and got.point == point else None

    def save(self, result: PointResult) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".point-", dir=self.dir)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.dir / f"{self.key(result.point)}.pkl")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def clear(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def prune(self) -> None:
        """Keep only the finished points: their checkpoints and the ledger files they name. What
        a stopped point left (its ledger half-written by a worker that was ended, a temporary
        file) goes, and so does the folder when nothing is left in it."""
        if not self.dir.is_dir():
            return
        from experiments.executor import PointResult

        keep: set[str] = set()
        for path in self.dir.glob("*.pkl"):
            try:
                with path.open("rb") as f:
                    got = pickle.load(f)
            except (pickle.UnpicklingError, EOFError):  # unreadable: not kept either
                continue
            if isinstance(got, PointResult):
                keep.add(path.name)
                for named in (got.turns_file, got.sessions_file):
                    if named is not None:
                        keep.add(Path(named).name)
        for path in self.dir.iterdir():
            if path.name in keep:
                continue
            if path.is_dir():  # a ledger's column scratch, left by a worker terminated mid-write
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not any(self.dir.iterdir()):
            self.dir.rmdir()
