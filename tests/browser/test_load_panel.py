"""The Race tab's Load sweep section in real headless Chromium, against stand-ins whose per-stream
speed falls with the streams in flight (tests/test_load_sweep.py's: designed to pay up to 2 users
and lose from 4): the curves drawn live (a step's point before the sweep ends), the crossover the
sweep found, the download (load.html and load.png), Stop mid-sweep with no stream left open, bad
input in one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from common.waiting import wait_for
from demo.load.engine import LoadResult
from harness.app_process import AppProcess
from harness.page_driver import open_page, screenshot
from harness.standin import Standin
from tests.browser.conftest import pair_app, wait_equal
from tests.test_load_sweep import BASE, SPEC

pytestmark = pytest.mark.browser

# Points drawn on the per-user chart, and the load status line's state, read together.
POINTS_AND_STATE_JS = """() => [
  document.querySelectorAll('#sd-load-per-user .scatterlayer .trace .points path').length,
  document.querySelector('#sd-load-status .sd-run-status')?.dataset.state]"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AppProcess, Standin, Standin]]:
    tmp = tmp_path_factory.mktemp("loadapp")
    base, spec = Standin(BASE).start(), Standin(SPEC).start()
    app = pair_app(base, spec, tmp)
    try:
        yield app, base, spec
    finally:
        app.stop()
        base.stop()
        spec.stop()


def sweep(page, users: str, max_tokens: int) -> None:
    page.fill("#sd-load-users textarea, #sd-load-users input", users)
    page.fill("#sd-load-max-tokens input", str(max_tokens))
    page.press("#sd-load-max-tokens input", "Tab")
    page.evaluate("() => { const e = document.querySelector('#sd-load-status .sd-run-status');"
                  " if (e) e.dataset.state = 'old'; }")
    page.click("#sd-load-run")


def open_panel(page, app: AppProcess) -> None:
    page.set_viewport_size({"width": 1400, "height": 1000})
    open_page(page, app)
    page.locator("#sd-load").scroll_into_view_if_needed()


def test_the_sweep_draws_its_curves_live_and_finds_the_crossover(setup, page) -> None:
    app, _base, _spec = setup
    open_panel(page, app)
    sweep(page, "1,2,4", 60)
    try:  # a step's point is on the chart while the sweep still runs
        live = f"() => {{ const [n, s] = ({POINTS_AND_STATE_JS})(); return n > 0 && s === 'running'; }}"
        page.wait_for_function(live, timeout=60_000)
        screenshot(page, "load-1-first-step")
        page.wait_for_selector('#sd-load-status [data-state="done"]', timeout=90_000)
    except Exception:
        screenshot(page, "failure-load-sweep")
        raise
    expect(page.locator("#sd-load-table").get_by_role("row")).to_have_count(1 + 3)  # the header and a row per step
    expect(page.locator("#sd-load-status")).to_contain_text("run saved", use_inner_text=True)
    wait_for(lambda: any(app.runs_dir.glob("*-load.json")), 15, "the sweep's load.json saved")
    # The page says the crossover the saved sweep found from its own steps. Which counts it pays at
    # rests on measured timing here: the designed 2 and 4 against the stand-ins' truth are the timing
    # stage's (tests/test_load_sweep.py, test_load_sweep_speedup_matches_truth_and_finds_the_crossover).
    saved = LoadResult.model_validate_json(next(app.runs_dir.glob("*-load.json")).read_text())
    cross = saved.crossover
    expect(page.locator("#sd-load-crossover .sd-load-sentence")).to_have_text(
        re.compile("^" + re.escape(cross.text[0].upper() + cross.text[1:])), use_inner_text=True)
    expect(page.locator("#sd-load-crossover")).to_contain_text("GAIN_WORTH", use_inner_text=True)
    expect(page.locator("#sd-load-crossover .sd-load-crossover")).to_have_attribute(
        "data-loses-from", str(cross.loses_from_users or ""))
    screenshot(page, "load-2-finished")
    page.click("#sd-load-export")
    page.wait_for_function("() => document.querySelector('#sd-load-files')?.innerText.includes('load.png')",
                           timeout=60_000)
    for name in ("load.html", "load.png"):
        expect(page.locator("#sd-load-files")).to_contain_text(name, use_inner_text=True)
    assert page.console_errors == []


