"""Remake docs/images/race-three-arms.png: the stage page after a race of three arms, in headless
Chromium at 1280x720.

    .venv/bin/python docs/images/make_arms_png.py

The servers are the test stand-ins (harness/standin/) on free ports, not vLLM: the picture shows
the page, and its figures are the stand-ins' (baseline 40 tokens/s one token a step; arms at 3.0x,
2.0x and 1.2x its speed, each in its own steps), not a measurement. The page runs as `python app.py`
on a free port with SPECDEMO_ARMS (harness/app_process.py); nothing touches ports 8000/8001/7860.
The order is the page's default for CPU servers: sequential, with the line saying why.
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from docs.images.make_race_png import PRESET_TITLE, answer_pieces  # noqa: E402
from harness.app_process import AppProcess  # noqa: E402
from harness.chromium import VIEWPORT, launch  # noqa: E402
from harness.page_driver import race_to_the_end  # noqa: E402
from harness.standin import Standin, StandinBehavior  # noqa: E402

OUT = ROOT / "docs" / "images" / "race-three-arms.png"
MAX_BYTES = 200_000
ARMS = {"eagle3": (120, [1, 3, 5, 4], "EAGLE-3"), "ngram": (80, [1, 3, 2], "n-gram"),
        "draft": (48, [1, 2], "draft model")}


def main() -> int:
    from PIL import Image
    from playwright.sync_api import sync_playwright

    pieces = answer_pieces()
    base = Standin(StandinBehavior(tokens_per_s=40, pieces=pieces, stop_at_end_of_pieces=True)).start()
    arms = {name: Standin(StandinBehavior(speculative=True, tokens_per_s=rate, chunk_sizes=chunks, pieces=pieces,
                                          stop_at_end_of_pieces=True)).start()
            for name, (rate, chunks, _method) in ARMS.items()}
    entries = [{"name": n, "url": s.url, "method": ARMS[n][2]} for n, s in arms.items()]
    with tempfile.TemporaryDirectory() as tmp:
        app = AppProcess({"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": arms["eagle3"].url,
                          "SPECDEMO_ARMS": json.dumps(entries), "SPECDEMO_SAVE_RUNS": "false"}, Path(tmp) / "app.log")
        try:
            with sync_playwright() as pw:
                browser = launch(pw)
                page = browser.new_page(viewport=VIEWPORT)
                race_to_the_end(page, app, PRESET_TITLE, timeout_ms=180_000)
                page.wait_for_selector('#sd-badge-draft [data-identical="true"]', timeout=30_000)
                page.evaluate("window.scrollTo(0, 0)")
                page.wait_for_timeout(1000)
                png = page.screenshot()
                browser.close()
        finally:
            app.stop()
            for s in (base, *arms.values()):
                s.stop()
    img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    img.save(OUT, optimize=True)  # 1280x720, as the page is shown: every pane readable
    size = OUT.stat().st_size
    print(f"wrote {OUT.relative_to(ROOT)}: {img.width}x{img.height}, {size:,} bytes")
    return 0 if size <= MAX_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
