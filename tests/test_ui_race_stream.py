"""demo/live/ without a browser (request, frames, frame_stream, status, saving): frames, the
final result, Stop, and the watchdog that aborts a race nobody reads any more (a closed tab).
Real stand-in servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from common.waiting import held_within_async
from demo.live import frame_stream
from demo.live.frame_stream import race_frames
from demo.live.frames import ChartThrottle, result_view, throttled_frames
from demo.live.request import build_request, workload_choices, workload_request, workload_user_text
from demo.live.saving import save
from demo.live.session import RaceControl, RaceRegistry
from demo.live.status import final_status
from demo.presets import Message, Preset
from demo.race import validate_request
from demo.results import RaceSnapshot, SideSnapshot
from demo.runs.store import list_runs
from demo.settings import Settings
from demo.workload import Workload, WorkloadRequest


def _settings(base, spec) -> Settings:
    return Settings(baseline_url=base.url, speculative_url=spec.url, read_timeout_s=5, probe_timeout_s=2)


def _req(max_tokens: int):
    return build_request({}, None, "hello", 0.0, max_tokens, "simultaneous")


@pytest.mark.asyncio
async def test_every_race_ends_with_the_result_frame(standin_factory) -> None:
    base = standin_factory(tokens_per_s=400)
    spec = standin_factory(speculative=True, tokens_per_s=800, chunk_sizes=[1, 3])
    for _ in range(5):  # the last snapshot used to be dropped when the race ended mid-yield
        frames = [f async for f in race_frames(_req(30), _settings(base, spec), RaceControl())]
        assert frames[-1].result is not None
        assert frames[-1].result.speculative.completion_tokens == 30
        assert sum(f.result is not None for f in frames) == 1
        assert frames[-1].race_figure is not None  # the final chart, whatever the redraw interval
        shown = result_view(frames[-1].result)
        assert 'data-identical="true"' in shown.badge  # greedy, and the stand-ins agree
        assert shown.chunk_figure.data  # tokens per chunk, both sides


@pytest.mark.asyncio
async def test_stop_event_aborts_both_and_still_gives_a_cancelled_result(standin_factory) -> None:
    base = standin_factory(tokens_per_s=20)
    spec = standin_factory(speculative=True, tokens_per_s=40, chunk_sizes=[1, 2])
    registry = RaceRegistry()
    control = registry.arm("s1")
    assert control is not None
    frames = []
    async for f in race_frames(_req(500), _settings(base, spec), control):
        frames.append(f)
        if f.speculative is not None and f.baseline is not None and "quick" in f.baseline.text_html:
            registry.stop("s1")
    assert frames[-1].result is not None and frames[-1].result.cancelled
    assert base.wait_idle(5) and spec.wait_idle(5)
    assert (base.aborted, spec.aborted) == (1, 1)


@pytest.mark.asyncio
async def test_unread_race_is_aborted(standin_factory, monkeypatch) -> None:
    monkeypatch.setattr(frame_stream, "CONSUMER_TIMEOUT_S", 0.5)
    base = standin_factory(tokens_per_s=20)
    spec = standin_factory(speculative=True, tokens_per_s=40)
    control = RaceControl()
    gen = race_frames(_req(500), _settings(base, spec), control)
    for _ in range(3):
        await gen.__anext__()
    # Nobody reads on (as when Gradio stops pulling for a closed tab) and nobody closes `gen`.
    await held_within_async(lambda: bool(base.aborted and spec.aborted), 6, poll_s=0.1)
    assert (base.aborted, spec.aborted) == (1, 1)
    # A page that was only slow reads on: it gets a final, stopped frame that says why,
    # never a page left on "Racing…".
    rest = [f async for f in gen]
    assert rest[-1].result is not None and rest[-1].result.cancelled
    assert control.stopped_because and "no update" in control.stopped_because
    status = final_status(rest[-1].result, None, control.stopped_because)
    assert 'data-state="stopped"' in status and "no update" in status


@pytest.mark.asyncio
async def test_a_frozen_app_is_not_a_closed_tab(standin_factory, monkeypatch) -> None:
    """The whole app stops for longer than the consumer timeout (a paused VM, a suspended
    laptop: here the event loop is blocked) while a frame is unread: the race goes on."""
    monkeypatch.setattr(frame_stream, "CONSUMER_TIMEOUT_S", 1.0)
    base = standin_factory(tokens_per_s=100)
    spec = standin_factory(speculative=True, tokens_per_s=200)
    gen = race_frames(_req(200), _settings(base, spec), RaceControl())
    for _ in range(3):
        await gen.__anext__()
    asyncio.get_running_loop().call_soon(time.sleep, 2.5)  # freezes the loop, a frame unread
    await asyncio.sleep(0.6)  # due after the watchdog's next tick: it looks first
    rest = [f async for f in gen]
    assert rest[-1].result is not None and not rest[-1].result.cancelled
    assert rest[-1].result.baseline.completion_tokens == 200 and base.aborted == 0


@pytest.mark.asyncio
async def test_a_bug_in_the_race_ends_on_an_error_status(standin_factory, monkeypatch) -> None:
    base = standin_factory(tokens_per_s=200)
    spec = standin_factory(speculative=True, tokens_per_s=200)

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr("demo.race.compare_arms", broken)  # where the race puts its sides together
    frames = [f async for f in race_frames(_req(20), _settings(base, spec), RaceControl())]
    assert frames[-1].result is None
    assert frames[-1].run_status is not None
    assert 'data-state="error"' in frames[-1].run_status
    assert "internal error: RuntimeError: boom" in frames[-1].run_status
    assert "second line" not in frames[-1].run_status


def test_build_request_preset_or_free_prompt() -> None:
    p = Preset(name="json", title="J", expect="e", max_tokens=100,
               messages=[Message(role="system", content="sys"), Message(role="user", content="do it")])
    req = build_request({"json": p}, "json", "do it", 0.0, 120, "sequential")
    assert req.preset == "json" and req.messages == p.messages and req.max_tokens == 120
    assert req.order == "sequential"
    edited = build_request({"json": p}, "json", "do it again", 0.5, 50, "simultaneous")
    assert edited.preset is None and edited.messages is not None and edited.messages[0].content == "do it again"
    with pytest.raises(ValueError, match="max_tokens"):
        build_request({}, None, "x", 0.0, 0, "simultaneous")
    with pytest.raises(ValueError, match="temperature"):
        build_request({}, None, "x", 3.0, 10, "simultaneous")


def test_build_request_from_an_uploaded_workload_request() -> None:
    chat = WorkloadRequest(id="a:1", api="chat", max_tokens=40, temperature=0.7,
                           messages=[Message(role="system", content="sys"), Message(role="user", content="copy it")])
    comp = WorkloadRequest(id="b", api="completions", prompt="complete me")
    w = Workload(name="mine", source="mine.jsonl", format="jsonl", requests=[chat, comp])
    assert workload_choices(w) == [("workload: a:1", "workload:a:1"), ("workload: b", "workload:b")]
    assert workload_choices(None) == []
    assert workload_request(w, "workload:a:1") == chat
    assert workload_request(w, "workload:gone") is None
    assert workload_request(None, "workload:a:1") is None
    assert workload_user_text(chat) == "copy it" and workload_user_text(comp) == "complete me"
    # Unchanged text: the request's own messages (system included) or prompt and API.
    req = build_request({}, "workload:a:1", "copy it", 0.7, 40, "simultaneous", w)
    assert req.messages == chat.messages and req.api == "chat" and req.preset == "workload:a:1"
    req = build_request({}, "workload:b", "complete me", 0.0, 10, "simultaneous", w)
    assert req.prompt == "complete me" and req.api == "completions" and req.messages is None
    # Edited: a free prompt, as for a preset.
    edited = build_request({}, "workload:a:1", "copy that", 0.7, 40, "simultaneous", w)
    assert edited.preset is None and edited.messages == [Message(role="user", content="copy that")]
    # The prompt cap holds for a workload request too.
    with pytest.raises(ValueError, match="over the limit"):
        validate_request(req, Settings(max_prompt_chars=5))


@pytest.mark.asyncio
async def test_empty_prompt_says_so_and_sends_nothing(standin_factory) -> None:
    base = standin_factory()
    spec = standin_factory(speculative=True)
    req = build_request({}, None, "   ", 0.0, 10, "simultaneous")
    frames = [f async for f in race_frames(req, _settings(base, spec), RaceControl())]
    status = frames[-1].run_status
    assert status is not None and 'data-state="error"' in status and "empty" in status
    assert base.started == 0 and spec.started == 0


@pytest.mark.asyncio
async def test_a_stalled_server_is_announced_not_frozen(standin_factory) -> None:
    base = standin_factory(tokens_per_s=100, fault="stall", fault_after_chunks=5, stall_s=30)
    spec = standin_factory(speculative=True, tokens_per_s=200)
    settings = Settings(baseline_url=base.url, speculative_url=spec.url, read_timeout_s=4, probe_timeout_s=2)
    frames = [f async for f in race_frames(_req(40), settings, RaceControl())]
    notices = [f.side_status["baseline"] for f in frames if f.side_status and "baseline" in f.side_status]
    assert notices, "no quiet-server notice while the baseline stalled"
    assert "nothing from the server for" in notices[0] and "gives up after 4 s" in notices[0]
    assert len(notices) >= 2  # it keeps counting, once a second
    final = frames[-1].result
    assert final is not None and final.baseline.error and final.speculative.complete


@pytest.mark.asyncio
async def test_a_prompt_over_the_size_limit_is_refused_before_anything_is_sent(standin_factory) -> None:
    base = standin_factory()
    spec = standin_factory(speculative=True)
    settings = _settings(base, spec)
    req = build_request({}, None, "x" * 2_000_000, 0.0, 10, "simultaneous")
    with pytest.raises(ValueError, match=r"2,000,000 characters, over the limit of 200,000"):
        validate_request(req, settings)  # what the page, its API and a workload loader call
    frames = [f async for f in race_frames(req, settings, RaceControl())]  # and the race itself
    status = frames[-1].run_status
    assert status is not None and 'data-state="error"' in status and "SPECDEMO_MAX_PROMPT_CHARS" in status
    assert (base.tokenized, spec.tokenized, base.started, spec.started) == (0, 0, 0, 0)
    at_limit = build_request({}, None, "x" * 200_000, 0.0, 10, "simultaneous")
    validate_request(at_limit, settings)  # at the limit: fine


@pytest.mark.asyncio
async def test_a_run_over_the_size_limit_is_not_written_and_the_status_says_why(
        standin_factory, tmp_path, caplog) -> None:
    base = standin_factory(tokens_per_s=400)
    spec = standin_factory(speculative=True, tokens_per_s=800)
    frames = [f async for f in race_frames(_req(20), _settings(base, spec), RaceControl())]
    result = frames[-1].result
    assert result is not None
    size = len(result.model_dump_json(indent=1).encode())
    small = Settings(runs_dir=tmp_path / "small", max_run_file_bytes=size - 1)
    with caplog.at_level(logging.WARNING, logger="demo.live.saving"):
        saved = await save(result, small)
    assert saved.name is None and not list_runs(small.runs_dir)
    assert saved.note and f"{size:,} bytes" in saved.note and "SPECDEMO_MAX_RUN_FILE_BYTES" in saved.note
    assert [r.getMessage().count("\n") for r in caplog.records] == [0]  # one logged line
    status = final_status(result, saved.name, None, saved.note)
    assert "run not saved" in status and "run saved" not in status.replace("run not saved", "")
    fits = await save(result, Settings(runs_dir=tmp_path / "fits", max_run_file_bytes=size))
    assert fits.name is not None and len(list_runs(tmp_path / "fits")) == 1


def _snap() -> RaceSnapshot:
    return RaceSnapshot(order="simultaneous", baseline=SideSnapshot(side="baseline"),
                        speculative=SideSnapshot(side="speculative"))


def test_the_chart_throttle_redraws_the_race_chart_at_most_once_an_interval() -> None:
    throttle = ChartThrottle()
    t0 = 1000.0
    drawn = [throttle.frame(_snap(), now).race_figure is not None for now in (t0, t0 + 0.5, t0 + 0.99, t0 + 1.0)]
    assert drawn == [True, False, False, True]


@pytest.mark.asyncio
async def test_throttled_frames_gives_one_frame_per_snapshot_the_first_with_the_chart() -> None:
    async def snapshots():
        for _ in range(3):
            yield _snap()

    frames = [f async for f in throttled_frames(snapshots())]
    assert len(frames) == 3 and frames[0].race_figure is not None
    assert [f.race_figure is None for f in frames[1:]] == [True, True]  # within the same second
