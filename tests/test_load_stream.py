"""The page's load sweep without a browser: demo/live/load_stream.py's frames against stand-ins
whose per-stream speed falls with the streams in flight (tests/test_load_sweep.py's: designed to
pay up to 2 users and lose from 4; here each frame says what its own steps found), Stop, the stream
budget, a server failing mid-sweep, the panel's bad input, and saved load sweeps.

Gates are the budget's, not the clock's: a test that must act between two steps holds streams
of the budget so that the next step waits for it (and says so), then lets it go.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import gradio as gr
import pytest

from common.waiting import wait_for
from demo.errors import BadInput
from demo.live.budget import StreamBudget
from demo.live.load_stream import LoadFrame, load_frames
from demo.live.session import RaceControl
from demo.load.engine import LoadResult, LoadSpec, load_spec, request_from_race
from demo.results import RaceRequest
from demo.runs.replay import run_label
from demo.runs.store import read_load, read_run, save_load, stem_parts
from demo.settings import Settings
from demo.sweep.crossover import find_crossover
from demo.ui import load_panel
from demo.workload import WorkloadRequest
from harness.standin import Standin
from harness.standin_process import StandinProcess
from tests import test_load_sweep
from tests.test_load_sweep import MAX_TOKENS, USERS

# The load sweep's fixtures of its stand-ins: ``pair`` in this process, ``apart`` in their own.
pair, apart = test_load_sweep.pair, test_load_sweep.apart
REQUEST = WorkloadRequest(id="prompt", api="chat", messages=[{"role": "user", "content": "hi"}])


def settings_for(base: Standin | StandinProcess, spec: Standin | StandinProcess, tmp_path: Path) -> Settings:
    return Settings(baseline_url=base.url, speculative_url=spec.url, read_timeout_s=10, runs_dir=tmp_path / "runs")


def spec_for(settings: Settings, users: list[int], max_tokens: int = MAX_TOKENS) -> LoadSpec:
    return LoadSpec(users=users, workload="prompt", max_tokens=max_tokens, temperature=0,
                    baseline_url=settings.baseline_url, speculative_url=settings.speculative_url)


async def collect(frames: AsyncIterator[LoadFrame], on_frame: Callable[[LoadFrame], None] | None = None,
                  timeout_s: float = 120) -> list[LoadFrame]:
    out: list[LoadFrame] = []

    async def run() -> None:
        async for f in frames:
            out.append(f)
            if on_frame is not None:
                on_frame(f)

    await asyncio.wait_for(run(), timeout_s)
    return out


def test_frames_draw_each_step_and_find_the_crossover(apart, tmp_path: Path) -> None:
    base, spec = apart
    settings = settings_for(base, spec, tmp_path)
    budget = StreamBudget(settings.stream_budget())
    frames = asyncio.run(collect(load_frames(spec_for(settings, USERS), REQUEST, settings, RaceControl(), budget)))
    # A frame with the curves redrawn after each step, the steps so far in it, before the last frame.
    stepped = [f for f in frames if f.steps is not None and f.result is None and f.steps]
    counts = [len(f.steps or []) for f in stepped]  # the last step may come with the end frame only
    assert counts[:3] == [1, 2, 3] and counts in ([1, 2, 3], [1, 2, 3, 4]), counts
    for f in stepped:
        assert f.per_user_figure is not None and f.total_figure is not None and f.table is not None
        assert len(f.per_user_figure.data[0].x) == len(f.steps or [])  # one point per step so far, per side
        assert len(f.table) == len(f.steps or [])
    end = frames[-1]
    assert end.result is not None and not end.result.interrupted
    assert [s.users for s in end.result.steps] == USERS and all(s.status == "ok" for s in end.result.steps)
    cross = end.result.crossover
    # The frame says the crossover its result found from its own steps. Which counts it pays at rests
    # on measured timing here: the designed 2 and 4 against the stand-ins' truth are the timing stage's
    # (tests/test_load_sweep.py, test_load_sweep_speedup_matches_truth_and_finds_the_crossover), the
    # crossover of given steps tests/test_given_clock.py's.
    assert cross == find_crossover([(s.users, s.speedup) for s in end.result.steps])
    assert end.crossover_text == cross.text and cross.text.startswith("speculation ")
    assert (f'data-pays-up-to="{cross.pays_up_to_users or ""}" '
            f'data-loses-from="{cross.loses_from_users or ""}"') in (end.crossover or "")
    assert "GAIN_WORTH" in (end.crossover or "") and "GAIN_NONE" in (end.crossover or "")
    assert 'data-state="done"' in (end.status or "") and "run saved" in (end.status or "")
    # Pressure per step in the table: queue, KV-cache peak, preemptions (the stand-ins queue nothing).
    assert end.table is not None and all(row[6] == "0 / 0" and row[8] == "0 / 0" for row in end.table)
    # Progress said between steps, with the step and the batch.
    assert any(f.progress and "step 3 of 4: 4 users" in f.progress for f in frames)
    assert budget.in_use == 0 and budget.waiting == 0
    # Saved like a race: kind "load", read back whole; the Replay tab's reader says what it is.
    (saved,) = (tmp_path / "runs").glob("*-load.json")
    assert json.loads(saved.read_text())["kind"] == "load"
    assert read_load(saved).crossover == cross
    with pytest.raises(BadInput, match="is a saved load sweep, not a race"):
        read_run(saved)


def test_stop_mid_sweep_leaves_no_stream_open(pair, tmp_path: Path) -> None:
    base, spec = pair
    settings = settings_for(base, spec, tmp_path)
    budget = StreamBudget(settings.stream_budget())
    control = RaceControl()

    def on_frame(f: LoadFrame) -> None:  # Stop while the second step's streams are open
        if f.progress and "step 2 of 3" in f.progress and base.open_streams + spec.open_streams > 0:
            control.stop.set()

    frames = asyncio.run(collect(load_frames(spec_for(settings, [1, 4, 8], max_tokens=200), REQUEST, settings,
                                             control, budget), on_frame))
    assert control.stop.is_set(), "the second step was never seen streaming"
    end = frames[-1]
    assert end.result is not None and end.result.interrupted
    assert 'data-state="stopped"' in (end.status or "") and "every stream was closed" in (end.status or "")
    assert end.result.steps[0].status == "ok" and 8 not in [s.users for s in end.result.steps]
    wait_for(lambda: base.open_streams == 0 and spec.open_streams == 0, 5, "both stand-ins' streams closed")
    assert budget.in_use == 0 and budget.waiting == 0


def test_each_step_waits_for_the_budget_and_a_failing_server_fails_only_its_step(pair, tmp_path: Path) -> None:
    base, spec = pair
    settings = settings_for(base, spec, tmp_path)
    budget = StreamBudget(3)  # sequential: steps of 1, 2, 3 users hold 1, 2, 3 streams
    other = budget.ask(2)  # another viewer's: step 1 fits beside it, step 2 waits
    assert other.granted
    held = [other]
    seen: list[str] = []

    def on_frame(f: LoadFrame) -> None:
        if f.progress is None or not f.progress.startswith("step") or "waiting for" not in f.progress:
            return
        step = f.progress.split(":")[0]
        if step in seen:
            return
        seen.append(step)
        if step == "step 2 of 3":  # the speculative server fails this step; the next fits 1 held stream
            spec.behavior.fault = "server_error"
            held.pop().release()
            held.append(budget.ask(1))
        elif step == "step 3 of 3":  # it is back for the last step
            spec.behavior.fault = None
            held.pop().release()

    frames = asyncio.run(collect(load_frames(spec_for(settings, [1, 2, 3], max_tokens=20), REQUEST, settings,
                                             RaceControl(), budget), on_frame))
    assert seen == ["step 2 of 3", "step 3 of 3"]
    waiting = next(f for f in frames if f.progress and "waiting for" in f.progress)
    assert 'data-state="waiting"' in (waiting.status or "")
    assert "of the page's 3 are in use by other viewers" in (waiting.progress or "")
    end = frames[-1]
    assert end.result is not None
    ok1, failed, ok3 = end.result.steps
    assert ok1.status == ok3.status == "ok" and failed.status == "failed" and failed.speedup is None
    assert any("HTTP 500" in e for e in failed.speculative.errors)
    assert end.table is not None and "HTTP 500" in end.table[1][-1]  # the error in the step's notes
    assert end.result.crossover.measured_users == [1, 3]  # the failed step is left out, not guessed
    assert budget.in_use == 0 and budget.waiting == 0


def test_a_sweep_larger_than_the_budget_is_refused_in_one_line(tmp_path: Path) -> None:
    settings = Settings(baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:9",
                        runs_dir=tmp_path)
    spec = spec_for(settings, [1, 8]).model_copy(update={"order": "simultaneous"})
    frames = asyncio.run(collect(load_frames(spec, REQUEST, settings, RaceControl(), StreamBudget(10))))
    (only,) = frames
    assert 'data-state="error"' in (only.status or "")
    assert only.progress == ("8 users in simultaneous order need 16 streams at once, over the page's budget of 10 "
                             "(SPECDEMO_MAX_STREAMS): ask for fewer users or the sequential order")


@pytest.mark.parametrize(("bad", "words"), [
    ("0", "users must be from 1 to 32"), ("-1", "users must be from 1 to 32"),
    ("1000000", "users must be from 1 to 32"), ("10^6", "whole numbers"), ("2.5", "whole numbers"),
    ("many", "whole numbers"), ("", "users is empty"),
])
def test_bad_user_counts_are_one_line_on_the_panel(bad: str, words: str, tmp_path: Path) -> None:
    settings = Settings(baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:9", runs_dir=tmp_path)
    with gr.Blocks():
        panel = load_panel.build(settings, StreamBudget(64))

    async def run() -> list[list]:
        return [v async for v in panel.on_run(bad, "sequential", 60, "json_reformat", None, None, None, "users",
                                             "1", 8, None, None)]  # type: ignore[arg-type]  # no gr.Request

    (values,) = asyncio.run(run())  # one update: the status line, nothing sent
    status = values[panel.live_outputs.index(panel.status)]
    assert 'data-state="error"' in status and words.lower() in status.lower()
    assert "\n" not in status and status.count("<div") == 1
    assert panel.registry.active() == 0 and panel.registry.get("no-session") is None


def test_the_panel_builds_the_request_of_the_race_tab(tmp_path: Path) -> None:
    settings = Settings(runs_dir=tmp_path)
    with gr.Blocks():
        panel = load_panel.build(settings, StreamBudget(64))
    load, wreq = panel.prepare("4, 1,2", "sequential", 48, "json_reformat", None, None, None)
    assert load.users == [1, 2, 4] and load.order == "sequential" and load.max_tokens == 48
    assert load.workload == "json_reformat" and wreq.messages
    # a free prompt typed in the Race tab's box
    load, wreq = panel.prepare("1", "simultaneous", 20, "json_reformat", "Count to ten", 0.5, None)
    assert load.workload == "prompt" and load.temperature == 0.5
    assert wreq.messages is not None and wreq.messages[0].content == "Count to ten"
    with pytest.raises(ValueError, match="prompt is empty"):
        panel.prepare("1", "sequential", 20, "json_reformat", "  ", 0.0, None)
    with pytest.raises(ValueError, match="max tokens is empty"):
        panel.prepare("1", "sequential", None, "json_reformat", None, None, None)


def test_load_spec_is_the_clis_and_the_pages(tmp_path: Path) -> None:
    settings = Settings(runs_dir=tmp_path)
    req = RaceRequest(prompt="hi", max_tokens=10)
    assert load_spec(settings, req, [1, 2], "sequential").users == [1, 2]
    with pytest.raises(ValueError) as e:
        load_spec(settings, req, [1], "sequential", repeats=0)
    assert "\n" not in str(e.value) and "repeats" in str(e.value)
    assert request_from_race(req).prompt == "hi"


def test_a_saved_load_sweep_is_named_and_listed_as_one(tmp_path: Path) -> None:
    settings = Settings(runs_dir=tmp_path)
    path = save_load(LoadResult(spec=spec_for(settings, [1])), tmp_path)
    assert path.name.endswith("-prompt-load.json") and path.parent == tmp_path
    assert run_label(path).endswith(" · prompt · load sweep")
    assert stem_parts(path) is None  # never taken for a race (the booth's recordings, pruning's kept runs)
    assert read_load(path).spec.users == [1]
