"""The agent race on stage (issue 40) in real headless Chromium: the baseline, n-gram and suffix as
three panes playing the agent_session preset turn by turn. The stand-ins replay the hermes tool-call
streams captured from vLLM 0.32 (tests/fixtures/stream-chat-tool-call*.sse): the baseline the plain
server's, both arms the n-gram server's (its per-request acceptance, 23 of 32 drafted), at speeds
whose truth is known from the captures themselves. Each turn's speedup lands in the per-turn strip
while the next turn races, the headlines end on the session's speedup, each pane shows the call, the
identical badge holds, every side carried its own call into its next turn, and no console error.

Speeds on a busy 2-core machine are not asserted; ratios are, against the captures' own timing
replayed at known speeds (a tolerance for a ~0.5 s decode window), and every wait polls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from harness.app_process import AppProcess
from harness.page_driver import final_value, open_page, press_stop, screenshot, set_users, start, wait_finished
from harness.standin import FIXTURES, TOOL_CALL_FIXTURE, Standin, StandinBehavior
from tests.browser.conftest import exactly, pair_app
from tests.test_tool_calls import replay_offline

pytestmark = pytest.mark.browser

PRESET_TITLE = "Agent session (5 turns, tool calls)"
TURNS = 5
SPEC_FIXTURE = FIXTURES / "stream-chat-tool-call-speculative.sse"
# Replayed at half the speeds first chosen (2.0, 0.5, 1.0): a turn's decode window of 0.3-0.8 s read
# n-gram's turn 2 at 0.99x against its truth of 1.20x in a fresh-clone CI run (2026-12-04); 0.6-1.6 s
# windows halve a late wake-up's share. The truths' ratios, and the bound, are unchanged.
BASE_SPEED = 1.0
# name -> (pane key, replay speed of the speculative capture): suffix twice n-gram's speed.
ARMS = {"ngram": ("speculative", 0.25), "suffix": ("suffix", 0.5)}


def truth(name: str) -> float:
    """The arm's decode speedup over the baseline, from the captures' own times and the replay speeds."""
    base = replay_offline(TOOL_CALL_FIXTURE).result().decode_tokens_per_s
    spec = replay_offline(SPEC_FIXTURE, "speculative").result().decode_tokens_per_s
    assert base and spec
    return spec * ARMS[name][1] / (base * BASE_SPEED)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Standin, dict[str, Standin]]]:
    base = Standin(StandinBehavior(replay_fixture=TOOL_CALL_FIXTURE, replay_speed=BASE_SPEED)).start()
    arms = {name: Standin(StandinBehavior(replay_fixture=SPEC_FIXTURE, replay_speed=speed)).start()
            for name, (_key, speed) in ARMS.items()}
    yield base, arms
    for s in (base, *arms.values()):
        s.stop()


@pytest.fixture(scope="module")
def app(servers: tuple[Standin, dict[str, Standin]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    base, arms = servers
    tmp: Path = tmp_path_factory.mktemp("agents")
    entries = [{"name": n, "url": s.url, "method": n} for n, s in arms.items()]
    # As scripts/demo.sh --agents opens it (app.py --preset agent_session): on the session.
    proc = pair_app(base, arms["ngram"], tmp, SPECDEMO_ARMS=json.dumps(entries), SPECDEMO_UI_PRESET="agent_session")
    yield proc
    proc.stop()


# Every value the strip's data-turns takes (how many turns have landed), in order.
WATCH_STRIP_JS = """
() => {
  window.__landed = [];
  const el = document.querySelector('#sd-turns');
  new MutationObserver(() => {
    const strip = el.querySelector('.sd-turns');
    const n = strip ? Number(strip.dataset.turns) : -1;
    if (window.__landed[window.__landed.length - 1] !== n) window.__landed.push(n);
  }).observe(el, {childList: true, subtree: true, attributes: true});
}
"""


def test_three_panes_play_the_agent_session_turn_by_turn(page, app: AppProcess, servers) -> None:
    base, arms = servers
    open_page(page, app)
    expect(page.locator("#sd-preset input")).to_have_value(PRESET_TITLE)  # opened on the session
    page.evaluate(WATCH_STRIP_JS)
    start(page)
    page.wait_for_selector('#sd-turns .sd-turns[data-turns="2"]', timeout=60_000)
    screenshot(page, "agents-1-turns-landing")
    state = wait_finished(page, 120_000, app)
    assert state == "done", (page.inner_text("#sd-run-status"), page.inner_text("#sd-turns"),
                             [page.inner_text(f"#sd-status-{k}") for k in ("baseline", "speculative", "suffix")])
    screenshot(page, "agents-2-finished")
    # Each turn's speedup appeared as it landed: the strip went 1, 2, ... 5 turns, one at a time
    # (the log read once the strip shows the last turn, which may land after the run's status).
    expect(page.locator(f'#sd-turns .sd-turns[data-turns="{TURNS}"]')).to_be_attached()
    seen = [n for n in page.evaluate("window.__landed") if n > 0]  # -1: the strip redrawn
    landed = [n for i, n in enumerate(seen) if i == 0 or n != seen[i - 1]]
    assert landed == list(range(1, TURNS + 1)), landed
    # Each arm's own figures in its own row and pane: per turn and for the session, each arm's
    # truths 2x apart (suffix replays twice n-gram's speed), so the page shows suffix's figure above
    # n-gram's in every turn. How close each figure is to its truth is a timing claim, checked with
    # nothing beside it: tests/test_session_preset.py's truth test, in the timing stage.
    assert truth("suffix") / truth("ngram") == pytest.approx(2.0)
    figures: dict[str, list[float]] = {}
    for name, (key, _speed) in ARMS.items():
        row = page.locator(f'#sd-turns tr[data-arm="{name}"] td[data-state="landed"]')
        expect(row).to_have_count(TURNS)
        figures[name] = [final_value(row.nth(i)) for i in range(TURNS)]
        for i in range(TURNS):
            cell = row.nth(i)
            expect(cell).to_have_attribute("data-identical", "True")
            # the capture's 23 of 32, 3.875 tokens per step
            expect(cell).to_contain_text("72% · 3.88/step", use_inner_text=True)
        # The headline: the session's decode speedup over all five turns.
        head = page.locator(f'#sd-speedup-{key} .sd-speedup[data-session="{TURNS}"][data-state="final"]')
        figures[name].append(final_value(head))
        expect(head).to_contain_text("session decode speedup", use_inner_text=True)
        page.wait_for_selector(f'#sd-badge-{key} [data-identical="true"]', timeout=15_000)
    assert all(s > n > 0 for s, n in zip(figures["suffix"], figures["ngram"], strict=True)), figures
    # A tool call in each pane: the last turn's answer, name and arguments.
    for key in ("baseline", *(k for k, _s in ARMS.values())):
        call = page.locator(f'#sd-text-{key} .sd-tool-call[data-tool-call="0"]')
        expect(call.locator(".sd-tool-name")).to_have_text(exactly("get_weather"), use_inner_text=True)
        expect(call.locator(".sd-tool-args")).to_have_text(exactly('{"city": "Paris"}'), use_inner_text=True)
    expect(page.locator("#sd-run-status")).to_contain_text("session: 5 of 5 turns", use_inner_text=True)
    # The strip, the three panes and their answers on one 1280x720 screen (the answers give up its height).
    page.evaluate("window.scrollTo(0, 0)")
    for key in ("baseline", *(k for k, _s in ARMS.values())):
        box = page.locator(f"#sd-text-{key}").bounding_box()
        assert box is not None and box["y"] + box["height"] <= 720, (key, box)
    # Each side carried its own answer: its fifth request holds its four calls, each answered by
    # the logged tool result under that call's own id, and every side was offered the same tools.
    for server in (base, *arms.values()):
        bodies = [r.body for r in server.requests if r.path.endswith("/chat/completions")][-TURNS:]
        assert len(bodies) == TURNS
        assert all(b["tools"] == bodies[0]["tools"] and len(b["tools"]) == 4 for b in bodies)
        history = bodies[-1]["messages"]
        calls = [m for m in history if m["role"] == "assistant"]
        results = [m for m in history if m["role"] == "tool"]
        assert len(calls) == len(results) == TURNS - 1
        for call, result in zip(calls, results, strict=True):
            assert call["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
            assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert page.console_errors == []


def test_stop_ends_the_session_and_more_users_are_refused_in_one_line(page, app: AppProcess, servers) -> None:
    base, arms = servers
    open_page(page, app)
    set_users(page, 2)
    start(page)
    assert wait_finished(page, 30_000, app) == "error"
    refused = "is a session of 5 turns: it races one user. Set Users to 1."
    line = page.locator("#sd-run-status .sd-run-status")  # (not Gradio's timer beside it)
    expect(line).to_contain_text(refused, use_inner_text=True)
    status = line.inner_text()  # read once it says so: one line
    assert refused in status and "\n" not in status.strip()
    set_users(page, 1)
    sent = [len(s.requests) for s in (base, *arms.values())]
    start(page)
    page.wait_for_selector('#sd-turns .sd-turns[data-turns="1"]', timeout=60_000)
    press_stop(page)
    assert wait_finished(page, 30_000, app) == "stopped"
    # Stop ended the session in its second turn: no third turn was sent, the first stays in the strip.
    page.wait_for_timeout(1_000)
    after = [len(s.requests) - n for s, n in zip((base, *arms.values()), sent, strict=True)]
    assert max(after) <= 2 and after[0] >= 1, after  # a side's generation requests: turn 1 and, at most, turn 2
    row = page.locator('#sd-turns tr[data-arm="suffix"]')
    expect(row.locator('td[data-state="landed"]')).to_have_count(1)
    expect(row.locator('td[data-turn="2"]')).to_have_attribute("data-state", "stopped")
    expect(page.locator("#sd-run-status")).to_contain_text("session: 1 of 5 turns", use_inner_text=True)
    assert page.console_errors == []
