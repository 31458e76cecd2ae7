"""The "Race" tab: controls on the left, the headline and both panes on the right; charts,
servers and the run history below the fold.

``build`` lays the tab out in page order and wires its events; the events' handlers are the
methods of ``RaceTab``, the tab's components. A race is three events in a chain: ``on_arm``
(no queue: the status says "waiting" at once), ``on_race`` (queued, streams the frames) and
``on_finish`` (draws the result once the race is over). One race at a time per page: Start
pressed again while it waits or runs does nothing (see demo.live.session).

Arms: the panes are built at startup from the configured arms (Settings.arm_endpoints()): one
arm is the race of two panes; two or three give every arm its own pane (``sd-pane-<key>``,
demo.view.pane_key: the first arm keeps ``speculative``), headline and identical-output badge,
in a compact layout that stays on one 1280x720 screen. A race of several arms on CPU servers
defaults to sequential order, and the page says why (demo.live.request.default_order).

Users: 1 is the one race (demo.live.frame_stream.race_frames); N > 1 starts N streams per side
through the load engine (demo.live.users.users_frames), drawn into the same components: user
1's answer in each pane, every user's progress and the step's figures in its tiles, the
per-user speedup and throughput ratio ("N users") as the headline. Either way the race holds
its streams in the page's one budget (demo.live.budget) while it runs.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from demo import charts, view
from demo.agent_race import SessionResult
from demo.fmt import esc
from demo.live.agent_frames import session_frames
from demo.live.budget import StreamBudget, Ticket, streams_needed
from demo.live.frame_stream import race_frames
from demo.live.frames import result_view
from demo.live.pane_title import arm_titles
from demo.live.request import (
    FREE_PROMPT,
    build_request,
    default_order,
    preset_user_text,
    workload_choices,
    workload_request,
    workload_user_text,
)
from demo.live.saving import save
from demo.live.session import RaceRegistry
from demo.live.status import final_status, internal_error_text
from demo.live.users import users_frames, users_from_input
from demo.load.engine import UsersRace
from demo.presets import Preset, PresetProblem, load_presets, session_preset
from demo.race import validate_request
from demo.results import SIDES, Order, RaceRequest, RaceResult
from demo.runs.export import export_to_temp
from demo.runs.store import Run, race_of, record_from_dump
from demo.server_info import ServerInfo, probe_arms, probe_servers
from demo.settings import Settings
from demo.ui.outputs import StreamOutputs, frame_updates
from demo.workload import Workload, WorkloadRequest

log = logging.getLogger(__name__)



class Finished(NamedTuple):
    """A race that has a result: what on_finish draws, and the final status it shows with it."""

    result: Run  # a race, or an N-user race (its user 1's race, and the step)
    status: str
    session: SessionResult | None = None  # a session's turns (``result`` is its last turn's race)


@dataclass(frozen=True, eq=False)
class Pane:
    """One server's pane: its title, status line, figure tiles and answer; in a race of several
    arms, an arm's pane also has its own headline and identical-output badge."""

    title: gr.HTML
    status: gr.HTML
    tiles: gr.HTML
    text: gr.HTML
    arm: str | None = None  # the arm's name (None: the baseline)
    headline: gr.HTML | None = None
    badge: gr.HTML | None = None

    @property
    def live(self) -> tuple[Any, ...]:
        """What every frame sets: (status, tiles, text), and the headline when it has one."""
        return (self.status, self.tiles, self.text) + ((self.headline,) if self.headline is not None else ())


