"""Replay of saved races: real timing, the same figures as saved, labelled as a recording."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from demo.race import run_race
from demo.replay import replay_snapshots, run_label, timeline
from demo.results import Message, RaceRequest, RaceResult, RaceSnapshot
from demo.runs import read_run, save_run
from demo.settings import Settings
from demo.view import recording_banner_html
from harness.ports import free_port
from harness.standin import Standin, StandinBehavior

REQ = RaceRequest(preset="json_reformat", messages=[Message(role="user", content="Reformat <b>this</b>")],
                  max_tokens=40, order="simultaneous")


def saved_race(tmp_path: Path, base_url: str | None = None) -> Path:
    base_b = StandinBehavior(tokens_per_s=100, ttft_s=0.05, pieces=[" <i>x</i>", " y"])
    spec_b = StandinBehavior(tokens_per_s=250, ttft_s=0.05, speculative=True, chunk_sizes=[3, 1, 4],
                             pieces=[" <i>x</i>", " y"])
    with Standin(base_b) as base, Standin(spec_b) as spec:
        settings = Settings(baseline_url=base_url or base.url, speculative_url=spec.url, save_runs=False)
        result = asyncio.run(run_race(REQ, settings))
    return save_run(result, tmp_path)


def play(result: RaceResult) -> list[tuple[float, RaceSnapshot]]:
    async def go() -> list[tuple[float, RaceSnapshot]]:
        t0 = time.perf_counter()
        return [(time.perf_counter() - t0, s) async for s in replay_snapshots(result)]
    return asyncio.run(go())


def test_replay_runs_at_the_recorded_timing_and_ends_on_the_saved_figures(tmp_path: Path) -> None:
    result = read_run(saved_race(tmp_path))
    frames = play(result)
    last_event = max(t for t, _s, _e in timeline(result))
    took = frames[-1][0]
    assert last_event - 0.01 <= took <= last_event + 0.3  # real timing, not instant, not slowed
    final = frames[-1][1]
    assert final.result == result  # the saved figures, not recomputed ones
    assert final.baseline.text == result.baseline.text and final.speculative.text == result.speculative.text
    assert final.speculative.completion_tokens == result.speculative.completion_tokens
    # Tokens appear over time, never ahead of the recording.
    for wall, snap in frames[:-1]:
        for side in ("baseline", "speculative"):
            arrived = sum(n for t, n, _ in getattr(snap, side).bursts)
            recorded = getattr(result, side)
            due = [e for e in recorded.events if e.t_s <= wall + 0.02 and e.completion_tokens is not None]
            assert arrived <= max((e.completion_tokens for e in due), default=0)
    mid = [s for w, s in frames if 0.2 < w < last_event - 0.1]
    assert mid and any(0 < (s.baseline.completion_tokens or 0) < 40 for s in mid)  # it streamed


def test_a_failed_side_replays_as_failed(tmp_path: Path) -> None:
    result = read_run(saved_race(tmp_path, base_url=f"http://127.0.0.1:{free_port()}"))
    assert result.baseline.error
    final = play(result)[-1][1]
    assert final.baseline.status == "error" and final.baseline.error == result.baseline.error
    assert final.speculative.status == "done"


def test_labels_say_recording_and_escape(tmp_path: Path) -> None:
    path = saved_race(tmp_path)
    result = read_run(path)
    banner = recording_banner_html(result)
    assert "RECORDING of " + result.started_at.strftime("%Y-%m-%d %H:%M:%S UTC") + ", not live" in banner
    assert run_label(path).endswith("· json_reformat · Simultaneous race")
    bad = result.model_copy(update={"preset": "<script>x</script>"})
    assert "<script>" not in recording_banner_html(bad)


@pytest.mark.parametrize("name", ["weird.json", "20261129T130049396717-x-race.json"])
def test_run_label_never_fails(name: str) -> None:
    assert run_label(Path(name))
