"""The Race tab's "Load sweep" section: where speculation stops paying as load grows (users or requests per second).

``build`` lays the section out in page order (inside the current tab) and wires its events; the
handlers are the methods of ``LoadPanel``, the section's components. The sweep itself runs in
demo.live.load_stream (one step at a time through demo.load.engine.run_load, each step's streams taken
from the page's one stream budget); this module maps its frames onto components and computes
nothing. The prompt is the Race tab's (its preset, prompt and temperature components, when the
tab passes them in), else the section's own preset dropdown.

The load is users (closed loop: each user sends its next request when its last one ends) or
requests per second (open loop, demo/load/rate.py: a seeded Poisson schedule of a few requests per
rate, sent to each server alone); the rate mode's inputs are capped here so a sweep stays short on
stage (RATE_STEPS_MAX rates, RATE_REQUESTS_MAX requests per step, RATE_WINDOW_MAX_S of arrivals per step).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from demo import view
from demo.live.budget import StreamBudget
from demo.live.load_stream import LoadFrame, error_frame, idle_frame, idle_status_html, load_frames, start_frame
from demo.live.request import FREE_PROMPT, build_request, preset_user_text
from demo.live.session import RaceRegistry
from demo.live.status import internal_error_text
from demo.load.arrivals import parse_rates
from demo.load.engine import LoadResult, LoadSpec, load_spec, parse_users, request_from_race
from demo.load.page import write_files
from demo.load.rate_models import RateLoad, make_rate_load
from demo.load.view import STEP_HEADERS
from demo.presets import Preset, load_presets
from demo.race import validate_request
from demo.settings import Settings
from demo.ui.outputs import StreamOutputs
from demo.workload import Workload, WorkloadRequest

log = logging.getLogger(__name__)

DEFAULT_USERS = "1,2,4,8,16"
# Short answers keep a sweep to minutes on a CPU pair.
DEFAULT_MAX_TOKENS = 160
MODES = [("Users", "users"), ("Requests per second", "rate")]
DEFAULT_RATES = "0.5,1,2"
DEFAULT_RATE_REQUESTS = 8  # per step and server: a step at 0.5 req/s sends for about 16 s
DEFAULT_SLO_ITL_MS = 150.0  # the capacity's bound: ITL p95 (the CPU pair's ITL is some tens of ms unloaded)
RATE_STEPS_MAX = 6  # rates per sweep on the page (the CLI takes more)
RATE_REQUESTS_MAX = 32  # requests per step on the page
RATE_WINDOW_MAX_S = 120.0  # a step's arrivals on the page: at most this long per server

# One budget per app when the page does not pass its own (demo.ui.app builds one for every tab).
_fallback_budget: StreamBudget | None = None


def fallback_budget(settings: Settings) -> StreamBudget:
    """The stream budget shared by every load section built without one (made on first use)."""
    global _fallback_budget
    if _fallback_budget is None:
        _fallback_budget = StreamBudget(settings.stream_budget())
    return _fallback_budget


@dataclass(frozen=True, eq=False)
class LoadPanel:
    """The section's components (page order), what its handlers need, and the handlers."""

    settings: Settings
    budget: StreamBudget
    registry: RaceRegistry
    presets: dict[str, Preset]
    # controls
    mode: gr.Radio  # "users" or "rate" (requests per second)
    users: gr.Textbox
    rates: gr.Textbox
    rate_requests: gr.Number
    slo_itl_ms: gr.Number
    order: gr.Radio
    max_tokens: gr.Number
    preset: gr.Dropdown  # the Race tab's, or the section's own
    prompt: gr.Textbox | gr.State  # the Race tab's, or a State holding None: the preset's own prompt
    temperature: gr.Slider | gr.State  # the Race tab's, or a State holding None: the preset's
    run: gr.Button
    stop: gr.Button
    # the sweep
    status: gr.HTML
    crossover: gr.HTML
    per_user_plot: gr.Plot
    total_plot: gr.Plot
    table: gr.Dataframe
    export: gr.Button
    exported: gr.File
    # session state
    last_load: gr.State  # dict | None: the last sweep's LoadResult dump (for the download)
    workload: gr.State  # dict | None: the uploaded Workload (shared with the Race tab)

    # ------------------------------------------------------------ output lists

    @property
    def run_inputs(self) -> list[Any]:
        """The Run button's inputs, in ``on_run``'s parameter order."""
        return [self.users, self.order, self.max_tokens, self.preset, self.prompt, self.temperature, self.workload,
                self.mode, self.rates, self.rate_requests, self.slo_itl_ms]

    @property
    def live_outputs(self) -> list[Any]:
        """What every frame sets (demo.ui.outputs): the status, the sentence, both curves, the table."""
        return [self.status, self.crossover, self.per_user_plot, self.total_plot, self.table, self.last_load]

    def updates(self, frame: LoadFrame) -> dict[Any, Any]:
        """A LoadFrame as {component: new value or None}, for StreamOutputs.values."""
        table = frame.table if frame.table is None or frame.headers is None else \
            {"headers": frame.headers, "data": frame.table}
        return {self.status: frame.status, self.crossover: frame.crossover, self.per_user_plot: frame.per_user_figure,
                self.total_plot: frame.total_figure, self.table: table,
                self.last_load: frame.result.model_dump(mode="json") if frame.result is not None else None}

    # ------------------------------------------------------------ handlers

    def prepare(self, users_text: str, order: str, max_tok: float | None, preset_name: str | None,
                prompt_text: str | None, temperature: float | None, workload: dict | None,
                mode: str = "users", rates_text: str = DEFAULT_RATES, rate_requests: float | None = None,
                slo_itl_ms: float | None = None) -> tuple[LoadSpec, WorkloadRequest]:
        """(spec, request) from the page's input; ValueError with a one-line message for bad input."""
        rate = rate_load(rates_text, rate_requests, slo_itl_ms) if mode == "rate" else None
        users = parse_users(users_text, self.settings.max_users) if rate is None else []
        if rate is not None:
            order = "sequential"  # an open-loop step goes to each server alone
        preset = self.presets.get(preset_name or "")
        if prompt_text is None:  # the section's own dropdown: the preset's prompt as it is
            if preset is None:
                raise ValueError("pick a preset for the load sweep")
            prompt_text = preset_user_text(preset)
        if temperature is None:
            temperature = preset.temperature if preset is not None else 0.0
        if max_tok is None:
            raise ValueError("max tokens is empty: give the tokens each user asks for, e.g. 160")
        loaded = None if not workload else Workload.model_validate(workload)
        req = build_request(self.presets, preset_name, prompt_text, temperature, max_tok, order, loaded)
        validate_request(req, self.settings)
        return load_spec(self.settings, req, users, order, rate=rate), request_from_race(req)

    async def on_run(self, users_text: str, order: str, max_tok: float | None, preset_name: str | None,
                     prompt_text: str | None, temperature: float | None, workload: dict | None,
                     mode: str, rates_text: str, rate_requests: float | None, slo_itl_ms: float | None,
                     request: gr.Request) -> AsyncIterator[Any]:
        """Run pressed: check the inputs, then yield a frame of outputs per event of the load sweep.

        A second Run while this page's sweep runs does nothing; bad inputs and failures end on an error status."""
        session = _session(request)
        control = self.registry.claim(session)
        if control is None:  # Run pressed again while this page's sweep runs
            return
        stream = StreamOutputs(self.live_outputs)
        try:
            try:
                spec, wreq = self.prepare(users_text, order, max_tok, preset_name, prompt_text, temperature, workload,
                                          mode, rates_text, rate_requests, slo_itl_ms)
            except ValueError as e:
                yield stream.values(self.updates(error_frame(str(e))))
                return
            async for frame in load_frames(spec, wreq, self.settings, control, self.budget):
                yield stream.values(self.updates(frame))
        except Exception as e:  # a bug, not a server fault: say so where the presenter looks
            log.exception("the load sweep failed")
            yield stream.values({self.status: view.run_status_html("error", text=internal_error_text(e))})
        finally:
            self.registry.drop(session, control)

    async def on_stop(self, request: gr.Request) -> None:
        """Stop pressed: stop this page's load sweep."""
        self.registry.stop(_session(request))

    def on_mode(self, mode: str) -> list[Any]:
        """The load chosen: its controls shown, the other's hidden (users, order; rates, requests, SLO), and
        the panel's charts, sentence and table cleared to that load's (the last sweep stays downloadable)."""
        rate = mode == "rate"
        shown = [gr.update(visible=v) for v in (not rate, not rate, rate, rate, rate)]
        idle = self.updates(idle_frame(mode))
        return shown + [idle[c] for c in self.mode_outputs[5:]]

    @property
    def mode_outputs(self) -> list[Any]:
        """What a change of the load sets, in ``on_mode``'s order."""
        return [self.users, self.order, self.rates, self.rate_requests, self.slo_itl_ms,
                self.crossover, self.per_user_plot, self.total_plot, self.table]

    async def on_export(self, last_load: dict | None) -> tuple[Any, Any]:
        """The last sweep as load.html (self-contained) and load.png (the slide), to download."""
        if not last_load:
            return None, view.run_status_html("error", text="No load sweep to download yet: run one first")
        try:
            result = LoadResult.model_validate(last_load)
            out = Path(tempfile.mkdtemp(prefix="specdemo-load-"))
            written = await asyncio.to_thread(write_files, result, out, True)
        except Exception as e:  # a full disk, a bug: one line, details in the log
            log.exception("writing the load sweep's files failed")
            return None, view.run_status_html("error", text=internal_error_text(e))
        files = [str(p) for p in written.paths if p.suffix in (".html", ".png")]
        text = "Written: load.html and load.png (16:9, for slides)" if written.png_note is None else \
            f"Written: load.html; {written.png_note}"
        return files, view.run_status_html("done", text=text)


