"""The "Replay" tab: a saved race played back side by side at its real timing, with its
figures, clearly labelled as a recording (stage insurance when a server or the network fails).

The saved ChunkEvents are fed, at the times they first arrived, into the same SideMeter the
live race uses, so the panes and charts are drawn by the same code (demo.view, demo.charts
through demo.ui.race_stream.frame_for). The final frame shows the figures saved with the run.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import gradio as gr
from pydantic import ValidationError

from demo import charts, view
from demo.export import ExportError, export_file, read_run
from demo.fmt import validation_summary
from demo.measure import SideMeter
from demo.results import LEGACY_ORDER, ChunkEvent, RaceResult, RaceSnapshot, Side
from demo.runs import list_runs, load_run
from demo.settings import Settings
from demo.ui.outputs import StreamOutputs, frame_updates
from demo.ui.race_stream import CHART_INTERVAL_S, frame_for, result_view

FRAME_INTERVAL_S = 0.05  # at most ~20 page updates per second, as the live race
MAX_LISTED = 200
_STAMP = re.compile(r"^(\d{8}T\d{6})\d*-(.+)-(simultaneous|sequential|race)$")  # race: an older name


# --------------------------------------------------------------------------- playback (no Gradio)


def run_label(path: Path) -> str:
    """'2026-11-29 13:00:49 UTC · json_reformat · sequential' from the saved file's name."""
    m = _STAMP.match(path.stem)
    if not m:
        return path.name
    when = datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{when} · {m.group(2)} · {view.ORDER_LABELS[LEGACY_ORDER.get(m.group(3), m.group(3))]}"


def timeline(result: RaceResult) -> list[tuple[float, Side, ChunkEvent]]:
    """Both sides' saved events in arrival order (each side timed from its own request)."""
    sides: tuple[Side, Side] = ("baseline", "speculative")
    events = [(ev.t_s, side, ev) for side in sides for ev in getattr(result, side).events]
    return sorted(events, key=lambda e: e[0])


async def replay_snapshots(result: RaceResult, interval_s: float = FRAME_INTERVAL_S) -> AsyncIterator[RaceSnapshot]:
    """Snapshots at the recording's real timing; the last one carries the saved result."""
    t0 = time.perf_counter()
    meters: dict[Side, SideMeter] = {}
    for side in ("baseline", "speculative"):
        saved = getattr(result, side)
        meters[side] = SideMeter(side, saved.url, t0=t0)
        meters[side].model = saved.model
    last_t = {side: max((e.t_s for e in getattr(result, side).events), default=0.0)
              for side in ("baseline", "speculative")}
    failed: set[Side] = set()

    def snap(final: bool = False) -> RaceSnapshot:
        return RaceSnapshot(order=result.order, baseline=meters["baseline"].snapshot(),
                            speculative=meters["speculative"].snapshot(), result=result if final else None)

    def settle(now: float) -> None:
        # A side that failed (or was stopped) in the recording fails here at its last event.
        for side in ("baseline", "speculative"):
            saved = getattr(result, side)
            if saved.error and side not in failed and now >= last_t[side]:
                failed.add(side)
                if result.cancelled and not saved.complete:
                    meters[side].cancel()
                else:
                    meters[side].fail(saved.error)

    items = timeline(result)
    i = 0
    settle(0.0)
    yield snap()
    while i < len(items):
        now = time.perf_counter() - t0
        if items[i][0] > now:
            await asyncio.sleep(min(items[i][0] - now, 1.0))
            continue
        while i < len(items) and items[i][0] <= now:
            _t, side, ev = items[i]
            meters[side].feed(ev)
            i += 1
        settle(now)
        yield snap()
        await asyncio.sleep(interval_s)  # many chunks fold into one frame
    settle(float("inf"))
    yield snap(final=True)


def recording_banner_html(result: RaceResult | None) -> str:
    if result is None:
        return ('<div class="sd-banner sd-recording" data-recording="none">Pick a saved run and press '
                "Play: it is played back at its real timing, labelled as a recording.</div>")
    when = result.started_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    req = result.request
    what = f"{result.preset or 'free prompt'} · {view.ORDER_LABELS[result.order]} · T={req.temperature:g} · " \
           f"max {req.max_tokens} tokens"
    return (f'<div class="sd-banner sd-recording" role="status" data-recording="true" '
            f'style="border:3px solid #ff6b6b;padding:10px 14px;border-radius:8px;font-size:22px;font-weight:700">'
            f"● RECORDING of {view.esc(when)}, not live"
            f'<div style="font-size:15px;font-weight:400">{view.esc(what)}</div></div>')


def export_run(path: str | None) -> tuple[str | None, str]:
    """The saved run as a self-contained page (demo.export) in a fresh temp folder: (its path,
    the status line). An ExportError is the status's one line, with no file."""
    if not path:
        return None, view.run_status_html("error", "no saved run picked: pick one to export")
    try:
        out = export_file(read_run(Path(path)), Path(tempfile.mkdtemp(prefix="specdemo-export-")))
    except ExportError as e:
        return None, view.run_status_html("error", f"cannot export: {e}")
    return str(out), view.run_status_html("done", f"exported {out.name}: it opens offline in any browser")


