"""The page and the CLI put their imports out of the garbage collector's reach before they measure
(demo.client.settle_heap): a full collection over them paused the client ~100 ms, and a pause at a
stream's first or last token moves its rate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import app
import demo.cli
from harness import ROOT

PROBE = """
import gc, json
import demo.ui.app  # the page's imports: the most the client's process holds
from demo.client import settle_heap
before = len(gc.get_objects())
settle_heap()
print(json.dumps({"before": before, "after": len(gc.get_objects()), "frozen": gc.get_freeze_count()}))
"""


def test_a_settled_heap_leaves_the_collector_almost_nothing_to_walk() -> None:
    # a fresh interpreter: this worker's heap is already settled (tests/conftest.py)
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["before"] > 50_000  # what a full collection walked
    assert counts["after"] < counts["before"] / 100 and counts["frozen"] > counts["before"] / 2


def test_the_cli_settles_the_heap_before_it_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def race_then_ctrl_c(*_args: object) -> None:
        calls.append("race")
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.cli, "settle_heap", lambda: calls.append("settle"))
    monkeypatch.setattr(demo.cli, "run_race", race_then_ctrl_c)
    code = demo.cli.main(["race", "--baseline-url", "http://127.0.0.1:9", "--speculative-url", "http://127.0.0.1:9",
                          "--prompt", "hi"])
    assert code == 130 and calls == ["settle", "race"]


def test_the_page_settles_the_heap_before_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Page:
        def launch(self, **_kwargs: object) -> None:
            calls.append("launch")

    async def no_servers(_settings: object) -> list:
        return []

    monkeypatch.setattr(app, "probe_servers", no_servers)
    monkeypatch.setattr(app, "terminal_report", lambda _infos: "")
    def build(_settings: object) -> Page:
        calls.append("build")
        return Page()

    monkeypatch.setattr(app, "build_app", build)
    monkeypatch.setattr(app, "settle_heap", lambda: calls.append("settle"))
    assert app.main([]) == 0
    assert calls == ["build", "settle", "launch"]
