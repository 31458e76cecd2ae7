"""Does the page stay smooth, and what does it cost? Prints the stage page's updates per second
per pane, and the CPU the page takes per race.

The page runs in a subprocess; headless Chromium (Debian's, /usr/bin/chromium) counts every DOM
change of each pane's text and tokens/s tile while it streams. Target: >= 10 updates/s per pane
(the page redraws at most 12.5 times a second by design). Also checks that the page's final figures are the
saved RaceResult's. Exit status 1 when the target is missed.

It prints what the page costs per race: CPU seconds of the app process and of the browser
(Playwright's driver and Chromium). On the CPU laptop path that CPU is taken from the two
vLLM servers being measured.

``--servers standin`` (the default): two stand-in servers stream (by default 60 and 150
tokens/s, the speculative one in bursts). ``--busy N`` runs N busy-loop processes meanwhile, the
way a loaded 2-core machine (a CI runner, a laptop in a video call) leaves the page less CPU.

``--servers real``: the running pair (`python -m servers up`, the app's default URLs) races
``--preset`` through the page, each repeat once in simultaneous order and once in sequential
A/B, and prints the simultaneous / sequential ratio of the two speedups, both measured through the
page (goal >= 0.85, docs/benchmarks.md). A pane there updates as fast as its server sends, below
10 a second on CPU servers, so the update target is not judged; the exit status is 1 only when a
race fails or the page's figures differ from the saved run.

    python -m benchmarks.bench_ui_rate [--repeats 3] [--tokens 300] [--busy 2]
    python -m benchmarks.bench_ui_rate --servers real --preset json_reformat --repeats 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from playwright.sync_api import Page, sync_playwright

from common.procstat import cpu_seconds
from demo import view
from demo.fmt import fmt_speedup
from demo.presets import Preset, load_presets
from demo.results import SIDES, RaceResult
from demo.runs.store import list_runs, read_run
from demo.settings import Settings
from harness.app_process import AppProcess
from harness.chromium import CHROMIUM, VIEWPORT, launch
from harness.page_driver import OBSERVER_JS, choose, start, tile_value, updates_per_s, wait_finished
from harness.standin import Standin, StandinBehavior
from servers.procs import children

TARGET_PER_S = 10.0
RATIO_GOAL = 0.85  # simultaneous speedup / sequential speedup (docs/benchmarks.md)
RACE_TIMEOUT_MS = 300_000  # a CPU race of a long preset, sequential, takes minutes


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


class PageRace(NamedTuple):
    """One race through the page: updates per pane, CPU of the app and the browser, and whether
    the page's figures were the saved RaceResult's."""

    updates: dict[str, tuple[int, float, int]]  # side -> (text updates, per s, tokens/s tile changes)
    app_cpu_s: float
    browser_cpu_s: float
    result: RaceResult
    page_matches: bool


def race_on_page(page: Page, app: AppProcess, not_browser: set[int], runs: Path) -> PageRace | None:
    """Press Start, wait for the finish, and read what the page showed; None if the run failed."""
    page.evaluate(OBSERVER_JS)
    cpu0 = (cpu_seconds(app.proc.pid) or 0.0, browser_cpu_seconds(not_browser))
    start(page)
    if wait_finished(page, RACE_TIMEOUT_MS) != "done":
        print("run failed:", page.text_content("#sd-run-status"), file=sys.stderr)
        return None
    app_cpu = (cpu_seconds(app.proc.pid) or 0.0) - cpu0[0]
    browser_cpu = browser_cpu_seconds(not_browser) - cpu0[1]
    rec = page.evaluate("() => window.__sd")
    updates: dict[str, tuple[int, float, int]] = {}
    for side in SIDES:
        n, rate = updates_per_s(rec[side]["text"])
        tiles, _ = updates_per_s(rec[side]["tps"])
        updates[side] = (n, rate, tiles)
    result = read_run(list_runs(runs)[0])
    speedup_shown = page.get_attribute("#sd-speedup .sd-speedup", "data-value")
    assert speedup_shown is not None, "the page shows no speedup"
    shown = (tile_value(page, "baseline", "tokens_per_s"), tile_value(page, "speculative", "tokens_per_s"),
             float(speedup_shown))
    truth = (result.baseline.decode_tokens_per_s, result.speculative.decode_tokens_per_s, result.speedup)
    return PageRace(updates, app_cpu, browser_cpu, result, shown == truth)


def set_order(page: Page, order: str) -> None:
    page.get_by_label("Sequential A/B" if order == "sequential" else "Race", exact=True).check()


def _spin() -> None:
    while True:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", choices=["standin", "real"], default="standin")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=300, help="max tokens (stand-ins; real: the preset's)")
    ap.add_argument("--preset", default="json_reformat", help="the preset raced on real servers")
    ap.add_argument("--baseline-tokens-per-s", type=float, default=60)
    ap.add_argument("--speculative-tokens-per-s", type=float, default=150)
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes to run meanwhile")
    a = ap.parse_args()
    if not CHROMIUM.exists():
        print("needs Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium", file=sys.stderr)
        return 2
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(a.busy)]
    for sp in spinners:
        sp.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = Path(tmp) / "runs"
            env = {"SPECDEMO_RUNS_DIR": str(runs)}
            if a.servers == "real":
                settings = Settings()
                presets, _errors = load_presets(settings.presets_dir)
                if a.preset not in presets:
                    print(f"no preset {a.preset!r}; there are: {', '.join(sorted(presets))}", file=sys.stderr)
                    return 2
                return run_real(a, env, Path(tmp), runs, presets[a.preset], spinners)
            with Standin(StandinBehavior(tokens_per_s=a.baseline_tokens_per_s)) as base, \
                    Standin(StandinBehavior(speculative=True, tokens_per_s=a.speculative_tokens_per_s,
                                            chunk_sizes=[1, 3, 5, 2])) as spec:
                env.update({"SPECDEMO_BASELINE_URL": base.url, "SPECDEMO_SPECULATIVE_URL": spec.url})
                return run_standin(a, env, Path(tmp), runs, spinners)
    finally:
        for sp in spinners:
            sp.terminate()


def _print_race(i: int, label: str, r: PageRace) -> None:
    print(f"{i:>4} {label}: CPU seconds this race: app {r.app_cpu_s:.2f}, browser {r.browser_cpu_s:.2f}; "
          f"speedup {fmt_speedup(r.result.speedup)}; page figures {'=' if r.page_matches else '!='} saved run")
    for side, (n, rate, tiles) in r.updates.items():
        print(f"{i:>4} {side:>12} {n:>13} {rate:>7.1f} {tiles:>19}")


def _summary(races: list[PageRace], busy: int, judge_rate: bool = True) -> bool:
    """Prints the medians; False when a target is missed (the update rate only if ``judge_rate``)."""
    ok = True
    for side in SIDES:
        values = [r.updates[side][1] for r in races]
        med = statistics.median(values)
        target = f"target >= {TARGET_PER_S:g}" if judge_rate else "as fast as the server sends: not judged"
        print(f"{side}: median {med:.1f} updates/s per pane (min {min(values):.1f}); {target}")
        ok &= med >= TARGET_PER_S or not judge_rate
    tokens = statistics.median(r.result.baseline.completion_tokens or 0 for r in races)
    print(f"CPU seconds per race (median): app {statistics.median(r.app_cpu_s for r in races):.2f}, "
          f"browser {statistics.median(r.browser_cpu_s for r in races):.2f} ({tokens:.0f} tokens a side); "
          f"busy-loop processes meanwhile: {busy}")
    matches = sum(r.page_matches for r in races)
    print(f"page figures equal the saved RaceResult in {matches}/{len(races)} runs")
    return ok and matches == len(races)


@contextmanager
def page_session(env: dict[str, str], tmp: Path, spinners: list[multiprocessing.Process]
                 ) -> Iterator[tuple[AppProcess, Page, set[int]]]:
    """The app on ``env``, headless Chromium on its page once the servers answered, and the PIDs
    whose CPU is not the browser's; closed and stopped on the way out."""
    app = AppProcess(env, tmp / "app.log")
    try:
        with sync_playwright() as p:
            browser = launch(p)
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(app.url, timeout=30_000)
            page.wait_for_selector("#sd-servers table", timeout=30_000)
            yield app, page, {app.proc.pid, *(sp.pid for sp in spinners if sp.pid)}
            browser.close()
    finally:
        app.stop()


