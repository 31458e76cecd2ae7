"""Fixed output lists for streaming events, so that a frame leaves nothing out.

A value left out of a Gradio event's outputs (gr.skip(), or a key missing from a yielded dict)
is not free: for each one Gradio builds a new component and recomputes its config, about 0.8 ms
a time. The race used to stream 21 outputs and leave out ~14 per frame: 11 ms of the app's CPU
per frame, 20 frames a second, taken from the CPU vLLM servers being measured on a laptop.
Resending an output's last value costs next to nothing: Gradio sends only the difference,
empty here, so the page does not redraw it either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gradio as gr


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