@dataclass(frozen=True, eq=False)
class RaceTab:
    """The tab's components (page order), what its handlers need, and the handlers."""

    settings: Settings
    registry: RaceRegistry
    budget: StreamBudget  # the page's one budget of streams (demo.ui.app): a race holds its share while it runs
    presets: dict[str, Preset]
    # controls
    preset: gr.Dropdown
    expect: gr.HTML
    prompt: gr.Textbox
    temperature: gr.Slider
    max_tokens: gr.Number
    order: gr.Radio
    users: gr.Number
    start: gr.Button
    stop: gr.Button
    # the race area
    banner: gr.HTML
    speedup: gr.HTML
    order_label: gr.HTML
    run_status: gr.HTML
    badge: gr.HTML
    turns: gr.HTML  # a session's per-turn strip (demo.live.agent_frames), under the headline; empty otherwise
    panes: dict[str, Pane]  # by pane key: "baseline", "speculative" (the first arm), then each other arm
    # below the fold
    race_plot: gr.Plot
    acc_plot: gr.Plot
    chunk_plot: gr.Plot
    servers: gr.HTML
    refresh: gr.Button
    history_df: gr.Dataframe
    download: gr.DownloadButton
    export: gr.Button
    exported: gr.File
    # session state
    history: gr.State  # list[dict]: HistoryRow dumps, oldest first
    infos: gr.State  # list[dict]: ServerInfo dumps from the last probe
    last_run: gr.State  # dict | None: the last race's RaceResult (or UsersRace) dump, for Export race.html
    workload: gr.State  # dict | None: the Workload uploaded in the Evaluate tab (shared, see demo.ui.app)

    # ------------------------------------------------------------ output lists

    @property
    def arm_panes(self) -> dict[str, Pane]:
        """Every arm's pane by pane key, the first arm first."""
        return {key: p for key, p in self.panes.items() if p.arm is not None}

    @property
    def several_arms(self) -> bool:
        """Whether the page races several arms (a pane per arm), not the pair."""
        return len(self.arm_panes) > 1

    @property
    def arm_titles(self) -> list[Any]:
        """Each arm pane's title component."""
        return [p.title for p in self.arm_panes.values()]

    @property
    def arm_badges(self) -> list[Any]:
        """Each arm pane's identical-output badge component (the panes that have one)."""
        return [p.badge for p in self.arm_panes.values() if p.badge is not None]

    @property
    def server_outputs(self) -> list[Any]:
        """What a server probe sets (``on_probe``'s order): the banner, the servers panel, the titles, the infos."""
        return [self.banner, self.servers, *self.arm_titles, self.infos]

    @property
    def live_panes(self) -> dict[str, tuple[Any, ...]]:
        """(status, tiles, text[, headline]) per pane key: what every frame sets (see demo.ui.outputs)."""
        return {key: p.live for key, p in self.panes.items()}

    @property
    def live_outputs(self) -> list[Any]:
        """What every frame of a race sets (demo.ui.outputs): the status, the speedup, each pane, the race chart."""
        return [self.run_status, self.speedup, *[c for comps in self.live_panes.values() for c in comps],
                self.race_plot]

    @property
    def race_outputs(self) -> list[Any]:
        """What every frame of the Race tab's own race sets: ``live_outputs`` and the session's strip."""
        return [*self.live_outputs, self.turns]

    @property
    def finish_outputs(self) -> list[Any]:
        """What a finished race sets: the status, badges, charts, history and its download, servers and last run."""
        return [self.run_status, self.badge, self.acc_plot, self.chunk_plot, self.history, self.history_df,
                self.download, self.banner, self.servers, self.infos, *self.arm_titles, *self.arm_badges,
                self.last_run]

    @property
    def arm_outputs(self) -> list[Any]:
        """What Start clears before a race: the badge and the result charts (and every arm's badge)."""
        return [self.run_status, self.badge, self.acc_plot, self.chunk_plot, *self.arm_badges]

    # ------------------------------------------------------------ handlers

    def on_preset(self, name: str, workload: dict | None = None) -> tuple[Any, ...]:
        """A pick in the preset dropdown: its prompt, temperature, max tokens and expectation.

        A workload request fills the same fields from the uploaded file; the free prompt keeps what is typed."""
        wreq = workload_request(_workload(workload), name)
        if wreq is not None:
            return (workload_user_text(wreq), wreq.temperature, wreq.max_tokens,
                    _workload_expect_html(_workload(workload), wreq))
        preset = self.presets.get(name)
        if preset is None:  # free prompt: keep what is typed, clear the expectation
            return gr.skip(), gr.skip(), gr.skip(), _expect_html(None)
        return (preset_user_text(preset), preset.temperature, preset.max_tokens,
                _expect_html(preset))

    def on_workload(self, workload: dict | None, current: str | None) -> Any:
        """A new upload: its requests join the preset dropdown ('workload: <id>')."""
        loaded = _workload(workload)
        choices = _preset_choices(self.presets, loaded)
        keep = current if current in {v for _label, v in choices} else FREE_PROMPT
        return gr.Dropdown(choices=choices, value=keep)

    async def on_probe(self) -> tuple[Any, ...]:
        """Probe the servers (every arm's with several arms, else the pair); returns ``server_outputs``' values."""
        # Several arms: every arm's server in the panel (one arm: the pair).
        infos = await (probe_arms(self.settings) if self.several_arms else probe_servers(self.settings))
        return _server_outputs(infos, self.settings)

    async def on_arm(self, request: gr.Request, status_html: str, badge_html: str,
                     *arm_badges: str) -> tuple[Any, ...]:
        """Start pressed: "waiting" at once, the result view cleared. The request comes first, as
        Gradio passes it only among the positional parameters (the arms' badges follow it)."""
        if self.registry.arm(_session(request)) is None:  # this page's race waits or runs
            # As they are: gr.skip() would blank an HTML output (Gradio 6).
            return status_html, badge_html, gr.skip(), gr.skip(), *arm_badges
        start_view = result_view(None)
        return (view.run_status_html("waiting", f"this page runs {self.settings.max_concurrent_races} at a time"),
                start_view.badge, start_view.position_acceptance_figure, start_view.chunk_figure,
                *(view.identical_badge_html(None, arm=p.arm) for p in self.arm_panes.values() if p.badge is not None))

    def _race_asked(self, preset_name: str, prompt_text: str, temp: float, max_tok: float, order_value: Order,
                    workload: dict | None, users_value: object) -> tuple[RaceRequest, int, Preset | None]:
        """The race the inputs ask for: its request, its users and its session preset (None for one race).

        Raises ValueError with what the race would refuse, so that it is said before "racing"."""
        users = users_from_input(users_value, self.settings.max_users)
        req = build_request(self.presets, preset_name, prompt_text, temp, max_tok, order_value, _workload(workload))
        validate_request(req, self.settings)
        multi_turn = session_preset(self.presets, req)  # a session preset: its turns one after another
        if multi_turn is not None and users > 1:
            raise ValueError(f"{multi_turn.title} is a session of {1 + len(multi_turn.turns)} turns: it races "
                             "one user. Set Users to 1.")
        return req, users, multi_turn

    async def on_race(self, preset_name: str, prompt_text: str, temp: float, max_tok: float, order_value: Order,
                      workload: dict | None, users_value: object, request: gr.Request) -> AsyncIterator[Any]:
        """Race: check the inputs, wait for the page's stream budget, then yield a frame of outputs per event.

        One user races the baseline and every arm; N users the baseline and the first arm. The race is saved and
        handed to ``on_finish`` for its final status; a second Start while it runs does nothing."""
        session = _session(request)
        control = self.registry.claim(session)
        if control is None:  # Start pressed again while this page's race waits or runs
            return
        stream = StreamOutputs(self.race_outputs)
        ticket: Ticket | None = None
        try:
            if control.stop.is_set():  # Stop was pressed while this race waited in the queue
                yield {self.run_status: view.run_status_html("stopped", "before it started")}
                return
            try:
                req, users, multi_turn = self._race_asked(preset_name, prompt_text, temp, max_tok, order_value,
                                                          workload, users_value)
                # More than the whole budget could never start: said at once, in one line.
                # One user races the baseline and every arm; N users the baseline and the first arm.
                servers = 1 + len(self.arm_panes) if users == 1 else len(SIDES)
                ticket = self.budget.ask(streams_needed(users, servers, req.order))
            except ValueError as e:
                yield {self.run_status: view.run_status_html("error", str(e))}
                return
            try:
                result: RaceResult | None = None
                record: UsersRace | None = None
                frames = (session_frames(req, multi_turn, self.settings, control, ticket) if multi_turn is not None
                          else race_frames(req, self.settings, control, ticket) if users == 1
                          else users_frames(req, users, self.settings, control, ticket, _workload(workload)))
                played: SessionResult | None = None
                async for frame in frames:
                    if frame.result is not None:
                        result = frame.result
                    record = frame.users or record
                    played = frame.session or played
                    updates = frame_updates(frame, self.live_panes, self.speedup, self.race_plot, self.run_status,
                                            self.turns)
                    yield stream.values(updates)
                if result is None:  # the frames have said why, in a final status
                    return
                saved = await save(record or result, self.settings)
                # The final status goes up with the rest (on_finish): "done" means all is drawn.
                status = final_status(result, saved.name, control.stopped_because, saved.note, users,
                                      lead=view.session_status_text(played) if played is not None else None)
                self.registry.hand_over(session, Finished(record or result, status, played))
            except Exception as e:  # a bug, not a server fault: say so where the presenter looks
                log.exception("the race failed")
                yield {self.run_status: view.run_status_html("error", internal_error_text(e))}
        finally:
            if ticket is not None:
                ticket.release()  # the race's pump gives it back too; a second release does nothing
            self.registry.drop(session, control)

    async def on_finish(self, rows: list[dict], infos: list[dict], request: gr.Request) -> dict[Any, Any]:
        """Draw the race ``on_race`` handed over: status, badges, charts, history, download and last run.

        Re-probes the servers when a side failed; returns {component: value} (nothing to draw when the race stopped
        before it started, was refused or failed)."""
        end: Finished | None = self.registry.take(_session(request))
        if end is None:  # stopped before it started, refused, failed, or drawn: on_race has said so
            return {self.acc_plot: gr.skip()}  # not {}: Gradio takes that for one output's value
        run = end.result
        result = race_of(run)  # an N-user race's badge and charts are its user 1's
        try:
            shown = result_view(result)
            if end.session is not None:  # the badge speaks for every turn of the session
                shown.badge = view.session_badge_html(end.session)
            row = view.users_history_row(run) if isinstance(run, UsersRace) else view.history_row(result)
            rows = [*rows, row.model_dump()]
            titles = arm_titles(self.settings, [ServerInfo(**i) for i in infos], result)
            out: dict[Any, Any] = {
                self.run_status: end.status,
                self.badge: shown.badge, self.acc_plot: shown.position_acceptance_figure,
                self.chunk_plot: shown.chunk_figure,
                self.history: rows,
                self.history_df: view.history_table([view.HistoryRow(**r) for r in rows]),
                self.download: _write_csv(rows),
                self.last_run: run.model_dump(mode="json"),
                **{self.panes[key].title: html for key, html in titles.items() if key in self.panes},
            }
            first = next(iter(result.arms), None)  # an N-user race's one arm is named "speculative"
            for i, p in enumerate(self.arm_panes.values()):
                if p.badge is not None:
                    name = first if i == 0 else p.arm
                    out[p.badge] = (view.session_badge_html(end.session, arm=name) if end.session is not None
                                    else view.identical_badge_html(result, arm=name))
            if result.baseline.error or result.speculative.error or any(a.side.error for a in result.arms.values()):
                # A side failed: re-probe so the banner says which server is down and what to do.
                banner_html, servers_html, *_titles, infos_dump = await self.on_probe()
                out.update({self.banner: banner_html, self.servers: servers_html, self.infos: infos_dump})
            return out
        except Exception as e:  # a bug: the race itself is shown and saved; say what is missing
            log.exception("drawing the race's result failed")
            return {self.run_status: view.run_status_html("error", internal_error_text(e))}

    def on_export(self, last_run: dict | None) -> tuple[Any, Any]:
        """The last race as a self-contained page (demo.runs.export) to download; errors in the status."""
        if not last_run:
            return None, view.run_status_html("error", "no race to export yet: run one first")
        return export_to_temp(lambda: record_from_dump(last_run))

    async def on_stop(self, request: gr.Request) -> None:
        """Stop pressed: stop this page's race."""
        self.registry.stop(_session(request))


