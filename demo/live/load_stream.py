"""A load sweep as the page's stream of LoadFrames, without Gradio (the Race tab's load panel and
the booth's load turn).

``LoadFrames`` runs the sweep in a pump task kept in the control (demo.live.session.RaceControl),
one step at a time through the one engine (demo.load.engine.run_load: each step an evaluator cell, a
failing server recorded in its step while the sweep goes on). Before each step it asks the page's
stream budget (demo.live.budget) for the streams that step holds at its peak, says why while it
waits, and gives them back when the step ends, however it ends. After each step a frame carries
the steps so far, both curves redrawn, the crossover's sentence and the table (pressure per step);
between steps the progress label, refreshed every second. Stop (the control's ``stop``), or a page
that reads no frame for CONSUMER_TIMEOUT_S (the tab closed), cancels the pump: every stream of
the step in progress is closed and its HTTP clients with it, and the last frame says so and
carries what was measured.

In requests per second (``spec.rate``, open loop: demo/load/rate.py) the sweep is one run of the
same engine over every rate, each rate step handed back as it ends (``on_rate_step``): a frame per
step carries the rate table (a row per server, demo.load.rate_view.rate_rows), the latency and
goodput figures against the rate (demo.load.rate_page) and, from the second step, the capacity
sentence and the crossovers. An open-loop step sends its requests whether or not earlier ones have
ended, so any of them may be in flight at once: the sweep holds its largest step's requests from
the budget for the whole sweep (one server at a time, so that many streams), and the status line
says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator

import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict

from demo import view
from demo.live.budget import StreamBudget, Ticket, streams_needed, waiting_text
from demo.live.frame_stream import CONSUMER_TIMEOUT_S, WATCH_TICK_S
from demo.live.saving import save
from demo.live.session import RaceControl
from demo.live.status import internal_error_text
from demo.load.engine import LoadResult, LoadSpec, LoadStep, finish, run_load
from demo.load.figures import per_user_figure, total_figure
from demo.load.rate_models import RateStep
from demo.load.rate_page import goodput_figure, latency_figure, rate_capacity_html
from demo.load.rate_view import RATE_HEADERS, rate_finished_text, rate_rows
from demo.load.view import STEP_HEADERS, crossover_html, finished_text, order_words, step_label, step_rows
from demo.settings import Settings
from demo.workload import WorkloadRequest

log = logging.getLogger(__name__)

SERVERS = 2  # the baseline and one speculative server (an arm's more, later)
TICK_S = 1.0  # the progress label's elapsed seconds are refreshed this often


class LoadFrame(BaseModel):
    """One update of the load panel; None fields are left as they are on the page."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    status: str | None = None  # HTML: the run status line (waiting, running with the step, done, stopped)
    progress: str | None = None  # the same in plain words (tests, logs, the booth's caption)
    steps: list[LoadStep] | None = None  # the steps so far, set when a step ends
    rate_steps: list[RateStep] | None = None  # requests per second: the rate steps so far, set when one ends
    # Redrawn when a step ends. Users: per-user decode and total output against users (demo.load.figures);
    # requests per second: ITL percentiles and goodput against the rate (demo.load.rate_page).
    per_user_figure: go.Figure | None = None
    total_figure: go.Figure | None = None
    crossover: str | None = None  # HTML: the crossover's sentence, and the thresholds (rate: the capacity's too)
    crossover_text: str | None = None  # the sentence itself (demo/sweep/crossover.py; rate: the capacity's)
    table: list[list[str]] | None = None  # users: a row per step; rate: a row per server per step
    headers: list[str] | None = None  # the table's headers (STEP_HEADERS or RATE_HEADERS), set with a new table
    result: LoadResult | None = None  # set once, on the final frame (stopped or done)


def start_frame(result: LoadResult | None = None) -> LoadFrame:
    """The panel cleared for a sweep (None: its idle state): empty curves, no steps."""
    if result is not None and result.spec.rate is not None:
        return LoadFrame(per_user_figure=latency_figure(result), total_figure=goodput_figure(result),
                         crossover=rate_capacity_html(result), table=[], headers=RATE_HEADERS, rate_steps=[])
    return LoadFrame(per_user_figure=per_user_figure(result), total_figure=total_figure(result),
                     crossover=crossover_html(result), table=[], headers=STEP_HEADERS, steps=[])


