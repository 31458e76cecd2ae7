"""Booth mode on the page (`python app.py --booth`): the caption over the race area, the big
layout, the visitor's takeover, and each page's view of the one show (demo.live.booth).

Every open page runs ``BoothPage.watch``: it joins the app's Booth and draws its updates on the Race tab's
own components, so the show and a visitor's race use the same panes (with several arms, a pane per
arm, each with its headline and badge). The page's script (BOOTH_JS)
sets the large layout while the show runs, and on a visitor's click or key folds it away and tells
the app (the hidden ``#sd-booth-touch`` button): the booth stops its race and hands the page over.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from demo import view
from demo.assets import static_text
from demo.live.booth import Booth, caption_html
from demo.live.load_stream import idle_status_html, start_frame
from demo.live.request import default_order
from demo.ui.load_panel import LoadPanel
from demo.ui.outputs import StreamOutputs, frame_updates
from demo.ui.race_tab import RaceTab

log = logging.getLogger(__name__)

# The page's side of booth mode (demo/static/booth.js): the large layout while the show runs,
# folded away at a visitor's first click or key, which also tells the app. Its look: booth.css.
BOOTH_JS = static_text("booth.js")
BOOTH_CSS = static_text("booth.css")


def build_caption() -> tuple[gr.HTML, gr.Button]:
    """The caption (above the tabs) and the hidden button the page's script presses for a visitor."""
    caption = gr.HTML(caption_html("waiting", None, "Starting the show…"), elem_id="sd-booth-caption")
    touch = gr.Button("visitor", elem_id="sd-booth-touch", elem_classes=["sd-hidden"])
    return caption, touch


@dataclass(frozen=True, eq=False)
class BoothPage:
    """Booth mode's components (the caption above the tabs and its hidden button), the show it
    watches and the Race tab it draws on; the handlers.

    Two streams per page, each the only writer of its outputs: the caption (which ticks every
    second, also in the visitor's turn) and the race area (which changes only with the show's
    races). Every yield sets every output of its stream (demo.ui.outputs), and the caption's
    countdown never touches the panes a visitor's race is drawing on. ``load``: the Race tab's load
    panel, where the booth's load turn draws its curves (set from the first update on)."""

    booth: Booth
    race: RaceTab
    caption: gr.HTML
    touch: gr.Button
    load: LoadPanel | None = None

    @property
    def outputs(self) -> list[Any]:
        """The race area as the show draws it (and the load panel, for the load turn)."""
        load_outputs = self.load.live_outputs if self.load is not None else []
        return [self.race.banner, self.race.badge, self.race.order_label, *self.race.live_outputs,
                *self.race.arm_badges, *load_outputs]

    # ------------------------------------------------------------ handlers

    async def watch(self) -> AsyncIterator[Any]:
        """This page's view of the show's races, for as long as the page is open."""
        race, load = self.race, self.load
        viewer = self.booth.join()
        stream = StreamOutputs(self.outputs)
        first = True
        try:
            while True:
                update = await viewer.take()
                if update is None or (update.frame is None and update.banner is None and update.badge is None
                                      and update.load is None and update.badges is None):
                    continue
                try:
                    values: dict[Any, Any] = {race.banner: update.banner, race.badge: update.badge}
                    if update.frame is not None:
                        values.update(frame_updates(update.frame, race.live_panes, race.speedup, race.race_plot,
                                                    race.run_status))
                    for key, html in (update.badges or {}).items():  # several arms: each arm's badge
                        arm_badge = race.panes[key].badge if key in race.panes else None
                        if arm_badge is not None:
                            values[arm_badge] = html
                    if first:
                        values[race.order_label] = view.order_html(*default_order(race.settings))
                        for p in race.arm_panes.values():  # several arms: every badge from the first yield on
                            if p.badge is not None and p.badge not in values:
                                values[p.badge] = view.identical_badge_html(None, arm=p.arm)
                        if load is not None:  # every output from the first yield on (demo.ui.outputs)
                            values.update(load.updates(start_frame(None)))
                            values[load.status] = idle_status_html(load.settings.max_users)
                        first = False
                    if load is not None and update.load is not None:
                        values.update({c: v for c, v in load.updates(update.load).items() if v is not None})
                    yield stream.values(values)
                except Exception:  # a bug must not end this page's show: log it, keep watching
                    log.exception("booth: drawing an update failed")
        finally:
            self.booth.leave(viewer)

    async def watch_caption(self) -> AsyncIterator[str]:
        """The caption, each time it changes."""
        viewer = self.booth.join()
        shown = None
        try:
            while True:
                update = await viewer.take()
                if update is not None and update.caption is not None and update.caption != shown:
                    shown = update.caption
                    yield shown
        finally:
            self.booth.leave(viewer)

    def on_touch(self) -> str:
        """A visitor touched the page: the show stops its race and hands the page over."""
        return self.booth.touch()


def build(page: gr.Blocks, booth: Booth, race: RaceTab, caption: gr.HTML, touch: gr.Button,
          load: LoadPanel | None = None) -> BoothPage:
    """The page's booth mode, on the caption laid out above the tabs (build_caption): wired."""
    shown = BoothPage(booth=booth, race=race, caption=caption, touch=touch, load=load)
    wire(page, shown)
    return shown


def wire(page: gr.Blocks, shown: BoothPage) -> None:
    """Each page watches the show once it has loaded (after the race tab's server probe, so the
    booth's banner is the last word); the hidden button hands the page to a visitor."""
    loaded = page.load(shown.race.on_probe, outputs=shown.race.server_outputs, show_progress="hidden")
    loaded.then(shown.watch, outputs=shown.outputs, concurrency_limit=None, concurrency_id="booth",
                show_progress="hidden")
    loaded.then(shown.watch_caption, outputs=[shown.caption], concurrency_limit=None, concurrency_id="booth",
                show_progress="hidden")
    # always_last: an input made while the last one is still on its way (a busy machine) is sent
    # after it, not dropped as Gradio's default ("once") would, which let the show back too soon.
    shown.touch.click(shown.on_touch, outputs=[shown.caption], queue=False, show_progress="hidden",
                      trigger_mode="always_last")
