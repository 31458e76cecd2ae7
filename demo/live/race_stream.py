"""A race as the page shows it, without Gradio: build the request, run the race, turn each
snapshot into a Frame of display values. demo.ui.race_tab maps Frames onto components.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from typing import NamedTuple

import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict, ValidationError

from demo import charts, view
from demo.fmt import validation_summary
from demo.live.session import RaceControl
from demo.presets import Preset
from demo.race import stream_race
from demo.results import Message, RaceRequest, RaceResult, RaceSnapshot
from demo.runs import RunTooLarge, save_run
from demo.server_info import ServerInfo
from demo.settings import Settings
from demo.workload import Workload, WorkloadRequest

log = logging.getLogger(__name__)

FREE_PROMPT = "(free prompt)"
# The preset dropdown's value for a request of the uploaded workload: "workload:<id>" (a preset's
# name never holds a colon).
WORKLOAD_PREFIX = "workload:"
MAX_WORKLOAD_CHOICES = 200  # a 10,000-line file would make the dropdown unusable: its first 200
# Each frame costs the browser ~30 ms of a core whatever it changes (Gradio's per-message work),
# taken on a CPU laptop from the servers being measured (docs/benchmarks.md, the page's cost).
# The race chart carries every chunk so far: redraw it once a second, live and in a replay
# alike (every 0.5 s cost the browser ~15% more CPU per race).
CHART_INTERVAL_S = 1.0
# stream_race folds chunks into snapshots at most every this often: at most 12.5 frames a
# second, above the >= 10 updates/s per pane the page promises (benchmarks/bench_ui_rate.py).
SNAPSHOT_INTERVAL_S = 0.08
# Gradio pulls the next frame within milliseconds while the browser is connected. When the
# tab closes it stops pulling and leaves this generator suspended (its unload event also
# fires spuriously on heartbeat reconnects, so it cannot be trusted): a frame left unread
# this long means nobody is watching, and the race is stopped, closing both streams.
CONSUMER_TIMEOUT_S = 5.0
WATCH_TICK_S = 0.5
# A side with no new token for this long says so on its status line, updated every second.
QUIET_NOTICE_S = 2.0


class Frame(BaseModel):
    """One update of the race area; None fields are left as they are on the page."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_status: str | None = None
    speedup: str | None = None
    baseline: view.PaneView | None = None
    speculative: view.PaneView | None = None
    side_status: dict[str, str] | None = None  # status lines only (the quiet-server notice)
    race_figure: go.Figure | None = None
    result: RaceResult | None = None  # set once, on the final frame
    failed: list[str] = []  # the sides whose stream failed (the booth switches to a recording)


