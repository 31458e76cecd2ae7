"""The page's JS and CSS, kept as files in demo/static/ (linted by Biome, scripts/test.sh) and
read once, at import, by the modules that use them: the Gradio page (demo/ui/theme.py, app.py,
booth_view.py), the self-contained exported race page (demo/runs/export.py), which inlines them, and the
self-contained reports (report.html, load.html): their stylesheet and CSP.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"


@cache
def static_text(name: str) -> str:
    """One file of demo/static/ as text (read once per process)."""
    return (STATIC_DIR / name).read_text(encoding="utf-8")


def stylesheet(*names: str) -> str:
    """The palette (palette.css: the colours as CSS custom properties), then the named
    stylesheets, as one text: for Gradio's ``css`` or a page's inline ``<style>``."""
    return "".join(static_text(n) for n in ("palette.css", *names))


# The self-contained reports (report.html, load.html): their stylesheet, and no network: everything
# they need is inline (the tests check it in Chromium).
REPORT_CSS = stylesheet("verdict.css", "report.css")
REPORT_CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
              "img-src data: blob:; font-src data:")
