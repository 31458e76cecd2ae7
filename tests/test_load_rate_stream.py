"""The page's load panel in requests per second without a browser: demo/live/load_stream.py's frames of an
open-loop sweep on tests/test_load_rate.py's stand-ins (their step time grows with the running batch), a
frame per finished rate step whose table rows are the RateStep records, completed req/s within 5% of what
the stand-ins recorded, the budget held and given back; Stop mid-sweep; bad rate input in one line.
"""

from __future__ import annotations

import asyncio
import html
from pathlib import Path

import gradio as gr
import pytest

from demo.live.budget import StreamBudget
from demo.live.load_stream import LoadFrame, load_frames
from demo.live.session import RaceControl
from demo.load.engine import LoadResult
from demo.load.page import write_files
from demo.load.rate_models import RateStep
from demo.load.rate_view import RATE_HEADERS, rate_side_cells
from demo.settings import Settings
from demo.ui import load_panel
from harness.margins import within
from harness.standin import Standin, StandinBehavior
from harness.standin_process import process_pair
from tests.test_load_rate import BASE, SPEC, TOKENS, request, split, truth_completed_per_s
from tests.test_load_stream import collect

RATES = "2,5"
REQUESTS = 6  # per step and server: about 3 s of arrivals at 2 req/s, 1.2 s at 5


def panel_for(settings: Settings, budget: StreamBudget) -> load_panel.LoadPanel:
    with gr.Blocks():
        return load_panel.build(settings, budget)


def rows_of(step: RateStep) -> list[list[str]]:
    """What the table must show of a step: a row per server, its name and its record's cells."""
    return [[side.name, *rate_side_cells(side)] for side in step.servers()]


def test_rate_frames_draw_each_step_from_its_records_and_match_the_truth(tmp_path: Path) -> None:
    with process_pair(BASE, SPEC) as (base, spec):
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, read_timeout_s=10,
                            runs_dir=tmp_path / "runs", save_runs=False)
        budget = StreamBudget(64)
        panel = panel_for(settings, budget)
        load, wreq = panel.prepare("1", "sequential", TOKENS, "json_reformat", "say something", 0.0, None,
                                   "rate", RATES, REQUESTS, 150)
        wreq = request()  # the stand-ins' own request (its tokens), as tests/test_load_rate.py sends
        in_use: list[int] = []
        frames = asyncio.run(collect(load_frames(load, wreq, settings, RaceControl(), budget),
                                     lambda f: in_use.append(budget.in_use)))
        truths = {"baseline": base.truth(), "speculative": spec.truth()}
    end = frames[-1]
    assert end.result is not None and not end.result.interrupted, end.progress
    steps = end.result.rate_steps
    assert [s.rate_requests_per_s for s in steps] == [2, 5]
    # A frame per finished step, drawn from the records so far: the table (a row per server), both figures.
    stepped: list[LoadFrame] = [f for f in frames if f.rate_steps]
    assert [len(f.rate_steps or []) for f in stepped][:1] == [1] and len(stepped[-1].rate_steps or []) == 2
    for f in stepped:
        assert f.headers == RATE_HEADERS and f.table is not None
        assert [row[1:-1] for row in f.table] == [r for s in f.rate_steps or [] for r in rows_of(s)]
        assert [row[0] for row in f.table][::2] == [f"{s.rate_requests_per_s:g}" for s in f.rate_steps or []]
        assert f.per_user_figure is not None and f.total_figure is not None
        itl_p50 = [t for t in f.per_user_figure.data if t.name == "baseline ITL p50"]
        assert len(itl_p50) == 1 and len(itl_p50[0].x) == len(f.rate_steps or [])  # a point per rate so far
    # The capacity sentence and the crossover once two steps are in, not before.
    assert "need 2" in (stepped[0].crossover or "") and stepped[0].crossover_text is None
    assert end.crossover_text and end.crossover_text.startswith("baseline holds")
    assert "req/s" in (end.crossover or "") and "speculative:" in (end.crossover or "")
    # The budget: the largest step's requests held while it ran, said on the status line, given back.
    assert max(in_use) == REQUESTS and budget.in_use == 0
    assert any(f"holding {REQUESTS} of the page's 64 streams" in (f.progress or "") for f in frames)
    assert end.progress and end.progress.startswith("finished: 2 of 2 rate step(s)")
    # The download: the page keeps the result as JSON (last_load) and writes load.json and load.html from it.
    kept = LoadResult.model_validate(panel.updates(end)[panel.last_load])
    written = write_files(kept, tmp_path / "out", png=False)
    page = (tmp_path / "out" / "load.html").read_text()
    assert [p.name for p in written.paths] == ["load.json", "load.html"] and end.crossover_text
    assert html.escape(end.crossover_text) in page and page.count("<tr>") == 1 + 2 * 2 + 2  # + each arm's note
    # Every request accounted for, and completed req/s within 5% of what the stand-ins recorded.
    per = {name: split(t, steps) for name, t in truths.items()}
    for k, step in enumerate(steps):
        for side in step.servers():
            tr = per[side.name][k]
            assert side.accounted and side.sent == REQUESTS == len(tr)
            truth = truth_completed_per_s(tr, step.schedule.offsets_s[0])
            assert within(side.completed_requests_per_s, truth, 0.05, f"completed req/s, {side.name}"), (
                side.name, side.completed_requests_per_s, truth)


