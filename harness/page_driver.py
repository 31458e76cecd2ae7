"""Driving the page in Playwright: open it (the Race or the Evaluate tab), choose a preset and the
users, press Start or Run, wait for the end, read a tile, count DOM updates, save a screenshot.
Shared by the browser tests and the benchmarks."""

from __future__ import annotations

import re
from pathlib import Path

from demo.results import SIDES
from harness import ROOT
from harness.app_process import AppProcess

ARTIFACTS = ROOT / "artifacts"  # screenshots (git-ignored)

# Counts, per pane, every DOM update of the text and of the tokens/s tile, with the time
# and the content it then showed, so a test can tell real updates from re-renders.
OBSERVER_JS = """
() => {
  window.__sd = {};
  for (const side of ['baseline', 'speculative']) {
    const rec = {text: [], tps: [], tokens: []};
    window.__sd[side] = rec;
    const textEl = document.querySelector('#sd-text-' + side);
    new MutationObserver(() => {
      const t = textEl.querySelector('.sd-text');
      rec.text.push([performance.now(), t ? t.textContent.length : 0]);
    }).observe(textEl, {childList: true, subtree: true, characterData: true});
    const tilesEl = document.querySelector('#sd-tiles-' + side);
    new MutationObserver(() => {
      const v = tilesEl.querySelector('[data-key="tokens_per_s"] .sd-tile-value');
      rec.tps.push([performance.now(), v ? v.textContent : '']);
      const n = tilesEl.querySelector('[data-key="tokens"] .sd-tile-value');
      rec.tokens.push([performance.now(), n ? n.textContent : '']);
    }).observe(tilesEl, {childList: true, subtree: true, characterData: true});
  }
}
"""


def screenshot(pg, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    pg.screenshot(path=str(path))
    return path


# Opening the page is not what a test measures: on a 2-core machine beside two busy loops,
# Chromium takes over 30 s to load and run Gradio's bundle. A wait ends as soon as it holds.
PAGE_LOAD_TIMEOUT_MS = 120_000


def open_page(page, app: AppProcess) -> None:
    page.goto(app.url, timeout=PAGE_LOAD_TIMEOUT_MS)
    page.wait_for_selector("#sd-start", timeout=PAGE_LOAD_TIMEOUT_MS)
    page.wait_for_selector("#sd-servers table", timeout=PAGE_LOAD_TIMEOUT_MS)  # the load-time probe answered


def select_preset(page, preset_title: str) -> None:
    """Pick the preset in the dropdown (nothing when it is the one shown) and wait for it to fill
    the fields, which it does asynchronously."""
    if page.input_value("#sd-preset input") != preset_title:
        before = page.text_content("#sd-expect")
        page.click("#sd-preset input")
        page.get_by_role("option", name=preset_title).click()
        page.wait_for_function("b => document.querySelector('#sd-expect').textContent !== b", arg=before)
        page.wait_for_timeout(200)


def race_to_the_end(page, app: AppProcess, preset_title: str, timeout_ms: int = 120_000) -> None:
    """Open the page, race ``preset_title`` as the preset sets it, and wait until it is done (the
    docs' screenshots)."""
    open_page(page, app)
    select_preset(page, preset_title)
    page.wait_for_timeout(100)
    page.click("#sd-start")
    page.wait_for_selector('#sd-run-status .sd-run-status[data-state="done"]', timeout=timeout_ms)


def open_evaluate(page, app: AppProcess) -> None:
    """Open the page on its Evaluate tab, at a size that shows the report."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(app.url, timeout=PAGE_LOAD_TIMEOUT_MS)
    page.get_by_role("tab", name="Evaluate").click(timeout=PAGE_LOAD_TIMEOUT_MS)
    page.wait_for_selector("#sd-eval-run", timeout=PAGE_LOAD_TIMEOUT_MS)


def fill_field(page, selector: str, value: str) -> None:
    """Type ``value`` into a Gradio field and leave it (Tab), so the page takes it."""
    page.fill(selector, value)
    page.press(selector, "Tab")


def run_evaluate(page, concurrency: str, max_tokens: int, failure: str, timeout_ms: int = 90_000,
                 **fields: str) -> None:
    """Set the Evaluate tab's concurrency, max tokens, no warm-up and ``fields`` (element id without
    the ``sd-eval-`` prefix -> value, e.g. ``slo_ttft="5000"``), press Run and wait until it is done;
    a screenshot named ``failure`` when it is not."""
    page.fill("#sd-eval-conc textarea, #sd-eval-conc input", concurrency)
    fill_field(page, "#sd-eval-max-tokens input", str(max_tokens))
    fill_field(page, "#sd-eval-warmup input", "0")
    for key, value in fields.items():
        fill_field(page, f"#sd-eval-{key.replace('_', '-')} input", value)
    page.click("#sd-eval-run")
    try:
        page.wait_for_selector('#sd-eval-status [data-state="done"]', timeout=timeout_ms)
    except Exception:
        screenshot(page, failure)
        raise


def choose(page, preset_title: str, max_tokens: int, order: str = "simultaneous") -> None:
    select_preset(page, preset_title)  # before overriding max tokens, which the preset sets
    page.fill("#sd-max-tokens input", str(max_tokens))
    page.press("#sd-max-tokens input", "Tab")
    if order == "sequential":
        page.get_by_label("Sequential A/B").check()


def set_users(page, users: int) -> None:
    """The Race tab's Users control (N streams per server; 1 is the one race)."""
    page.fill("#sd-users input", str(users))
    page.press("#sd-users input", "Tab")


