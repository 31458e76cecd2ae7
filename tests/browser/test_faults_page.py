"""Faults and bad input on the stage page, in real headless Chromium (issue 7).

Each fault is injected into one stand-in server; each test checks what the audience sees:
a clear message on the affected side, the other side finishes, the page stays usable, and
the next run works without restarting the app. Core-level faults are covered without a
browser in tests/test_race_faults.py; a server down at start (speculative side), Stop, tab
close and escaping are in tests/browser/test_race_page.py.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import expect

from common.paths import ROOT
from common.waiting import wait_for
from demo.runs.store import list_runs, read_run
from harness.app_process import AppProcess, start_together
from harness.page_driver import PRESENT, choose, final_tile_value, open_page, screenshot, start, wait_finished
from harness.standin import Standin, StandinBehavior
from tests.browser.conftest import standin_pair
from tests.browser.test_race_page import PRESET_TITLE

pytestmark = pytest.mark.browser

READ_TIMEOUT_S = 2.0  # the page's inter-chunk timeout in these tests
TOKENS = 40
BASE = StandinBehavior(tokens_per_s=300, ttft_s=0.02)
SPEC = StandinBehavior(speculative=True, tokens_per_s=600, ttft_s=0.02, chunk_sizes=[1, 3])
SIDES = ("baseline", "speculative")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Standin]]:
    with standin_pair(BASE, SPEC) as pair:
        yield pair


@pytest.fixture(scope="module")
def apps(servers: dict[str, Standin], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, AppProcess]]:
    """The module's app ("main") and the one with malformed preset files ("presets", for its one
    test, which stops it), started together before the first test (see start_together)."""
    tmp = tmp_path_factory.mktemp("faults-app")
    pair = {"SPECDEMO_BASELINE_URL": servers["baseline"].url, "SPECDEMO_SPECULATIVE_URL": servers["speculative"].url}
    presets = tmp / "presets"
    shutil.copytree(ROOT / "presets", presets)
    (presets / "broken_field.yaml").write_text(yaml.safe_dump({
        "title": "Broken", "expect": "never shown", "max_tokens": -5,
        "messages": [{"role": "user", "content": "hi"}]}), encoding="utf-8")
    (presets / "broken_syntax.yaml").write_text("title: [unclosed\nexpect: x\n", encoding="utf-8")
    started = start_together({
        "main": {"env": {**pair, "SPECDEMO_RUNS_DIR": str(tmp / "runs"),
                         "SPECDEMO_READ_TIMEOUT_S": str(READ_TIMEOUT_S), "SPECDEMO_PROBE_TIMEOUT_S": "2"},
                 "log_path": tmp / "app.log"},
        "presets": {"env": {**pair, "SPECDEMO_PRESETS_DIR": str(presets), "SPECDEMO_SAVE_RUNS": "false"},
                    "log_path": tmp / "presets-app.log"},
    })
    started["main"].runs_dir = tmp / "runs"
    yield started
    for proc in started.values():
        proc.stop()


@pytest.fixture(scope="module")
def app(apps: dict[str, AppProcess]) -> AppProcess:
    return apps["main"]


@pytest.fixture(autouse=True)
def healthy(servers: dict[str, Standin]) -> Iterator[None]:
    """Every test starts, and leaves, both servers up and well-behaved."""
    for side, behavior in (("baseline", BASE), ("speculative", SPEC)):
        servers[side].behavior = behavior
    yield
    for side, behavior in (("baseline", BASE), ("speculative", SPEC)):
        if servers[side]._server is None:
            servers[side].start()
        servers[side].behavior = behavior


def other(side: str) -> str:
    return "speculative" if side == "baseline" else "baseline"


def status(page, side: str):
    """A side's status line (a locator: expect(...) waits for what it says)."""
    return page.locator(f"#sd-status-{side}")


def assert_next_run_works(page, servers: dict[str, Standin]) -> None:
    """Same page, same app process: a healthy run completes on both sides."""
    for side, behavior in (("baseline", BASE), ("speculative", SPEC)):
        servers[side].behavior = behavior
    start(page)
    assert wait_finished(page) == "done"
    for side in SIDES:
        expect(status(page, side)).to_contain_text("done")
        assert final_tile_value(page, side, "tokens") == TOKENS