# ---------------------------------------------------------------- layout


def build(settings: Settings, registry: RaceRegistry, workload: gr.State | None = None,
          budget: StreamBudget | None = None) -> RaceTab:
    """Lay out the tab inside the current gr.Tab and wire its events. The page loads the
    servers' state with the returned tab's ``on_probe`` (see demo.ui.app). ``workload`` is the
    page's shared uploaded workload (the Evaluate tab sets it); its requests join the dropdown.
    ``budget`` is the page's one budget of streams (its own when none is given)."""
    presets, preset_errors = load_presets(settings.presets_dir)
    # The copy-heavy JSON preset shows the effect best: open on it when it is there (or on the one asked for).
    first = presets.get(settings.ui_preset or "") or presets.get("json_reformat") or next(iter(presets.values()), None)
    if settings.ui_preset and settings.ui_preset not in presets:
        opens = first.name if first else "none"
        preset_errors = [*preset_errors, PresetProblem(
            file="SPECDEMO_UI_PRESET", message=f"no preset is named {settings.ui_preset!r}; known presets: "
                                               f"{', '.join(presets) or 'none'} (the page opens on {opens})")]
    if preset_errors:
        gr.HTML(_preset_errors_html(preset_errors))
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280, elem_id="sd-controls"):
            controls = _controls(presets, first, settings)
        several = len(settings.arm_endpoints()) > 1
        # Several arms: the compact layout (page.css, .sd-arms), every pane on one 1280x720 screen.
        with gr.Column(scale=3, elem_classes=["sd-arms"] if several else None):
            area = _race_area(settings)
    tab = RaceTab(settings=settings, registry=registry, budget=budget or StreamBudget(settings.stream_budget()),
                  presets=presets, **controls, **area,
                  **_below_the_fold(), history=gr.State([]), infos=gr.State([]), last_run=gr.State(None),
                  workload=workload if workload is not None else gr.State(None))
    wire(tab)
    return tab


