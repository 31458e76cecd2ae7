"""One name for each concept (docs/development.md#glossary): a retired name does not come back in
demo/, servers/, harness/ or common/, and every name the glossary points at is defined where it says."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from common.paths import ROOT

PACKAGES = ("demo", "servers", "harness", "common")
# retired identifier -> what replaces it (an attribute of another library's, such as gr.Progress, is not ours,
# nor the end of a name built in an f-string, such as f"slo_{n}_ms")
RETIRED = {
    "Role": "Side (common/sides.py): a server's part in a comparison, one spelling for demo/ and servers/",
    "ROLES": "SIDES (common/sides.py)",
    "make_spec": "load_spec (demo/load/engine.py), load_spec_of_flags (demo/cli/load.py) or sweep_spec "
                 "(demo/sweep/runner.py): one name meant three things",
    "points_from_cells": "server_points (demo/sweep/schedule.py) or measured_points (demo/sweep/pooling.py)",
    "side_cells": "rate_side_cells (demo/load/rate_view.py) or load_side_cells (demo/cli/load.py)",
    "acceptance_figure": "position_acceptance_figure (demo/charts.py, a race's acceptance by draft position) or "
                         "cell_acceptance_figure (demo/sweep/figures.py, a sweep's per cell)",
    "Progress": "SweepProgress (demo/sweep/runner.py) or StartProgress (servers/progress.py)",
    "_ms": "_to_ms (a figure in ms) or _ms_text (its text)",
    "_pool_acceptance": "_pool_batch_acceptance (demo/sweep/pooling.py) or _pool_cell_acceptance "
                        "(demo/sweep/measured.py)",
    "RateSlo": "Slo (demo/slo.py): one SLO model for the evaluator, the rate sweep and the schedule",
    "ScheduleSlo": "Slo (demo/slo.py), its decode_part() for a band's k",
    "make_rate_slo": "slo_of_bounds (demo/slo.py)",
    "_validation_message": "common.validation.validation_summary (every=True)",
}
# retired module -> where its job lives now (one file name for one job)
RETIRED_MODULES = {
    "demo/turns.py": "demo/agent_race.py",
    "demo/live/turns.py": "demo/live/agent_frames.py",
    "demo/live/canary.py": "demo/live/canary_stage.py (servers/canary/ is the canary itself)",
}
GLOSSARY = (ROOT / "docs" / "development.md").read_text().split("## Glossary", 1)[1].split("\n## ", 1)[0]


@functools.cache
def _sources(root: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """PACKAGES' modules under ``root``, read once: (path relative to root, its lines)."""
    return tuple((str(path.relative_to(root)), tuple(path.read_text().splitlines()))
                 for pkg in PACKAGES for path in sorted((root / pkg).rglob("*.py")))


def _uses(name: str, root: Path = ROOT) -> list[str]:
    """Each line of PACKAGES' modules under ``root`` that holds ``name`` as a word: path:line."""
    word = re.compile(rf"(?<![\w.}}]){re.escape(name)}\b")  # not an attribute, nor a suffix in an f-string
    return [f"{path}:{n}" for path, lines in _sources(root) for n, line in enumerate(lines, 1) if word.search(line)]


def test_no_retired_name_comes_back() -> None:
    found = {name: uses for name in RETIRED if (uses := _uses(name))}
    assert not found, "\n".join(f"{name} is retired, use {RETIRED[name]}: {', '.join(uses)}"
                                for name, uses in found.items())


def test_no_retired_module_comes_back() -> None:
    back = [f"{path} is retired, its job is in {RETIRED_MODULES[path]}" for path in RETIRED_MODULES
            if (ROOT / path).exists()]
    assert not back, back


def test_the_scan_finds_a_planted_retired_name(tmp_path: Path) -> None:
    (tmp_path / "servers" / "deep").mkdir(parents=True)
    (tmp_path / "servers" / "deep" / "x.py").write_text(
        '"""A module."""\n\nRole = str  # planted\nRoles = 1\np = gr.Role\n')
    assert _uses("Role", tmp_path) == ["servers/deep/x.py:3"]  # a word, not another library's attribute
    assert "common/sides.py:9" in _uses("Side")  # and the real tree is read


def test_every_name_the_glossary_points_at_is_defined() -> None:
    code = "\n".join(line for _path, lines in _sources(ROOT) for line in lines)
    rows = [line.split("|")[3] for line in GLOSSARY.splitlines() if line.startswith("| ") and "---" not in line][1:]
    names = {m.split(".")[-1] for row in rows for m in re.findall(r"`([A-Za-z_][\w.]*)`", row)}
    missing = [n for n in sorted(names) if not re.search(rf"^\s*(?:def |class |async def )?{n}\b[\s(:=]", code, re.M)]
    assert len(names) > 10 and not missing, missing


def test_each_word_has_one_row_and_each_retired_name_is_not_in_it() -> None:
    words = re.findall(r"^\| ([^|]+?) \|", GLOSSARY, re.M)[1:]  # the header row's "word" left out
    assert len(words) == len(set(words)) and {"server", "side", "arm", "pane"} <= set(words), words
    assert not any(re.search(rf"`{name}`", GLOSSARY) for name in RETIRED)


def _private_imports(root: Path, dirs: tuple[str, ...]) -> list[str]:
    """Each ``from M import _name`` in ``dirs`` under ``root``: path:line M._name (a dunder is not private)."""
    found = []
    for d in dirs:
        for path in sorted((root / d).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    found += [f"{path.relative_to(root)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_from_another_module() -> None:
    # A package shows its inside and outside (docs/development.md "Names"): a helper another module
    # needs is public, in a private module (demo/workload/_lines.py) or a public one; tests and
    # benchmarks use the same names as the product.
    assert not _private_imports(ROOT, (*PACKAGES, "tests", "benchmarks", "docs"))


def test_the_private_import_scan_finds_a_planted_one(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "x.py").write_text("from demo.y import _helper, public\nfrom __future__ import annotations\n")
    assert _private_imports(tmp_path, ("demo",)) == ["demo/x.py:1 demo.y._helper"]
