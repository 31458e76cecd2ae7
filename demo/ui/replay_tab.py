"""The "Replay" tab: a saved race played back side by side at its real timing, with its
figures, clearly labelled as a recording (stage insurance when a server or the network fails).

``build`` lays the tab out in page order and wires its events; the handlers are the methods of
``ReplayTab``, the tab's components (the shape of demo/ui/race_tab.py). The playback
(demo.runs.replay) feeds the saved events through the live race's SideMeter, so the panes and charts
are drawn by the same code (demo.view, demo.charts through demo.live.frames.throttled_frames).
The final frame shows the figures saved with the run. An N-user race (demo.load.engine.UsersRace)
replays user 1's answers and ends on the step's figures: the per-user speedup and throughput
ratio ("N users") and each side's step tiles.

Arms: the panes follow the *run* played, not the settings. Gradio's components are fixed when
the page is built, so the tab has both layouts: the pair's two panes (a run of one arm, or an
N-user run: the baseline and speculative panes) and, hidden until a run of several arms is
played, the compact layout of the Race tab (.sd-arms): the baseline and MAX_ARMS arm slots, each
arm's pane with its own title, headline and identical-output badge, the slots past the run's arms
hidden. Play first shows the run's layout (``on_layout``, no queue), then streams the recording.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from demo import charts, view
from demo.errors import DemoError
from demo.live.frames import result_view, throttled_frames
from demo.live.pane_title import recorded_arm_titles
from demo.load.engine import UsersRace
from demo.results import SIDES, RaceResult
from demo.runs.export import export_to_temp, run_for_export, several_arms
from demo.runs.replay import replay_snapshots, run_label
from demo.runs.store import list_runs, race_of, read_record
from demo.settings import MAX_ARMS, Settings
from demo.ui.outputs import StreamOutputs, frame_updates

MAX_LISTED = 200

# One side's pane: (status, tiles, text), what every frame sets (demo.ui.outputs).
PaneOutputs = tuple[gr.HTML, gr.HTML, gr.HTML]


@dataclass(frozen=True, eq=False)
class ArmSlot:
    """One arm's pane in the layout of several arms: shown for an arm the run has, hidden past them."""

    column: gr.Column
    title: gr.HTML
    status: gr.HTML
    tiles: gr.HTML
    text: gr.HTML
    headline: gr.HTML
    badge: gr.HTML

    @property
    def live(self) -> tuple[gr.HTML, gr.HTML, gr.HTML, gr.HTML]:
        """What every frame sets: (status, tiles, text, headline) (demo.ui.outputs.frame_updates)."""
        return self.status, self.tiles, self.text, self.headline

    def cleared(self) -> dict[Any, Any]:
        """The slot's outputs emptied (a slot past the run's arms, before it is hidden)."""
        return {self.status: "", self.tiles: "", self.text: '<div class="sd-text"></div>',
                self.headline: view.arm_speedup_html("", None, None, running=False),
                self.badge: view.identical_badge_html(None)}


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
    pair: gr.Row  # the pair's two panes: a run of one arm (and an N-user run)
    panes: dict[str, PaneOutputs]
    arms_area: gr.Column  # the layout of several arms, hidden until such a run plays
    arms_baseline: PaneOutputs
    slots: list[ArmSlot]  # MAX_ARMS of them, the first arm's first
    race_plot: gr.Plot
    acc_plot: gr.Plot
    chunk_plot: gr.Plot

    @property
    def outputs(self) -> list[Any]:
        """What a playback sets, every frame all of it (demo.ui.outputs)."""
        return [self.banner, self.speedup, self.order_label, self.status, self.badge, self.race_plot,
                self.acc_plot, self.chunk_plot, *[c for pane in self.panes.values() for c in pane],
                *self.arms_baseline, *[c for slot in self.slots for c in (*slot.live, slot.badge)]]

    @property
    def layout_outputs(self) -> list[Any]:
        """What on_layout sets: which layout shows, the pair's headline and badge, each slot's title."""
        return [self.pair, self.arms_area, self.speedup, self.badge, *[s.column for s in self.slots],
                *[s.title for s in self.slots]]

    def live_panes(self, result: RaceResult) -> dict[str, tuple[Any, ...]]:
        """The panes a frame of ``result``'s playback is drawn on, by pane key (demo.view.pane_key):
        the pair's two, or the baseline and a slot per arm of a run of several."""
        if not several_arms(result):
            return dict(self.panes)
        out: dict[str, tuple[Any, ...]] = {"baseline": self.arms_baseline}
        for i, (name, slot) in enumerate(zip(result.arms, self.slots, strict=False)):
            out[view.pane_key(i, name)] = slot.live
        return out

    # ------------------------------------------------------------ handlers

    def on_layout(self, path: str | None) -> list[Any]:
        """Play pressed: the picked run's layout at once (its panes are fixed at build time, shown or
        hidden here). A run that cannot be read keeps the pair's: on_play says what is wrong."""
        result: RaceResult | None = None
        if path:
            try:
                result = race_of(read_record(Path(path)))
            except DemoError:
                result = None
        several = result is not None and several_arms(result)
        names = list(result.arms) if result is not None and several else []
        titles = recorded_arm_titles(result) if result is not None and several else []
        return [gr.update(visible=not several), gr.update(visible=several),
                gr.update(visible=not several), gr.update(visible=not several),
                *[gr.update(visible=i < len(names)) for i in range(len(self.slots))],
                *[titles[i] if i < len(titles) else gr.skip() for i in range(len(self.slots))]]

    async def on_play(self, path: str | None) -> AsyncIterator[Any]:
        """Play the saved run at ``path`` at its real timing, yielding a frame of outputs per event.

        Ends on the figures saved with the run; a missing or unreadable run ends on an error status."""
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
        panes = self.live_panes(result)
        # Every frame sets every output (see demo.ui.outputs): the first frame all of them, the
        # layout the run does not use emptied.
        stream = StreamOutputs(self.outputs)
        start_view = result_view(None)
        yield stream.values({self.banner: view.recording_banner_html(result, note),
                             self.order_label: view.order_html(result.order),
                             self.status: view.run_status_html("running", "playing the recording"),
                             self.badge: start_view.badge, self.acc_plot: start_view.position_acceptance_figure,
                             self.chunk_plot: start_view.chunk_figure, **self._unused(result),
                             **self._arm_badges(None, result)})
        async for frame in throttled_frames(replay_snapshots(result)):
            yield stream.values(frame_updates(frame, panes, self.speedup, self.race_plot))
        end_view = result_view(result)
        step_figures: dict[Any, Any] = {} if users is None else {
            self.speedup: view.users_speedup_html(users.users, users.step, running=False),
            **{self.panes[side][1]: view.users_step_html(side, users) for side in SIDES}}
        yield stream.values({self.badge: end_view.badge, self.acc_plot: end_view.position_acceptance_figure,
                             self.chunk_plot: end_view.chunk_figure, **step_figures,
                             **self._arm_badges(result, result),
                             self.status: view.run_status_html("done", "end of the recording (figures as saved)")})

    def _unused(self, result: RaceResult) -> dict[Any, Any]:
        """The outputs of the layout ``result`` does not use (and of the slots past its arms), emptied."""
        out: dict[Any, Any] = {}
        if several_arms(result):
            pairs = list(self.panes.values())
        else:
            pairs = [self.arms_baseline]
        for status, tiles, text in pairs:
            out.update({status: "", tiles: "", text: '<div class="sd-text"></div>'})
        used = len(result.arms) if several_arms(result) else 0
        for slot in self.slots[used:]:
            out.update(slot.cleared())
        return out

    def _arm_badges(self, shown: RaceResult | None, result: RaceResult) -> dict[Any, Any]:
        """Each arm's identical-output badge in a run of several arms: pending (``shown`` None), then
        as saved."""
        if not several_arms(result):
            return {}
        return {slot.badge: view.identical_badge_html(shown, arm=name)
                for name, slot in zip(result.arms, self.slots, strict=False)}

    def on_stop(self) -> str:
        """Stop pressed: the "playback stopped" status."""
        return view.run_status_html("stopped", "playback stopped")

    def on_refresh(self) -> gr.Dropdown:
        """The saved-run dropdown, refilled from the runs folder (at most MAX_LISTED runs)."""
        return gr.Dropdown(choices=_choices(self.settings))

    def on_export(self, path: str | None) -> tuple[str | None, str]:
        """The saved run as a self-contained page to download (demo.runs.export); errors in the status."""
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
    with gr.Row(equal_height=True) as pair:
        panes: dict[str, PaneOutputs] = {side: _pane(side) for side in SIDES}
    # A run of several arms: the Race tab's compact layout (page.css, .sd-arms), shown by on_layout.
    with gr.Column(visible=False, elem_classes=["sd-arms"], elem_id="sd-replay-arms") as arms_area:
        with gr.Row(equal_height=True):
            arms_baseline = _arms_baseline_pane()
            slots = [_slot(i) for i in range(MAX_ARMS)]
    gr.HTML(view.burst_legend_html())
    race_plot = gr.Plot(charts.race_figure(None), label="Tokens over time (recorded)", elem_id="sd-replay-race")
    with gr.Row():
        acc_plot = gr.Plot(charts.position_acceptance_figure(None), label="Acceptance by position",
                           elem_id="sd-replay-acc")
        chunk_plot = gr.Plot(charts.chunk_figure(None), label="Tokens per chunk", elem_id="sd-replay-chunk")
    tab = ReplayTab(settings=settings, run=run, refresh=refresh, play=play, stop=stop, export=export,
                    exported=exported, banner=banner, speedup=speedup, order_label=order_label, status=status,
                    badge=badge, pair=pair, panes=panes, arms_area=arms_area, arms_baseline=arms_baseline,
                    slots=slots, race_plot=race_plot, acc_plot=acc_plot, chunk_plot=chunk_plot)
    wire(tab)
    return tab


