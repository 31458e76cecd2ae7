"""An answer that is a tool call on the stage page, in real headless Chromium: both stand-ins replay
the hermes tool-call stream captured from vLLM 0.32 (tests/fixtures/stream-chat-tool-call.sse),
each pane shows the call (name and arguments) and the badge says the answers are identical; when
the speculative side's call has no arguments, the badge says the calls differ."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from demo.race import compare
from demo.runs.export import export_file, player_data
from harness.app_process import AppProcess
from harness.page_driver import open_page, start, wait_finished
from harness.standin import FIXTURES, TOOL_CALL_FIXTURE, Standin, StandinBehavior
from tests.browser.conftest import exactly, standin_pair
from tests.test_tool_calls import REQ, replay_offline

pytestmark = pytest.mark.browser

BASE = StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=2.0)
SPEC = StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=4.0)
NO_ARGUMENTS = StandinBehavior(replay_fixture=FIXTURES / "stream-chat-tool-call-no-arguments.sse", replay_speed=4.0)
SIDES = ("baseline", "speculative")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Standin]]:
    with standin_pair(BASE, SPEC) as pair:
        yield pair


@pytest.fixture(scope="module")
def app(servers: dict[str, Standin], tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    tmp = tmp_path_factory.mktemp("tool-call-app")
    proc = AppProcess({"SPECDEMO_BASELINE_URL": servers["baseline"].url,
                       "SPECDEMO_SPECULATIVE_URL": servers["speculative"].url,
                       "SPECDEMO_SAVE_RUNS": "false", "SPECDEMO_PROBE_TIMEOUT_S": "2"}, tmp / "app.log")
    yield proc
    proc.stop()


def test_each_pane_shows_the_tool_call_and_the_badge_compares_the_calls(
        page, app: AppProcess, servers: dict[str, Standin]) -> None:
    open_page(page, app)
    start(page)
    assert wait_finished(page, app=app) == "done"
    for side in SIDES:
        call = page.locator(f'#sd-text-{side} .sd-tool-call[data-tool-call="0"]')
        expect(call.locator(".sd-tool-name")).to_have_text(exactly("get_weather"), use_inner_text=True)
        expect(call.locator(".sd-tool-args")).to_have_text(exactly('{"city": "Paris"}'), use_inner_text=True)
        expect(page.locator(f"#sd-text-{side} .sd-tool-call")).to_have_count(1)
    page.wait_for_selector('#sd-badge [data-identical="true"]', timeout=15_000)

    servers["speculative"].behavior = NO_ARGUMENTS
    start(page)
    assert wait_finished(page, app=app) == "done"
    page.wait_for_selector('#sd-badge [data-identical="false"]', timeout=15_000)
    for needle in ("Tool calls differ", 'get_weather({"city": "Paris"})'):
        expect(page.locator("#sd-badge")).to_contain_text(needle, use_inner_text=True)
    expect(page.locator("#sd-text-speculative .sd-tool-args")).to_have_text(exactly(""), use_inner_text=True)
    assert page.console_errors == []


def test_the_exported_race_shows_each_call(page, tmp_path) -> None:
    """The race's page for sharing (python -m demo export) plays the calls too, from the saved events."""
    result = compare(REQ, replay_offline(TOOL_CALL_FIXTURE).result(),
                     replay_offline(FIXTURES / "stream-chat-tool-call-no-arguments.sse", "speculative").result())
    calls = {side: player_data(result)["sides"][side]["tool_calls"] for side in SIDES}
    assert calls == {"baseline": [["get_weather", '{"city": "Paris"}']], "speculative": [["get_weather", ""]]}
    page.goto(export_file(result, tmp_path).as_uri())
    page.wait_for_selector('html[data-state="finished"]', timeout=30_000)
    for side, args in (("baseline", '{"city": "Paris"}'), ("speculative", "")):
        expect(page.locator(f"#text-{side} .sd-tool-call")).to_have_count(1)
        expect(page.locator(f"#text-{side} .sd-tool-name")).to_have_text(exactly("get_weather"), use_inner_text=True)
        expect(page.locator(f"#text-{side} .sd-tool-args")).to_have_text(exactly(args), use_inner_text=True)
    expect(page.locator("body")).to_contain_text("Tool calls differ", use_inner_text=True)
    assert page.console_errors == []
