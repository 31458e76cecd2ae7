"""The page's JS and CSS as files (demo/static/), with one palette: every colour is written once,
in palette.css, and read from there by the stylesheets (``var(--sd-NAME)``) and by Python
(demo/palette.py); the pages that are files of their own inline them (no link, no fetch).
"""

from __future__ import annotations

import re
from pathlib import Path

from demo import palette
from demo.assets import STATIC_DIR, static_text, stylesheet
from demo.runs.export import PAGE_CSS, PLAYER_JS, content_security_policy, csp_hash
from demo.settings import ROOT, Settings
from demo.ui.app import PAGE_JS, launch_js, launch_kwargs
from demo.ui.booth_view import BOOTH_CSS, BOOTH_JS

HEX = re.compile(r"#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?(?:[0-9a-fA-F]{2})?\b(?![-\w])")
VAR = re.compile(r"var\(--sd-([a-z0-9-]+)\)")
# Every module is on the palette (the evaluator's report and figures too): none is excepted.
NOT_YET: set[str] = set()


def _python_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "demo").rglob("*.py") if "__pycache__" not in p.parts)


def test_no_colour_outside_the_palette() -> None:
    found = {}
    for p in sorted(STATIC_DIR.iterdir()):
        if p.name != "palette.css" and (hits := HEX.findall(p.read_text(encoding="utf-8"))):
            found[p.name] = hits
    for p in _python_modules():
        rel = p.relative_to(ROOT).as_posix()
        # a colour literal in Python is a quoted "#rrggbb" (or a CSS value inside a string)
        hits = re.findall(r"""["':\s]#[0-9a-fA-F]{3,8}\b""", p.read_text(encoding="utf-8"))
        if hits and rel not in NOT_YET:
            found[rel] = hits
    assert not found, f"colours written outside demo/static/palette.css: {found}"


def test_every_colour_used_is_in_the_palette() -> None:
    texts = {p.name: p.read_text(encoding="utf-8") for p in STATIC_DIR.iterdir()}
    texts |= {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in _python_modules()}
    missing = {name: sorted(set(VAR.findall(text)) - set(palette.PALETTE)) for name, text in texts.items()}
    assert not {k: v for k, v in missing.items() if v}
    # ... and the palette holds only colours that something uses
    used = {n for text in texts.values() for n in VAR.findall(text)}
    python_names = set(re.findall(r"color\(\"([a-z0-9-]+)\"\)", (ROOT / "demo" / "palette.py").read_text()))
    assert set(palette.PALETTE) - used - python_names == set()


def test_the_pages_get_the_files_whole() -> None:
    css = launch_kwargs(Settings())["css"]
    for name in ("palette.css", "page.css", "burst.css", "booth.css"):
        assert static_text(name) in css
    assert css.index(static_text("palette.css")) == 0
    plain, booth = launch_js(15.0, booth=False), launch_js(15.0, booth=True)
    assert PAGE_JS in plain and BOOTH_JS not in plain and BOOTH_JS in booth
    assert "const SD_STALL_NOTICE_S = 20.0;" in launch_js(20, booth=False)
    assert BOOTH_CSS == static_text("booth.css")
    assert PAGE_CSS == stylesheet("export.css", "burst.css") and PLAYER_JS == static_text("export.js")
    csp = content_security_policy()
    assert csp_hash(PAGE_CSS) in csp and csp_hash(PLAYER_JS) in csp


def test_the_python_palette_is_the_css_one() -> None:
    text = static_text("palette.css")
    assert palette.ACCENT == "#ffb000" and "--sd-accent: #ffb000;" in text
    assert len(palette.PALETTE) == text.count("--sd-")
