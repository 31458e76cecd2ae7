"""The Race tab's Users control in real headless Chromium against stand-ins (issue 22): N users
draw live (every user's strip, user 1's text, then the step's headline and tiles), bad input is
one line, Stop leaves no stream open, and two browser sessions at the most users share the page's
one stream budget (the second waits, with the message). No console errors anywhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from common.waiting import wait_for
from demo.load.engine import UsersRace
from demo.runs.store import list_runs, read_record
from harness.app_process import AppProcess
from harness.page_driver import PRESENT, choose, final_value, open_page, screenshot, set_users, start, wait_finished
from harness.standin import Standin, StandinBehavior
from tests.browser.conftest import wait_equal

pytestmark = pytest.mark.browser

PRESET_TITLE = "SQL from a schema"
MAX_USERS = 4  # the page's budget is then 8 streams: one viewer at 4 users on both servers


def behaviors(tokens_per_s: float) -> tuple[StandinBehavior, StandinBehavior]:
    """Per-stream speed falling with the streams in flight, by a different factor on each side."""
    return (StandinBehavior(tokens_per_s=tokens_per_s, ttft_s=0.02, slowdown_in_flight=0.05),
            StandinBehavior(tokens_per_s=2 * tokens_per_s, ttft_s=0.02, slowdown_in_flight=0.3, speculative=True,
                            chunk_sizes=[1, 3, 2]))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Standin, Standin]]:
    base, spec = (Standin(b).start() for b in behaviors(60))
    yield base, spec
    base.stop()
    spec.stop()


@pytest.fixture(scope="module")
def app(servers: tuple[Standin, Standin], tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    base, spec = servers
    tmp: Path = tmp_path_factory.mktemp("users")
    proc = AppProcess({"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url,
                       "SPECDEMO_RUNS_DIR": str(tmp / "runs"), "SPECDEMO_MAX_USERS": str(MAX_USERS),
                       "SPECDEMO_READ_TIMEOUT_S": "10", "SPECDEMO_PROBE_TIMEOUT_S": "2"}, tmp / "app.log")
    proc.runs_dir = tmp / "runs"
    yield proc
    proc.stop()


def set_behaviors(servers: tuple[Standin, Standin], tokens_per_s: float) -> None:
    servers[0].behavior, servers[1].behavior = behaviors(tokens_per_s)


COUNT_TILE_UPDATES_JS = """
() => {
  window.__tiles = [];
  const el = document.querySelector('#sd-tiles-baseline');
  new MutationObserver(() => window.__tiles.push(performance.now()))
    .observe(el, {childList: true, subtree: true, characterData: true, attributes: true});
}
"""


def test_four_users_draw_live_then_the_steps_figures(page, app, servers) -> None:
    set_behaviors(servers, 60)
    runs_before = set(list_runs(app.runs_dir))
    open_page(page, app)
    choose(page, PRESET_TITLE, max_tokens=80)
    set_users(page, 4)
    page.evaluate(COUNT_TILE_UPDATES_JS)
    start(page)
    # Live: every user's bar, some streaming; the headline pending, never a number.
    page.wait_for_selector('#sd-tiles-baseline .sd-users[data-users="4"] .sd-u[data-status="streaming"]',
                           timeout=20_000)
    expect(page.locator("#sd-tiles-speculative .sd-users .sd-u")).to_have_count(4)
    expect(page.locator("#sd-speedup .sd-speedup")).to_have_attribute("data-state", "running")
    page.wait_for_function(
        "() => (document.querySelector('#sd-text-baseline .sd-text')?.textContent ?? '').length > 10")
    screenshot(page, "users-1-streaming")
    assert wait_finished(page, 60_000, app) == "done"
    head = page.locator("#sd-speedup .sd-speedup")
    expect(head).to_have_attribute("data-state", "final")
    expect(head).to_have_attribute("data-users", "4")
    for needle in ("4 users", "throughput ratio"):
        expect(head).to_contain_text(needle, use_inner_text=True)
    expect(page.locator('#sd-tiles-baseline .sd-u[data-status="done"]')).to_have_count(4)
    for key in ("per_user_decode_tokens_per_s", "output_tokens_per_s", "ttft_p95_s", "itl_p95_s"):
        expect(page.locator(f'#sd-tiles-speculative .sd-tile[data-key="{key}"]')).to_have_attribute(
            "data-value", PRESENT)
    page.wait_for_function("() => document.querySelector('#sd-history').innerText.includes('4 users')",
                           timeout=10_000)
    screenshot(page, "users-2-finished")
    # Throttled: the tiles changed at most ~10 times a second while the step ran.
    times = page.evaluate("window.__tiles")
    span_s = (times[-1] - times[0]) / 1000
    assert len(times) > 5 and len(times) <= 12 * span_s + 5, (len(times), span_s)
    # Saved as an N-user race.
    (path,) = set(list_runs(app.runs_dir)) - runs_before
    record = read_record(path)
    assert isinstance(record, UsersRace) and record.users == 4
    assert final_value(head) == record.step.speedup
    # The Replay tab plays user 1, then shows the step's figures.
    page.get_by_role("tab", name="Replay").click()
    page.click("#sd-replay-refresh")
    page.click("#sd-replay-run input")
    page.get_by_role("option", name="4 users").first.click()
    page.click("#sd-replay-play")
    page.wait_for_selector('#sd-replay-status [data-state="done"]', timeout=30_000)
    wait_equal(lambda: page.inner_text("#sd-replay-text-baseline .sd-text").strip(), record.race.baseline.text.strip(),
               30, "user 1's replayed text")
    replayed = page.locator("#sd-replay-speedup .sd-speedup")
    expect(replayed).to_have_attribute("data-users", "4")
    assert final_value(replayed) == record.step.speedup
    expect(page.locator('#sd-replay-tiles-speculative .sd-tile[data-key="output_tokens_per_s"]')).to_have_attribute(
        "data-value", repr(record.step.speculative.output_tokens_per_s))
    expect(page.locator("#sd-replay-banner")).to_contain_text("4 users", use_inner_text=True)
    screenshot(page, "users-4-replayed")
    assert page.console_errors == []


@pytest.mark.parametrize("bad", ["0", "-1", "1000000", "2.5", "5"])
def test_bad_users_is_one_line_on_the_page(page, app, servers, bad: str) -> None:
    started = servers[0].started
    open_page(page, app)
    page.fill("#sd-users input", bad)
    page.press("#sd-users input", "Tab")
    start(page)
    assert wait_finished(page, 15_000, app) == "error"
    refused = f"Users must be a whole number from 1 to {MAX_USERS}"
    line = page.locator("#sd-run-status .sd-run-status")
    expect(line).to_contain_text(refused, use_inner_text=True)
    status = line.inner_text()  # read once it says so: one line
    assert refused in status and "\n" not in status.strip()
    assert servers[0].started == started  # nothing was sent
    assert page.console_errors == []


def test_stop_with_users_leaves_no_stream_open(page, app, servers) -> None:
    base, spec = servers
    set_behaviors(servers, 15)
    aborted = (base.aborted, spec.aborted)
    open_page(page, app)
    choose(page, PRESET_TITLE, max_tokens=600)
    set_users(page, 4)
    start(page)
    page.wait_for_function(
        "() => (document.querySelector('#sd-text-speculative .sd-text')?.textContent ?? '').length > 10",
        timeout=20_000)
    wait_equal(lambda: (base.open_streams, spec.open_streams), (4, 4), 20, "every user's stream open on both servers")
    page.click("#sd-stop")
    assert wait_finished(page, 15_000, app) == "stopped"
    # Each stand-in sees its streams end when its server loop gets to them: waited for.
    wait_for(lambda: not (base.open_streams or spec.open_streams), 30, "both stand-ins' streams ended")
    assert (base.aborted, spec.aborted) == (aborted[0] + 4, aborted[1] + 4)
    expect(page.locator('#sd-tiles-baseline .sd-u[data-status="cancelled"]')).to_have_count(4)
    # The page works again: the next race ends.
    set_behaviors(servers, 200)
    page.fill("#sd-max-tokens input", "30")
    page.press("#sd-max-tokens input", "Tab")
    start(page)
    assert wait_finished(page, 30_000, app) == "done"
    assert page.console_errors == []


def test_two_viewers_at_the_most_users_share_the_budget(chromium, app, servers) -> None:
    base, spec = servers
    set_behaviors(servers, 40)
    pages = []
    contexts = [chromium.new_context(), chromium.new_context()]  # two browser sessions
    try:
        for ctx in contexts:
            pg = ctx.new_page()
            pg.console_errors = []
            pg.on("console", lambda m, pg=pg: m.type == "error" and pg.console_errors.append(m.text))
            open_page(pg, app)
            choose(pg, PRESET_TITLE, max_tokens=150)  # ~4 s: time for the second viewer to ask
            set_users(pg, MAX_USERS)
            pages.append(pg)
        peak = [0]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                peak[0] = max(peak[0], base.open_streams + spec.open_streams)
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            start(pages[0])
            pages[0].wait_for_selector('#sd-tiles-baseline .sd-u[data-status="streaming"]', timeout=20_000)
            start(pages[1])
            pages[1].wait_for_function(
                "() => document.querySelector('#sd-run-status').innerText.includes('waiting for 8 streams')",
                timeout=10_000)
            screenshot(pages[1], "users-3-second-viewer-waiting")
            states = [wait_finished(pg, 60_000, app) for pg in pages]
        finally:
            sampling.set()
            sampler.join()
        assert states == ["done", "done"]
        assert 4 < peak[0] <= 2 * MAX_USERS, peak[0]
        for pg in pages:
            assert pg.console_errors == []
    finally:
        for ctx in contexts:
            ctx.close()