class ResultView(BaseModel):
    """What the page shows of a finished race beyond the live frames: drawn once, at the end."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    badge: str
    acceptance_figure: go.Figure
    chunk_figure: go.Figure


def result_view(result: RaceResult | None) -> ResultView:
    """The badge and the two result charts; their empty state for None (a race starting)."""
    return ResultView(badge=view.identical_badge_html(result), acceptance_figure=charts.acceptance_figure(result),
                      chunk_figure=charts.chunk_figure(result))


def preset_user_text(preset: Preset) -> str:
    """The text the prompt box shows for a preset: its last user message."""
    users = [m.content for m in preset.messages if m.role == "user"]
    return users[-1] if users else preset.messages[-1].content


def workload_choices(workload: Workload | None) -> list[tuple[str, str]]:
    """The dropdown entries for the uploaded workload's first MAX_WORKLOAD_CHOICES requests:
    ('workload: <id>', 'workload:<id>')."""
    requests = workload.requests[:MAX_WORKLOAD_CHOICES] if workload else []
    return [(f"workload: {r.id}", WORKLOAD_PREFIX + r.id) for r in requests]


def workload_request(workload: Workload | None, choice: str | None) -> WorkloadRequest | None:
    """The request a 'workload:<id>' dropdown value names, if the loaded workload has it."""
    if workload is None or not choice or not choice.startswith(WORKLOAD_PREFIX):
        return None
    rid = choice.removeprefix(WORKLOAD_PREFIX)
    return next((r for r in workload.requests if r.id == rid), None)


def workload_user_text(req: WorkloadRequest) -> str:
    """The text the prompt box shows for a workload request: its last user message, or its prompt."""
    if req.prompt is not None:
        return req.prompt
    users = [m.content for m in req.messages or [] if m.role == "user"]
    return users[-1] if users else req.prompt_text


def build_request(presets: dict[str, Preset], preset_name: str | None, prompt: str,
                  temperature: float, max_tokens: float, order: str, workload: Workload | None = None) -> RaceRequest:
    """The preset's (or the workload request's) messages when its prompt is unchanged; an edited
    prompt is a free prompt.

    Every argument is page input, validated here (``order`` by RaceRequest). Raises ValueError
    with a one-line message for input the servers should never see.
    """
    preset = presets.get(preset_name or "")
    wreq = workload_request(workload, preset_name)
    try:
        tokens = int(max_tokens)
        if wreq is not None and prompt == workload_user_text(wreq):
            return RaceRequest(preset=WORKLOAD_PREFIX + wreq.id, messages=wreq.messages, prompt=wreq.prompt,
                               api=wreq.api, temperature=temperature, max_tokens=tokens, order=order)
        if preset is not None and prompt == preset_user_text(preset):
            return preset.to_request(temperature=temperature, max_tokens=tokens, order=order)
        return RaceRequest(messages=[Message(role="user", content=prompt)], temperature=temperature,
                           max_tokens=tokens, order=order)
    except (ValidationError, TypeError) as e:
        if isinstance(e, ValidationError):
            raise ValueError(f"Invalid {validation_summary(e)}.") from e
        raise ValueError(f"Invalid input: {e}.") from e


def spec_title(settings: Settings, infos: list[ServerInfo] | None, result: RaceResult | None) -> str:
    """The speculative pane's title line (HTML): 'Speculative (method, k)' from the launcher's
    settings, the server, or the last run; what is unknown says n/a and why."""
    method, k = settings.spec_method, settings.spec_num_tokens
    spec_info = next((i for i in infos or [] if i.side == "speculative"), None)
    if spec_info is not None:
        method = method or spec_info.spec_method
        k = k or spec_info.spec_num_tokens
    if k is None and result is not None and result.speculative.spec is not None:
        k = result.speculative.spec.num_spec_tokens
    return view.pane_title_html(view.spec_pane_title(method, k), view.spec_title_note(method, k))


def frame_for(snapshot: RaceSnapshot, with_chart: bool) -> Frame:
    final = snapshot.result is not None
    return Frame(
        speedup=view.speedup_html(snapshot),
        baseline=view.pane_view("baseline", snapshot),
        speculative=view.pane_view("speculative", snapshot),
        race_figure=charts.race_figure(snapshot) if with_chart or final else None,
        result=snapshot.result,
        failed=[s for s in ("baseline", "speculative") if getattr(snapshot, s).status == "error"],
    )


async def race_frames(req: RaceRequest, settings: Settings, control: RaceControl) -> AsyncGenerator[Frame, None]:
    """Run one race and yield Frames; only the latest snapshot is drawn when the page lags.

    The race is driven by a pump task kept in ``control`` so that closing the tab (which
    leaves this generator suspended, nobody reading) can still cancel it and close both streams.
    """
    latest: RaceSnapshot | None = None
    changed = asyncio.Event()

    async def pump() -> None:
        nonlocal latest
        try:
            async with contextlib.aclosing(
                stream_race(req, settings, interval_s=SNAPSHOT_INTERVAL_S, stop=control.stop)
            ) as snapshots:
                async for snap in snapshots:
                    latest = snap
                    changed.set()
        finally:
            changed.set()

    unread_since: float | None = None

    async def watchdog(pump_task: asyncio.Task[None]) -> None:
        # Unread time is counted in this loop's own ticks, not on the wall clock: an app that
        # was itself frozen (a suspended laptop, a paused VM) did not leave a frame unread.
        pending, ticks = None, 0
        while not pump_task.done():
            await asyncio.sleep(WATCH_TICK_S)
            if unread_since != pending:  # another frame (or none) is waiting now
                pending, ticks = unread_since, 0
            if pending is None:
                continue
            ticks += 1
            if ticks * WATCH_TICK_S > CONSUMER_TIMEOUT_S:
                log.warning("nobody has read the race for %.0f s (tab closed?): aborting both requests",
                            CONSUMER_TIMEOUT_S)
                # A graceful stop: both streams close, and a page that was only slow still
                # gets the final (stopped) frame. Cancel only if the race ignores the stop.
                control.stopped_because = (f"the page read no update for {CONSUMER_TIMEOUT_S:.0f} s "
                                           "(tab closed or the app overloaded)")
                control.stop.set()
                done, _ = await asyncio.wait({pump_task}, timeout=CONSUMER_TIMEOUT_S)
                if not done:
                    pump_task.cancel()
                return

    yield Frame(run_status=view.run_status_html("running", view.ORDER_LABELS[req.order]))
    control.pump = asyncio.create_task(pump())
    guard = asyncio.create_task(watchdog(control.pump))
    last_chart = 0.0
    shown: RaceSnapshot | None = None
    progress_at = {"baseline": time.monotonic(), "speculative": time.monotonic()}
    try:
        while True:
            if latest is None:
                # Checked only when nothing is pending: the pump sets `latest` before it ends.
                if control.pump.done():
                    break
                try:
                    await asyncio.wait_for(changed.wait(), timeout=1.0)
                except TimeoutError:
                    quiet = _quiet_status(shown, progress_at, settings.read_timeout_s)
                    if quiet:
                        unread_since = time.monotonic()
                        yield Frame(side_status=quiet)
                        unread_since = None
                    continue
                changed.clear()
                continue
            snap, latest = latest, None
            now = time.monotonic()
            for side in ("baseline", "speculative"):
                before = getattr(shown, side) if shown is not None else None
                after = getattr(snap, side)
                if before is None or (after.completion_tokens, len(after.text), after.status) != (
                        before.completion_tokens, len(before.text), before.status):
                    progress_at[side] = now
            shown = snap
            with_chart = now - last_chart >= CHART_INTERVAL_S
            if with_chart:
                last_chart = now
            frame = frame_for(snap, with_chart)
            # Heartbeat snapshots keep coming while a server is silent: say so on its pane.
            frame.side_status = _quiet_status(snap, progress_at, settings.read_timeout_s) or None
            unread_since = now
            yield frame
            unread_since = None
        exc = control.pump.exception() if not control.pump.cancelled() else None
        if isinstance(exc, ValueError):  # bad input, said in one line by the core
            yield Frame(run_status=view.run_status_html("error", str(exc)))
        elif exc is not None:  # a bug, not a server fault: logged in full, said on the page
            log.error("the race failed", exc_info=exc)
            yield Frame(run_status=view.run_status_html("error", internal_error_text(exc)))
        elif shown is None or shown.result is None:  # never leave the page on "Racing…"
            yield Frame(run_status=view.run_status_html(
                "stopped", control.stopped_because or "the race ended without a result"))
    finally:
        guard.cancel()
        if not control.pump.done():
            control.pump.cancel()
            await asyncio.gather(control.pump, return_exceptions=True)


def _quiet_status(shown: RaceSnapshot | None, progress_at: dict[str, float],
                  timeout_s: float) -> dict[str, str]:
    """Status lines for running sides that have sent nothing for a while."""
    if shown is None or shown.result is not None:
        return {}
    now = time.monotonic()
    out: dict[str, str] = {}
    for side in ("baseline", "speculative"):
        snap = getattr(shown, side)
        quiet = now - progress_at[side]
        if snap.status in ("waiting", "streaming") and quiet >= QUIET_NOTICE_S:
            out[side] = view.side_status_html(side, snap, quiet_s=quiet, timeout_s=timeout_s)
    return out


def internal_error_text(exc: BaseException) -> str:
    """One line for a failure that is the app's own fault, not a server's."""
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"internal error: {type(exc).__name__}: {first} (the app's log has the details)"


class Saved(NamedTuple):
    """Where a run was saved (its file name), or why it was not (a note for the status line)."""

    name: str | None = None
    note: str | None = None


def final_status(result: RaceResult, saved: str | None, stopped_because: str | None = None,
                 save_note: str | None = None) -> str:
    state = result.outcome
    detail = view.ORDER_LABELS[result.order] + (" · run saved" if saved else "")
    if save_note:
        detail = f"{detail} · {save_note}"
    if state == "stopped" and stopped_because:
        detail = f"{stopped_because} · {detail}"
    if state == "error":
        failed = [s for s in ("baseline", "speculative") if getattr(result, s).error]
        detail = f"{' and '.join(failed)} failed (see the pane) · " + detail
    return view.run_status_html(state, detail)


async def save(result: RaceResult, settings: Settings) -> Saved:
    """Save the run when settings say so; a failure to save is logged, never fatal on stage."""
    if not settings.save_runs:
        return Saved()
    try:
        path = await asyncio.to_thread(save_run, result, settings.runs_dir, settings.max_run_file_bytes,
                                       settings.runs_keep_count, settings.runs_keep_days)
    except RunTooLarge as e:
        log.warning("run not saved: %s", e)
        return Saved(note=f"run not saved: {e}")
    except OSError as e:
        log.warning("could not save the run to %s: %s", settings.runs_dir, e)
        return Saved()
    return Saved(name=path.name)
