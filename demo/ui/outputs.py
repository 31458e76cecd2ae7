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

from demo import view
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


def frame_updates(frame: Frame, panes: Mapping[str, Sequence[Any]], speedup: Any, race_plot: Any,
                  run_status: Any = None, turns: Any = None) -> dict[Any, Any]:
    """A Frame as {component: new value or None}, for StreamOutputs.values. ``panes`` maps a pane
    key ("baseline", "speculative": the first arm, then each other arm's, demo.view.pane_key) to its
    (status, tiles, text) components, and an arm's headline fourth in a race of several; a pane
    the frame has and the page does not (a replay of more arms than it shows) is left out. A
    quiet-server notice wins over the status line. ``turns``: the session's per-turn strip."""
    out: dict[Any, Any] = {speedup: frame.speedup, race_plot: frame.race_figure}
    if run_status is not None:
        out[run_status] = frame.run_status
    if turns is not None:  # every frame sets it: a race that is not a session clears the strip
        out[turns] = frame.turns if frame.turns is not None else view.turns_strip_html(None)
    shown: dict[str, Any] = {side: getattr(frame, side) for side in SIDES}
    shown.update(frame.arms or {})
    for key, pane in shown.items():
        comps = panes.get(key)
        if pane is None or comps is None:
            continue
        out[comps[0]], out[comps[1]], out[comps[2]] = pane.status_html, pane.tiles_html, pane.text_html
        if len(comps) > 3:
            out[comps[3]] = pane.headline_html
    for quiet_key, html in (frame.side_status or {}).items():
        if quiet_key in panes:
            out[panes[quiet_key][0]] = html
    return out
