"""The values a streaming event yields for each frame: every output, every time.

``frame_updates`` maps a Frame (demo.live.frames) onto the race area's components;
``StreamOutputs`` turns those updates into the event's full output list, resending an output's
last value where the frame has no new one. The reason: Gradio builds a new component, with its
config, for each output left out of a yield (``gr.skip()``, a missing dict key), and over a day
of streaming those cost memory (the booth soak, docs/benchmarks.md#booth-soak); a value sent
again unchanged is diffed away, and the page does not redraw it. A figure is serialised once,
when it is new (Gradio's own ``Plot.postprocess``), and its serialised form is what is resent:
resending costs no JSON dump.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gradio as gr

from demo.live.frames import Frame
from demo.results import SIDES


class StreamOutputs:
    """The values of ``components`` for each frame: the new value where a frame has one, else
    the last value sent (left out only before the first). A new figure for a ``gr.Plot`` is
    kept serialised, so sending it again is free."""

    def __init__(self, components: Sequence[Any]) -> None:
        self.components = list(components)
        self._known = {id(c) for c in self.components}
        self._last: dict[int, Any] = {}

    def values(self, updates: Mapping[Any, Any]) -> list[Any]:
        """``updates`` maps components to new values; a None value means 'no new value'."""
        for component, value in updates.items():
            if id(component) not in self._known:
                raise KeyError(f"{component!r} is not one of this event's outputs")
            if value is not None:
                self._last[id(component)] = component.postprocess(value) if isinstance(component, gr.Plot) else value
        return [self._last.get(id(c), gr.skip()) for c in self.components]


def frame_updates(frame: Frame, panes: Mapping[str, tuple[Any, Any, Any]], speedup: Any, race_plot: Any,
                  run_status: Any = None) -> dict[Any, Any]:
    """A Frame as {component: new value or None}, for StreamOutputs.values. ``panes`` maps a side
    to its (status, tiles, text) components; a quiet-server notice wins over the status line."""
    out: dict[Any, Any] = {speedup: frame.speedup, race_plot: frame.race_figure}
    if run_status is not None:
        out[run_status] = frame.run_status
    for side in SIDES:
        pane = getattr(frame, side)
        if pane is not None:
            status, tiles, text = panes[side]
            out[status], out[tiles], out[text] = pane.status_html, pane.tiles_html, pane.text_html
    for quiet_side, html in (frame.side_status or {}).items():
        out[panes[quiet_side][0]] = html
    return out