def start(page, key: bool = False) -> None:
    """Press Start (or Ctrl+Enter); the old status is marked first so a wait can't match it."""
    page.evaluate("() => { const e = document.querySelector('#sd-run-status .sd-run-status');"
                  " if (e) e.dataset.state = 'old'; }")
    if key:
        page.keyboard.press("Control+Enter")
    else:
        page.click("#sd-start")


def press_stop(page) -> None:
    """Press Stop and return once the app has run its handler (its response came back), so that
    what the test does next cannot overtake the Stop."""
    with page.expect_response(lambda r: r.request.method == "POST" and "/run/" in r.url, timeout=60_000):
        page.click("#sd-stop")


def wait_finished(page, timeout_ms: int = 60_000, app: AppProcess | None = None) -> str:
    """The run's final state; when it never comes, the failure shows the page's status, the
    text of both panes and (given ``app``) the end of the app's log."""
    try:
        page.wait_for_selector(
            '#sd-run-status .sd-run-status:is([data-state="done"],[data-state="stopped"],[data-state="error"])',
            timeout=timeout_ms)
    except Exception:
        screenshot(page, "failure-not-finished")
        panes = {side: page.inner_text(f"#sd-pane-{side}")[-400:] for side in SIDES}
        log = app.output()[-3000:] if app is not None else "(no app given)"
        raise AssertionError(f"the run did not finish; console errors: {page.console_errors}; status: "
                             + page.inner_html("#sd-run-status .html-container")[-500:]
                             + f"\npanes: {panes}\napp log:\n{log}") from None
    return page.get_attribute("#sd-run-status .sd-run-status", "data-state")


def tile_value(page, side: str, key: str) -> float | None:
    raw = page.get_attribute(f'#sd-tiles-{side} .sd-tile[data-key="{key}"]', "data-value")
    return None if raw is None else float(raw)


# For to_have_attribute(name, PRESENT): the attribute is there, whatever its value ("^" matches any
# text; a missing attribute matches nothing; Playwright reads an empty pattern as the text "").
PRESENT = re.compile("^")


def settled_state(over_bound: str | None) -> str:
    """The data-state a finished headline settles in, as its saved record decides it: "over-bound"
    when the record says the speedup is over the bound (demo.measure.over_bound: a slowed baseline,
    which a busy machine causes with stand-ins too; the page then flags it instead of headlining it),
    "final" otherwise. A test of what the page or an export shows reads the record, not the clock."""
    return "over-bound" if over_bound is not None else "final"


def final_value(locator, timeout_ms: int = 30_000) -> float:
    """The exact figure a tile or headline carries in data-value, which it has only once final:
    waited for (Playwright's expect), since the page may draw it a moment after the run's status."""
    from playwright.sync_api import expect

    expect(locator).to_have_attribute("data-value", PRESENT, timeout=timeout_ms)
    raw = locator.get_attribute("data-value")
    assert raw is not None
    return float(raw)


def final_tile_value(page, side: str, key: str, timeout_ms: int = 30_000) -> float:
    """tile_value once the tile is final: waits for its data-value."""
    return final_value(page.locator(f'#sd-tiles-{side} .sd-tile[data-key="{key}"]'), timeout_ms)


def updates_per_s(samples: list[list[float | int | str]]) -> tuple[int, float]:
    """(content changes, changes per second) over the span in which the content changed. Empty
    content (a pane cleared at the start, a side still waiting its turn) is not counted: the
    rate is that of the side's own streaming."""
    changes: list[float] = []
    last: object = None
    for t, content in samples:
        if content and content != last:
            changes.append(float(t))
            last = content
    if len(changes) < 2:
        return len(changes), 0.0
    return len(changes), (len(changes) - 1) / ((changes[-1] - changes[0]) / 1000)


def save_docs_png(png: bytes, out: Path, max_bytes: int) -> bool:
    """A 1280x720 screenshot as a docs picture: 960x540, 128 colours. True when it fits max_bytes."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    img = img.resize((960, 540), Image.Resampling.LANCZOS).quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    img.save(out, optimize=True)
    size = out.stat().st_size
    print(f"wrote {out.relative_to(ROOT)}: {img.width}x{img.height}, {size:,} bytes")
    return size <= max_bytes