def _controls(presets: dict[str, Preset], first: Preset | None, settings: Settings) -> dict[str, Any]:
    max_users = settings.max_users
    order, _why = default_order(settings)  # the why is said by the order label (_race_area)
    several = len(settings.arm_endpoints()) > 1
    c: dict[str, Any] = {}
    c["preset"] = gr.Dropdown(choices=_preset_choices(presets), value=first.name if first else FREE_PROMPT,
                              label="Preset", elem_id="sd-preset")
    c["expect"] = gr.HTML(_expect_html(first), elem_id="sd-expect")
    c["prompt"] = gr.Textbox(value=preset_user_text(first) if first else "", label="Prompt",
                             lines=4, max_lines=4, elem_id="sd-prompt")
    with gr.Row():
        c["temperature"] = gr.Slider(0.0, 2.0, value=first.temperature if first else 0.0, step=0.1,
                                     label="Temperature", elem_id="sd-temperature", min_width=120)
        # No minimum/maximum here: Gradio would refuse out-of-range input with a passing
        # toast and leave the status on "waiting"; build_request says it on the page.
        c["max_tokens"] = gr.Number(value=first.max_tokens if first else 256, precision=0,
                                    label="Max tokens", elem_id="sd-max-tokens", min_width=100)
    c["order"] = gr.Radio([("Race", "simultaneous"), ("Sequential A/B", "sequential")],
                          value=order, label="Order", elem_id="sd-order")
    # No minimum, maximum or precision: Gradio would refuse (or round 2.5) with a passing toast;
    # demo.live.users.users_from_input says what is wrong on the page.
    users_label = (f"Users (1-{max_users}; >1: first arm only)" if several
                   else f"Users (1-{max_users}, streams per server)")
    c["users"] = gr.Number(value=1, label=users_label, step=1, elem_id="sd-users", min_width=100)
    with gr.Row():
        c["start"] = gr.Button("▶ Start", variant="primary", elem_id="sd-start", min_width=100)
        c["stop"] = gr.Button("■ Stop", variant="stop", elem_id="sd-stop", min_width=100)
    gr.HTML('<div class="sd-legend">Keys: Ctrl+Enter start · Esc stop</div>')
    return c


