"""The Canary tab in real headless Chromium (issue 42, "On stage").

A real canary (`python -m servers canary up`, HAProxy, Prometheus, Alertmanager, the receiver) in
front of two stand-ins, at share 50 with the short alert path of tests/test_canary_rollback.py
(``--alert-for 2s --alert-window 5s``, 1 s scrapes); the app reads it through
SPECDEMO_CANARY_RUN_DIR. On the page: before the canary is up, one line says so with the command
that starts it; a rate <= 0 is one line; Start sends eligible traffic through
the router and the view shows the live share (50%) and both paths' requests/s and ITL p95 from the
canary's Prometheus; Switch sends poetry at T=1 (the speculative stand-in degrades with it: a
stand-in's acceptance does not follow the prompt), and the view shows the share at 0, the rollback
event (rule and value) and the time from the switch to share 0. The manual recovery sets the share
back. No console errors. docs/images/canary-on-stage.png is this test's screenshot after the
rollback (artifacts/canary-rolled-back.png). Skipped without Chromium, haproxy, prometheus or
prometheus-alertmanager; fast stage (browser).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect

from common.canary_rules import default_eligibility
from harness.app_process import AppProcess
from harness.page_driver import PAGE_LOAD_TIMEOUT_MS, fill_field, screenshot
from harness.standin import Standin
from tests.browser.conftest import wait_equal
from tests.test_canary import Canary
from tests.test_canary_view import BASE, DEGRADED, SPEC, alert_rules, up_with_alert_path

pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    any(shutil.which(b) is None for b in ("haproxy", "prometheus", "prometheus-alertmanager")),
    reason="haproxy, prometheus or prometheus-alertmanager not installed "
           "(bash scripts/install_prometheus.sh; bash scripts/install_canary.sh)")]

VIEW = "#sd-canary-view .sd-canary"


def line(page):
    """The tab's one status line (a locator: expect(...) waits for what it says)."""
    return page.locator("#sd-canary-status .sd-canary-line")


def test_the_canary_tab_shows_the_live_share_and_the_rollback(page, tmp_path: Path) -> None:
    with Standin(BASE) as base, Standin(SPEC) as spec:
        c = Canary(tmp_path / "run", base, spec, default_eligibility())
        app = AppProcess({"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url,
                          "SPECDEMO_SAVE_RUNS": "false", "SPECDEMO_READ_TIMEOUT_S": "10",
                          "SPECDEMO_PROBE_TIMEOUT_S": "2", "SPECDEMO_CANARY_RUN_DIR": str(c.run_dir)},
                         tmp_path / "app.log")
        try:
            page.goto(app.url, timeout=PAGE_LOAD_TIMEOUT_MS)
            page.get_by_role("tab", name="Canary").click(timeout=PAGE_LOAD_TIMEOUT_MS)
            # No canary yet: one line, with the command that starts it.
            page.wait_for_selector('#sd-canary-status .sd-canary-line[data-state="problem"]', timeout=30_000)
            expect(line(page)).to_contain_text("no canary is running")
            expect(line(page)).to_contain_text("python -m servers canary up --share 50")
            up_with_alert_path(c, alert_rules(tmp_path))
            page.wait_for_selector('#sd-canary-view .sd-canary[data-share="50"]', timeout=30_000)  # the timer

            fill_field(page, "#sd-canary-rate input", "0")
            page.click("#sd-canary-start")
            page.wait_for_function(
                "() => (document.querySelector('#sd-canary-status .sd-canary-line')?.textContent || '')"
                ".includes('rate must be above 0 requests/s')", timeout=15_000)
            expect(line(page)).to_have_attribute("data-state", "problem")

            fill_field(page, "#sd-canary-rate input", "5")
            fill_field(page, "#sd-canary-max-tokens input", "24")
            page.click("#sd-canary-start")
            page.wait_for_function(  # both paths' requests/s and ITL p95 from Prometheus, not n/a
                "() => [...document.querySelectorAll('.sd-canary-paths tbody tr')].length === 2 && "
                "[...document.querySelectorAll('.sd-canary-paths tbody tr')].every(r => "
                "r.children[1].textContent !== 'n/a' && r.children[2].textContent !== 'n/a')", timeout=60_000)
            expect(page.locator(".sd-canary-traffic")).to_contain_text("json_reformat")

            page.click("#sd-canary-switch")
            spec.behavior.chunk_sizes = DEGRADED  # what poetry at T=1 does to drafts (see the docstring)
            page.wait_for_selector("#sd-canary-rollback", timeout=60_000)
            page.wait_for_selector('#sd-canary-view .sd-canary[data-share="0"]', timeout=15_000)
            page.wait_for_selector("#sd-canary-total", timeout=15_000)
            rollback = page.locator("#sd-canary-rollback")
            for needle in ("SpecAcceptanceBelowFloor", "50% → 0%", "manual"):
                expect(rollback).to_contain_text(needle)
            # The time, read once the line has its shape.
            expect(page.locator("#sd-canary-total")).to_have_text(re.compile("^switch to share 0: "))
            total = page.text_content("#sd-canary-total") or ""
            assert total.startswith("switch to share 0: ") and 0 < float(total.split(": ")[1].split(" ")[0]) < 60
            expect(page.locator(".sd-canary-traffic")).to_contain_text("poetry")
            screenshot(page, "canary-rolled-back")

            fill_field(page, "#sd-canary-share-input input", "20")
            page.click("#sd-canary-set-share")
            page.wait_for_selector('#sd-canary-view .sd-canary[data-share="20"]', timeout=15_000)
            wait_equal(lambda: c.status()["share_percent"], 20, 15, "the canary's share")
            assert page.console_errors == [], page.console_errors
        finally:
            app.stop()
            assert c("down").returncode == 0
