"""docs/architecture.md's table of the names that cross each seam is the one the code gives."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _architecture():
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "docs/architecture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_documented_table_is_the_code_s():
    doc = (ROOT / "docs/architecture.md").read_text()
    m = re.search(
        r"<!-- architecture-table:[^>]*-->\n(.*?)\n<!-- /architecture-table -->", doc, re.S
    )
    assert m, "docs/architecture.md lost its table markers"
    assert m.group(1).strip() == _architecture().table().strip(), (
        "the engine's seams changed: run python docs/architecture.py and update the table"
    )


def test_every_part_is_drawn_and_every_hook_found():
    arch = _architecture()
    edges = arch.flows()
    for cls, _ in arch.PARTS.values():
        assert (arch.CORE, cls) in edges, f"the core calls nothing on {cls}"
    # names the core is known to call on its parts (a reader that missed aliases would lose them)
    assert {"start", "page_filled", "end"} <= set(edges[(arch.CORE, "OffloadDecode")])
    assert {"hold", "counts"} <= set(edges[("Admission or ChunkedPrefill", "PrefixSharing")])
    assert {"place", "release"} <= set(edges[(arch.CORE, "PrefixSharing")])
    assert {"running", "waiting", "extend"} <= set(
        edges[("Admission or ChunkedPrefill", arch.CORE)]
    )
