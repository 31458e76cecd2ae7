"""Remake docs/images/race.png: the stage page after a race, in headless Chromium at 1280x720.

    .venv/bin/python docs/images/make_race_png.py

The servers are the test stand-ins (harness/standin/) on free ports, not vLLM: the picture shows
the page, and its figures are the stand-ins' (baseline 40 tokens/s one token a step, speculative
100 tokens/s in steps of 1/3/5/2 tokens), not a measurement. The page runs as `python app.py` on a
free port (harness/app_process.py); nothing touches ports 8000/8001/7860.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.app_process import AppProcess  # noqa: E402
from harness.chromium import VIEWPORT, launch  # noqa: E402
from harness.page_driver import race_to_the_end, save_docs_png  # noqa: E402
from harness.standin import Standin, StandinBehavior  # noqa: E402

OUT = ROOT / "docs" / "images" / "race.png"
PRESET_TITLE = "JSON reformat (copy-heavy)"
MAX_BYTES = 150_000


def answer_pieces() -> list[str]:
    """The json_reformat preset's answer (its record, pretty-printed), cut into token-sized pieces."""
    import yaml

    preset = yaml.safe_load((ROOT / "presets" / "json_reformat.yaml").read_text(encoding="utf-8"))
    prompt = preset["messages"][-1]["content"]
    record = json.loads(prompt[prompt.index("{") : prompt.rindex("}") + 1])
    return re.findall(r"\s+|\w{1,6}|[^\w\s]", json.dumps(record, indent=2))


def main() -> int:
    from playwright.sync_api import sync_playwright

    pieces = answer_pieces()
    base = Standin(StandinBehavior(tokens_per_s=40, pieces=pieces, stop_at_end_of_pieces=True)).start()
    spec = Standin(StandinBehavior(speculative=True, tokens_per_s=100, chunk_sizes=[1, 3, 5, 2],
                                   pieces=pieces, stop_at_end_of_pieces=True)).start()
    with tempfile.TemporaryDirectory() as tmp:
        app = AppProcess({"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url,
                          "SPECDEMO_SAVE_RUNS": "false", "SPECDEMO_SPEC_METHOD": "ngram",
                          "SPECDEMO_SPEC_NUM_TOKENS": "4"}, Path(tmp) / "app.log")
        try:
            with sync_playwright() as pw:
                browser = launch(pw)
                page = browser.new_page(viewport=VIEWPORT)
                race_to_the_end(page, app, PRESET_TITLE, timeout_ms=120_000)
                page.wait_for_timeout(1000)
                png = page.screenshot()
                browser.close()
        finally:
            app.stop()
            base.stop()
            spec.stop()
    return 0 if save_docs_png(png, OUT, MAX_BYTES) else 1


if __name__ == "__main__":
    sys.exit(main())
