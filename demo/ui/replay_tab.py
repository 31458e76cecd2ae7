"""The "Replay" tab: a saved race played back side by side at its real timing, with its
figures, clearly labelled as a recording (stage insurance when a server or the network fails).

``build`` lays the tab out in page order and wires its events; the handlers are the methods of
``ReplayTab``, the tab's components (the shape of demo/ui/race_tab.py). The playback
(demo.replay) feeds the saved events through the live race's SideMeter, so the panes and charts
are drawn by the same code (demo.view, demo.charts through demo.live.frames.throttled_frames).
The final frame shows the figures saved with the run. An N-user race (demo.load.UsersRace)
replays user 1's answers and ends on the step's figures: the per-user speedup and throughput
ratio ("N users") and each side's step tiles.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
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

# One side's pane: (status, tiles, text), what every frame sets (demo.ui.outputs).
PaneOutputs = tuple[gr.HTML, gr.HTML, gr.HTML]


@dataclass(frozen=True, eq=False)
class ReplayTab:
    """The tab's components (page order), what its handlers need, and the handlers."""

    settings: Settings
    # the saved run and what to do with it
    run: gr.Dropdown
    refresh: gr.Button
    play: gr.Button
    stop: gr.Button
    export: gr.Button
    exported: gr.File
    # the recording
    banner: gr.HTML
    speedup: gr.HTML
    order_label: gr.HTML
    status: gr.HTML
    badge: gr.HTML
    panes: dict[str, PaneOutputs]
    race_plot: gr.Plot
    acc_plot: gr.Plot
    chunk_plot: gr.Plot

    @property
    def outputs(self) -> list[Any]:
        """What a playback sets, every frame all of it (demo.ui.outputs)."""
        return [self.banner, self.speedup, self.order_label, self.status, self.badge, self.race_plot,
                self.acc_plot, self.chunk_plot, *[c for pane in self.panes.values() for c in pane]]

    # ------------------------------------------------------------ handlers

    async def on_play(self, path: str | None) -> AsyncIterator[Any]:
        if not path:
            yield {self.status: view.run_status_html("error", "no saved run picked (races are saved under "
                                                     f"{self.settings.runs_dir})")}
            return
        try:
            run = read_record(Path(path))
        except DemoError as e:
            yield {self.status: view.run_status_html("error", f"cannot play it: {e}")}
            return
        result = race_of(run)  # an N-user race plays user 1
        users = run if isinstance(run, UsersRace) else None
        note = f"{users.users} users: user 1's answers, then the step's figures" if users else None
        # Every frame sets every output (see demo.ui.outputs): the first frame all of them.
        stream = StreamOutputs(self.outputs)
        start_view = result_view(None)
        yield stream.values({self.banner: view.recording_banner_html(result, note),
                             self.order_label: view.order_html(result.order),
                             self.status: view.run_status_html("running", "playing the recording"),
                             self.badge: start_view.badge, self.acc_plot: start_view.acceptance_figure,
                             self.chunk_plot: start_view.chunk_figure})
        async for frame in throttled_frames(replay_snapshots(result)):
            yield stream.values(frame_updates(frame, self.panes, self.speedup, self.race_plot))
        end_view = result_view(result)
        step_figures: dict[Any, Any] = {} if users is None else {
            self.speedup: view.users_speedup_html(users.users, users.step, running=False),
            **{self.panes[side][1]: view.users_step_html(side, users) for side in SIDES}}
        yield stream.values({self.badge: end_view.badge, self.acc_plot: end_view.acceptance_figure,
                             self.chunk_plot: end_view.chunk_figure, **step_figures,
                             self.status: view.run_status_html("done", "end of the recording (figures as saved)")})

    def on_stop(self) -> str:
        return view.run_status_html("stopped", "playback stopped")

    def on_refresh(self) -> gr.Dropdown:
        return gr.Dropdown(choices=_choices(self.settings))

    def on_export(self, path: str | None) -> tuple[str | None, str]:
        """The saved run as a self-contained page to download (demo.export); errors in the status."""
        if not path:
            return None, view.run_status_html("error", "no saved run picked: pick one to export")
        return export_to_temp(lambda: run_for_export(Path(path)))


# ---------------------------------------------------------------- layout


def build(settings: Settings) -> ReplayTab:
    """Lay out the tab inside the current gr.Tab, then wire its events."""
    choices = _choices(settings)
    with gr.Row():
        run = gr.Dropdown(choices=choices, value=choices[0][1] if choices else None,
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
            order_label = gr.HTML("", elem_id="sd-replay-mode")
            status = gr.HTML("", elem_id="sd-replay-status")
        badge = gr.HTML(view.identical_badge_html(None), elem_id="sd-replay-badge", min_width=220)
    with gr.Row(equal_height=True):
        panes: dict[str, PaneOutputs] = {side: _pane(side) for side in SIDES}
    gr.HTML(view.burst_legend_html())
    race_plot = gr.Plot(charts.race_figure(None), label="Tokens over time (recorded)", elem_id="sd-replay-race")
    with gr.Row():
        acc_plot = gr.Plot(charts.acceptance_figure(None), label="Acceptance by position", elem_id="sd-replay-acc")
        chunk_plot = gr.Plot(charts.chunk_figure(None), label="Tokens per chunk", elem_id="sd-replay-chunk")
    tab = ReplayTab(settings=settings, run=run, refresh=refresh, play=play, stop=stop, export=export,
                    exported=exported, banner=banner, speedup=speedup, order_label=order_label, status=status,
                    badge=badge, panes=panes, race_plot=race_plot, acc_plot=acc_plot, chunk_plot=chunk_plot)
    wire(tab)
    return tab


def _pane(side: str) -> PaneOutputs:
    with gr.Column(min_width=360):
        gr.HTML(view.pane_title_html(side.capitalize() + " (recorded)"))
        return (gr.HTML("", elem_id=f"sd-replay-status-{side}"),
                gr.HTML("", elem_id=f"sd-replay-tiles-{side}"),
                gr.HTML('<div class="sd-text"></div>', elem_id=f"sd-replay-text-{side}"))


# ---------------------------------------------------------------- events


def wire(tab: ReplayTab) -> None:
    """The tab's events: Play streams the recording, Stop cancels it; the list, the download."""
    playing = tab.play.click(tab.on_play, inputs=[tab.run], outputs=tab.outputs, show_progress="hidden")
    tab.stop.click(tab.on_stop, outputs=[tab.status], cancels=[playing], queue=False)
    tab.refresh.click(tab.on_refresh, outputs=[tab.run], queue=False)
    tab.export.click(tab.on_export, inputs=[tab.run], outputs=[tab.exported, tab.status], show_progress="minimal")


def _choices(settings: Settings) -> list[tuple[str, str]]:
    return [(run_label(p), str(p)) for p in list_runs(settings.runs_dir)[:MAX_LISTED]]
