"""The Evaluate and Replay tabs in real headless Chromium against stand-in servers."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from playwright.sync_api import expect

from common.waiting import wait_for
from demo.race import run_race
from demo.results import RaceRequest
from demo.runs.store import read_run, save_run
from demo.settings import Settings
from harness.app_process import AppProcess
from harness.page_driver import final_value, open_evaluate, run_evaluate, screenshot
from harness.standin import Standin, StandinBehavior
from tests.browser.conftest import pair_app, wait_equal

pytestmark = pytest.mark.browser


def stripped_text(page, selector: str):
    """A reader of an element's innerText, stripped (for wait_equal)."""
    return lambda: page.inner_text(selector).strip()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AppProcess, Path]]:
    tmp = tmp_path_factory.mktemp("evalapp")
    base = Standin(StandinBehavior(tokens_per_s=300, ttft_s=0.02)).start()
    spec = Standin(StandinBehavior(tokens_per_s=700, ttft_s=0.02, speculative=True, chunk_sizes=[1, 4, 2])).start()
    settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
    req = RaceRequest(preset="poetry", prompt="Write <b>a poem</b>", max_tokens=60, order="sequential")
    # Playwright's session-wide browser holds an event loop in this thread: race in another one.
    with ThreadPoolExecutor(1) as pool:
        race = pool.submit(asyncio.run, run_race(req, settings)).result()
    saved = save_run(race, tmp / "runs")
    app = AppProcess({
        "SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url,
        "SPECDEMO_RUNS_DIR": str(tmp / "runs"), "SPECDEMO_READ_TIMEOUT_S": "10", "SPECDEMO_PROBE_TIMEOUT_S": "2",
    }, tmp / "app.log")
    try:
        yield app, saved
    finally:
        app.stop()
        base.stop()
        spec.stop()


def test_evaluate_tab_runs_a_small_sweep(setup, page) -> None:
    app, _ = setup
    open_evaluate(page, app)
    page.fill("#sd-eval-temps textarea, #sd-eval-temps input", "")
    run_evaluate(page, "1,2", 24, "failure-evaluate-tab")
    verdicts = page.locator("#sd-eval-verdict .sv-verdict")
    expect(verdicts).to_have_count(2)  # json_reformat and poetry
    # The speculative stand-in is ~2x faster; on a busy 2-core box a 24-token batch can still dip.
    expect(verdicts.first).to_have_attribute("data-decision", re.compile("^(enable|depends)$"))
    expect(page.locator("#sd-eval-verdict")).to_contain_text("at concurrency 1:", use_inner_text=True)
    page.wait_for_selector("#sd-eval-throughput .main-svg", timeout=15_000)
    expect(page.locator("#sd-eval-throughput .bars .point")).to_have_count(4)
    for name in ("report.html", "results.json", "results.csv"):
        expect(page.locator("#sd-eval-report")).to_contain_text(name, use_inner_text=True)
    screenshot(page, "evaluate-tab")
    assert page.console_errors == []


def test_replay_tab_plays_a_saved_run_labelled_as_a_recording(setup, page) -> None:
    app, saved = setup
    result = read_run(saved)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(app.url, timeout=30_000)
    page.get_by_role("tab", name="Replay").click()
    page.wait_for_selector("#sd-replay-play", timeout=15_000)
    page.click("#sd-replay-play")
    page.wait_for_selector('#sd-replay-banner [data-recording="true"]', timeout=15_000)
    expect(page.locator("#sd-replay-banner")).to_contain_text(
        "RECORDING of " + result.started_at.strftime("%Y-%m-%d %H:%M:%S UTC") + ", not live", use_inner_text=True)
    page.wait_for_selector('#sd-replay-status [data-state="done"]', timeout=30_000)
    wait_equal(stripped_text(page, "#sd-replay-text-speculative .sd-text"), result.speculative.text.strip(), 30,
               "the replayed speculative text")
    shown = final_value(page.locator('#sd-replay-tiles-speculative .sd-tile[data-key="tokens_per_s"]'))
    assert shown == pytest.approx(result.speculative.decode_tokens_per_s)
    screenshot(page, "replay-tab")
    assert page.console_errors == []


