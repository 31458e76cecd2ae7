"""An N-user race on the page, without Gradio: N streams per side start together through the
load engine (demo.load.engine.run_load: one step, one evaluator cell), drawn as the race's own Frames.

Each pane streams user 1's answer (the race's own text, tiles' place and chart, from user 1's
meter through the engine's observer hook), its tiles hold a strip of every user's progress
(tokens so far out of max tokens; done, error, stopped) and, once the step ends, the step's
figures (demo.view.users_tiles). The headline is the per-user decode speedup and the
throughput ratio, labelled "N users", from the step: pending while it runs, never a live guess.

The page redraws at most every USERS_FRAME_INTERVAL_S: the engine's observer
(demo.load.engine.StreamWatch) only keeps each user's meter and marks the race changed (it runs on
every event of every stream), and a frame reads the meters when it is drawn. Stop cancels
the step: every stream on both sides closes (the engine's own cancellation), and the record
keeps what was measured, as ``cancelled``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator

from demo import view
from demo.live.budget import Ticket
from demo.live.frame_stream import RaceFrames
from demo.live.frames import Frame
from demo.live.session import RaceControl
from demo.load.engine import (
    LoadResult,
    LoadSpec,
    LoadStep,
    StreamWatch,
    UsersRace,
    request_from_race,
    run_load,
    users_race,
)
from demo.results import SIDES, RaceRequest, RaceSnapshot, SideSnapshot, StreamProgress
from demo.settings import Settings
from demo.workload import Workload, WorkloadRequest

# At most 10 frames a second: each costs the browser ~30 ms of a core (docs/development.md).
USERS_FRAME_INTERVAL_S = 0.1


def users_from_input(value: object, max_users: int) -> int:
    """The Users control's value as a count from 1 to max_users; ValueError, one line in the
    page's words, for anything else (0, -1, 10^6, 2.5, text, empty)."""
    wanted = f"Users must be a whole number from 1 to {max_users}"
    if value is None or value == "":
        raise ValueError(f"{wanted}: the box is empty.")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{wanted}, not {str(value)[:40]!r}.")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{wanted}, not {str(value)[:40]!r}.") from None
    if not math.isfinite(number) or not number.is_integer():
        raise ValueError(f"{wanted}, not {str(value)[:40]}.")
    users = int(number)
    if not 1 <= users <= max_users:
        raise ValueError(f"{wanted}, not {users}.")
    return users


def users_requests(req: RaceRequest, users: int, workload: Workload | None = None) -> list[WorkloadRequest]:
    """What the N users send: the race's request, N times; when it is a request of the uploaded
    workload (unchanged), user 1 sends it and the others the workload's next requests, in order,
    wrapping round (N copies when the workload holds only that one)."""
    mine = request_from_race(req)
    rid = (req.preset or "").removeprefix("workload:")
    if workload is None or not req.preset or not req.preset.startswith("workload:"):
        return [mine] * users
    ids = [r.id for r in workload.requests]
    if rid not in ids:
        return [mine] * users
    start = ids.index(rid)
    ordered = workload.requests[start:] + workload.requests[:start]
    return [ordered[i % len(ordered)] for i in range(users)]  # the race's max tokens and T apply to all


def users_frames(req: RaceRequest, users: int, settings: Settings, control: RaceControl,
                 ticket: Ticket | None = None, workload: Workload | None = None) -> AsyncGenerator[Frame, None]:
    """Run an N-user race and yield Frames (the last carries ``users``, the record to save)."""
    return UsersFrames(req, users, settings, control, ticket, users_requests(req, users, workload)).frames()


