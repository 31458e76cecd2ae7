"""The page and the CLI put their imports out of the garbage collector's reach before they measure
(demo.client.settle_heap): a full collection over them paused the client ~100 ms, and a pause at a
stream's first or last token moves its rate. While a race or a batch streams, the collector is off
(demo.client.collector_paused), and on again once no measured run is left."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

import app
import demo.cli.race
from demo import client
from demo.client import collector_paused, make_http_client
from demo.race import stream_race
from demo.results import Message, RaceRequest
from demo.settings import Settings
from demo.sweep import runner
from harness import ROOT
from harness.standin import Standin, StandinBehavior

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
    monkeypatch.setattr(demo.cli.race, "run_race", race_then_ctrl_c)
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


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector on, as in a fresh process, and as it was afterwards."""
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_overlapping_runs_keep_the_collector_off_until_the_last_ends(collector_on: None) -> None:
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled(), "another run still streams"
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("a run that fails")
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_turned_off_by_someone_else_stays_off(collector_on: None) -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_runs_that_overlap_too_long_get_one_collection(collector_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    collected: list[int] = []

    def collect(*_args: object) -> int:
        collected.append(1)
        return 0

    monkeypatch.setattr(client.gc, "collect", collect)
    monkeypatch.setattr(client, "MAX_COLLECTOR_PAUSE_S", 0.0)
    with collector_paused(), collector_paused():
        assert collected == [1] and not gc.isenabled()
    assert gc.isenabled()


REQ = RaceRequest(messages=[Message(role="user", content="hello")], max_tokens=40)


def test_a_race_streams_with_the_collector_off_and_turns_it_on_after(collector_on: None) -> None:
    seen: list[bool] = []
    with Standin(StandinBehavior(tokens_per_s=200)) as b, Standin(StandinBehavior(tokens_per_s=400,
                                                                                   speculative=True)) as s:
        settings = Settings(baseline_url=b.url, speculative_url=s.url, save_runs=False)

        async def go() -> None:
            async for snap in stream_race(REQ.model_copy(update={"order": "simultaneous"}), settings):
                if snap.result is None and snap.baseline.completion_tokens:
                    seen.append(gc.isenabled())  # mid-stream

        asyncio.run(go())
    assert seen and not any(seen), "the collector ran while the race streamed"
    assert gc.isenabled()


def test_a_batch_streams_with_the_collector_off_and_turns_it_on_after(collector_on: None) -> None:
    seen: list[bool] = []
    with Standin(StandinBehavior(tokens_per_s=200)) as s:
        settings = Settings(baseline_url=s.url, speculative_url=s.url, save_runs=False)

        async def go() -> None:
            async with make_http_client(settings, "baseline") as http:
                server = runner.ServerHandle("baseline", s.url, None, http)
                stats, _ = await runner.run_batch(http, server, [REQ, REQ], 2, settings,
                                                  observe=lambda *_: seen.append(gc.isenabled()))
                assert stats.ok_requests == 2

        asyncio.run(go())
    assert seen and not any(seen), "the collector ran while the batch streamed"
    assert gc.isenabled()