def newest_run(app: AppProcess, before: set[Path]):
    new = [p for p in list_runs(app.runs_dir) if p not in before]
    assert len(new) == 1, new
    return read_run(new[0])


FAULTS = [
    # (side, stand-in fault, what the affected side's status must say)
    pytest.param("speculative", {"fault": "cut", "fault_after_chunks": 4}, ("cut after",), id="dies-mid-stream"),
    pytest.param("baseline", {"fault": "stall", "fault_after_chunks": 3, "stall_s": 8.0},
                 ("stalled", "SPECDEMO_READ_TIMEOUT_S"), id="stall"),
    pytest.param("speculative", {"fault": "too_long"}, ("HTTP 400", "maximum context length"), id="400-too-long"),
    pytest.param("baseline", {"fault": "server_error"}, ("HTTP 500", "see its log"), id="5xx"),
    pytest.param("speculative", {"fault": "garbage", "fault_after_chunks": 2}, ("not JSON",), id="garbage"),
]


@pytest.mark.parametrize(("side", "fault", "needles"), FAULTS)
def test_fault_on_one_side_is_said_there_and_the_other_side_finishes(
        page, app, servers, side: str, fault: dict, needles: tuple[str, ...]) -> None:
    servers[side].behavior = servers[side].behavior.model_copy(update=fault)
    runs_before = set(list_runs(app.runs_dir))
    open_page(page, app)
    choose(page, PRESET_TITLE, max_tokens=TOKENS)
    t0 = time.monotonic()
    start(page)
    assert wait_finished(page, 30_000) == "error"
    took = time.monotonic() - t0
    screenshot(page, f"fault-{fault['fault']}-{side}")
    shown = status(page, side)
    expect(shown).to_contain_text("failed", ignore_case=True)
    for needle in needles:
        expect(shown).to_contain_text(needle)
    expect(shown).to_contain_text(servers[side].url)  # says which server
    expect(status(page, other(side))).to_contain_text("done")
    assert final_tile_value(page, other(side), "tokens") == TOKENS
    expect(page.locator("#sd-speedup .sd-speedup")).to_have_attribute("data-state", "na")
    expect(page.locator("#sd-run-status")).to_contain_text(side)  # "<side> failed (see the pane)"
    if fault["fault"] == "stall":  # said within the timeout, not after the stall ends
        print(f"\n[stall] page said 'stalled' {took:.1f} s after Start (read timeout {READ_TIMEOUT_S:g} s)")
        assert took < fault["stall_s"]
    # Nothing lost: the run is saved with what arrived, marked incomplete.
    result = newest_run(app, runs_before)
    failed = getattr(result, side)
    assert failed.error and not failed.complete
    assert getattr(result, other(side)).complete
    if fault["fault"] in ("cut", "stall"):
        assert failed.completion_tokens and failed.text  # the tokens before the fault are kept
    wait_for(lambda: not servers[side].open_streams, 30, f"the {side} stand-in's failed stream closed")  # not hanging
    assert_next_run_works(page, servers)
    assert not page.console_errors, page.console_errors


def test_server_killed_mid_stream_then_restarted_between_runs(page, app, servers) -> None:
    spec = servers["speculative"]
    servers["baseline"].behavior = BASE.model_copy(update={"tokens_per_s": 60})
    spec.behavior = SPEC.model_copy(update={"tokens_per_s": 30})
    open_page(page, app)
    choose(page, PRESET_TITLE, max_tokens=TOKENS)
    start(page)
    page.wait_for_function(
        "() => (document.querySelector('#sd-text-speculative .sd-text')?.textContent ?? '').length > 5")
    spec.stop()  # the server process dies: its connections drop, its port closes
    assert wait_finished(page, 30_000) == "error"
    screenshot(page, "fault-killed-speculative")
    shown = status(page, "speculative")
    expect(shown).to_contain_text("failed", ignore_case=True)
    expect(shown).to_contain_text(spec.url)
    expect(status(page, "baseline")).to_contain_text("done")
    assert final_tile_value(page, "baseline", "tokens") == TOKENS
    # The page re-probed after the failure: the banner says the server is down and what to do.
    banner = page.locator("#sd-banner")
    expect(banner).to_contain_text("speculative server")
    expect(banner).to_contain_text("python -m servers up")
    spec.start()  # restarted on the same port: fresh process, /metrics counters reset
    page.click("#sd-refresh")
    page.wait_for_function("() => !document.querySelector('#sd-banner .sd-banner')", timeout=15_000)
    assert_next_run_works(page, servers)


