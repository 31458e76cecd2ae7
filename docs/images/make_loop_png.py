"""Remake docs/images/loop-label.png: the stage page after a real json_reformat race, with the loop
label under the speedup (the default model ends its answer in '"book", ' repeated).

    .venv/bin/python -m servers up --detach      # the real CPU pair on 127.0.0.1:8000/8001
    .venv/bin/python docs/images/make_loop_png.py

Unlike race.png, this picture needs the real servers: the loop is the real model's. The page runs
as `python app.py` on a free port (harness/app_process.py), in sequential order, 400 tokens.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.app_process import AppProcess  # noqa: E402
from harness.chromium import VIEWPORT, launch  # noqa: E402
from harness.page_driver import choose, open_page, save_docs_png, start, wait_finished  # noqa: E402

OUT = ROOT / "docs" / "images" / "loop-label.png"
MAX_BYTES = 200_000


def main() -> int:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        app = AppProcess({"SPECDEMO_SAVE_RUNS": "false"}, Path(tmp) / "app.log")
        try:
            with sync_playwright() as pw:
                browser = launch(pw)
                page = browser.new_page(viewport=VIEWPORT)
                open_page(page, app)
                choose(page, "JSON reformat (copy-heavy)", 400, order="sequential")
                start(page)
                state = wait_finished(page, timeout_ms=300_000, app=app)
                if state != "done" or not page.query_selector("#sd-speedup .sd-loop"):
                    print(f"the race ended {state!r} without a loop label: nothing written", file=sys.stderr)
                    return 1
                page.wait_for_timeout(1000)
                png = page.screenshot()
                browser.close()
        finally:
            app.stop()
    return 0 if save_docs_png(png, OUT, MAX_BYTES) else 1


if __name__ == "__main__":
    sys.exit(main())
