"""Headless Chromium on the booth page: the caption, the run status, error markers and console
errors."""

from __future__ import annotations

from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from benchmarks.soak.summary import Sighting

# Anything on the page that says a run failed: a side's error line, a run status or pane in the
# error state, Gradio's error toast. The servers-down banner (.sd-banner) is not one: during an
# outage it is the intended message.
ERROR_SELECTOR = '.sd-side-error, [data-state="error"], .toast-body.error'
CAPTION_SELECTOR = "#sd-booth-caption .sd-booth-caption"
RUN_STATUS_SELECTOR = "#sd-run-status .sd-run-status"
# One call per poll: caption, run status and the visible error markers. (Whether a server is
# still streaming is asked of the server, AnswerProbe: the page shows it late.)
POLL_JS = """([errSel, capSel, runSel]) => {
  const visible = el => !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  const cap = document.querySelector(capSel);
  const run = document.querySelector(runSel);
  const errors = [];
  for (const el of document.querySelectorAll(errSel)) {
    if (visible(el)) errors.push(`${el.className}: ${(el.textContent || '').trim().slice(0, 200)}`);
  }
  return {caption: cap ? (cap.dataset.state || null) : null, preset: cap ? (cap.dataset.preset || null) : null,
          run: run ? (run.dataset.state || null) : null, errors};
}"""


class Page:
    """Headless Chromium on the booth page: polls and collects console errors."""

    def __init__(self, url: str) -> None:
        from playwright.sync_api import sync_playwright

        from harness.chromium import CHROMIUM, VIEWPORT, launch

        if not CHROMIUM.exists():
            raise RuntimeError(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
        self.console: list[Sighting] = []
        self._pw = sync_playwright().start()
        try:
            self._browser = launch(self._pw)
            self._page = self._browser.new_context(viewport=VIEWPORT).new_page()
            self._page.on("console", self._on_console)
            # Uncaught exceptions in the page's scripts are not console messages: count them too.
            self._page.on("pageerror", lambda e: self._note(f"uncaught: {e}"))
            self._page.goto(url, wait_until="domcontentloaded", timeout=60_000)
        except BaseException:
            self.close()
            raise

    def _on_console(self, message: Any) -> None:
        if message.type == "error":
            self._note(message.text)

    def _note(self, text: str) -> None:
        self.console.append(Sighting(at=datetime.now(UTC), text=text[:300]))

    def wait_caption(self, timeout_s: float) -> bool:
        try:
            self._page.wait_for_selector(CAPTION_SELECTOR, state="attached", timeout=timeout_s * 1000)
            return True
        except Exception:  # noqa: BLE001 - Playwright's TimeoutError; the caller says what is missing
            return False

    def poll(self) -> dict[str, Any]:
        result: dict[str, Any] = self._page.evaluate(POLL_JS, [ERROR_SELECTOR, CAPTION_SELECTOR,
                                                               RUN_STATUS_SELECTOR])
        return result

    def idle(self, seconds: float) -> None:
        """Sleep while Playwright delivers the page's events (console messages)."""
        self._page.wait_for_timeout(seconds * 1000)

    def close(self) -> None:
        with suppress(Exception):
            self._browser.close()
        with suppress(Exception):
            self._pw.stop()