def test_stop_mid_rate_sweep_cuts_the_step_and_leaves_no_stream_open(tmp_path: Path) -> None:
    slow = StandinBehavior(tokens_per_s=40, ttft_s=0.02)
    with Standin(slow) as base, Standin(slow.model_copy(update={"speculative": True})) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, read_timeout_s=10,
                            runs_dir=tmp_path / "runs", save_runs=False)
        budget = StreamBudget(64)
        panel = panel_for(settings, budget)
        load, _ = panel.prepare("1", "sequential", 40, "json_reformat", "say something", 0.0, None,
                                "rate", "4,8", 8, None)
        control = RaceControl()

        def stop_after_the_first_step(f: LoadFrame) -> None:
            if f.rate_steps:
                control.stop.set()

        frames = asyncio.run(collect(load_frames(load, request(), settings, control, budget),
                                     stop_after_the_first_step))
        assert base.wait_idle(5) and spec.wait_idle(5)  # every stream of the step in progress was closed
    end = frames[-1]
    assert end.result is not None and end.result.interrupted
    assert [s.rate_requests_per_s for s in end.result.rate_steps] == [4]
    assert end.progress and end.progress.startswith("stopped after 1 of 2 steps (Stop was pressed)")
    assert budget.in_use == 0 and all(s.accounted for s in end.result.rate_steps[0].servers())


@pytest.mark.parametrize(("rates", "requests", "slo", "words"), [
    ("0", 8, 150, "rate must be requests per second above 0, got 0"),
    ("1,-2", 8, 150, "above 0"),
    ("", 8, 150, "rate is empty"),
    ("1,2,3,4,5,6,7", 8, 150, f"at most {load_panel.RATE_STEPS_MAX} per sweep"),
    ("1", 0, 150, f"from 1 to {load_panel.RATE_REQUESTS_MAX}, got 0"),
    ("1", None, 150, "got nothing"),
    ("1", 2.5, 150, "whole number"),
    ("0.05", 8, 150, f"past the page's bound of {load_panel.RATE_WINDOW_MAX_S:g} s per step"),
    ("1", 8, -5, "the ITL SLO must be above 0 ms"),
    ("1", 20, 150, "over the page's budget of 10 streams"),
])
def test_bad_rate_input_is_one_line_on_the_panel(rates: str, requests: float | None, slo: float | None, words: str,
                                                 tmp_path: Path) -> None:
    settings = Settings(baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:9", runs_dir=tmp_path)
    panel = panel_for(settings, StreamBudget(10))

    async def run() -> list[list]:
        return [v async for v in panel.on_run("1", "sequential", 60, "json_reformat", None, None, None, "rate", rates,
                                             requests, slo, None)]  # type: ignore[arg-type]  # no gr.Request

    (values,) = asyncio.run(run())  # one update: the status line, nothing sent
    status = values[panel.live_outputs.index(panel.status)]
    assert 'data-state="error"' in status and html.escape(words).lower() in status.lower(), status
    assert "\n" not in status and status.count("<div") == 1
    assert panel.registry.active() == 0
