"""Fixed output lists for streaming events, so that a frame leaves nothing out.

A value left out of a Gradio event's outputs (gr.skip(), or a key missing from a yielded dict)
is not free: for each one Gradio builds a new component and recomputes its config, about 0.8 ms
a time. The race used to stream 21 outputs and leave out ~14 per frame: 11 ms of the app's CPU
per frame, 20 frames a second, taken from the CPU vLLM servers being measured on a laptop.
Resending an output's last value costs next to nothing: Gradio sends only the difference,
empty here, so the page does not redraw it either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gradio as gr

from demo.ui.race_stream import Frame


class StreamOutputs:
    """The values of ``components`` for each frame: the new value where a frame has one, else
    the last value sent (left out only before the first). Components in ``no_resend``
    (figures, whose resending costs a JSON dump) are left out instead."""

    def __init__(self, components: Sequence[Any], no_resend: Sequence[Any] = ()) -> None:
        self.components = list(components)
        self._known = {id(c) for c in self.components}
        self._no_resend = {id(c) for c in no_resend}
        self._last: dict[int, Any] = {}

    def values(self, updates: dict[Any, Any]) -> list[Any]:
        """``updates`` maps components to new values; a None value means 'no new value'."""
        for component, value in updates.items():
            if id(component) not in self._known:
                raise KeyError(f"{component!r} is not one of this event's outputs")
            if value is not None:
                self._last[id(component)] = value
        out = []
        for c in self.components:
            if id(c) in self._no_resend:
                value = updates.get(c)
                out.append(gr.skip() if value is None else value)
            else:
                out.append(self._last.get(id(c), gr.skip()))
        return out


def frame_updates(frame: Frame, panes: Mapping[str, tuple[Any, Any, Any]], speedup: Any, race_plot: Any,
                  run_status: Any = None) -> dict[Any, Any]:
    """A Frame as {component: new value or None}, for StreamOutputs.values. ``panes`` maps a side
    to its (status, tiles, text) components; a quiet-server notice wins over the status line."""
    out: dict[Any, Any] = {speedup: frame.speedup, race_plot: frame.race_figure}
    if run_status is not None:
        out[run_status] = frame.run_status
    for side in ("baseline", "speculative"):
        pane = getattr(frame, side)
        if pane is not None:
            status, tiles, text = panes[side]
            out[status], out[tiles], out[text] = pane.status_html, pane.tiles_html, pane.text_html
    for side, html in (frame.side_status or {}).items():
        out[panes[side][0]] = html
    return out
