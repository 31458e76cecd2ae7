"""The "Replay" tab: a saved race played back side by side at its real timing, with its
figures, clearly labelled as a recording (stage insurance when a server or the network fails).

An N-user race (demo.load.UsersRace) replays user 1's answers; its end shows the step's
figures: the per-user speedup and throughput ratio ("N users") and each side's step tiles.

The playback (demo.replay) feeds the saved events through the live race's SideMeter, so the
panes and charts are drawn by the same code (demo.view, demo.charts through
demo.live.frames.throttled_frames). The final frame shows the figures saved with the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from demo import charts, view
from demo.errors import DemoError
from demo.export import export_to_temp, run_for_export
from demo.live.frames import result_view, throttled_frames
from demo.load import UsersRace
from demo.replay import replay_snapshots, run_label
from demo.results import SIDES
from demo.runs import list_runs, race_of, read_record
from demo.settings import Settings
from demo.ui.outputs import StreamOutputs, frame_updates

MAX_LISTED = 200


def export_run(path: str | None) -> tuple[str | None, str]:
    """The saved run as a self-contained page to download (demo.export); errors in the status."""
    if not path:
        return None, view.run_status_html("error", "no saved run picked: pick one to export")
    return export_to_temp(lambda: run_for_export(Path(path)))


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
    banner = gr.HTML(view.recording_banner_html(None), elem_id="sd-replay-banner")
    with gr.Row(equal_height=True):
        speedup = gr.HTML(view.speedup_html(None), elem_id="sd-replay-speedup", min_width=260)
        with gr.Column(scale=3, min_width=300):
            order_box = gr.HTML("", elem_id="sd-replay-mode")
            status = gr.HTML("", elem_id="sd-replay-status")
        badge = gr.HTML(view.identical_badge_html(None), elem_id="sd-replay-badge", min_width=220)
    panes: dict[str, tuple[Any, Any, Any]] = {}
    with gr.Row(equal_height=True):
        for side in SIDES:
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

    outputs = [banner, speedup, order_box, status, badge, race_plot, acc_plot, chunk_plot,
               *[c for side in panes.values() for c in side]]

    async def on_play(path: str | None):
        if not path:
            yield {status: view.run_status_html("error", "no saved run picked (races are saved under "
                                                f"{settings.runs_dir})")}
            return
        try:
            run = read_record(Path(path))
        except DemoError as e:
            yield {status: view.run_status_html("error", f"cannot play it: {e}")}
            return
        result = race_of(run)  # an N-user race plays user 1
        users = run if isinstance(run, UsersRace) else None
        # Every frame sets every output (see demo.ui.outputs): the first frame all of them.
        stream = StreamOutputs(outputs)
        start_view = result_view(None)
        note = f"{users.users} users: user 1's answers, then the step's figures" if users else None
        yield stream.values({banner: view.recording_banner_html(result, note), order_box: view.order_html(result.order),
                             status: view.run_status_html("running", "playing the recording"),
                             badge: start_view.badge, acc_plot: start_view.acceptance_figure,
                             chunk_plot: start_view.chunk_figure})
        async for frame in throttled_frames(replay_snapshots(result)):
            yield stream.values(frame_updates(frame, panes, speedup, race_plot))
        end_view = result_view(result)
        step_figures: dict[Any, Any] = {} if users is None else {
            speedup: view.users_speedup_html(users.users, users.step, running=False),
            **{panes[side][1]: view.users_step_html(side, users) for side in SIDES}}
        yield stream.values({badge: end_view.badge, acc_plot: end_view.acceptance_figure,
                             chunk_plot: end_view.chunk_figure, **step_figures,
                             status: view.run_status_html("done", "end of the recording (figures as saved)")})

    event = play.click(on_play, inputs=[run_dd], outputs=outputs, show_progress="hidden")
    stop.click(lambda: view.run_status_html("stopped", "playback stopped"), outputs=[status], cancels=[event],
               queue=False)
    refresh.click(lambda: gr.Dropdown(choices=_choices(settings)), outputs=[run_dd], queue=False)
    export.click(export_run, inputs=[run_dd], outputs=[exported, status], show_progress="minimal")
