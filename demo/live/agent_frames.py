"""A session preset on the page, without Gradio: its turns raced one after another (demo.agent_race), drawn
as the race's own Frames.

Each pane streams the turn racing now (its answer, tiles and shading, as a race); under the headline
the per-turn strip fills in as each turn lands (its speedup, acceptance and tokens per step per arm,
demo.view.turns_strip_html); the headline is the session's decode speedup over the turns landed so
far, the live figure of the first turn until it lands. Stop, the stream budget and the watchdog are
the race's (demo.live.frame_stream.RaceFrames).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence

from demo import view
from demo.agent_race import SessionResult, stream_session
from demo.live.budget import Ticket
from demo.live.frame_stream import SNAPSHOT_INTERVAL_S, RaceFrames
from demo.live.frames import Frame
from demo.live.session import RaceControl
from demo.presets import Preset
from demo.results import RaceRequest
from demo.settings import Settings


def session_frames(req: RaceRequest, preset: Preset, settings: Settings, control: RaceControl,
                   ticket: Ticket | None = None) -> AsyncGenerator[Frame, None]:
    """Race ``preset``'s session (``req`` its first turn, as the page set it) and yield Frames."""
    return SessionFrames(req, preset, settings, control, ticket).frames()


class SessionFrames(RaceFrames):
    """A session's frames: each turn a race, the strip and the session's headline on every frame."""

    def __init__(self, req: RaceRequest, preset: Preset, settings: Settings, control: RaceControl,
                 ticket: Ticket | None = None) -> None:
        super().__init__(req, settings, control, ticket)
        self.preset = preset
        self.session: SessionResult | None = None
        self.turn = 1

    def running_status(self) -> str:
        """The status line while the session runs: which turn of how many, and the order."""
        total = 1 + len(self.preset.turns)
        return view.run_status_html("running", f"turn {self.turn} of {total} · {view.ORDER_LABELS[self.req.order]}")

    async def _run(self) -> None:
        async with contextlib.aclosing(stream_session(
                self.req, self.preset.turns, self.settings, first_label=self.preset.first_label,
                interval_s=SNAPSHOT_INTERVAL_S, stop=self.control.stop)) as snapshots:
            async for snap in snapshots:
                if snap.turn != self.turn:
                    self.turn = snap.turn
                    self.status_note = self.running_status()
                self.session = snap.session
                self.latest = snap.snapshot
                self.changed.set()

    def _dress(self, frame: Frame) -> Frame:
        session = self.session
        landed = session.landed if session is not None else 0
        frame.turns = view.turns_strip_html(session, racing=self.turn, labels=self._labels())
        frame.session = session
        if session is None or not landed:
            return frame  # the first turn streams: its live headline, as a race's
        total = session.turns_total
        names = list(session.arms)
        if len(names) == 1:
            frame.speedup = view.session_speedup_html(None, session.arms[names[0]], landed, total)
        panes: Sequence[view.PaneView | None] = [frame.speculative, *(frame.arms or {}).values()]
        if len(names) > 1:
            for name, pane in zip(names, panes, strict=False):
                if pane is not None:
                    pane.headline_html = view.session_speedup_html(name, session.arms[name], landed, total)
        return frame

    def _labels(self) -> dict[str, str]:
        """Each arm's row label in the strip: its label or name."""
        return {e.arm: e.label or e.arm for e in self.settings.arm_endpoints() if e.arm is not None}
