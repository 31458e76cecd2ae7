"""An exported race.html in real headless Chromium: it plays at the recorded timing, both panes end
on the saved texts with burst shading, the saved figures appear, model output stays text, and the
page makes no network request and logs no error. Saves a screenshot to artifacts/."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from demo.results import RaceResult
from demo.runs.export import export_file, player_data
from demo.runs.store import read_run
from demo.settings import ROOT
from demo.view import pane_key
from harness.chromium import CHROMIUM, launch
from tests.test_export import EVIL, make_arms_run, make_run

pytestmark = pytest.mark.browser



@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[RaceResult, Path]:
    # 150 tokens at 100 tok/s: a playback of about 1.5 seconds, to watch it grow.
    result = read_run(make_run(tmp_path_factory.mktemp("runs"), max_tokens=150))
    return result, export_file(result, tmp_path_factory.mktemp("export"))


def test_exported_race_plays_offline_without_errors(exported: tuple[RaceResult, Path]) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium")
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (requirements-dev.txt)")
    result, page_path = exported
    # Its own Playwright, in its own thread: another test module may hold a browser in this one.
    with ThreadPoolExecutor(1) as pool:
        seen = pool.submit(play_in_chromium, page_path).result()
    assert seen["errors"] == [], seen["errors"]
    assert seen["requests"] == [page_path.as_uri()], f"the page tried the network: {seen['requests']}"
    assert seen["pwned"] is None  # the planted <img onerror> never ran

    # Real timing. The log starts when the player empties the panes (its clock's zero); a busy
    # machine may show chunks late, never early, and the final figures wait for the recording's end.
    chunks = player_data(result)["sides"]["baseline"]["chunks"]
    log = seen["growth"]
    assert log[0][1] == 0 and log[0][2] is False
    t0_ms = log[0][0]
    for ms, n, final, live in log[1:]:
        due = sum(len(c[4]) for c in chunks if c[0] <= (ms - t0_ms) / 1000 + 0.05)
        assert n <= due, f"{n} characters shown at {ms - t0_ms:.0f} ms, only {due} recorded by then"
        if n < len(result.baseline.text):
            assert not final and live  # live tiles while it streams, figures at the end
    assert any(0 < n < len(result.baseline.text) for _ms, n, _f, _l in log), log  # it streamed
    finished_ms = next(ms for ms, _n, final, _l in log if final)
    assert (finished_ms - t0_ms) / 1000 >= player_data(result)["duration_s"] - 0.05, log
    for side in ("baseline", "speculative"):
        saved = getattr(result, side)
        end = seen["end"][side]
        assert end["text"] == saved.text and EVIL in end["text"]  # the payload shows as text
        assert end["status"] == "done" and end["tokens"] == str(saved.completion_tokens)
        assert end["final_value"] == repr(saved.decode_tokens_per_s)
        assert end["live_shown"] is False and end["final_shown"] is True  # final tiles replace the live ones
    assert {"b3", "b4"} <= set(seen["end"]["speculative"]["classes"])
    assert seen["end"]["baseline"]["classes"] == []
    assert seen["end"]["speedup"] == repr(result.speedup)
    assert seen["end"]["final_hidden"] is False
    # Replay starts over from empty panes, and plays to the same end.
    assert seen["replay"]["state"] == "playing" and seen["replay"]["speculative"] != result.speculative.text
    assert seen["replay_end"] == result.speculative.text


# Runs before the page's own script (Playwright injects it; the page's CSP does not apply): logs
# (ms since navigation, baseline text length, final figures visible, live tiles visible) on each change.
GROWTH_LOG = """
window.__growth = [];
new MutationObserver(() => {
  const text = document.getElementById("text-baseline");
  if (!text) return;
  const n = text.textContent.length, log = window.__growth, last = log[log.length - 1];
  const final = document.getElementById("final").checkVisibility();
  const live = document.getElementById("live-baseline").checkVisibility();
  // A new entry when the text grew or the tiles changed: the final figures may show in a later
  // mutation than the last characters (on a busy machine), and must still be logged.
  if (last && last[1] === n && last[2] === final && last[3] === live) return;
  log.push([performance.now(), n, final, live]);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


# Each change of the page's state (playing, finished) with the speculative pane's text at that moment.
STATE_LOG = """() => {
  window.__states = [];
  new MutationObserver(() => window.__states.push(
      [document.documentElement.dataset.state, document.getElementById("text-speculative").textContent]))
    .observe(document.documentElement, {attributes: true, attributeFilter: ["data-state"]});
}"""


@contextmanager
def offline_page(seen: dict[str, Any]) -> Iterator[Any]:
    """A Chromium page that may load only file:// URLs: every request is recorded in
    ``seen["requests"]`` (any other is aborted), console errors and uncaught exceptions in
    ``seen["errors"]``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()

            def route(r: Any) -> None:
                seen["requests"].append(r.request.url)
                if r.request.url.startswith("file://"):
                    r.continue_()
                else:
                    r.abort()

            page.route("**/*", route)
            page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: seen["errors"].append(f"uncaught: {e}"))
            yield page
        finally:
            browser.close()


def play_in_chromium(page_path: Path) -> dict[str, Any]:
    from playwright.sync_api import expect

    seen: dict[str, Any] = {"errors": [], "requests": []}

    def panes(page: Any) -> dict[str, Any]:
        return page.evaluate("""() => {
            const out = {state: document.documentElement.dataset.state,
                         final_hidden: !document.getElementById("final").checkVisibility(),
                         speedup: document.querySelector("#final .sd-speedup").dataset.value ?? null};
            for (const side of ["baseline", "speculative"]) {
                const text = document.getElementById("text-" + side);
                out[side] = {text: text.textContent,
                             classes: [...new Set([...text.querySelectorAll("span")].map(s => s.className))],
                             status: document.getElementById("status-" + side).dataset.state,
                             tokens: document.getElementById("tokens-" + side).textContent,
                             live_shown: document.getElementById("live-" + side).checkVisibility(),
                             final_shown: document.getElementById("final-" + side).checkVisibility(),
                             final_value: document.querySelector(
                                 `#final-${side} [data-key="tokens_per_s"]`).dataset.value ?? null};
            }
            return out;
        }""")

    with offline_page(seen) as page:
        page.add_init_script(GROWTH_LOG)
        page.goto(page_path.as_uri(), wait_until="load")
        page.wait_for_selector("html[data-state=finished]", state="attached", timeout=20_000)
        seen["end"] = {k: v for k, v in panes(page).items()}
        seen["growth"] = page.evaluate("window.__growth")
        seen["pwned"] = page.evaluate("window.__pwned ?? null")
        page.locator("details").evaluate("d => d.open = true")
        artifacts = ROOT / "artifacts"
        artifacts.mkdir(exist_ok=True)
        page.screenshot(path=str(artifacts / "export-race.png"), full_page=True)
        # Replay: the page as it stood when the player set its state (a look after the click
        # could come after the 1.5 s playback's end on a busy machine), logged by an observer.
        page.evaluate(STATE_LOG)
        page.click("#replay")
        page.wait_for_function("() => window.__states.length > 0", timeout=15_000)
        state, text = page.evaluate("window.__states[0]")
        seen["replay"] = {"state": state, "speculative": text}
        page.click("#skip")  # and "skip to the end" shows it all at once
        page.wait_for_selector("html[data-state=finished]", state="attached", timeout=15_000)
        seen["replay_end"] = panes(page)["speculative"]["text"]
        expect(page.locator("#prompt")).to_contain_text(EVIL, timeout=15_000)
    json.dumps(seen)  # plain data only
    return seen


def test_an_exported_race_of_three_arms_plays_every_pane(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium")
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (requirements-dev.txt)")
    result = read_run(make_arms_run(tmp_path / "runs"))
    page_path = export_file(result, tmp_path / "export")
    with ThreadPoolExecutor(1) as pool:
        seen = pool.submit(play_arms_in_chromium, page_path, player_data(result)["panes"]).result()
    assert seen["errors"] == [], seen["errors"]
    assert seen["requests"] == [page_path.as_uri()], f"the page tried the network: {seen['requests']}"
    assert seen["pwned"] is None
    sides = {"baseline": result.baseline, "speculative": result.speculative,
             **{pane_key(i, n): a.side for i, (n, a) in enumerate(result.arms.items()) if i}}
    for pane, saved in sides.items():
        end = seen["panes"][pane]
        assert end["text"] == saved.text and EVIL in end["text"], pane
        assert end["status"] == "done" and end["tokens"] == str(saved.completion_tokens), pane
        assert end["final_shown"] is True, pane
    assert seen["speedups"] == {n: repr(a.speedup) for n, a in result.arms.items()}
    assert seen["chart_lines"] == player_data(result)["panes"]  # a line per server, drawn at the end


def play_arms_in_chromium(page_path: Path, panes: list[str]) -> dict[str, Any]:
    seen: dict[str, Any] = {"errors": [], "requests": []}
    with offline_page(seen) as page:
        page.goto(page_path.as_uri(), wait_until="load")
        page.wait_for_selector("html[data-state=finished]", state="attached", timeout=20_000)
        seen["panes"] = page.evaluate("""(panes) => Object.fromEntries(panes.map(p => [p, {
            text: document.getElementById("text-" + p).textContent,
            status: document.getElementById("status-" + p).dataset.state,
            tokens: document.getElementById("tokens-" + p).textContent,
            final_shown: document.getElementById("final-" + p).checkVisibility()}]))""", panes)
        seen["speedups"] = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
            "#final .x-arm")].map(a => [a.dataset.arm, a.querySelector(".sd-speedup").dataset.value]))""")
        seen["pwned"] = page.evaluate("window.__pwned ?? null")
        seen["chart_lines"] = page.evaluate("""() => [...document.querySelectorAll("#x-chart polyline")]
            .filter(l => l.checkVisibility() && l.getBBox().width > 100).map(l => l.dataset.pane)""")
        artifacts = ROOT / "artifacts"
        artifacts.mkdir(exist_ok=True)
        page.screenshot(path=str(artifacts / "export-race-arms.png"), full_page=True)
    return seen
