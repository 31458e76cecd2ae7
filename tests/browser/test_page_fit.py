"""The page at the stage's 1280x720 in real headless Chromium, against stand-ins: the tables'
headers never break inside a word (each on one line; a wide table scrolls sideways), and a
download box takes no room until there is a file in it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from common.waiting import held_within
from harness.app_process import AppProcess
from harness.page_driver import choose, open_page, screenshot, start, wait_finished
from harness.standin import StandinBehavior
from tests.browser.conftest import pair_app, standin_pair

pytestmark = pytest.mark.browser

# Each header cell of Run history and of the load table: its text, its label's height and the
# label's one line-height (pixels).
HEADERS_JS = """() => [...document.querySelectorAll('#sd-history th .header, #sd-load-table th .header')]
  .map(e => [e.innerText, e.getBoundingClientRect().height, parseFloat(getComputedStyle(e).lineHeight)])"""
# The empty download boxes of the Race tab: the race's page and the load sweep's files.
DOWNLOAD_BOXES = ("#sd-export-file", "#sd-load-files")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    with standin_pair(StandinBehavior(), StandinBehavior(speculative=True)) as pair:
        proc = pair_app(pair["baseline"], pair["speculative"], tmp_path_factory.mktemp("fit"))
        try:
            yield proc
        finally:
            proc.stop()


def test_table_headers_stay_on_one_line_and_empty_downloads_take_no_room(app, page) -> None:
    open_page(page, app)

    # Both tables' headers drawn (waited for), then read once: a header on two lines fails.
    held_within(lambda: len(page.evaluate(HEADERS_JS)) == 11 + 10, 30)
    headers = page.evaluate(HEADERS_JS)
    assert len(headers) == 11 + 10, headers  # Run history's columns, then the load table's
    broken = [(text, height) for text, height, line in headers if height > line * 1.5]
    screenshot(page, "fit-1-headers")
    assert not broken, f"header cells on more than one line at 1280x720: {broken}"
    for box in DOWNLOAD_BOXES:
        assert page.locator(box).bounding_box() is None, f"{box} takes room while empty"
    choose(page, "SQL from a schema", 30)
    start(page)
    assert wait_finished(page, app=app) == "done"
    page.click("#sd-export")
    page.wait_for_function("() => document.querySelector('#sd-export-file')?.innerText.includes('.html')",
                           timeout=60_000)

    def export_box() -> dict | None:
        return page.locator("#sd-export-file").bounding_box()

    held_within(lambda: (b := export_box()) is not None and b["height"] > 20, 30)  # laid out with its file
    shown = export_box()
    assert shown is not None and shown["height"] > 20, shown  # with its file, the box shows
    page.locator("#sd-export-file").scroll_into_view_if_needed()
    screenshot(page, "fit-2-exported")
