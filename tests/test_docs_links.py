"""README.md and docs/*.md: every relative link and #anchor resolves, and the README stays short.

Anchors follow GitHub's rule for heading ids: lower case, punctuation dropped (letters, digits,
spaces, ``-`` and ``_`` kept), spaces to ``-``, and ``-1``, ``-2``... for repeated headings.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from common.paths import ROOT

README_MAX_BYTES = 8192

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link in a code sample is not a link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """Each relative link of a Markdown file whose file or anchor does not exist, as 'target: why'."""
    problems = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / unquote(file_part)).resolve() if file_part else path
            if not dest.exists():
                problems.append(f"{target}: {dest} does not exist")
                continue
            if anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
                problems.append(f"{target}: no heading with id #{anchor} in {dest.name}")
    return problems


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(path: Path) -> None:
    assert broken_links(path) == [], f"broken links in {path.relative_to(ROOT)}"


def test_readme_fits_in_8_kb() -> None:
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; keep it <= {README_MAX_BYTES}, details in docs/"


def test_every_docs_page_is_reachable_from_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(index)}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= linked, f"docs pages missing from docs/README.md: {sorted(pages - linked)}"


def test_the_checker_finds_a_broken_file_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A `code` heading: with punctuation!\n\n## Twice\n## Twice\n",
                                       encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-code-heading-with-punctuation) [ok](other.md#twice-1) [ok](#local)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [bad local](#elsewhere)\n"
        "`[in code](missing-too.md)` [web](https://example.com/x)\n"
        "```\n[in a fence](missing-three.md)\n```\n"
        "## Local\n",
        encoding="utf-8")
    assert [p.split(":")[0] for p in broken_links(page)] == ["missing.md", "other.md#nope", "#elsewhere"]
