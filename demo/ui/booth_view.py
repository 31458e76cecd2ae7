"""Booth mode on the page (`python app.py --booth`): the caption over the race area, the big
layout, the visitor's takeover, and each page's view of the one show (demo.live.booth).

Every open page runs ``watch``: it joins the app's Booth and draws its updates on the Race tab's
own components, so the show and a visitor's race use the same panes. The page's script (BOOTH_JS)
sets the large layout while the show runs, and on a visitor's click or key folds it away and tells
the app (the hidden ``#sd-booth-touch`` button): the booth stops its race and hands the page over.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import gradio as gr

from demo import view
from demo.assets import static_text
from demo.live.booth import Booth, caption_html
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


def wire(page: gr.Blocks, booth: Booth, race: RaceTab, caption: gr.HTML, touch: gr.Button) -> None:
    """Each page watches the show once it has loaded (after the race tab's server probe, so the
    booth's banner is the last word); the hidden button hands the page to a visitor.

    Two streams per page, each the only writer of its outputs: the caption (which ticks every
    second, also in the visitor's turn) and the race area (which changes only with the show's
    races). Every yield sets every output of its stream (demo.ui.outputs), and the caption's
    countdown never touches the panes a visitor's race is drawing on."""
    outputs = [race.banner, race.badge, race.mode_label, *race.live_outputs]
    panes = race.live_panes

    async def watch() -> AsyncIterator[Any]:
        viewer = booth.join()
        stream = StreamOutputs(outputs)
        first = True
        try:
            while True:
                update = await viewer.take()
                if update is None or (update.frame is None and update.banner is None and update.badge is None):
                    continue
                try:
                    values: dict[Any, Any] = {race.banner: update.banner, race.badge: update.badge}
                    if update.frame is not None:
                        values.update(frame_updates(update.frame, panes, race.speedup, race.race_plot, race.run_status))
                    if first:
                        values[race.mode_label] = view.order_html("simultaneous")
                        first = False
                    yield stream.values(values)
                except Exception:  # a bug must not end this page's show: log it, keep watching
                    log.exception("booth: drawing an update failed")
        finally:
            booth.leave(viewer)

    async def watch_caption() -> AsyncIterator[str]:
        viewer = booth.join()
        shown = None
        try:
            while True:
                update = await viewer.take()
                if update is not None and update.caption is not None and update.caption != shown:
                    shown = update.caption
                    yield shown
        finally:
            booth.leave(viewer)

    loaded = page.load(race.on_probe, outputs=race.server_outputs, show_progress="hidden")
    loaded.then(watch, outputs=outputs, concurrency_limit=None, concurrency_id="booth", show_progress="hidden")
    loaded.then(watch_caption, outputs=[caption], concurrency_limit=None, concurrency_id="booth",
                show_progress="hidden")
    touch.click(booth.touch, outputs=[caption], queue=False, show_progress="hidden")