def _race_area(settings: Settings) -> dict[str, Any]:
    arms = settings.arm_endpoints()
    several = len(arms) > 1
    a: dict[str, Any] = {"banner": gr.HTML(elem_id="sd-banner")}
    with gr.Row(equal_height=True):
        # Several arms: each arm's headline and badge are in its pane; these two stay (the booth and
        # an N-user race's first frame set them) but are folded away (page.css, .sd-arms).
        with gr.Column(scale=0, min_width=290, elem_classes=["sd-pair-only"]):
            a["speedup"] = gr.HTML(view.speedup_html(None), elem_id="sd-speedup")
        with gr.Column(scale=3, min_width=300):
            a["order_label"] = gr.HTML(view.order_html(*default_order(settings)), elem_id="sd-order-label")
            a["run_status"] = gr.HTML(view.run_status_html("idle"), elem_id="sd-run-status")
        with gr.Column(scale=0, min_width=230, elem_classes=["sd-pair-only"]):
            a["badge"] = gr.HTML(view.identical_badge_html(None), elem_id="sd-badge")
    a["turns"] = gr.HTML(view.turns_strip_html(None), elem_id="sd-turns")
    titles = arm_titles(settings, None, None)
    with gr.Row(equal_height=True):
        panes = {"baseline": _pane("baseline", None, view.pane_title_html("Baseline"), several)}
        for i, e in enumerate(arms):
            key = view.pane_key(i, e.arm or "")
            panes[key] = _pane(key, e.arm, titles[key], several, index=i)
        a["panes"] = panes
    gr.HTML(view.burst_legend_html())
    return a