@pytest.mark.parametrize("down", ["baseline"])  # the speculative side: test_race_page.py
def test_server_down_at_start_shows_its_banner_and_the_other_side_completes(
        page, app, servers, down: str) -> None:
    servers[down].stop()
    open_page(page, app)
    banner = page.locator("#sd-banner")
    for needle in (f"{down} server", servers[down].url, "python -m servers up"):
        expect(banner).to_contain_text(needle)
    choose(page, PRESET_TITLE, max_tokens=TOKENS)
    start(page)
    assert wait_finished(page, 30_000) == "error"
    screenshot(page, f"fault-down-at-start-{down}")
    expect(status(page, down)).to_contain_text("Cannot reach")
    expect(status(page, other(down))).to_contain_text("done")
    assert final_tile_value(page, other(down), "tokens") == TOKENS
    servers[down].start()
    page.click("#sd-refresh")
    page.wait_for_function("() => !document.querySelector('#sd-banner .sd-banner')", timeout=15_000)
    assert_next_run_works(page, servers)


def test_metrics_missing_says_why_acceptance_is_unknown_and_the_race_completes(
        page, app, servers) -> None:
    # No per-request numbers and no /metrics: acceptance cannot be known, everything else can.
    servers["speculative"].behavior = SPEC.model_copy(update={"metrics_mode": "missing",
                                                              "per_request_metrics": False})
    open_page(page, app)
    # The server panel says why KV-cache use is unknown.
    expect(page.locator('#sd-servers tr[data-side="speculative"]')).to_contain_text("HTTP 404")
    choose(page, PRESET_TITLE, max_tokens=TOKENS)
    start(page)
    assert wait_finished(page) == "done"
    screenshot(page, "fault-metrics-missing")
    tile = page.locator('#sd-tiles-speculative .sd-tile[data-key="acceptance_rate"]')
    expect(tile).to_have_attribute("class", re.compile("sd-na"))
    expect(tile).to_contain_text("HTTP 404")  # n/a, and why
    expect(page.locator('#sd-tiles-speculative .sd-tile[data-key="tokens_per_s"]')).to_have_attribute(
        "data-value", PRESENT)
    expect(page.locator("#sd-speedup .sd-speedup")).to_have_attribute("data-value", PRESENT)
    assert_next_run_works(page, servers)
    assert final_tile_value(page, "speculative", "acceptance_rate") > 0  # back once the server reports it


def test_bad_input_says_so_on_the_page_and_sends_nothing(page, app, servers) -> None:
    open_page(page, app)
    choose(page, PRESET_TITLE, max_tokens=TOKENS)
    started = {side: s.started for side, s in servers.items()}
    cases = [("prompt", "   ", "prompt is empty"), ("max", "0", "max_tokens"), ("max", "100000", "max_tokens")]
    for field, value, needle in cases:
        if field == "prompt":
            page.fill("#sd-prompt textarea", value)
        else:
            page.fill("#sd-prompt textarea", "Say hello.")
            page.fill("#sd-max-tokens input", value)
            page.press("#sd-max-tokens input", "Tab")
        start(page)
        assert wait_finished(page, 15_000) == "error", (field, value)
        expect(page.locator("#sd-run-status")).to_contain_text(needle)
    screenshot(page, "input-max-tokens-out-of-range")
    # Temperature: the slider's own box cannot hold an out-of-range value.
    box = page.locator("#sd-temperature input[type=number]")
    for typed, kept in (("5", 2.0), ("-1", 0.0)):
        box.fill(typed)
        box.press("Tab")
        page.wait_for_function("([v]) => Number(document.querySelector("
                               "'#sd-temperature input[type=number]').value) === v", arg=[kept])
    assert {side: s.started for side, s in servers.items()} == started  # nothing reached a server
    page.fill("#sd-max-tokens input", str(TOKENS))
    page.press("#sd-max-tokens input", "Tab")
    assert_next_run_works(page, servers)


