"""Per-browser-session control of the running race: Stop, and closing the tab.

Stop sets the race's ``stop`` event: demo.race.stream_race then closes both streams
(the servers abort the requests) and still delivers a final, cancelled result that the
page shows and saves. Closing the tab leaves nobody to read the frames: the watchdog in
demo.ui.race_stream.race_frames then sets ``stop`` the same way and says why in
``stopped_because`` (a page that was only slow still gets a final state, never a frozen one).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class RaceControl:
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    pump: asyncio.Task[None] | None = None
    stopped_because: str | None = None  # set when the app, not the user, stopped the race


class RaceRegistry:
    def __init__(self) -> None:
        self._by_session: dict[str, RaceControl] = {}

    def arm(self, session: str) -> RaceControl:
        """A fresh control for the session's next race (a previous one is stopped first)."""
        self.stop(session)
        control = RaceControl()
        self._by_session[session] = control
        return control

    def get(self, session: str) -> RaceControl | None:
        return self._by_session.get(session)

    def stop(self, session: str) -> bool:
        control = self._by_session.get(session)
        if control is None:
            return False
        control.stop.set()
        return True

    def drop(self, session: str, control: RaceControl) -> None:
        if self._by_session.get(session) is control:
            del self._by_session[session]

    def active(self) -> int:
        return sum(1 for c in self._by_session.values() if c.pump is not None and not c.pump.done())