def _pane(key: str, arm: str | None, title: str, several: bool, index: int = 0) -> Pane:
    """One pane. In a race of several arms an arm's pane has its own headline and badge (the
    baseline's an empty line of the same height, so the panes stay aligned), and ``sd-arm-N``
    gives its title its arm's colour (palette.arm_color)."""
    classes = [f"sd-arm-{index + 1}"] if arm is not None else []
    with gr.Column(elem_id=f"sd-pane-{key}", elem_classes=classes, min_width=150 if several else 360):
        title_html = gr.HTML(title, elem_id=f"sd-title-{key}")
        headline = badge = None
        if several:
            with gr.Row(elem_classes=["sd-arm-head"]):
                if arm is None:
                    gr.HTML(view.reference_speedup_html())
                else:
                    headline = gr.HTML(view.arm_speedup_html(arm, None, None, running=False),
                                       elem_id=f"sd-speedup-{key}")
                    badge = gr.HTML(view.identical_badge_html(None, arm=arm), elem_id=f"sd-badge-{key}")
        return Pane(title=title_html,
                    status=gr.HTML("", elem_id=f"sd-status-{key}"),
                    tiles=gr.HTML("", elem_id=f"sd-tiles-{key}"),
                    text=gr.HTML(_placeholder("baseline" if arm is None else "speculative" if index == 0 else arm),
                                 elem_id=f"sd-text-{key}"),
                    arm=arm, headline=headline, badge=badge)


def _below_the_fold() -> dict[str, Any]:
    with gr.Column(elem_id="sd-below"):  # booth mode folds it away (demo.ui.booth_view)
        return _below_the_fold_content()


def _below_the_fold_content() -> dict[str, Any]:
    b: dict[str, Any] = {}
    with gr.Row():
        b["race_plot"] = gr.Plot(charts.race_figure(None), show_label=False, elem_id="sd-race-plot")
    with gr.Row():
        b["acc_plot"] = gr.Plot(charts.position_acceptance_figure(None), show_label=False, elem_id="sd-acc-plot")
        b["chunk_plot"] = gr.Plot(charts.chunk_figure(None), show_label=False, elem_id="sd-chunk-plot")
    with gr.Accordion("Servers", open=True):
        b["servers"] = gr.HTML(elem_id="sd-servers")
        b["refresh"] = gr.Button("Refresh servers", size="sm", elem_id="sd-refresh")
    with gr.Accordion("Run history (this session)", open=True):
        b["history_df"] = gr.Dataframe(headers=view.HISTORY_HEADERS, value=[], interactive=False,
                                       wrap=True, elem_id="sd-history")
        b["download"] = gr.DownloadButton("Download CSV", value=None, elem_id="sd-download", size="sm")
    with gr.Accordion("Share the last race", open=True):
        b["export"] = gr.Button("Export race.html", size="sm", elem_id="sd-export")
        b["exported"] = gr.File(label="Self-contained page (replays offline)", interactive=False,
                                elem_id="sd-export-file", height=60)
    return b


# ---------------------------------------------------------------- events


