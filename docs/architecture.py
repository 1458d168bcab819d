"""Draw the engine's parts and the calls between them, read from the code (``ast``), not by hand.

    python docs/architecture.py            # writes docs/img/architecture.png, prints the table

The core is ``sim/scheduler.py`` with its decode spans (``sim/spans.py``); the parts are the
classes of ``sim/parts/``; the services are the objects every run has (memory tiers with their
policies, the pricer, arrivals, the ledger, the step buckets). An arrow from the core to a part or
service carries the names the core calls or reads on it (``self.offload.start``, ``core.mem.used``);
an arrow from a part to the core carries the core's names the part uses (``core.running``), and
one from a part to a service or another part what it reaches through the core (``core.share.hold``).
docs/architecture.md holds the table this prints; a test checks that the two agree.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE_FILES = ("sim/scheduler.py", "sim/spans.py")
PARTS = {  # the core's attribute -> (its class, modules)
    "admission": ("Admission or ChunkedPrefill", "sim/admission.py sim/parts/chunked.py"),
    "budget": ("TokenBudget", "sim/parts/budget.py"),
    "recovery": ("PageRecovery or LayerRecovery", "sim/recovery.py"),
    "offload": ("OffloadDecode", "sim/parts/offload.py"),
    "prefetch": ("Prefetch", "sim/parts/prefetch.py"),
    "share": ("PrefixSharing", "sim/parts/sharing.py"),
    "stream": ("StreamIntake", "sim/parts/stream.py"),
}
SERVICES = {
    "mem": "TieredMemory + policies",
    "pricer": "Pricer",
    "arrivals": "Arrivals",
    "ledger": "Ledger",
    "page_due": "StepBuckets",
    "finish_due": "StepBuckets",
}
CORE = "Scheduler (core)"


def _owner_names(tree: ast.AST, owners: set[str]) -> dict[str, set[str]]:
    """attribute -> names used on it, for ``self.<attribute>.<name>``/``core.<attribute>.<name>``
    and for a local bound to ``self.<attribute>`` (``off = self.offload``; ``off.start``)."""
    used: dict[str, set[str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        alias: dict[str, str] = {}
        for node in ast.walk(fn):  # locals bound to a part: x = self.part, (a, x) = ..., x, y = ...
            if isinstance(node, ast.Assign):
                pairs: list[tuple[ast.expr, ast.expr]] = []
                for target in node.targets:
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        pairs += zip(target.elts, node.value.elts, strict=False)
                    else:
                        pairs.append((target, node.value))
                for target, value in pairs:
                    attr = _part_attr(value, owners)
                    if isinstance(target, ast.Name) and attr is not None:
                        alias[target.id] = attr
        for node in ast.walk(fn):
            if not isinstance(node, ast.Attribute):
                continue
            base = node.value
            attr = _part_attr(base, owners)
            if attr is None and isinstance(base, ast.Name):
                attr = alias.get(base.id)
            if attr is not None:
                used.setdefault(attr, set()).add(node.attr)
    return used


def _part_attr(node: ast.AST, owners: set[str]) -> str | None:
    """``self.X``, ``core.X``, ``self.core.X`` or ``... if ... else None`` of them, with X one of
    ``owners``: X."""
    if isinstance(node, ast.IfExp):
        return _part_attr(node.body, owners)
    if isinstance(node, ast.Attribute) and node.attr in owners:
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "core"):
            return node.attr
        if _is_core(base):
            return node.attr
    return None


def _is_core(node: ast.AST) -> bool:
    """``core`` or ``self.core`` (a part's reference to the scheduler)."""
    if isinstance(node, ast.Name):
        return node.id == "core"
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "core"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _core_names(tree: ast.AST) -> set[str]:
    """The core's own names a part uses: ``self.core.<name>`` and ``core.<name>``."""
    names = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and _is_core(node.value)
    }
    return names - set(PARTS) - set(SERVICES)


