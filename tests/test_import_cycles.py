"""No import cycles among the project's own modules.

Every import statement counts, those inside functions too: an import deferred into a function
still closes the cycle, it only hides it until the function runs. Imports under
``if TYPE_CHECKING:`` never run, so they do not count. A submodule's implicit import of its own
parent packages is not an edge (Python initialises the parent first, so it cannot loop).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodels", "sim", "traces", "calibration", "experiments")


def project_modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every .py under PACKAGES."""
    modules = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` except the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        run = (
            child.orelse if isinstance(child, ast.If) and _is_type_checking(child.test) else [child]
        )
        for stmt in run:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                yield stmt
            else:
                yield from _imports(stmt)


def _owning(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a project module (``costmodels.cost.CostModel`` ->
    ``costmodels.cost``), or None for a module outside the project."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules its import statements name."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        for stmt in _imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(stmt, ast.Import):
                targets.update(_owning(alias.name, modules) for alias in stmt.names)
                continue
            base = stmt.module or ""
            if stmt.level:
                anchor = package.split(".")[: len(package.split(".")) - (stmt.level - 1)]
                base = ".".join(anchor + ([stmt.module] if stmt.module else []))
            # `from pkg import x` names the submodule pkg.x where there is one, else pkg itself.
            for alias in stmt.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else _owning(base, modules))
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _cycle_through(start: str, members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest import path from ``start`` back to itself inside one strongly connected set."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module] & members):
                if target == start:
                    return paths[module] + [start]
                if target not in paths:
                    paths[target] = paths[module] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in no cycle")


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle, as a path of module names, for each strongly connected set of modules."""
    # Tarjan's algorithm, iterative so a deep import chain cannot hit the recursion limit.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_cycle_through(min(c), c, graph) for c in components]


def test_finder_sees_deferred_and_relative_imports(tmp_path: Path) -> None:
    # A hand-built package: a imports b at module level, b imports a inside a function through
    # `from . import a`, c imports a only for type checking.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import helper\n")
    (pkg / "b.py").write_text("def helper():\n    from . import a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import helper\n"
    )
    modules = {name: pkg / f"{name.rpartition('.')[2]}.py" for name in ("pkg.a", "pkg.b", "pkg.c")}
    modules["pkg"] = pkg / "__init__.py"
    graph = import_graph(modules)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": set()}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph(project_modules()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