def idle_frame(mode: str) -> LoadFrame:
    """The panel before a sweep of the load chosen ("users" or "rate"): its empty charts, sentence and table."""
    if mode == "rate":
        return LoadFrame(per_user_figure=latency_figure(None), total_figure=goodput_figure(None),
                         crossover=rate_capacity_html(None), table=[], headers=RATE_HEADERS)
    return start_frame(None)


def rate_streams(spec: LoadSpec) -> int:
    """Streams an open-loop sweep holds: its largest step's requests, since every one of them may be in
    flight at once (its servers one at a time); 0 for a users sweep."""
    if spec.rate is None:
        return 0
    return max(len(spec.rate.schedule(i).offsets_s) for i in range(len(spec.rate.rates)))


def check_budget(spec: LoadSpec, budget: StreamBudget) -> None:
    """ValueError (one line) when the sweep's largest step can never fit the page's budget."""
    if spec.rate is not None:
        needed = rate_streams(spec)
        if needed > budget.total:
            raise ValueError(f"a rate step of {needed} requests may have all {needed} in flight at once, over the "
                             f"page's budget of {budget.total} streams (SPECDEMO_MAX_STREAMS): ask for fewer "
                             "requests per step")
        return
    needed = streams_needed(max(spec.users), SERVERS, spec.order)
    if needed > budget.total:
        raise ValueError(f"{max(spec.users)} users in {spec.order} order need {needed} streams at once, over the "
                         f"page's budget of {budget.total} (SPECDEMO_MAX_STREAMS): ask for fewer users"
                         + (" or the sequential order" if spec.order == "simultaneous" else ""))


def load_frames(spec: LoadSpec, request: WorkloadRequest, settings: Settings, control: RaceControl,
                budget: StreamBudget | None, save: bool = True) -> AsyncGenerator[LoadFrame, None]:
    """Run the sweep and yield LoadFrames (see the module's doc); ``budget`` None: no budget (the
    booth's show, the only traffic); ``save``: the finished or stopped sweep is saved."""
    return LoadFrames(spec, request, settings, control, budget, save).frames()


