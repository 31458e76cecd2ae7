"""Booth mode: the page races a rotation of presets by itself, all day, and never shows a dead screen.

One ``Booth`` per app conducts the show; every open page watches it (one race, many viewers), so
two browsers never double the servers' load. Nobody watching means no races: a viewer that has
not read what was offered for ``VIEWER_TIMEOUT_S`` has gone (Gradio leaves a closed tab's
generator suspended, see demo.live.frame_stream).

Each turn takes the next preset of the rotation and:
- every server answers /health: races it live (demo.live.frame_stream.race_frames), in simultaneous order, and
  saves the run as any race is saved. Several arms (SPECDEMO_ARMS): the baseline and every arm, each
  arm's pane, headline and badge drawn; on CPU servers in sequential order, as the Race tab's default
  (demo.live.request.default_order), the caption saying why;
- a server is down, or fails during the race: plays the newest good recording of that preset
  (demo.runs.replay) under the RECORDING banner, with a small "live again in …" line read from the
  supervisor's state file, and tries live again on the next turn.
With ``SPECDEMO_BOOTH_LOAD_USERS`` (e.g. "1,8") the rotation ends with a load turn: the copy-heavy
preset swept live over those user counts (demo.live.load_stream: one user, then 8, the curves
redrawn after each step, the crossover read off them), saved like a page's sweep and logged as
one ``booth-load {json}`` line; a server down before it: the preset's recording, as for a race.
A visitor's click or key (``touch``) stops the booth's race and hands the page over; the rotation
resumes after ``booth_idle_s`` without input and with no visitor race running.

No Gradio here: the booth publishes ``BoothView``s; demo.ui.booth_view draws them. Each turn ends
with one ``booth-race {json}`` log line (what was shown, live or recording, outcome, speedup, the
saved run): benchmarks/soak/logs.py reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from demo import view
from demo.fmt import esc
from demo.live.budget import StreamBudget
from demo.live.frame_stream import race_frames
from demo.live.frames import Frame, frame_for, throttled_frames
from demo.live.load_stream import LoadFrame, load_frames, start_frame
from demo.live.request import build_request, default_order, preset_user_text
from demo.live.saving import Saved, save
from demo.live.session import RaceControl
from demo.live.status import final_status
from demo.load.engine import load_spec, request_from_race
from demo.presets import Preset
from demo.race import validate_request
from demo.results import SIDES, ArmSnapshot, Order, RaceResult, RaceSnapshot, SideSnapshot
from demo.runs.replay import replay_snapshots
from demo.runs.store import newest_good_run, read_run
from demo.server_info import ServerInfo, healthy_sides, probe_arms, probe_servers
from demo.settings import Settings

log = logging.getLogger(__name__)

BoothState = Literal["live", "recording", "visitor", "waiting"]

# A page that has not taken the booth's latest update for this long has gone (tab closed).
VIEWER_TIMEOUT_S = 10.0
# A live race where a side has sent nothing for this long, and whose server then does not answer
# /health, is abandoned for the recording (a hung server). A server that answers is working (a
# long prompt's prefill takes tens of seconds on a CPU): the race goes on, up to the read timeout.
STALL_S = 20.0
STALL_RECHECK_S = 5.0
# How often the caption's countdowns tick, and the servers are probed while they are down.
TICK_S = 1.0
# The load turn's answers are short: 8 users of 400 tokens would hold a CPU pair for minutes.
BOOTH_LOAD_MAX_TOKENS = 160
BOOTH_LOAD_PRESET = "json_reformat"  # the copy-heavy preset: the gain is large at 1 user, so its fall shows


class BoothView(BaseModel):
    """One update of a booth page; None fields are left as they are."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    caption: str | None = None  # HTML: what is shown and why
    banner: str | None = None  # HTML: the RECORDING banner, or "" (live)
    frame: Frame | None = None  # the race area (demo.live.frames.Frame)
    badge: str | None = None  # the identical-text badge, set at a race's end
    # Several arms: each arm's identical-text badge by its pane key (demo.view.pane_key).
    badges: dict[str, str] | None = None
    load: LoadFrame | None = None  # the load panel, in a load turn (demo.live.load_stream.LoadFrame)

    def merged(self, newer: BoothView) -> BoothView:
        """This update followed by ``newer``: newer values win, a field newer leaves None stays."""
        frame = self.frame
        if newer.frame is not None:
            old, new = frame, newer.frame
            frame = new if old is None else Frame(**{
                k: (getattr(new, k) if getattr(new, k) is not None else getattr(old, k)) for k in Frame.model_fields})
        load = self.load
        if newer.load is not None:
            load = newer.load if load is None else LoadFrame(**{
                k: (getattr(newer.load, k) if getattr(newer.load, k) is not None else getattr(load, k))
                for k in LoadFrame.model_fields})
        badges = self.badges if newer.badges is None else {**(self.badges or {}), **newer.badges}
        return BoothView(caption=newer.caption if newer.caption is not None else self.caption,
                         banner=newer.banner if newer.banner is not None else self.banner,
                         frame=frame, badge=newer.badge if newer.badge is not None else self.badge, load=load,
                         badges=badges)