# --------------------------------------------------------------------------- the tab


def _choices(settings: Settings) -> list[tuple[str, str]]:
    return [(run_label(p), str(p)) for p in list_runs(settings.runs_dir)[:MAX_LISTED]]


def build(settings: Settings) -> None:
    """Lay out the tab inside the current gr.Tab and wire its events."""
    choices = _choices(settings)
    with gr.Row():
        run_dd = gr.Dropdown(choices=choices, value=choices[0][1] if choices else None,
                             label=f"Saved runs ({settings.runs_dir})", elem_id="sd-replay-run", scale=4)
        refresh = gr.Button("Refresh list", size="sm", elem_id="sd-replay-refresh", scale=1)
        play = gr.Button("▶ Play recording", variant="primary", elem_id="sd-replay-play", scale=1)
        stop = gr.Button("■ Stop", variant="stop", elem_id="sd-replay-stop", scale=1)
    with gr.Row():
        export = gr.Button("Download as a self-contained page", size="sm", elem_id="sd-replay-export", scale=1)
        exported = gr.File(label="Self-contained page (replays offline)", interactive=False,
                           elem_id="sd-replay-export-file", scale=3, height=60)
    banner = gr.HTML(recording_banner_html(None), elem_id="sd-replay-banner")
    with gr.Row(equal_height=True):
        speedup = gr.HTML(view.speedup_html(None), elem_id="sd-replay-speedup", min_width=260)
        with gr.Column(scale=3, min_width=300):
            mode_box = gr.HTML("", elem_id="sd-replay-mode")
            status = gr.HTML("", elem_id="sd-replay-status")
        badge = gr.HTML(view.identical_badge_html(None), elem_id="sd-replay-badge", min_width=220)
    panes: dict[str, tuple[Any, Any, Any]] = {}
    with gr.Row(equal_height=True):
        for side in ("baseline", "speculative"):
            with gr.Column(min_width=360):
                gr.HTML(view.pane_title_html(side.capitalize() + " (recorded)"))
                panes[side] = (gr.HTML("", elem_id=f"sd-replay-status-{side}"),
                               gr.HTML("", elem_id=f"sd-replay-tiles-{side}"),
                               gr.HTML('<div class="sd-text"></div>', elem_id=f"sd-replay-text-{side}"))
    gr.HTML(view.burst_legend_html())
    race_plot = gr.Plot(charts.race_figure(None), label="Tokens over time (recorded)", elem_id="sd-replay-race")
    with gr.Row():
        acc_plot = gr.Plot(charts.acceptance_figure(None), label="Acceptance by position", elem_id="sd-replay-acc")
        chunk_plot = gr.Plot(charts.chunk_figure(None), label="Tokens per chunk", elem_id="sd-replay-chunk")

    outputs = [banner, speedup, mode_box, status, badge, race_plot, acc_plot, chunk_plot,
               *[c for side in panes.values() for c in side]]

    async def on_play(path: str | None):
        if not path:
            yield {status: view.run_status_html("error", "no saved run picked (races are saved under "
                                                f"{settings.runs_dir})")}
            return
        try:
            result = load_run(Path(path))
        except (OSError, ValueError) as e:  # pydantic's ValidationError is a ValueError
            why = validation_summary(e) if isinstance(e, ValidationError) else str(e).splitlines()[0]
            yield {status: view.run_status_html("error", f"cannot read {Path(path).name}: {why}")}
            return
        # Every frame sets every output (see demo.ui.outputs): the first frame all of them.
        stream = StreamOutputs(outputs, no_resend=[race_plot])
        start_view = result_view(None)
        yield stream.values({banner: recording_banner_html(result), mode_box: view.order_html(result.order),
                             status: view.run_status_html("running", "playing the recording"),
                             badge: start_view.badge, acc_plot: start_view.acceptance_figure,
                             chunk_plot: start_view.chunk_figure})
        last_chart = 0.0
        async for snapshot in replay_snapshots(result):
            now = time.monotonic()
            with_chart = now - last_chart >= CHART_INTERVAL_S
            if with_chart:
                last_chart = now
            yield stream.values(frame_updates(frame_for(snapshot, with_chart), panes, speedup, race_plot))
        end_view = result_view(result)
        yield stream.values({badge: end_view.badge, acc_plot: end_view.acceptance_figure,
                             chunk_plot: end_view.chunk_figure,
                             status: view.run_status_html("done", "end of the recording (figures as saved)")})

    event = play.click(on_play, inputs=[run_dd], outputs=outputs, show_progress="hidden")
    stop.click(lambda: view.run_status_html("stopped", "playback stopped"), outputs=[status], cancels=[event],
               queue=False)
    refresh.click(lambda: gr.Dropdown(choices=_choices(settings)), outputs=[run_dd], queue=False)
    export.click(export_run, inputs=[run_dd], outputs=[exported, status], show_progress="minimal")