HEADER = f"{'run':>4} {'side':>12} {'text updates':>13} {'per s':>7} {'tok/s tile changes':>19}"


def run_standin(a: argparse.Namespace, env: dict[str, str], tmp: Path, runs: Path,
                spinners: list[multiprocessing.Process]) -> int:
    races: list[PageRace] = []
    with page_session(env, tmp, spinners) as (app, page, not_browser):
        page.fill("#sd-max-tokens input", str(a.tokens))
        page.press("#sd-max-tokens input", "Tab")
        print(HEADER)
        for i in range(a.repeats):
            r = race_on_page(page, app, not_browser, runs)
            if r is None:
                return 1
            races.append(r)
            _print_race(i, "race", r)
    return 0 if _summary(races, a.busy) else 1


def run_real(a: argparse.Namespace, env: dict[str, str], tmp: Path, runs: Path, preset: Preset,
             spinners: list[multiprocessing.Process]) -> int:
    by_order: dict[str, list[PageRace]] = {"simultaneous": [], "sequential": []}
    with page_session(env, tmp, spinners) as (app, page, not_browser):
        choose(page, preset.title, preset.max_tokens)
        print(f"{preset.name} on the running pair, {preset.max_tokens} max tokens, through the page; "
              f"started {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}")
        print(HEADER)
        for i in range(a.repeats):
            for order in ("simultaneous", "sequential"):
                set_order(page, order)
                r = race_on_page(page, app, not_browser, runs)
                if r is None:
                    return 1
                by_order[order].append(r)
                _print_race(i, view.ORDER_LABELS[order], r)
    simultaneous = [r.result.speedup for r in by_order["simultaneous"] if r.result.speedup is not None]
    sequential = [r.result.speedup for r in by_order["sequential"] if r.result.speedup is not None]
    ok = _summary(by_order["simultaneous"], a.busy, judge_rate=False)
    if simultaneous and sequential:
        rm, sq = statistics.median(simultaneous), statistics.median(sequential)
        print(f"simultaneous / sequential: {fmt_speedup(rm)} / {fmt_speedup(sq)} = {rm / sq:.2f} "
              f"(medians of {len(simultaneous)} and {len(sequential)}; goal >= {RATIO_GOAL:g})")
    else:
        print("simultaneous / sequential: n/a (a race reported no speedup)")
    print(f"done {datetime.now(UTC):%H:%M} UTC, load {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
