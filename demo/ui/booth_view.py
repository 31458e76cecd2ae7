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
from demo.live.booth import Booth, caption_html
from demo.ui.outputs import StreamOutputs, frame_updates
from demo.ui.race_tab import RaceTab

log = logging.getLogger(__name__)

# The page's side of booth mode: the large layout while the show runs (the caption's data-state
# says whose turn it is), folded away at a visitor's first click or key, which also tells the app
# (at most once a second: each input pushes the show's return back by booth_idle_s; a 2 s
# throttle dropped an input made 2 s after the last whenever the browser ran the first one late).
BOOTH_JS = """
(() => {
  const body = document.body;
  body.classList.add('sd-booth');
  let inputAt = 0, touchedAt = 0;
  const touch = (e) => {
    if (!e.isTrusted) return;  // the page's own clicks (Ctrl+Enter pressing Start) are not a visitor
    body.classList.remove('sd-booth');
    const now = Date.now();
    inputAt = now;
    if (now - touchedAt > 1000) {
      touchedAt = now;
      document.getElementById('sd-booth-touch')?.click();
    }
  };
  document.addEventListener('pointerdown', touch, true);
  document.addEventListener('keydown', touch, true);
  // The large layout while the show runs; an update of the show already on its way when the
  // visitor touched the page must not bring it back for a moment.
  setInterval(() => {
    const c = document.querySelector('#sd-booth-caption .sd-booth-caption');
    if (!c) return;
    const show = c.dataset.state !== 'visitor' && Date.now() - inputAt > 3000;
    if (show !== body.classList.contains('sd-booth')) body.classList.toggle('sd-booth', show);
  }, 300);
})();
"""

# Read from 3 m: the controls, the tab bar and everything below the panes fold away; the
# headline, the caption and the two panes grow. (!important: Gradio also adds every rule scoped
# under its container, which outranks a body class.)
BOOTH_CSS = """
.sd-hidden { display: none !important; }
.sd-booth-caption { font-size: 22px; font-weight: 700; color: #f2f4f8; padding: 4px 8px; }
.sd-booth-caption[data-state="live"] .sd-booth-head { color: #4ade80; }
.sd-booth-caption[data-state="recording"] .sd-booth-head { color: #ff6b6b; }
.sd-booth-caption[data-state="visitor"] .sd-booth-head { color: #ffb000; }
.sd-booth-expect { font-size: 18px; font-weight: 400; color: #ffd37a; }
.sd-booth-note { font-size: 15px; font-weight: 400; color: #c9d1dd; }
body.sd-booth #sd-controls, body.sd-booth #sd-below, body.sd-booth .tab-wrapper,
body.sd-booth .sd-legend { display: none !important; }
body.sd-booth .sd-booth-caption { font-size: 40px !important; }
body.sd-booth .sd-booth-expect { font-size: 28px !important; }
body.sd-booth .sd-booth-note { font-size: 20px !important; }
body.sd-booth .sd-speedup-value { font-size: 120px !important; }
body.sd-booth .sd-speedup-label { font-size: 20px !important; }
body.sd-booth .sd-pane-title { font-size: 34px !important; }
body.sd-booth .sd-tile-value { font-size: 40px !important; }
body.sd-booth .sd-tile[data-key="tokens_per_s"] .sd-tile-value { font-size: 52px !important; }
body.sd-booth .sd-text, body.sd-booth .sd-idle { height: 44vh !important; font-size: 24px !important; }
"""


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
    outputs = [race.banner, race.badge, race.order_label, *race.live_outputs]
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
                        values[race.order_label] = view.order_html("simultaneous")
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
