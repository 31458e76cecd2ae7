"""Per-browser-session control of the race: one race at a time, Stop, and closing the tab.

One race per session: Start arms the session's race; pressed again while that race waits for
a slot or runs, it is refused and its race event does nothing (Gradio's queue still runs the
event each press chains, so the registry counts the refused presses to know those events).

Stop sets the race's ``stop`` event: demo.race.stream_race then closes both streams
(the servers abort the requests) and still delivers a final, cancelled result that the
page shows and saves. Closing the tab leaves nobody to read the frames: the watchdog in
demo.live.frame_stream.RaceFrames then sets ``stop`` the same way and says why in
``stopped_because`` (a page that was only slow still gets a final state, never a frozen one).

A race's end is handed to the event that draws it through ``hand_over``/``take``: taken
once, so an event chained to a refused press cannot draw (or count) the race a second time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

# Ends handed over but never taken (the tab closed first) are dropped beyond this many.
MAX_UNTAKEN = 32


@dataclass
class RaceControl:
    """One session's race: its stop event, its task (pump), why the app stopped it, whether an event runs it."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    pump: asyncio.Task[None] | None = None
    stopped_because: str | None = None  # set when the app, not the user, stopped the race
    claimed: bool = False  # a race event runs this race


class RaceRegistry:
    """Every browser session's race, by session hash: one at a time; Stop, and the hand-over of each race's end."""
    def __init__(self) -> None:
        self._by_session: dict[str, RaceControl] = {}
        self._refused: dict[str, int] = {}  # refused presses whose race event has not run yet
        self._ends: dict[str, Any] = {}

    def arm(self, session: str) -> RaceControl | None:
        """The session's next race, armed by Start; None (the press refused) while the
        session's race is armed, waiting or running."""
        if session in self._by_session:
            self._refused[session] = self._refused.get(session, 0) + 1
            return None
        control = RaceControl()
        self._by_session[session] = control
        return control

    def claim(self, session: str) -> RaceControl | None:
        """The control a race event runs: the race Start armed, or a new one for a call that
        skipped Start (the API). None when the event must do nothing: it comes from a refused
        press, or the session's race is already running."""
        control = self._by_session.get(session)
        if control is not None and not control.claimed:
            control.claimed = True
            self._ends.pop(session, None)  # an earlier race's end nobody took is not this one's
            return control
        if self._refused.get(session, 0) > 0:
            self._refused[session] -= 1
            if not self._refused[session]:
                del self._refused[session]
            return None
        if control is not None:
            return None
        control = RaceControl(claimed=True)
        self._by_session[session] = control
        self._ends.pop(session, None)
        return control

    def get(self, session: str) -> RaceControl | None:
        """The session's race, or None when it has none."""
        return self._by_session.get(session)

    def stop(self, session: str) -> bool:
        """Set the session's race's stop event; False when the session has no race."""
        control = self._by_session.get(session)
        if control is None:
            return False
        control.stop.set()
        return True

    def drop(self, session: str, control: RaceControl) -> None:
        """Forget the session's race, if ``control`` is still the one registered."""
        if self._by_session.get(session) is control:
            del self._by_session[session]

    def hand_over(self, session: str, end: Any) -> None:
        """Keep a finished race's end for the event that draws it (``take``)."""
        self._ends.pop(session, None)
        self._ends[session] = end
        while len(self._ends) > MAX_UNTAKEN:
            del self._ends[next(iter(self._ends))]

    def take(self, session: str) -> Any | None:
        """The session's finished race's end, once; None when there is none (or it was taken)."""
        return self._ends.pop(session, None)

    def active(self) -> int:
        """How many races are running now (their task started and not done)."""
        return sum(1 for c in self._by_session.values() if c.pump is not None and not c.pump.done())