def rate_load(rates_text: str, requests: float | None, slo_itl_ms: float | None) -> RateLoad:
    """The open-loop sweep the panel asks (Poisson arrivals, seed 0, ``requests`` per step, an ITL p95 SLO
    when ``slo_itl_ms`` is given); ValueError with a one-line message for bad input or past the page's caps."""
    rates = parse_rates(rates_text)
    if len(rates) > RATE_STEPS_MAX:
        raise ValueError(f"{len(rates)} rates: the page measures at most {RATE_STEPS_MAX} per sweep (the CLI, "
                         "python -m demo load --rate, takes more)")
    if requests is None or not 1 <= requests <= RATE_REQUESTS_MAX or requests != int(requests):  # NaN, inf too
        raise ValueError(f"requests per step must be a whole number from 1 to {RATE_REQUESTS_MAX}, got "
                         f"{'nothing' if requests is None else f'{requests:g}'}")
    if slo_itl_ms is not None and not slo_itl_ms > 0:
        raise ValueError(f"the ITL SLO must be above 0 ms (or empty: no capacity), got {slo_itl_ms:g}")
    load = make_rate_load(rates_text, requests=int(requests), slo_ms={"itl": slo_itl_ms or None})  # a ValueError
    windows = [load.schedule(i).window_s for i in range(len(rates))]
    for r, w in zip(rates, windows, strict=True):
        if w > RATE_WINDOW_MAX_S:
            raise ValueError(f"at {r:g} req/s, {int(requests)} requests take {w:.0f} s of arrivals per server: past "
                             f"the page's bound of {RATE_WINDOW_MAX_S:g} s per step; raise the rate or ask for "
                             "fewer requests")
    return load