@dataclass(eq=False)
class Viewer:
    """One open page: the booth's updates it has not taken yet, folded into one."""

    pending: BoothView | None = None
    pending_since: float | None = None  # when an untaken update was first offered
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, update: BoothView) -> None:
        """Fold ``update`` into what this page has not taken yet, and wake its stream."""
        self.pending = update if self.pending is None else self.pending.merged(update)
        if self.pending_since is None:
            self.pending_since = time.monotonic()
        self.ready.set()

    async def take(self, timeout_s: float = TICK_S) -> BoothView | None:
        """The updates since the last take, folded; None when nothing came within ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ready.wait(), timeout_s)
        self.ready.clear()
        update, self.pending, self.pending_since = self.pending, None, None
        return update

    def gone(self, now: float) -> bool:
        """True when an offered update has waited more than VIEWER_TIMEOUT_S untaken: the page was closed."""
        return self.pending_since is not None and now - self.pending_since > VIEWER_TIMEOUT_S


def caption_html(state: BoothState, preset: Preset | None, note: str = "", n: int = 0, *,
                 load_users: list[int] | None = None, why: str = "") -> str:
    """The booth's caption: what is on screen (live, recording, the visitor's turn) and the preset's
    'what to expect'; ``note`` is the small line under it (a countdown). ``load_users``: a load
    turn's (data-turn="load": the page shows the load panel's curves then). ``why``: why the race
    runs in its order (several arms on CPU servers: one after another)."""
    heads = {"live": "● LIVE", "recording": "● RECORDING", "visitor": "Your turn", "waiting": "Next"}
    title = preset.title if preset is not None else ""
    expect = preset.expect if preset is not None else ""
    if load_users:
        title = f"{title}: {load_title(load_users)}"
        expect = "Speculation's gain shrinks as users share the servers: watch the two curves."
    if state == "visitor":
        title, expect = "pick a preset and press Start", ""
    return (f'<div class="sd-booth-caption" data-state="{state}" data-turn="{"load" if load_users else "race"}" '
            f'data-preset="{esc(preset.name if preset else "")}" data-n="{n}">'
            f'<span class="sd-booth-head">{esc(heads[state])}</span> '
            f'<span class="sd-booth-title">{esc(title)}</span>'
            + (f'<div class="sd-booth-expect">{esc(expect)}</div>' if expect else "")
            + (f'<div class="sd-booth-note">{esc(note)}</div>' if note else "")
            + (f'<div class="sd-booth-note sd-booth-why">{esc(why)}</div>' if why and state != "visitor" else "")
            + "</div>")


def load_title(users: list[int]) -> str:
    """'1 user, then 8 users' (a load turn's caption)."""
    words = [f"{n} user" + ("" if n == 1 else "s") for n in users]
    return ", then ".join(words)


class RestartWatch:
    """'Live again in about N s' for a down server, from the supervisor's state file
    (servers/state.py): its next restart time and how long its last start took."""

    def __init__(self, state_file: Path | None) -> None:
        self.state_file = state_file
        self._start_s: dict[str, float] = {}  # url -> the last known time to healthy

    def estimate(self, down: list[ServerInfo], now: datetime | None = None) -> str:
        """The banner's line for servers ``down``: 'Live again in about N s'.

        From the supervisor's next restart and the last start's time; else 'Live again once ... answers'.
        """
        what = " and ".join(f"the {i.arm or i.side} server" for i in down) or "a server"  # an arm by its name
        fallback = f"Live again once {what} answers (checked every few seconds)."
        records = self._records()
        if not down or records is None:
            return fallback
        now = now or datetime.now(UTC)
        etas: list[float] = []
        for info in down:
            rec = records.get(info.url.rstrip("/"))
            if rec is None:
                return fallback
            if rec.held:
                return f"{what.capitalize()} is down and not being restarted: {rec.held}."
            start_s = self._start_s.get(info.url.rstrip("/"))
            if rec.next_restart_at is not None:  # waiting out the restart's backoff
                since = rec.next_restart_at
            elif rec.time_to_healthy_s is None:  # restarted, not healthy yet
                since = rec.started_at
            else:  # the supervisor has not noticed yet (a hang before its health timeout)
                return fallback
            if start_s is None:
                return fallback
            etas.append((since - now).total_seconds() + start_s)
        eta = max(etas)
        if eta < 1:
            return f"Live again in a moment: {what} is starting."
        return f"Live again in about {eta:.0f} s: {what} is restarting."

    def remember(self) -> None:
        """Note each server's start time while it is healthy (the estimate for its restart)."""
        self._records()

    def _records(self) -> dict | None:
        if self.state_file is None:
            return None
        from servers.state import read_state  # the launcher's record; absent for remote servers
        try:
            state = read_state(self.state_file)
        except (OSError, ValueError):
            return None
        if state is None:
            return None
        out = {}
        for rec in state.servers:
            url = rec.url.rstrip("/")
            if rec.time_to_healthy_s is not None:
                self._start_s[url] = rec.time_to_healthy_s
            out[url] = rec
        return out


def launcher_state_file() -> Path | None:
    """Where `python -m servers up` keeps its state (None if its settings cannot be read)."""
    from servers.settings import LauncherSettings
    try:
        return LauncherSettings().state_file
    except ValueError:
        return None


class Booth:
    """Booth mode's show (SPECDEMO_BOOTH): presets raced live in rotation, a load turn, a recording while down.

    One show for every open page: each page joins as a Viewer and gets its updates; a visitor's
    input pauses the show until the page is left alone for the idle time.
    """

    def __init__(self, settings: Settings, presets: dict[str, Preset],
                 visitor_racing: Callable[[], bool] = lambda: False,
                 restart_watch: RestartWatch | None = None, budget: StreamBudget | None = None) -> None:
        self.settings = settings
        # The load turn (SPECDEMO_BOOTH_LOAD_USERS), after the rotation's presets; its streams
        # come from the page's budget when one is given (visitors' races and sweeps share it).
        self.load_users = list(settings.booth_load_users)
        self.load_preset = presets.get(BOOTH_LOAD_PRESET) or next(iter(presets.values()), None)
        if self.load_users and self.load_preset is None:
            log.warning("booth: no preset for the load turn; the rotation has none")
            self.load_users = []
        self.budget = budget
        # The arms raced each turn (one: the pair, as always) and their order: several on CPU
        # servers race one after another, as the Race tab's default, and the caption says why.
        self.arms = [e.arm or f"arm {i + 1}" for i, e in enumerate(settings.arm_endpoints())]
        self.pane_keys = ["baseline", *(view.pane_key(i, n) for i, n in enumerate(self.arms))]
        order, why = default_order(settings)
        self.order: Order = order
        self.order_why = why or ""
        names = settings.booth_presets or [n for n, p in presets.items() if p.booth]
        self.rotation = [presets[n] for n in names if n in presets]
        unknown = [n for n in names if n not in presets]
        if unknown:
            log.warning("booth: no preset named %s; the rotation skips it", ", ".join(unknown))
        self.visitor_racing = visitor_racing  # a visitor's race runs on some page
        self.restarts = restart_watch or RestartWatch(launcher_state_file())
        self.viewers: set[Viewer] = set()
        self.current = BoothView(caption=caption_html("waiting", None, "Starting the show…"), banner="")
        self.turn = 0
        self.visitor_until = 0.0
        self._interrupt = asyncio.Event()  # a visitor took over: stop what is on screen
        self._joined = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ viewers

    def join(self) -> Viewer:
        """A page opened: it gets what is on screen now, then every update."""
        viewer = Viewer()
        viewer.offer(self.current)
        self.viewers.add(viewer)
        self._joined.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run())
        return viewer

    def leave(self, viewer: Viewer) -> None:
        """Stop sending updates to ``viewer`` (its page closed)."""
        self.viewers.discard(viewer)

    def watched(self) -> bool:
        """True when a page is watching; pages gone (their updates untaken) are dropped first."""
        now = time.monotonic()
        for v in [v for v in self.viewers if v.gone(now)]:
            self.viewers.discard(v)
        return bool(self.viewers)

    def publish(self, update: BoothView, reset: bool = False) -> None:
        """Send ``update`` to every page and keep it as the show's current view (``reset``: replace it)."""
        self.current = update if reset else self.current.merged(update)
        for v in list(self.viewers):
            v.offer(update)

    # ------------------------------------------------------------ the visitor

    def touch(self) -> str:
        """A visitor's input: the page is theirs until booth_idle_s without input; returns the caption."""
        self.visitor_until = time.monotonic() + self.settings.booth_idle_s
        self._interrupt.set()
        caption = self._visitor_caption()
        self.current = self.current.merged(BoothView(caption=caption))
        return caption

    def visitor_active(self) -> bool:
        """True while a visitor has the page: within the idle time of their last input, or racing."""
        return time.monotonic() < self.visitor_until or self.visitor_racing()

    def _visitor_caption(self) -> str:
        left = max(0.0, self.visitor_until - time.monotonic())
        note = (f"The show resumes after {self.settings.booth_idle_s:.0f} s without input"
                + (f" (in {left:.0f} s)." if left < self.settings.booth_idle_s - 1 else "."))
        if self.visitor_racing():
            note = "The show resumes once your race ends and the page is left alone."
        return caption_html("visitor", None, note, self.turn)

    # ------------------------------------------------------------ the show

    async def run(self) -> None:
        """The show, forever: runs while somebody watches, idles otherwise."""
        while True:
            try:
                await self._one_turn()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must never end the show: log it, show the next turn
                log.exception("booth: a turn failed")
                await asyncio.sleep(TICK_S)

    async def _one_turn(self) -> None:
        if not self.watched():
            self._joined.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._joined.wait(), TICK_S)
            return
        if self.visitor_active():
            self.publish(BoothView(caption=self._visitor_caption()))
            await asyncio.sleep(TICK_S)
            return
        self._interrupt.clear()
        if not self.rotation:
            self.publish(BoothView(caption=caption_html("waiting", None, "No presets to show: add one to presets/.")))
            await asyncio.sleep(TICK_S * 5)
            return
        if self._load_turn_next():
            self.turn += 1
            await self._load_turn()
            return
        preset = self.rotation[self.turn % self._turns()]
        self.turn += 1
        infos = await self._probe()
        down = [i for i in infos if not i.healthy]
        if not down:
            await asyncio.to_thread(self.restarts.remember)
        shown: BoothState = "waiting"
        if not down:
            shown = "live" if await self._live(preset) else "recording"
            if shown == "recording":  # a side failed or stalled during the race
                down = [i for i in await self._probe() if not i.healthy]
        if shown != "live":
            shown, preset = await self._recording(preset, down)
        await self._pause(shown, preset)

    async def _probe(self) -> list[ServerInfo]:
        """Every server a race turn races: the pair, or the baseline and every arm."""
        return await (probe_arms(self.settings) if len(self.arms) > 1 else probe_servers(self.settings))

    async def _healthy_panes(self, quiet: list[str]) -> set[str]:
        """Which of the ``quiet`` panes' servers answer /health now, by pane key."""
        if all(k in SIDES for k in quiet):  # the pair's servers: /health alone
            return set(await healthy_sides(self.settings))
        # Another arm's server: the arms' probe, [baseline, arm 1, ...] as self.pane_keys lists them.
        infos = await probe_arms(self.settings)
        return {key for key, info in zip(self.pane_keys, infos, strict=True) if info.healthy}

    def _racing_note(self) -> str:
        if len(self.arms) <= 1:
            return "Racing both servers now"
        how = ", one after another" if self.order == "sequential" else ", all at once"
        return f"Racing the baseline and {len(self.arms)} arms now{how}"

    def _badges(self, result: RaceResult | None) -> dict[str, str] | None:
        """Several arms: each arm's badge by pane key, pending (None) or ``result``'s (a recording's
        arms by their own pane keys, a configured arm it lacks pending)."""
        if len(self.arms) <= 1:
            return None
        out = {view.pane_key(i, n): view.identical_badge_html(None, arm=n) for i, n in enumerate(self.arms)}
        if result is not None:
            out.update({view.pane_key(i, n): view.identical_badge_html(result, arm=n)
                        for i, n in enumerate(result.arms)})
        return out

    def _turns(self) -> int:
        """Turns in one round of the rotation: its presets, and the load turn when there is one."""
        return len(self.rotation) + (1 if self.load_users else 0)

    def _load_turn_next(self) -> bool:
        return bool(self.load_users) and self.turn % self._turns() == len(self.rotation)

    def _next_title(self) -> str:
        if self._load_turn_next() and self.load_preset is not None:
            return f"{self.load_preset.title}, {load_title(self.load_users)}"
        return self.rotation[self.turn % self._turns()].title

    async def _pause(self, shown: BoothState, preset: Preset, load_users: list[int] | None = None) -> None:
        nxt = self._next_title()
        deadline = time.monotonic() + (self.settings.booth_pause_s if shown == "live" else TICK_S * 2)
        while time.monotonic() < deadline and not self._interrupt.is_set():
            left = deadline - time.monotonic()
            self.publish(BoothView(caption=caption_html(shown, preset, f"Next: {nxt}, in {left:.0f} s",
                                                        self.turn, load_users=load_users,
                                                        why="" if load_users else self.order_why)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._interrupt.wait(), min(TICK_S, left))

    async def _live(self, preset: Preset) -> bool:
        """Race ``preset`` live and save it; False when a side failed or stalled (the recording's turn)."""
        req = build_request({preset.name: preset}, preset.name, preset_user_text(preset),
                            preset.temperature, preset.max_tokens, self.order)
        validate_request(req, self.settings)
        control = RaceControl()
        started = datetime.now(UTC)
        self.publish(BoothView(caption=caption_html("live", preset, self._racing_note(), self.turn, why=self.order_why),
                               banner="", badge=view.identical_badge_html(None), badges=self._badges(None),
                               frame=frame_for_start(view.run_status_html("running", self.order), self.arms)),
                     reset=True)
        result: RaceResult | None = None
        failed: str | None = None
        quiet_since: dict[str, float] = {}
        checked_at = 0.0  # when a quiet side's server was last asked for /health
        frames = race_frames(req, self.settings, control)
        async with contextlib.aclosing(frames):
            async for frame in frames:
                if frame.result is not None:
                    result = frame.result
                now = time.monotonic()
                for key in self.pane_keys:  # the baseline and every arm, by pane key
                    if frame.side_status is not None and key in frame.side_status:
                        quiet_since.setdefault(key, now)
                    elif frame.baseline is not None or frame.side_status is not None:
                        quiet_since.pop(key, None)
                stalled = [s for s, t in quiet_since.items() if now - t >= STALL_S]
                if stalled and failed is None and not frame.failed and now - checked_at >= STALL_RECHECK_S:
                    checked_at = now
                    healthy = await self._healthy_panes(stalled)
                    stalled = [s for s in stalled if s not in healthy]
                else:
                    stalled = []
                if failed is None and (frame.failed or stalled):
                    failed = (f"the {' and '.join(frame.failed)} server failed" if frame.failed
                              else f"the {' and '.join(stalled)} server sent nothing for {STALL_S:.0f} s "
                                   "and does not answer /health")
                    control.stopped_because = failed
                    control.stop.set()  # closes both streams; the result comes as the last frame
                if self._interrupt.is_set() and not control.stop.is_set():
                    control.stopped_because = "a visitor took over"
                    control.stop.set()
                if failed is None:
                    self.publish(BoothView(frame=frame))
        saved = await save(result, self.settings) if result is not None else Saved()
        if failed is None and result is not None:
            status = final_status(result, saved.name, control.stopped_because, saved.note)
            self.publish(BoothView(frame=Frame(run_status=status), badge=view.identical_badge_html(result),
                                   badges=self._badges(result)))
        outcome = None if result is None else ("error" if failed or result.outcome == "error" else result.outcome)
        log_turn(self.turn, preset, "live", started, outcome, result.speedup if result else None, saved.name,
                 failed or control.stopped_because)
        return failed is None

    async def _load_turn(self) -> None:
        """The load turn: the preset swept live over the load users, the curves on the load panel;
        a server down before it: the preset's recording (the race turn's fallback)."""
        preset = self.load_preset
        assert preset is not None  # _load_turn_next checks there is a load turn
        infos = await probe_servers(self.settings)
        down = [i for i in infos if not i.healthy]
        if down:
            shown, shown_preset = await self._recording(preset, down)
            await self._pause(shown, shown_preset)
            return
        await self._live_load(preset)
        await self._pause("live", preset, self.load_users)

    async def _live_load(self, preset: Preset) -> None:
        req = build_request({preset.name: preset}, preset.name, preset_user_text(preset), preset.temperature,
                            min(preset.max_tokens, BOOTH_LOAD_MAX_TOKENS), "sequential")
        spec = load_spec(self.settings, req, self.load_users, "sequential")
        control = RaceControl()
        started = datetime.now(UTC)
        users = self.load_users
        self.publish(BoothView(caption=caption_html("live", preset, "Measuring each step now", self.turn,
                                                    load_users=users), banner="", load=start_frame(None)))
        last: LoadFrame | None = None
        frames = load_frames(spec, request_from_race(req), self.settings, control, self.budget)
        async with contextlib.aclosing(frames):
            async for frame in frames:
                last = frame
                if self._interrupt.is_set() and not control.stop.is_set():
                    control.stopped_because = "a visitor took over"
                    control.stop.set()
                note = frame.progress or ""
                self.publish(BoothView(load=frame, caption=caption_html("live", preset, note[:1].upper() + note[1:],
                                                                        self.turn, load_users=users)))
        result = last.result if last is not None else None
        steps = result.steps if result is not None else []
        log.info("booth-load %s", json.dumps({
            "n": self.turn, "preset": preset.name, "users": users,
            "steps": [{"users": s.users, "status": s.status, "speedup": s.speedup} for s in steps],
            "crossover": result.crossover.text if result else None,
            "interrupted": result.interrupted if result else None,
            "started_at": started.isoformat(), "ended_at": datetime.now(UTC).isoformat(),
            "note": last.progress if last else None}))

    async def _recording(self, preset: Preset, down: list[ServerInfo]) -> tuple[BoothState, Preset]:
        """Play the newest good recording of ``preset`` (or of the next preset that has one);
        returns what was shown and of which preset."""
        started = datetime.now(UTC)
        path: Path | None = None
        shown_preset = preset
        order = [preset, *[p for p in self.rotation if p is not preset]]
        # A recording raced in the booth's order first (several arms on CPU: sequential), else any
        # simultaneous one (a pair's recording without arms still shows the lesson).
        race_orders = [self.order, *(["simultaneous"] if self.order != "simultaneous" else [])]
        for race_order in race_orders:
            for candidate in order:
                path = await asyncio.to_thread(newest_good_run, self.settings.runs_dir, candidate.name, race_order)
                if path is not None:
                    shown_preset = candidate
                    break
            if path is not None:
                break
        if path is None:
            note = self.restarts.estimate(down)
            # Not "running": nothing streams, and the page would take a silent race for a lost connection.
            idle = view.run_status_html("idle", text="The servers are restarting")
            self.publish(BoothView(caption=caption_html("waiting", preset, note, self.turn), banner="",
                                   frame=frame_for_start(idle, self.arms), badge=view.identical_badge_html(None),
                                   badges=self._badges(None)), reset=True)
            log_turn(self.turn, preset, "none", started, None, None, None, "no good recording saved yet")
            await self._wait_interrupt(TICK_S * 3)
            return "waiting", preset
        result = await asyncio.to_thread(read_run, path)
        note = self.restarts.estimate(down) if down else "Live again from the next race."
        self.publish(BoothView(caption=caption_html("recording", shown_preset, note, self.turn),
                               banner=view.recording_banner_html(result, note),
                               badge=view.identical_badge_html(None), badges=self._badges(None),
                               frame=frame_for_start(view.run_status_html("running", "a recording, not live",
                                                                          text="Playing the recording…"), self.arms)),
                     reset=True)
        last_note = 0.0
        async for frame in throttled_frames(replay_snapshots(result)):
            if self._interrupt.is_set():  # a visitor took over: the page is theirs, ready for Start
                self.publish(BoothView(frame=Frame(run_status=view.run_status_html("idle"))))
                break
            now = time.monotonic()
            update = BoothView(frame=frame)
            if now - last_note >= TICK_S * 3:  # the "live again in …" line, re-read from the state file
                last_note = now
                still_down = [i for i in await self._probe() if not i.healthy] if down else []
                note = self.restarts.estimate(still_down) if still_down else "Live again from the next race."
                update.caption = caption_html("recording", shown_preset, note, self.turn)
                update.banner = view.recording_banner_html(result, note)
            self.publish(update)
        else:
            self.publish(BoothView(badge=view.identical_badge_html(result), badges=self._badges(result), frame=Frame(
                run_status=view.run_status_html("done", "end of the recording (figures as saved)"))))
        log_turn(self.turn, shown_preset, "recording", started, result.outcome, result.speedup, None,
                 f"recorded {result.started_at:%Y-%m-%d %H:%M:%S} UTC ({path.name})")
        return "recording", shown_preset

    async def _wait_interrupt(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._interrupt.wait(), seconds)


def frame_for_start(run_status: str, arms: list[str] | None = None) -> Frame:
    """The race area cleared for a new race or recording: empty panes (each of the ``arms``'), no
    figure yet."""
    empty = {n: ArmSnapshot(name=n, side=SideSnapshot(side="speculative")) for n in arms or []}
    snap = RaceSnapshot(order="simultaneous", baseline=SideSnapshot(side="baseline"),
                        speculative=SideSnapshot(side="speculative"), arms=empty if len(empty) > 1 else {})
    frame = frame_for(snap, with_chart=True)
    frame.run_status = run_status
    return frame


def log_turn(n: int, preset: Preset, source: str, started: datetime, outcome: str | None,
             speedup: float | None, saved: str | None, note: str | None) -> None:
    """The turn's one log line, ``booth-race {json}`` (benchmarks/soak/logs.py reads it)."""
    log.info("booth-race %s", json.dumps({
        "n": n, "preset": preset.name, "source": source, "outcome": outcome, "speedup": speedup,
        "saved": saved, "started_at": started.isoformat(), "ended_at": datetime.now(UTC).isoformat(),
        "note": note}))
