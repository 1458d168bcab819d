"""A benchmark script run from another tree (an old worktree, for paired timings) imports that
tree's packages, and so do the processes it starts, not the installed checkout's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import subprocess
import sys


def main():
    import sim

    print("parent", sim.__file__)
    child = [sys.executable, "-c", "import sim; print('child', sim.__file__)"]
    print(subprocess.run(child, capture_output=True, text=True, check=True, cwd="/").stdout.strip())


if __name__ == "__main__":
    import own_tree

    own_tree.use()
    main()
"""


def test_a_script_and_its_children_import_the_scripts_own_tree(tmp_path):
    tree = tmp_path / "old_tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "sim").mkdir()
    (tree / "sim" / "__init__.py").write_text("")
    shutil.copy(REPO / "benchmarks" / "own_tree.py", tree / "benchmarks")
    (tree / "benchmarks" / "probe.py").write_text(SCRIPT)
    got = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "probe.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split("\n")
    want = str(tree / "sim" / "__init__.py")
    assert got[:2] == [f"parent {want}", f"child {want}"]


def test_every_benchmark_script_uses_its_own_tree():
    scripts = sorted(p for p in (REPO / "benchmarks").glob("*.py") if p.name != "own_tree.py")
    assert scripts
    for p in scripts:
        main_block = p.read_text().split('if __name__ == "__main__":', 1)
        assert len(main_block) == 2 and "own_tree.use()" in main_block[1].split("main()")[0], p
