"""A function does one job and reads on one screen: none over 60 lines (its docstring included) in
demo/, servers/, harness/ or common/ (docs/development.md "Functions"). A longer one is split along the
seams it already marks: a check, a loop, a result assembled."""

from __future__ import annotations

import ast
from pathlib import Path

from common.paths import ROOT

PACKAGES = ("demo", "servers", "harness", "common")
MAX_LINES = 60


def _long_functions(root: Path) -> list[str]:
    """Each function or method in PACKAGES under ``root`` longer than MAX_LINES: path:line name (lines)."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > MAX_LINES:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_over_sixty_lines() -> None:
    assert not _long_functions(ROOT), _long_functions(ROOT)


def test_the_scan_finds_a_planted_long_function(tmp_path: Path) -> None:
    (tmp_path / "harness" / "deep").mkdir(parents=True)
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_LINES))  # with its def line: one over
    (tmp_path / "harness" / "deep" / "x.py").write_text(
        f"class A:\n    async def long(self):\n{body}\n\ndef short():\n    return 1\n")
    assert _long_functions(tmp_path) == [f"harness/deep/x.py:2 long ({MAX_LINES + 1} lines)"]