def _pane(side: str) -> PaneOutputs:
    with gr.Column(min_width=360):
        gr.HTML(view.pane_title_html(side.capitalize() + " (recorded)"))
        return (gr.HTML("", elem_id=f"sd-replay-status-{side}"),
                gr.HTML("", elem_id=f"sd-replay-tiles-{side}"),
                gr.HTML('<div class="sd-text"></div>', elem_id=f"sd-replay-text-{side}"))


def _arms_baseline_pane() -> PaneOutputs:
    """The baseline's pane in the layout of several arms: the reference line where an arm's pane has
    its headline, so the panes stay aligned (as the Race tab's)."""
    with gr.Column(elem_id="sd-replay-pane-arms-baseline", min_width=150):
        gr.HTML(view.pane_title_html("Baseline (recorded)"))
        with gr.Row(elem_classes=["sd-arm-head"]):
            gr.HTML(view.reference_speedup_html())
        return (gr.HTML("", elem_id="sd-replay-status-arms-baseline"),
                gr.HTML("", elem_id="sd-replay-tiles-arms-baseline"),
                gr.HTML('<div class="sd-text"></div>', elem_id="sd-replay-text-arms-baseline"))


def _slot(index: int) -> ArmSlot:
    """Arm slot ``index`` (its ids ``sd-replay-*-arm-<index + 1>``; ``sd-arm-N`` its arm's colour)."""
    n = index + 1
    with gr.Column(visible=False, elem_id=f"sd-replay-pane-arm-{n}", elem_classes=[f"sd-arm-{n}"],
                   min_width=150) as column:
        title = gr.HTML(view.pane_title_html(f"Arm {n} (recorded)"), elem_id=f"sd-replay-title-arm-{n}")
        with gr.Row(elem_classes=["sd-arm-head"]):
            headline = gr.HTML(view.arm_speedup_html("", None, None, running=False),
                               elem_id=f"sd-replay-speedup-arm-{n}")
            badge = gr.HTML(view.identical_badge_html(None), elem_id=f"sd-replay-badge-arm-{n}")
        return ArmSlot(column=column, title=title,
                       status=gr.HTML("", elem_id=f"sd-replay-status-arm-{n}"),
                       tiles=gr.HTML("", elem_id=f"sd-replay-tiles-arm-{n}"),
                       text=gr.HTML('<div class="sd-text"></div>', elem_id=f"sd-replay-text-arm-{n}"),
                       headline=headline, badge=badge)


# ---------------------------------------------------------------- events


def wire(tab: ReplayTab) -> None:
    """The tab's events: Play shows the run's layout, then streams the recording; Stop cancels
    it; the list, the download."""
    playing = (tab.play.click(tab.on_layout, inputs=[tab.run], outputs=tab.layout_outputs, queue=False,
                              show_progress="hidden")
               .then(tab.on_play, inputs=[tab.run], outputs=tab.outputs, show_progress="hidden"))
    tab.stop.click(tab.on_stop, outputs=[tab.status], cancels=[playing], queue=False)
    tab.refresh.click(tab.on_refresh, outputs=[tab.run], queue=False)
    tab.export.click(tab.on_export, inputs=[tab.run], outputs=[tab.exported, tab.status], show_progress="minimal")


def _choices(settings: Settings) -> list[tuple[str, str]]:
    return [(run_label(p), str(p)) for p in list_runs(settings.runs_dir)[:MAX_LISTED]]