def test_replay_tab_lays_out_a_pane_per_arm_of_the_run_it_plays(setup, page) -> None:
    """The app races one arm; the run played has three: the tab shows the run's panes (each arm's
    answer, headline and badge), not the settings', and a run of one arm brings the pair back."""
    app, saved = setup
    with ExitStack() as stack:
        base = stack.enter_context(Standin(StandinBehavior(tokens_per_s=300, ttft_s=0.02)))
        arms = {n: stack.enter_context(Standin(StandinBehavior(tokens_per_s=rate, ttft_s=0.02, speculative=True,
                                                               chunk_sizes=[1, 3])))
                for n, rate in (("eagle3", 900), ("ngram", 600), ("draft", 450))}
        settings = Settings(baseline_url=base.url, speculative_url=arms["eagle3"].url, save_runs=False,
                            arms=[{"name": n, "url": s.url, "method": n.upper()} for n, s in arms.items()])
        req = RaceRequest(preset="json_reformat", prompt="Reformat <b>this</b>", max_tokens=40, order="sequential")
        with ThreadPoolExecutor(1) as pool:  # Playwright holds this thread's event loop
            race = pool.submit(asyncio.run, run_race(req, settings)).result()
    result = read_run(save_run(race, saved.parent))
    assert list(result.arms) == ["eagle3", "ngram", "draft"]
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(app.url, timeout=30_000)
    page.get_by_role("tab", name="Replay").click()
    page.click("#sd-replay-refresh")
    page.click("#sd-replay-run input")
    page.get_by_role("option", name=re.compile("json_reformat")).first.click()
    page.click("#sd-replay-play")
    page.wait_for_selector('#sd-replay-status [data-state="done"]', timeout=30_000)
    expect(page.locator("#sd-replay-arms")).to_be_visible()
    expect(page.locator("#sd-replay-text-speculative")).not_to_be_visible()
    wait_equal(stripped_text(page, "#sd-replay-text-arms-baseline .sd-text"), result.baseline.text.strip(), 30,
               "the replayed baseline text")
    for n, (name, arm) in enumerate(result.arms.items(), 1):
        expect(page.locator(f"#sd-replay-pane-arm-{n}")).to_be_visible()
        expect(page.locator(f"#sd-replay-title-arm-{n}")).to_contain_text(name, use_inner_text=True)
        wait_equal(stripped_text(page, f"#sd-replay-text-arm-{n} .sd-text"), arm.side.text.strip(), 30,
                   f"arm {n}'s replayed text")
        head = page.locator(f"#sd-replay-speedup-arm-{n} .sd-speedup")
        expect(head).to_have_attribute("data-arm", name)
        expect(head).to_have_attribute("data-value", repr(arm.speedup))
        expect(page.locator(f"#sd-replay-badge-arm-{n} .sd-badge")).to_have_attribute("data-identical", "true")
    page.locator("#sd-replay-arms").scroll_into_view_if_needed()  # the picture shows the panes
    screenshot(page, "replay-tab-arms")

    pair = read_run(saved)
    page.click("#sd-replay-run input")
    page.get_by_role("option", name=re.compile("poetry")).first.click()
    page.click("#sd-replay-play")
    page.wait_for_selector("#sd-replay-arms", state="hidden", timeout=15_000)
    page.wait_for_function("want => document.querySelector('#sd-replay-text-speculative .sd-text')?.innerText.trim()"
                           " === want", arg=pair.speculative.text.strip(), timeout=30_000)
    expect(page.locator("#sd-replay-speedup")).to_be_visible()
    expect(page.locator("#sd-replay-badge")).to_be_visible()
    assert page.console_errors == []


@pytest.fixture(scope="module")
def arms_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    """The app against a baseline and two arms (SPECDEMO_ARMS), as the Race tab would race them."""
    tmp = tmp_path_factory.mktemp("evalarms")
    base = Standin(StandinBehavior(tokens_per_s=200, ttft_s=0.02)).start()
    fast = Standin(StandinBehavior(tokens_per_s=600, ttft_s=0.02, speculative=True, chunk_sizes=[3, 4])).start()
    slow = Standin(StandinBehavior(tokens_per_s=300, ttft_s=0.02, speculative=True, chunk_sizes=[1, 2])).start()
    arms = [{"name": "eagle3", "url": fast.url}, {"name": "ngram", "url": slow.url}]
    app = pair_app(base, fast, tmp, SPECDEMO_ARMS=json.dumps(arms))
    try:
        yield app
    finally:
        app.stop()
        for s in (base, fast, slow):
            s.stop()


def test_evaluate_tab_shows_every_arm(arms_app: AppProcess, page) -> None:
    open_evaluate(page, arms_app)
    run_evaluate(page, "1,2", 24, "failure-evaluate-tab-arms")
    # json_reformat and poetry: each with its one line on top, then a verdict per arm
    lines = page.locator("#sd-eval-verdict .sv-methods")
    # Two lines, each's text after its first ": " starting "for this workload, ".
    methods_line = re.compile(r"^(?:(?!: )[\s\S])*: for this workload, ")
    expect(lines).to_have_text([methods_line, methods_line], use_inner_text=True)
    verdicts = page.locator("#sd-eval-verdict .sv-verdict")
    expect(verdicts).to_have_count(4)
    for n, arm in enumerate(["eagle3", "ngram", "eagle3", "ngram"]):
        expect(verdicts.nth(n)).to_have_attribute("data-arm", arm)
    heads = "els => els.map(e => e.innerText.trim())"
    wait_for(lambda: "arm" in page.eval_on_selector_all("#sd-eval-table th", heads), 30, "an arm column in the table")
    # Gradio's table draws its body rows as divs (its one <tbody> row only sizes the columns): count
    # the cells outside any <tr> that read an arm's name
    def arm_cells() -> tuple[int, int]:
        cells = page.evaluate("""() => [...document.querySelectorAll("#sd-eval-table *")]
            .filter(e => e.children.length == 0 && e.closest("tr") === null).map(e => e.textContent.trim())""")
        return cells.count("eagle3"), cells.count("ngram")

    wait_equal(arm_cells, (2 * 2, 2 * 2), 30, "the table's rows per arm")  # 2 presets x 2 concurrencies
    page.wait_for_selector("#sd-eval-throughput .main-svg", timeout=15_000)
    expect(page.locator("#sd-eval-throughput .bars .point")).to_have_count(8)  # a bar per cell and arm
    expect(page.locator("body")).to_contain_text("2 arms", use_inner_text=True)
    screenshot(page, "evaluate-tab-arms")
    assert page.console_errors == []