# ---------------------------------------------------------------- layout


def _preset_choice(presets: dict[str, Preset], race_preset: gr.Dropdown | None) -> gr.Dropdown:
    """The Race tab's preset dropdown, which a legend names; without one, the section's own."""
    if race_preset is not None:
        gr.HTML('<div class="sd-legend">Prompt: the Race tab\'s preset, prompt and temperature above</div>')
        return race_preset
    first = "json_reformat" if "json_reformat" in presets else next(iter(presets), FREE_PROMPT)
    return gr.Dropdown(choices=[(p.title, n) for n, p in presets.items()], value=first, label="Preset",
                       elem_id="sd-load-preset")


def build(settings: Settings, budget: StreamBudget | None = None, *, preset: gr.Dropdown | None = None,
          prompt: gr.Textbox | None = None, temperature: gr.Slider | None = None,
          workload: gr.State | None = None, registry: RaceRegistry | None = None) -> LoadPanel:
    """Lay the section out inside the current tab and wire its events. ``budget`` is the page's
    one stream budget (a fallback for the process when None); ``preset``/``prompt``/``temperature``
    are the Race tab's components, reused (else the section has its own preset dropdown)."""
    presets, _errors = load_presets(settings.presets_dir)  # the Race tab shows the errors
    with gr.Accordion("Load sweep: where speculation stops paying as load grows (users or requests per second)",
                      open=True, elem_id="sd-load"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=280, elem_id="sd-load-controls"):
                mode = gr.Radio(MODES, value="users", label="Load", elem_id="sd-load-mode",
                                info="users: each sends its next request when its last ends; requests per second: "
                                     "sent on a seeded Poisson schedule, each server alone")
                users = gr.Textbox(value=DEFAULT_USERS, label=f"Users per step (1 to {settings.max_users})",
                                   max_lines=1, elem_id="sd-load-users")
                order = gr.Radio([("Sequential (each server alone)", "sequential"), ("Simultaneous", "simultaneous")],
                                 value="sequential", label="Order", elem_id="sd-load-order")
                rates = gr.Textbox(value=DEFAULT_RATES, label=f"Requests per second, a step each (at most "
                                   f"{RATE_STEPS_MAX})", max_lines=1, visible=False, elem_id="sd-load-rates")
                rate_requests = gr.Number(value=DEFAULT_RATE_REQUESTS, precision=0, visible=False,
                                          label=f"Requests per step (1 to {RATE_REQUESTS_MAX})",
                                          elem_id="sd-load-rate-requests")
                slo_itl_ms = gr.Number(value=DEFAULT_SLO_ITL_MS, visible=False, elem_id="sd-load-slo-itl",
                                       label="SLO for the capacity: ITL p95 at most (ms; empty: none)")
                # No minimum/maximum: Gradio would refuse out-of-range input with a passing toast.
                max_tokens = gr.Number(value=DEFAULT_MAX_TOKENS, precision=0, label="Max tokens per user",
                                       elem_id="sd-load-max-tokens")
                if preset is None:  # the section's own preset, with no prompt or temperature of the Race tab's
                    prompt = temperature = None
                preset = _preset_choice(presets, preset)
                with gr.Row():
                    run = gr.Button("▶ Run sweep", variant="primary", elem_id="sd-load-run", min_width=100)
                    stop = gr.Button("■ Stop", variant="stop", elem_id="sd-load-stop", min_width=100)
            with gr.Column(scale=3):
                status = gr.HTML(idle_status_html(settings.max_users), elem_id="sd-load-status")
                idle = start_frame(None)
                crossover = gr.HTML(idle.crossover, elem_id="sd-load-crossover")
                with gr.Row():
                    per_user_plot = gr.Plot(idle.per_user_figure, show_label=False, elem_id="sd-load-per-user")
                    total_plot = gr.Plot(idle.total_figure, show_label=False, elem_id="sd-load-total")
                table = gr.Dataframe(headers=STEP_HEADERS, value=[], interactive=False, wrap=True,
                                     elem_id="sd-load-table")
                with gr.Row():
                    export = gr.Button("Download load.html + PNG", size="sm", elem_id="sd-load-export", scale=1)
                    exported = gr.File(label="load.html (self-contained) and load.png (a 16:9 slide)",
                                       file_count="multiple", interactive=False, elem_id="sd-load-files",
                                       scale=3, height=80)
    panel = LoadPanel(settings=settings, budget=budget if budget is not None else fallback_budget(settings),
                      registry=registry or RaceRegistry(), presets=presets, mode=mode, users=users, rates=rates,
                      rate_requests=rate_requests, slo_itl_ms=slo_itl_ms, order=order,
                      max_tokens=max_tokens, preset=preset, run=run,
                      prompt=prompt if prompt is not None else gr.State(None),
                      temperature=temperature if temperature is not None else gr.State(None),
                      stop=stop, status=status, crossover=crossover, per_user_plot=per_user_plot,
                      total_plot=total_plot, table=table, export=export, exported=exported,
                      last_load=gr.State(None), workload=workload if workload is not None else gr.State(None))
    wire(panel)
    return panel


def wire(panel: LoadPanel) -> None:
    """Wire the section's load choice, Run, Stop and Download buttons to their handlers."""
    panel.mode.change(panel.on_mode, inputs=[panel.mode], outputs=panel.mode_outputs, queue=False,
                      show_progress="hidden")
    panel.run.click(panel.on_run, inputs=panel.run_inputs, outputs=panel.live_outputs,
                    # Streams are limited by the page's budget (each step waits its turn there),
                    # not by Gradio's race slots: a waiting sweep says why on its status line.
                    concurrency_limit=None, concurrency_id="load", show_progress="hidden")
    panel.stop.click(panel.on_stop, queue=False, show_progress="hidden")
    panel.export.click(panel.on_export, inputs=[panel.last_load], outputs=[panel.exported, panel.status],
                       show_progress="minimal")


def _session(request: gr.Request | None) -> str:
    return (request.session_hash if request is not None else None) or "no-session"
