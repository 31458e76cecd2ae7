"""Does the page stay smooth? Prints the stage page's updates per second per pane.

Two stand-in servers stream (by default 60 and 150 tokens/s, the speculative one in bursts);
the page runs in a subprocess; headless Chromium (Debian's, /usr/bin/chromium) counts every
DOM change of each pane's text and tokens/s tile while it streams. Target: >= 10 updates/s
per pane (the page redraws at most ~20/s by design). Also checks that the page's final
figures are the saved RaceResult's. Exit status 1 when the target is missed.

It prints what the page costs per race: CPU seconds of the app process and of the browser
(Playwright's driver and Chromium). On the CPU laptop path that CPU is taken from the two
vLLM servers being measured. ``--busy N`` runs N busy-loop processes meanwhile, the way a
loaded 2-core machine (a CI runner, a laptop in a video call) leaves the page less CPU.

    python -m benchmarks.bench_ui_rate [--repeats 3] [--tokens 300] [--busy 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from demo.runs import list_runs, load_run
from servers.procs import children, cpu_seconds
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, AppProcess
from tests.browser.test_race_page import OBSERVER_JS, start, tile_value, updates_per_s, wait_finished
from tests.standin import Standin, StandinBehavior

TARGET_PER_S = 10.0


def browser_cpu_seconds(exclude: set[int]) -> float:
    """CPU seconds of this process's descendants (Playwright's driver, Chromium), less the
    subtrees of ``exclude`` (the app, the busy loops). Only processes alive now count."""
    kids = children()
    total, todo = 0.0, list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        total += cpu_seconds(pid) or 0.0
        todo.extend(kids.get(pid, []))
    return total


def _spin() -> None:
    while True:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--baseline-tokens-per-s", type=float, default=60)
    ap.add_argument("--speculative-tokens-per-s", type=float, default=150)
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes to run meanwhile")
    a = ap.parse_args()
    if not CHROMIUM.exists():
        print("needs Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium", file=sys.stderr)
        return 2
    rates: dict[str, list[float]] = {"baseline": [], "speculative": []}
    app_cpu: list[float] = []
    browser_cpu: list[float] = []
    mismatches = 0
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(a.busy)]
    for sp in spinners:
        sp.start()
    with tempfile.TemporaryDirectory() as tmp, \
            Standin(StandinBehavior(tokens_per_s=a.baseline_tokens_per_s)) as base, \
            Standin(StandinBehavior(speculative=True, tokens_per_s=a.speculative_tokens_per_s,
                                    chunk_sizes=[1, 3, 5, 2])) as spec:
        runs = Path(tmp) / "runs"
        app = AppProcess({"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url,
                          "SPECDEMO_RUNS_DIR": str(runs)}, Path(tmp) / "app.log")
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                page = browser.new_page(viewport=VIEWPORT)
                page.goto(app.url, timeout=30_000)
                page.wait_for_selector("#sd-servers table", timeout=30_000)
                page.fill("#sd-max-tokens input", str(a.tokens))
                page.press("#sd-max-tokens input", "Tab")
                print(f"{'run':>4} {'side':>12} {'text updates':>13} {'per s':>7} {'tok/s tile changes':>19}")
                for i in range(a.repeats):
                    page.evaluate(OBSERVER_JS)
                    not_browser = {app.proc.pid, *(sp.pid for sp in spinners if sp.pid)}
                    cpu0 = (cpu_seconds(app.proc.pid) or 0.0, browser_cpu_seconds(not_browser))
                    start(page)
                    if wait_finished(page, 120_000) != "done":
                        print("run failed:", page.text_content("#sd-run-status"), file=sys.stderr)
                        return 1
                    app_cpu.append((cpu_seconds(app.proc.pid) or 0.0) - cpu0[0])
                    browser_cpu.append(browser_cpu_seconds(not_browser) - cpu0[1])
                    print(f"{i:>4} CPU seconds this race: app {app_cpu[-1]:.2f}, browser {browser_cpu[-1]:.2f}")
                    rec = page.evaluate("() => window.__sd")
                    for side in ("baseline", "speculative"):
                        n, rate = updates_per_s(rec[side]["text"])
                        tiles, _ = updates_per_s(rec[side]["tps"])
                        rates[side].append(rate)
                        print(f"{i:>4} {side:>12} {n:>13} {rate:>7.1f} {tiles:>19}")
                    result = load_run(list_runs(runs)[0])
                    speedup_shown = page.get_attribute("#sd-speedup .sd-speedup", "data-value")
                    assert speedup_shown is not None, "the page shows no speedup"
                    shown = (tile_value(page, "baseline", "tokens_per_s"),
                             tile_value(page, "speculative", "tokens_per_s"),
                             float(speedup_shown))
                    truth = (result.baseline.decode_tokens_per_s, result.speculative.decode_tokens_per_s,
                             result.speedup)
                    mismatches += shown != truth
                browser.close()
        finally:
            app.stop()
            for sp in spinners:
                sp.terminate()
    ok = True
    for side, values in rates.items():
        med = statistics.median(values)
        print(f"{side}: median {med:.1f} updates/s per pane (min {min(values):.1f}); target >= {TARGET_PER_S:g}")
        ok &= med >= TARGET_PER_S
    print(f"CPU seconds per race (median): app {statistics.median(app_cpu):.2f}, "
          f"browser {statistics.median(browser_cpu):.2f}; busy-loop processes meanwhile: {a.busy}")
    print(f"page figures equal the saved RaceResult in {a.repeats - mismatches}/{a.repeats} runs")
    return 0 if ok and mismatches == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
