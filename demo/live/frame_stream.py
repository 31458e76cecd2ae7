"""One race as the page's stream of Frames, without Gradio: RaceFrames runs the race in a pump
task, draws only the latest snapshot when the page lags, says when a side goes quiet, and its
watchdog stops the race when nobody reads the frames (the tab closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator

from demo import view
from demo.live.budget import Ticket, waiting_text
from demo.live.frames import ChartThrottle, Frame, pane_sides
from demo.live.session import RaceControl
from demo.live.status import internal_error_text, server_working_text
from demo.race import stream_race
from demo.results import SIDES, RaceRequest, RaceSnapshot
from demo.settings import Settings

log = logging.getLogger(__name__)

# stream_race folds chunks into snapshots at most every this often: at most 12.5 frames a
# second, above the >= 10 updates/s per pane the page promises (benchmarks/bench_ui_rate.py).
SNAPSHOT_INTERVAL_S = 0.08
# Gradio pulls the next frame within milliseconds while the browser is connected. When the
# tab closes it stops pulling and leaves this generator suspended (its unload event also
# fires spuriously on heartbeat reconnects, so it cannot be trusted): a frame left unread
# this long means nobody is watching, and the race is stopped, closing both streams.
CONSUMER_TIMEOUT_S = 5.0
WATCH_TICK_S = 0.5
# A side with no new token for this long says so on its status line, updated every second.
QUIET_NOTICE_S = 2.0
# While a race waits for the page's stream budget, its status line says so this often.
WAIT_TICK_S = 1.0


def race_frames(req: RaceRequest, settings: Settings, control: RaceControl,
                ticket: Ticket | None = None) -> AsyncGenerator[Frame, None]:
    """Run one race and yield Frames; only the latest snapshot is drawn when the page lags.
    With ``ticket`` (the page's stream budget, demo.live.budget) the race first waits its turn,
    saying so, and gives the streams back when it ends however it ends."""
    return RaceFrames(req, settings, control, ticket).frames()


class RaceFrames:
    """One race's frames. The race is driven by a pump task kept in ``control`` so that closing
    the tab (which leaves the generator suspended, nobody reading) can still cancel it and close
    both streams; the pump also waits for the budget's ``ticket`` and releases it, so a closed
    tab never keeps streams held or its place in the queue. A subclass runs something else than
    one race (demo.live.users: N users per side) by overriding ``_run`` and ``_dress``."""

    def __init__(self, req: RaceRequest, settings: Settings, control: RaceControl,
                 ticket: Ticket | None = None) -> None:
        self.req, self.settings, self.control, self.ticket = req, settings, control, ticket
        self.status_note: str | None = None  # a run status line to show next (waiting, then running)
        self.started = ticket is None or ticket.granted  # the streams are ours: the race runs
        self.latest: RaceSnapshot | None = None  # the newest snapshot not drawn yet
        self.changed = asyncio.Event()
        self.unread_since: float | None = None  # a frame is waiting to be read since then
        self.shown: RaceSnapshot | None = None
        # When each pane's side (by pane key: the baseline and every arm) last moved.
        self.progress_at: dict[str, float] = {side: time.monotonic() for side in SIDES}
        self.throttle = ChartThrottle()

    def running_status(self) -> str:
        """The status line while the race runs (HTML): 'running' and its order."""
        return view.run_status_html("running", view.ORDER_LABELS[self.req.order])

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """The race's frames for the page: a first (waiting, or running), then one per change, the last with the result.

        The race runs in a task of its own (the pump) under a watchdog; Stop or a closed page ends it
        and releases the ticket.
        """
        control = self.control
        yield Frame(run_status=self.running_status() if self.started
                    else _waiting_html(self.ticket))
        pump = control.pump = asyncio.create_task(self._pump())
        guard = asyncio.create_task(self._watchdog(pump))
        try:
            # `latest` is checked first: the pump sets it before it ends.
            while self.latest is not None or not pump.done():
                frame = await self._next_frame()
                if frame is None:
                    continue
                self.unread_since = time.monotonic()
                yield frame
                self.unread_since = None
            end = self._end_frame(pump)
            if end is not None:
                yield end
        finally:
            guard.cancel()
            if not pump.done():
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)

    async def _pump(self) -> None:
        try:
            if await self._wait_turn():
                await self._run()
        finally:
            if self.ticket is not None:
                self.ticket.release()  # granted or still queued: nothing stays held
            self.changed.set()

    async def _wait_turn(self) -> bool:
        """True once the budget grants the streams (at once without a ticket); False when Stop
        (or the watchdog) ends the wait first. Says "waiting for N streams ..." every tick."""
        if self.ticket is None or self.ticket.granted:
            self.started = True
            return True
        stop = asyncio.ensure_future(self.control.stop.wait())
        try:
            while True:
                turn = asyncio.ensure_future(self.ticket.wait())
                done, _ = await asyncio.wait({turn, stop}, timeout=WAIT_TICK_S, return_when=asyncio.FIRST_COMPLETED)
                turn.cancel()
                if self.ticket.granted:
                    break
                if stop in done:
                    return False
                self.status_note = _waiting_html(self.ticket)
                self.changed.set()
        finally:
            stop.cancel()
        self.started = True
        self.status_note = self.running_status()
        self.changed.set()
        return True

    async def _run(self) -> None:
        """The race itself, its snapshots into ``latest``."""
        async with contextlib.aclosing(
            stream_race(self.req, self.settings, interval_s=SNAPSHOT_INTERVAL_S, stop=self.control.stop)
        ) as snapshots:
            async for snap in snapshots:
                self.latest = snap
                self.changed.set()

    async def _watchdog(self, pump: asyncio.Task[None]) -> None:
        # Unread time is counted in this loop's own ticks, not on the wall clock: an app that
        # was itself frozen (a suspended laptop, a paused VM) did not leave a frame unread.
        pending, ticks = None, 0
        while not pump.done():
            await asyncio.sleep(WATCH_TICK_S)
            if self.unread_since != pending:  # another frame (or none) is waiting now
                pending, ticks = self.unread_since, 0
            if pending is None:
                continue
            ticks += 1
            if ticks * WATCH_TICK_S > CONSUMER_TIMEOUT_S:
                log.warning("nobody has read the race for %.0f s (tab closed?): aborting both requests",
                            CONSUMER_TIMEOUT_S)
                # A graceful stop: both streams close, and a page that was only slow still
                # gets the final (stopped) frame. Cancel only if the race ignores the stop.
                self.control.stopped_because = (f"the page read no update for {CONSUMER_TIMEOUT_S:.0f} s "
                                                "(tab closed or the app overloaded)")
                self.control.stop.set()
                done, _ = await asyncio.wait({pump}, timeout=CONSUMER_TIMEOUT_S)
                if not done:
                    pump.cancel()
                return

    async def _next_frame(self) -> Frame | None:
        """The frame of the newest snapshot, a quiet-server notice after a second without one,
        a run status line (waiting for streams, then running), or None (nothing to show yet)."""
        if self.status_note is not None:
            html, self.status_note = self.status_note, None
            return Frame(run_status=html)
        if self.latest is None:
            try:
                await asyncio.wait_for(self.changed.wait(), timeout=1.0)
            except TimeoutError:
                quiet = quiet_status(self.shown, self.progress_at, self.settings)
                return Frame(side_status=quiet) if quiet else None
            self.changed.clear()
            return None
        snap, self.latest = self.latest, None
        now = time.monotonic()
        shown = pane_sides(self.shown) if self.shown is not None else {}
        for key, after in pane_sides(snap).items():
            before = shown.get(key)
            if before is None or (after.completion_tokens, len(after.text), after.status) != (
                    before.completion_tokens, len(before.text), before.status):
                self.progress_at[key] = now
        self.shown = snap
        frame = self._dress(self.throttle.frame(snap, now))
        # Heartbeat snapshots keep coming while a server is silent: say so on its pane.
        frame.side_status = quiet_status(snap, self.progress_at, self.settings) or None
        return frame

    def _dress(self, frame: Frame) -> Frame:
        """The frame as shown: a race's as it is (a subclass puts its own headline and tiles in)."""
        return frame

    def _end_frame(self, pump: asyncio.Task[None]) -> Frame | None:
        """The status after the last snapshot, when the result did not say it."""
        exc = pump.exception() if not pump.cancelled() else None
        if isinstance(exc, ValueError):  # bad input, said in one line by the core
            return Frame(run_status=view.run_status_html("error", str(exc)))
        if exc is not None:  # a bug, not a server fault: logged in full, said on the page
            log.error("the race failed", exc_info=exc)
            return Frame(run_status=view.run_status_html("error", internal_error_text(exc)))
        if not self.started:  # Stop (or the watchdog) while it waited for streams
            return Frame(run_status=view.run_status_html(
                "stopped", self.control.stopped_because or "before it started (it was waiting for streams)"))
        if self.shown is None or self.shown.result is None:  # never leave the page on "Racing…"
            return Frame(run_status=view.run_status_html(
                "stopped", self.control.stopped_because or "the race ended without a result"))
        return None


def _waiting_html(ticket: Ticket | None) -> str:
    """The status line of a race waiting for the page's streams (not for a race slot)."""
    return view.run_status_html("waiting", waiting_text(ticket) if ticket else "", text="Waiting for free streams…")


def quiet_status(shown: RaceSnapshot | None, progress_at: dict[str, float],
                  settings: Settings) -> dict[str, str]:
    """Status lines for running sides that have sent nothing for a while, by pane key: how long,
    and either when the client gives up (the read timeout) or that the server says it is working
    (demo.live.status.server_working_text: the client waits on, up to prefill_wait_max_s)."""
    if shown is None or shown.result is not None:
        return {}
    now = time.monotonic()
    out: dict[str, str] = {}
    names = list(shown.arms)
    for key, snap in pane_sides(shown).items():
        quiet = now - progress_at.get(key, now)
        if snap.status in ("waiting", "streaming") and quiet >= QUIET_NOTICE_S:
            # An arm's notice (a race of several) names it, as its pane's status line does.
            who = next((shown.arms[n].label or n for i, n in enumerate(names)
                        if len(names) > 1 and view.pane_key(i, n) == key), None)
            out[key] = view.side_status_html(
                snap.side, snap, quiet_s=quiet, timeout_s=settings.read_timeout_s, who=who,
                note=server_working_text(snap, quiet, settings.prefill_wait_max_s))
    return out