def test_prompt_over_the_context_is_refused_before_sending(page, app, servers) -> None:
    spec = servers["speculative"]
    spec.behavior = SPEC.model_copy(update={"max_model_len": 8})  # /tokenize reports it
    started = spec.started
    open_page(page, app)
    choose(page, PRESET_TITLE, max_tokens=TOKENS)
    page.fill("#sd-prompt textarea", "word " * 50)
    start(page)
    assert wait_finished(page, 30_000) == "error"
    shown = status(page, "speculative")
    expect(shown).to_contain_text("max_model_len")
    expect(shown).to_contain_text("shorten the prompt")
    assert spec.started == started  # refused before sending
    expect(status(page, "baseline")).to_contain_text("done")
    assert_next_run_works(page, servers)


def test_malformed_preset_file_is_named_with_its_field_and_the_rest_load(page, apps) -> None:
    app = apps["presets"]  # the project's presets plus broken_field.yaml and broken_syntax.yaml
    good = sorted(p.stem for p in (ROOT / "presets").glob("*.yaml"))
    try:
        open_page(page, app)
        alert = page.get_by_role("alert").filter(has_text="broken_field.yaml")
        # (a pattern for "line ": a string's trailing space would be trimmed away)
        for needle in ("broken_field.yaml", "max_tokens", "broken_syntax.yaml", re.compile("line ")):
            expect(alert).to_contain_text(needle)
        screenshot(page, "preset-malformed-banner")
        page.click("#sd-preset input")
        expect(page.get_by_role("option")).to_have_count(len(good) + 1)  # every good preset, plus the free prompt
        options = page.get_by_role("option").all_text_contents()
        assert "Broken" not in options
        page.get_by_role("option", name=PRESET_TITLE).click()
        page.wait_for_function("() => document.querySelector('#sd-expect').textContent.includes('SQL')"
                               " || document.querySelector('#sd-prompt textarea').value.includes('SQL')")
        page.fill("#sd-max-tokens input", str(TOKENS))
        page.press("#sd-max-tokens input", "Tab")
        start(page)
        assert wait_finished(page) == "done"  # the page works with the presets that loaded
    finally:
        app.stop()


def test_a_prompt_over_the_size_limit_is_refused_on_the_page_and_nothing_is_sent(page, app, servers) -> None:
    runs_before = set(list_runs(app.runs_dir))
    sent = {side: (s.tokenized, len(s.requests), s.started) for side, s in servers.items()}
    open_page(page, app)
    choose(page, PRESET_TITLE, max_tokens=TOKENS)
    # 2,000,000 characters pasted at once (typing them would take the test minutes).
    page.evaluate("() => { const box = document.querySelector('#sd-prompt textarea');"
                  " box.value = 'x'.repeat(2000000); box.dispatchEvent(new Event('input', {bubbles: true})); }")
    start(page)
    assert wait_finished(page, 30_000, app=app) == "error"
    shown = page.locator("#sd-run-status")
    for needle in ("2,000,000 characters", "limit of 200,000", "SPECDEMO_MAX_PROMPT_CHARS"):
        expect(shown).to_contain_text(needle)
    screenshot(page, "input-prompt-over-the-size-limit")
    assert {side: (s.tokenized, len(s.requests), s.started) for side, s in servers.items()} == sent
    assert set(list_runs(app.runs_dir)) == runs_before  # no run file written
    page.fill("#sd-prompt textarea", "Say hello.")
    assert_next_run_works(page, servers)
    assert not page.console_errors, page.console_errors