def wire(tab: RaceTab) -> None:
    """The tab's events. Start is a chain: arm (no queue), race (queued, streaming), finish."""
    tab.preset.change(tab.on_preset, inputs=[tab.preset, tab.workload],
                      outputs=[tab.prompt, tab.temperature, tab.max_tokens, tab.expect],
                      queue=False, show_progress="hidden")
    tab.workload.change(tab.on_workload, inputs=[tab.workload, tab.preset], outputs=[tab.preset],
                        queue=False, show_progress="hidden")
    (tab.start.click(tab.on_arm, inputs=[tab.run_status, tab.badge, *tab.arm_badges],
                     outputs=tab.arm_outputs, queue=False, show_progress="hidden")
        .then(tab.on_race, inputs=[tab.preset, tab.prompt, tab.temperature, tab.max_tokens, tab.order, tab.workload,
                                   tab.users],
              outputs=tab.race_outputs,
              concurrency_limit=tab.settings.max_concurrent_races, concurrency_id="race",
              # Our own status line says "waiting" / "racing": Gradio's overlay would dim it.
              show_progress="hidden")
        .then(tab.on_finish, inputs=[tab.history, tab.infos], outputs=tab.finish_outputs,
              concurrency_limit=None, show_progress="hidden"))
    tab.stop.click(tab.on_stop, queue=False, show_progress="hidden")
    tab.export.click(tab.on_export, inputs=[tab.last_run], outputs=[tab.exported, tab.run_status],
                     show_progress="minimal")
    tab.refresh.click(tab.on_probe, outputs=tab.server_outputs, show_progress="minimal")
    why = default_order(tab.settings)[1]  # still said when the presenter picks the other order
    tab.order.change(lambda o: view.order_html(o, why), inputs=[tab.order], outputs=[tab.order_label], queue=False,
                    show_progress="hidden")


# ---------------------------------------------------------------- HTML and files


def _session(request: gr.Request | None) -> str:
    return (request.session_hash if request is not None else None) or "no-session"


def _preset_choices(presets: dict[str, Preset], workload: Workload | None = None) -> list[tuple[str, str]]:
    return ([(p.title, name) for name, p in presets.items()] + workload_choices(workload)
            + [(FREE_PROMPT, FREE_PROMPT)])


def _workload(dump: dict | None) -> Workload | None:
    """The shared state's workload (a dump, as gr.State keeps it), validated again."""
    return None if not dump else Workload.model_validate(dump)


def _preset_errors_html(errors: list[PresetProblem]) -> str:
    return '<div class="sd-banner" role="alert"><ul>' + "".join(
        (f"<li>{esc(e.file)}: {esc(e.message)}</li>" if e.file == "SPECDEMO_UI_PRESET"
         else f"<li>Preset file {esc(e.file)} skipped: {esc(e.message)}</li>") for e in errors
    ) + "</ul></div>"


def _placeholder(side: str) -> str:
    # Not class "sd-text": that holds the model's answer only (tests read it).
    return (f'<div class="sd-idle" data-side="{side}"><div class="sd-text-body sd-placeholder">'
            f"Press Start: the {side} server's answer streams here.</div></div>")


def _expect_html(preset: Preset | None) -> str:
    if preset is None:
        return '<div class="sd-expect"></div>'
    text = esc(preset.expect + view.sampling_note(preset.to_request()))
    return f'<div class="sd-expect" title="{text}">What to expect: {text}</div>'


def _workload_expect_html(workload: Workload | None, req: WorkloadRequest) -> str:
    name = esc(workload.name if workload else "")
    text = (f"From the uploaded workload {name}: request {esc(req.id)} "
            f"({esc(view.sampling_text(req.to_race_request()))}, max {req.max_tokens} tokens), "
            "as sent by the Evaluate tab.")
    return f'<div class="sd-expect" data-workload="true" title="{text}">What to expect: {text}</div>'


def _server_outputs(infos: list[ServerInfo], settings: Settings) -> tuple[Any, ...]:
    return (view.server_banner_html(infos), view.server_panel_html(infos, settings.grafana_url),
            *arm_titles(settings, infos, None).values(),
            [i.model_dump() for i in infos])


def _write_csv(rows: list[dict]) -> str:
    # Gradio copies files a handler returns into its own cache; this temp file is the source.
    with tempfile.NamedTemporaryFile("w", prefix="specdemo-history-", suffix=".csv", delete=False,
                                     encoding="utf-8", newline="") as f:
        f.write(view.history_csv([view.HistoryRow(**r) for r in rows]))
    return str(Path(f.name))