def test_stop_mid_sweep_leaves_no_stream_open(setup, page) -> None:
    app, base, spec = setup
    open_panel(page, app)
    sweep(page, "1,4,8", 200)
    try:
        wait_for(lambda: "step 2 of 3" in page.inner_text("#sd-load-status") and
                 base.open_streams + spec.open_streams > 0, 60, "the second step streaming")
        page.click("#sd-load-stop")
        page.wait_for_selector('#sd-load-status [data-state="stopped"]', timeout=30_000)
    except Exception:
        screenshot(page, "failure-load-stop")
        raise
    expect(page.locator("#sd-load-status")).to_contain_text("every stream was closed", use_inner_text=True)
    wait_for(lambda: base.open_streams == 0 and spec.open_streams == 0, 30, "both stand-ins' streams closed")
    screenshot(page, "load-3-stopped")
    assert page.console_errors == []


@pytest.mark.parametrize("bad", ["0", "2.5", "many"])
def test_bad_user_counts_say_one_line(setup, page, bad: str) -> None:
    app, base, spec = setup
    open_panel(page, app)
    before = len(base.truth) + len(spec.truth)
    sweep(page, bad, 20)
    page.wait_for_selector('#sd-load-status [data-state="error"]', timeout=15_000)
    expect(page.locator("#sd-load-status")).to_contain_text("users", ignore_case=True, use_inner_text=True)
    text = page.inner_text("#sd-load-status").strip()  # read once it says so: one line
    assert "\n" not in text and "users" in text.lower(), text
    assert len(base.truth) + len(spec.truth) == before  # nothing was sent
    assert page.console_errors == []


def test_two_rate_steps_draw_their_table_chart_and_capacity(setup, page) -> None:
    app, base, spec = setup
    open_panel(page, app)
    page.locator("#sd-load-mode").get_by_label("Requests per second").check()
    page.fill("#sd-load-rates textarea, #sd-load-rates input", "4,8")
    page.fill("#sd-load-rate-requests input", "4")
    page.fill("#sd-load-max-tokens input", "20")
    page.press("#sd-load-max-tokens input", "Tab")
    before = len(base.truth) + len(spec.truth)
    page.click("#sd-load-run")
    try:
        page.wait_for_selector('#sd-load-status [data-state="done"]', timeout=60_000)
    except Exception:
        screenshot(page, "failure-load-rate")
        raise
    # two rates, two servers, four requests each
    wait_equal(lambda: len(base.truth) + len(spec.truth) - before, 2 * 2 * 4, 15, "the stand-ins' requests")
    expect(page.locator("#sd-load-status")).to_contain_text("finished: 2 of 2 rate step(s)", use_inner_text=True)
    table = page.locator("#sd-load-table")
    expect(table.get_by_role("row")).to_have_count(1 + 2 * 2)  # the header and a row per server per step
    expect(table).to_contain_text("ITL p50/95/99 ms", use_inner_text=True)
    for needle in ("baseline holds", "req/s"):
        expect(page.locator("#sd-load-crossover")).to_contain_text(needle, use_inner_text=True)
    # The latency chart: a point per rate on each line drawn (ITL p50/p95/p99 of both servers).
    expect(page.locator("#sd-load-per-user .scatterlayer .trace .points path")).to_have_count(2 * 3 * 2)
    expect(page.locator("#sd-load-total .scatterlayer .trace")).to_have_count(3)  # offered, baseline, speculative
    screenshot(page, "load-4-rate")
    assert page.console_errors == []