class UsersFrames(RaceFrames):
    """An N-user race's frames: RaceFrames' pump, watchdog, stream budget and quiet notices, with
    the load engine in place of the one race, and its own headline and tiles."""

    def __init__(self, req: RaceRequest, users: int, settings: Settings, control: RaceControl,
                 ticket: Ticket | None, requests: list[WorkloadRequest]) -> None:
        super().__init__(req, settings, control, ticket)
        self.users = users
        self.requests = requests
        self.watch = StreamWatch(users)  # the engine's observer: every user's meter, per side
        self.step: LoadStep | None = None
        self.record: UsersRace | None = None

    def running_status(self) -> str:
        """The status line while the N-user race runs (HTML): the users and the order."""
        return view.run_status_html("running", f"{self.users} users · {view.ORDER_LABELS[self.req.order]}")

    def _spec(self) -> LoadSpec:
        return LoadSpec(users=[self.users], workload=self.req.preset or "prompt", max_tokens=self.req.max_tokens,
                        temperature=self.req.temperature, api=self.req.api, order=self.req.order,
                        baseline_url=self.settings.baseline_url, speculative_url=self.settings.speculative_url)

    def _snapshot(self) -> RaceSnapshot:
        """User 1 of each side as a race snapshot: the pane's text, status and the race chart."""
        first = self.watch.first()
        sides = {side: first[side].snapshot() if side in first else SideSnapshot(side=side) for side in SIDES}
        return RaceSnapshot(order=self.req.order, baseline=sides["baseline"], speculative=sides["speculative"])

    async def _run(self) -> None:
        result = LoadResult(spec=self._spec())
        run = asyncio.create_task(run_load(result.spec, self.requests, self.settings, result=result,
                                           observe=self.watch))
        stop = asyncio.ensure_future(self.control.stop.wait())
        cancelled = False
        try:
            while not run.done():
                done, _ = await asyncio.wait({run, stop}, timeout=USERS_FRAME_INTERVAL_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                if stop in done and not run.done():
                    cancelled = True  # Stop: every stream of both sides closes with the task
                    run.cancel()
                    await asyncio.gather(run, return_exceptions=True)
                    break
                if self.watch.changed and not run.done():
                    self.watch.changed = False
                    self.latest = self._snapshot()
                    self.changed.set()
                    await asyncio.sleep(USERS_FRAME_INTERVAL_S)  # at most ten frames a second
        finally:
            stop.cancel()
            if not run.done():
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
        if not cancelled and (exc := run.exception()) is not None:
            raise exc  # a bug, not a server fault (those land in the step): the end frame says so
        self.step = result.steps[0] if result.steps else None
        if self.step is None:
            return  # stopped before the engine recorded anything: the end frame says "stopped"
        self.record = users_race(self.req, self.step, self.watch.first(), self.settings, cancelled=cancelled)
        final = self._snapshot()
        for side in SIDES:  # a side whose user 1 never started (its server down): its error, not "waiting"
            if side not in self.watch.first():
                saved = getattr(self.record.race, side)
                setattr(final, side, SideSnapshot(side=side, status="cancelled" if cancelled else "error",
                                                  error=saved.error))
        self.latest = final.model_copy(update={"result": self.record.race})
        self.changed.set()

    def _dress(self, frame: Frame) -> Frame:
        """The race's frame of user 1, with the N-user headline and every user's strip and tiles."""
        final = frame.result is not None
        step = self.step if final else None
        frame.speedup = view.users_speedup_html(self.users, step, running=not final)
        for side in SIDES:
            pane = getattr(frame, side)
            if pane is None:
                continue
            progress = self.watch.progress(side)
            figures = getattr(step, side) if step is not None else None
            if final:  # a user that never started ends as its side did
                never = StreamProgress(status="error" if figures is not None and figures.errors else "cancelled")
                progress = [p or never for p in progress]
            pane.tiles_html = (view.users_strip_html(side, progress, self.req.max_tokens)
                               + view.users_tiles_html(side, figures))
        arms = self.settings.arm_endpoints()
        if len(arms) > 1:  # a race of several arms: the engine races the first; the others say so
            if frame.speculative is not None:
                frame.speculative.headline_html = frame.speedup  # the pair's headline is folded away
            frame.arms = {view.pane_key(i, e.arm or ""): view.arm_left_out_view(e.arm or "", self.users)
                          for i, e in enumerate(arms) if i}
        if final:
            frame.users = self.record
        return frame
