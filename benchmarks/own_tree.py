"""A benchmark script times the tree it belongs to, not the checkout that is installed.

``pip install -e`` puts one checkout on every Python's path, so ``python benchmarks/x.py`` run
from another worktree (an old commit, for paired timings) would time the installed checkout's
``sim``. Each script's ``__main__`` block calls :func:`use` first: this tree goes first on
``sys.path`` and on ``PYTHONPATH``, which the script's child processes inherit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def use() -> Path:
    """Put this tree first on the import path of this process and of its children."""
    sys.path.insert(0, str(REPO))
    inherited = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *([inherited] if inherited else [])])
    return REPO
