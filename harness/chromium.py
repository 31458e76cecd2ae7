"""Headless Chromium as the tests and benchmarks run it: Debian's package, never a download.

Install it with ``apt-get install -y chromium`` (scripts/install_browser.sh); the browser tests
skip, saying so, when it is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright, ViewportSize

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT: ViewportSize = {"width": 1280, "height": 720}


def launch(playwright: Playwright) -> Browser:
    """Start Debian's Chromium headless with CHROMIUM_ARGS through ``playwright``; return the Browser.

    The one place the tests, the benchmarks and the docs' image scripts launch a browser.
    """
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
