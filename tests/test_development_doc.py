"""docs/development.md's Layout names every module of common/, demo/, servers/, harness/ and
benchmarks/, each with a one-line role, and names no module that does not exist.

The Layout is the code block under "## Layout": a line is an entry when it starts (after its
indentation) with one or more names ending in ``.py`` or ``/``, separated by two spaces, then its
role. A folder entry with one name opens that folder for the entries indented below it. A
package's own line stands for its ``__init__.py``.
"""

from __future__ import annotations

import re

from demo.settings import ROOT

DOC = ROOT / "docs" / "development.md"
PACKAGES = ("common", "demo", "servers", "harness", "benchmarks")
NAME = re.compile(r"[\w.-]+(?:/[\w.-]+)*(?:\.py|/)")


def layout_block(text: str) -> list[str]:
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("\n```\n", 1)[1].split("\n```", 1)[0].splitlines()


def parse_entry(line: str) -> tuple[int, list[str], str] | None:
    """(indent, names, role) of a layout line, or None when it names no module or folder first."""
    indent = len(line) - len(line.lstrip(" "))
    names: list[str] = []
    rest = line.strip()
    while (m := NAME.match(rest)) and (m.end() == len(rest) or rest[m.end()] == " "):
        names.append(m.group())
        rest = rest[m.end():].lstrip(" ")
    return (indent, names, rest) if names else None


def documented(lines: list[str]) -> dict[str, str]:
    """Path (relative to the repository) -> role, for every name in the layout."""
    found: dict[str, str] = {}
    folders: list[tuple[int, str]] = []  # (indent, path) of the open folders
    for line in lines:
        entry = parse_entry(line)
        if entry is None:
            continue
        indent, names, role = entry
        while folders and folders[-1][0] >= indent:
            folders.pop()
        prefix = folders[-1][1] if folders else ""
        for name in names:
            found[prefix + name] = role
        if len(names) == 1 and names[0].endswith("/"):
            folders.append((indent, prefix + names[0]))
    return found


def modules_in_tree() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def test_the_parser_reads_folders_and_several_names_on_a_line() -> None:
    lines = ["app.py         entry", "demo/          the library", "  a.py  b.py   two modules",
             "  ui/          the page", "    c.py       a tab", "  d.py         back in demo",
             "                  a continuation line.py with a name inside", "tests/  see below"]
    assert documented(lines) == {"app.py": "entry", "demo/": "the library", "demo/a.py": "two modules",
                                 "demo/b.py": "two modules", "demo/ui/": "the page", "demo/ui/c.py": "a tab",
                                 "demo/d.py": "back in demo", "tests/": "see below"}


def test_every_module_is_named_with_its_role() -> None:
    layout = documented(layout_block(DOC.read_text(encoding="utf-8")))
    missing = sorted(modules_in_tree() - set(layout))
    assert not missing, f"docs/development.md's Layout does not name: {missing}"
    without_role = sorted(path for path, role in layout.items() if path.endswith(".py") and not role)
    assert not without_role, f"named without a role: {without_role}"


def test_every_named_module_and_folder_exists() -> None:
    layout = documented(layout_block(DOC.read_text(encoding="utf-8")))
    gone = sorted(path for path in layout if not (ROOT / path).exists())
    assert not gone, f"docs/development.md's Layout names what does not exist: {gone}"
