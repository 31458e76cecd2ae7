"""No import cycle in common/, demo/, servers/ and harness/ (a lazy import inside a function counts too)."""

from __future__ import annotations

import ast
from pathlib import Path

from demo.settings import ROOT

PACKAGES = ("common", "demo", "servers", "harness")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Our modules that ``path`` imports anywhere in its body; ``from pkg import mod`` counts as ``pkg.mod``."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    modules = {module_name(p) for p in paths}
    # A package's __init__ runs before its modules, so importing "a.b" also imports "a"; that edge
    # is implied, not written, and would make every package its modules' importer: leave it out.
    return {module_name(p): imports_of(p, modules) - {module_name(p)} for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_checker_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_our_imports() -> None:
    graph = import_graph()
    assert "demo.measure" in graph["demo.race"]
    assert "demo.results" in graph["demo.measure"]
    assert "demo.cli" in graph["demo.__main__"]


def test_demo_and_servers_import_each_other_without_a_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_scripts_outside_the_packages_import_no_test_module() -> None:
    """lint-imports checks the packages; app.py and the scripts under docs/ are checked here."""
    scripts = [ROOT / "app.py", *sorted((ROOT / "docs").rglob("*.py"))]
    tests_modules = {module_name(p) for p in (ROOT / "tests").rglob("*.py")} | {"tests"}
    offenders = {p.relative_to(ROOT).as_posix(): sorted(found) for p in scripts
                 if (found := imports_of(p, tests_modules))}
    assert not offenders, f"imports test modules (use harness/): {offenders}"
