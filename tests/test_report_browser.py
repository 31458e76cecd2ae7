"""report.html in real headless Chromium: no console errors, no network, charts drawn,
model output shown as text (never run). Saves a screenshot to artifacts/."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from demo.settings import ROOT, Settings
from demo.sweep.models import SweepSpec
from demo.sweep.plan import resolve_presets
from demo.sweep.report import finalize, write_outputs
from demo.sweep.runner import new_result, run_sweep
from harness.chromium import CHROMIUM, launch
from harness.standin import Standin, StandinBehavior

pytestmark = pytest.mark.browser

EVIL = '<script>window.__pwned = 1</script><img src="http://198.51.100.1/x.png" onerror="window.__pwned = 2">'


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny) sweep against stand-ins whose model output tries to inject HTML."""
    out = tmp_path_factory.mktemp("report")
    pieces = [EVIL, " {", " \"a\"", ":", " 1", " }"]
    base_b = StandinBehavior(tokens_per_s=300, ttft_s=0.02, pieces=pieces)
    spec_b = StandinBehavior(tokens_per_s=700, ttft_s=0.02, pieces=pieces, speculative=True, chunk_sizes=[1, 4, 2])
    with Standin(base_b) as base, Standin(spec_b) as spec:
        sw = SweepSpec(baseline_url=base.url, speculative_url=spec.url, presets=["json_reformat", "poetry"],
                       concurrency=[1, 2], repeats=1, warmup=0, max_tokens=24)
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
        presets = resolve_presets(sw.presets, settings.presets_dir)
        result = new_result(sw, presets)
        # Run apart from any event loop this thread holds (a session-wide Playwright browser does).
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, run_sweep(sw, settings, result, presets)).result()
    write_outputs(finalize(result), out)
    return out / "report.html"


def test_report_opens_offline_without_console_errors(report: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium")
    html = report.read_text()
    assert "<script src" not in html and "<link" not in html  # Plotly inlined, nothing fetched
    assert EVIL not in html and "&lt;script&gt;window.__pwned" in html  # escaped in the file

    # Its own Playwright, in its own thread: another test module may hold a browser in this one.
    with ThreadPoolExecutor(1) as pool:
        errors, requests = pool.submit(open_in_chromium, report).result()
    assert errors == [], errors
    assert requests == [], f"the report tried the network: {requests}"


def open_in_chromium(report: Path) -> tuple[list[str], list[str]]:
    """Open the report offline; check charts, verdicts, escaping; screenshot. Returns (errors, requests)."""
    from playwright.sync_api import expect, sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = launch(p)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()

            def route(r):
                if not r.request.url.startswith("file://"):
                    requests.append(r.request.url)
                    r.abort()
                else:
                    r.continue_()

            page.route("**/*", route)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report.as_uri(), wait_until="load")
            page.wait_for_selector("#chart-throughput .main-svg", timeout=20_000)
            # Plotly draws the charts one after another: each waited for (30 s on a busy machine).
            expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=30_000)
            # at least 4 bars: 2 presets x 2 concurrencies
            expect(page.locator("#chart-throughput .bars .point").nth(3)).to_be_attached(timeout=30_000)
            expect(page.locator(".sv-verdict")).to_have_count(2, timeout=30_000)
            assert page.evaluate("window.__pwned") is None  # model output never ran (once it is all drawn)
            page.locator("details").first.evaluate("d => d.open = true")
            expect(page.locator("details pre").first).to_contain_text("<script>window.__pwned = 1</script>",
                                                                      use_inner_text=True, timeout=30_000)
            artifacts = ROOT / "artifacts"
            artifacts.mkdir(exist_ok=True)
            page.screenshot(path=str(artifacts / "sweep-report.png"), full_page=True)
        finally:
            browser.close()
    return errors, requests