class LoadFrames:
    """A running load sweep as the page's frames: its budget checked first, each step drawn as it ends."""
    def __init__(self, spec: LoadSpec, request: WorkloadRequest, settings: Settings, control: RaceControl,
                 budget: StreamBudget | None, save: bool = True) -> None:
        self.spec, self.request, self.settings, self.control = spec, request, settings, control
        own = StreamBudget(max(rate_streams(spec), 1) if spec.rate is not None  # never waits
                           else streams_needed(max(spec.users), SERVERS, "simultaneous"))
        self.budget = budget if budget is not None else own
        self.keep = save
        self.result = LoadResult(spec=spec)
        self.changed = asyncio.Event()
        self.stepped = False  # a step ended since the last frame: redraw the curves
        self.label = "starting"
        self.state = "running"
        self.step_users: int | None = None
        self.held = ""  # requests per second: the streams the sweep holds, in words
        self.step_started = time.monotonic()
        self.unread_since: float | None = None

    # ------------------------------------------------------------ the frames

    async def frames(self) -> AsyncGenerator[LoadFrame, None]:
        """The sweep's frames: an error frame when the budget cannot hold its most users, else one per change."""
        try:
            check_budget(self.spec, self.budget)
        except ValueError as e:
            yield error_frame(str(e))
            return
        first = start_frame(self.result)
        first.status, first.progress = self._status(), self._words()
        yield first
        pump = self.control.pump = asyncio.create_task(self._pump())
        guard = asyncio.create_task(self._watch(pump))
        try:
            while not pump.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), TICK_S)
                self.changed.clear()
                if pump.done():
                    break
                self.unread_since = time.monotonic()
                yield self._frame()
                self.unread_since = None
            await asyncio.gather(pump, return_exceptions=True)
            yield await self._end_frame(pump)
        finally:
            guard.cancel()
            if not pump.done():
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)

    def _frame(self) -> LoadFrame:
        frame = LoadFrame(status=self._status(), progress=self._words())
        if self.stepped and self.spec.rate is not None:
            self.stepped = False
            frame.rate_steps = list(self.result.rate_steps)
            frame.per_user_figure, frame.total_figure = latency_figure(self.result), goodput_figure(self.result)
            frame.crossover, frame.crossover_text = rate_capacity_html(self.result), self._capacity_text()
            frame.table, frame.headers = rate_rows(self.result), RATE_HEADERS
        elif self.stepped:
            self.stepped = False
            frame.steps = list(self.result.steps)
            frame.per_user_figure, frame.total_figure = per_user_figure(self.result), total_figure(self.result)
            frame.crossover, frame.crossover_text = crossover_html(self.result), self.result.crossover.text
            frame.table = step_rows(self.result)
        return frame

    def _capacity_text(self) -> str | None:
        s = self.result.rate_summary
        return s.capacity_text if s is not None and len(self.result.rate_steps) >= 2 else None

    def _words(self) -> str:
        if self.spec.rate is not None and self.step_users is not None:
            elapsed = time.monotonic() - self.step_started
            n = min(len(self.result.rate_steps) + 1, len(self.spec.rate.rates))
            return f"step {n} of {len(self.spec.rate.rates)}: {self.label} · {elapsed:.0f} s · {self.held}"
        if self.step_users is None:
            return self.label
        elapsed = time.monotonic() - self.step_started
        return f"{step_label(self.result, self.step_users)} · {self.label} · {elapsed:.0f} s"

    def _status(self) -> str:
        if self.state == "waiting":
            return view.run_status_html("waiting", text=f"Waiting: {self.label}")
        order = ("open loop, each server alone, the same arrivals" if self.spec.rate is not None
                 else order_words(self.result))
        return view.run_status_html("running", order, text=f"Load sweep: {self._words()}")

    async def _end_frame(self, pump: asyncio.Task[None]) -> LoadFrame:
        """The last frame: every step, the status in words; the sweep saved (a failure to save is a note)."""
        result = finish(self.result)
        exc = pump.exception() if not pump.cancelled() else None
        if result.spec.rate is not None:
            end = LoadFrame(rate_steps=list(result.rate_steps), per_user_figure=latency_figure(result),
                            total_figure=goodput_figure(result), crossover=rate_capacity_html(result),
                            crossover_text=self._capacity_text(), table=rate_rows(result), headers=RATE_HEADERS,
                            result=result)
        else:
            end = LoadFrame(steps=list(result.steps), per_user_figure=per_user_figure(result),
                            total_figure=total_figure(result), crossover=crossover_html(result),
                            crossover_text=result.crossover.text, table=step_rows(result), headers=STEP_HEADERS,
                            result=result)
        if exc is not None:  # a bug, not a server fault (run_load records those in the step)
            log.error("the load sweep failed", exc_info=exc)
            end.progress = internal_error_text(exc)
            end.status = view.run_status_html("error", text=end.progress)
            end.result = None
        elif pump.cancelled() or result.interrupted:
            result.interrupted = True
            why = self.control.stopped_because or "Stop was pressed"
            done, asked = ((len(result.rate_steps), len(result.spec.rate.rates)) if result.spec.rate is not None
                           else (sum(s.status != "interrupted" for s in result.steps), len(result.spec.users)))
            end.progress = f"stopped after {done} of {asked} steps ({why}): every stream was closed"
            if result.spec.rate is not None:
                end.progress += "; the step in progress is not kept (its requests were cut)"
            end.status = view.run_status_html("stopped", await self._saved(result), text=f"Load sweep {end.progress}")
        else:
            end.progress = f"finished: {rate_finished_text(result) if result.spec.rate else finished_text(result)}"
            end.status = view.run_status_html("done", await self._saved(result), text=f"Load sweep {end.progress}")
        return end

    async def _saved(self, result: LoadResult) -> str:
        """The sweep saved beside the races (demo/runs/store.py, kind "load"); the status line's note."""
        if not (result.steps or result.rate_steps) or not self.keep:
            return ""
        saved = await save(result, self.settings)
        return "run saved" if saved.name else (saved.note or "")

    # ------------------------------------------------------------ the sweep

    def _say(self, label: str, state: str = "running") -> None:
        self.label, self.state = label, state
        self.changed.set()

    def _progress(self, label: str) -> None:
        # run_cell's labels are "<preset> T=.. c=N: <side>, repeat r/R"; the step is said already.
        self._say(label.split(": ", 1)[-1])

    def _stepped(self, step: LoadStep) -> None:
        self.stepped = True
        self._say(f"{step.users} users measured")

    def _rate_progress(self, label: str) -> None:
        # run_rate_sweep's labels: "<rate> req/s: <server>, N requests over W s (bound B s)", one per server.
        self.step_started = time.monotonic()
        self._say(label)

    def _rate_stepped(self, step: RateStep) -> None:
        self.stepped = True
        self._say(f"{step.rate_requests_per_s:g} req/s measured")

    async def _rate_pump(self) -> None:
        """Requests per second: the whole sweep in one run of the engine, holding its largest step's streams."""
        assert self.spec.rate is not None
        streams = rate_streams(self.spec)
        self.step_users, self.step_started = 0, time.monotonic()  # not None: the status line shows the step
        ticket = self.budget.ask(streams)
        try:
            while not await ticket.wait(TICK_S):
                self._say(waiting_text(ticket), state="waiting")
            self.held = (f"holding {streams} of the page's {self.budget.total} streams (a step's {streams} requests "
                         "may all be in flight)")
            self.step_started = time.monotonic()
            self._say("starting")
            await run_load(self.spec, self.request, self.settings, on_progress=self._rate_progress,
                           on_rate_step=self._rate_stepped, result=self.result)
        finally:
            ticket.release()

    async def _pump(self) -> None:
        if self.spec.rate is not None:
            await self._rate_pump()
            return
        for users in self.spec.users:
            self.step_users, self.step_started = users, time.monotonic()
            ticket: Ticket = self.budget.ask(streams_needed(users, SERVERS, self.spec.order))
            try:
                while not await ticket.wait(TICK_S):
                    self._say(waiting_text(ticket), state="waiting")
                self.step_started = time.monotonic()
                self._say("starting")
                await run_load(self.spec.model_copy(update={"users": [users]}), self.request, self.settings,
                               on_step=self._stepped, on_progress=self._progress, result=self.result)
            finally:
                ticket.release()

    async def _watch(self, pump: asyncio.Task[None]) -> None:
        """Stop pressed, or nobody reading the frames (the tab closed): cancel the sweep."""
        ticks, pending = 0, None
        while not pump.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.control.stop.wait(), WATCH_TICK_S)
            if self.control.stop.is_set():
                break
            if self.unread_since != pending:
                pending, ticks = self.unread_since, 0
            if pending is None:
                continue
            ticks += 1
            if ticks * WATCH_TICK_S > CONSUMER_TIMEOUT_S:
                log.warning("nobody has read the load sweep for %.0f s (tab closed?): stopping it", CONSUMER_TIMEOUT_S)
                self.control.stopped_because = (f"the page read no update for {CONSUMER_TIMEOUT_S:.0f} s "
                                                "(tab closed or the app overloaded)")
                break
        if not pump.done():
            pump.cancel()
        self.changed.set()


def idle_status_html(max_users: int) -> str:
    """The load panel's status line before a sweep (HTML): the user counts it takes, or rates."""
    return view.run_status_html("idle", text=f"Ready: user counts from 1 to {max_users}, or requests per second, "
                                             "then Run sweep")


def error_frame(text: str) -> LoadFrame:
    """A sweep that does not run: its one line on the status line (first letter capitalised)."""
    line = (text.splitlines() or [""])[0]
    line = line[:1].upper() + line[1:]
    return LoadFrame(status=view.run_status_html("error", text=line), progress=line)