def flows() -> dict[tuple[str, str], list[str]]:
    """(from, to) -> the names that cross, sorted."""
    owners = set(PARTS) | set(SERVICES)
    core_uses: dict[str, set[str]] = {}
    for f in CORE_FILES:
        for attr, names in _owner_names(ast.parse((ROOT / f).read_text()), owners).items():
            core_uses.setdefault(attr, set()).update(names)
    out: dict[tuple[str, str], list[str]] = {}
    for attr, names in core_uses.items():
        to = PARTS[attr][0] if attr in PARTS else SERVICES[attr]
        out.setdefault((CORE, to), [])
        out[(CORE, to)] = sorted(set(out[(CORE, to)]) | names)
    for cls, modules in PARTS.values():
        for module in modules.split():
            tree = ast.parse((ROOT / module).read_text())
            names = _core_names(tree)
            if names:
                out[(cls, CORE)] = sorted(set(out.get((cls, CORE), [])) | names)
            # what it reaches through the core: services (core.mem) and other parts (core.share)
            for attr, used in _owner_names(tree, set(SERVICES) | set(PARTS)).items():
                edge = (cls, SERVICES[attr] if attr in SERVICES else PARTS[attr][0])
                out[edge] = sorted(set(out.get(edge, [])) | used)
    return dict(sorted(out.items()))


def table() -> str:
    rows = ["| from | to | names |", "|---|---|---|"]
    for (a, b), names in flows().items():
        rows.append(f"| {a} | {b} | {', '.join(f'`{n}`' for n in names)} |")
    return "\n".join(rows)


def draw(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges = flows()
    parts = [cls for cls, _ in PARTS.values()]
    services = sorted(set(SERVICES.values()))
    fig, ax = plt.subplots(figsize=(17, 10))
    ax.set_xlim(0, 17)
    ax.set_ylim(0, 10)
    ax.axis("off")
    pos = {CORE: (8.8, 5.0)}
    for i, cls in enumerate(parts):  # parts on the left, services on the right
        pos[cls] = (2.6, 9.3 - i * 8.6 / (len(parts) - 1))
    for i, name in enumerate(services):
        pos[name] = (15.4, 8.8 - i * 7.6 / (len(services) - 1))
    colors = {CORE: "#ffe9a8", **dict.fromkeys(parts, "#cfe3ff")}
    for name, (x, y) in pos.items():
        ax.text(
            x,
            y,
            name,
            ha="center",
            va="center",
            fontsize=11,
            weight="bold",
            zorder=3,
            bbox=dict(boxstyle="round,pad=0.5", fc=colors.get(name, "#d9f2d0"), ec="0.3"),
        )
    for (a, b), names in edges.items():
        (x0, y0), (x1, y1) = pos[a], pos[b]
        if a in parts and b in services:  # a part's direct use of a service: faint, unlabelled
            ax.plot([x0 + 1.2, x1 - 1.6], [y0, y1], color="0.8", lw=0.8, ls=":", zorder=1)
            continue
        if a in parts and b in parts:  # one part's use of another: an arc on the left, unlabelled
            ax.annotate(
                "",
                xy=(x1 - 1.2, y1),
                xytext=(x0 - 1.2, y0),
                zorder=1,
                arrowprops=dict(
                    arrowstyle="->", color="0.6", ls=":", lw=0.8, connectionstyle="arc3,rad=0.35"
                ),
            )
            continue
        back = b == CORE  # what a part uses of the core: dashed, below the core's arrow
        dy = -0.12 if back else 0.12
        ax.annotate(
            "",
            xy=(x1, y1 + dy),
            xytext=(x0, y0 + dy),
            zorder=2,
            arrowprops=dict(
                arrowstyle="->",
                color="0.5" if back else "0.1",
                ls="--" if back else "-",
                shrinkA=60,
                shrinkB=60,
                lw=1.0,
            ),
        )
        t = 0.45 if back else 0.75  # the core's labels near the part, the part's mid-way
        label = "\n".join(textwrap.wrap(", ".join(names), 46))
        ax.text(
            x0 + (x1 - x0) * t,
            y0 + dy + (y1 - y0) * t,
            label,
            fontsize=6.5,
            zorder=4,
            ha="center",
            va="center",
            color="0.35" if back else "0.05",
            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.9),
        )
    ax.set_title(
        "kvsim's engine, read from the code: the core, its parts (left) and services (right)\n"
        "solid: what the core calls or reads on each; dashed: what a part uses of the core; "
        "dotted: a part's own use of a service or of another part (names in docs/architecture.md)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    out = ROOT / "docs/img/architecture.png"
    draw(out)
    print(table())
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
