"""The Race tab's "Load sweep" section: where speculation stops paying as users share the servers.

``build`` lays the section out in page order (inside the current tab) and wires its events; the
handlers are the methods of ``LoadPanel``, the section's components. The sweep itself runs in
demo.live.load_stream (one step at a time through demo.load.engine.run_load, each step's streams taken
from the page's one stream budget); this module maps its frames onto components and computes
nothing. The prompt is the Race tab's (its preset, prompt and temperature components, when the
tab passes them in), else the section's own preset dropdown.
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
from demo.live.load_stream import LoadFrame, error_frame, idle_status_html, load_frames, start_frame
from demo.live.request import FREE_PROMPT, build_request, preset_user_text
from demo.live.session import RaceRegistry
from demo.live.status import internal_error_text
from demo.load.engine import LoadResult, LoadSpec, make_spec, parse_users, request_from_race
from demo.load.page import write_files
from demo.load.view import STEP_HEADERS
from demo.presets import Preset, load_presets
from demo.race import validate_request
from demo.settings import Settings
from demo.ui.outputs import StreamOutputs
from demo.workload import Workload, WorkloadRequest

log = logging.getLogger(__name__)

DEFAULT_USERS = "1,2,4,8,16"
# Short answers keep a sweep to minutes on a CPU pair (the measurements used 160).
DEFAULT_MAX_TOKENS = 160

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
    users: gr.Textbox
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
        return [self.users, self.order, self.max_tokens, self.preset, self.prompt, self.temperature, self.workload]

    @property
    def live_outputs(self) -> list[Any]:
        """What every frame sets (demo.ui.outputs): the status, the sentence, both curves, the table."""
        return [self.status, self.crossover, self.per_user_plot, self.total_plot, self.table, self.last_load]

    def updates(self, frame: LoadFrame) -> dict[Any, Any]:
        """A LoadFrame as {component: new value or None}, for StreamOutputs.values."""
        return {self.status: frame.status, self.crossover: frame.crossover, self.per_user_plot: frame.per_user_figure,
                self.total_plot: frame.total_figure, self.table: frame.table,
                self.last_load: frame.result.model_dump(mode="json") if frame.result is not None else None}

    # ------------------------------------------------------------ handlers

    def prepare(self, users_text: str, order: str, max_tok: float | None, preset_name: str | None,
                prompt_text: str | None, temperature: float | None, workload: dict | None,
                ) -> tuple[LoadSpec, WorkloadRequest]:
        """(spec, request) from the page's input; ValueError with a one-line message for bad input."""
        users = parse_users(users_text, self.settings.max_users)
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
        return make_spec(self.settings, req, users, order), request_from_race(req)

    async def on_run(self, users_text: str, order: str, max_tok: float | None, preset_name: str | None,
                     prompt_text: str | None, temperature: float | None, workload: dict | None,
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
                spec, wreq = self.prepare(users_text, order, max_tok, preset_name, prompt_text, temperature, workload)
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


# ---------------------------------------------------------------- layout


def build(settings: Settings, budget: StreamBudget | None = None, *, preset: gr.Dropdown | None = None,
          prompt: gr.Textbox | None = None, temperature: gr.Slider | None = None,
          workload: gr.State | None = None, registry: RaceRegistry | None = None) -> LoadPanel:
    """Lay the section out inside the current tab and wire its events. ``budget`` is the page's
    one stream budget (a fallback for the process when None); ``preset``/``prompt``/``temperature``
    are the Race tab's components, reused (else the section has its own preset dropdown)."""
    presets, _errors = load_presets(settings.presets_dir)  # the Race tab shows the errors
    with gr.Accordion("Load sweep: where speculation stops paying as users share the servers", open=True,
                      elem_id="sd-load"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=280, elem_id="sd-load-controls"):
                users = gr.Textbox(value=DEFAULT_USERS, label=f"Users per step (1 to {settings.max_users})",
                                   max_lines=1, elem_id="sd-load-users")
                order = gr.Radio([("Sequential (each server alone)", "sequential"), ("Simultaneous", "simultaneous")],
                                 value="sequential", label="Order", elem_id="sd-load-order")
                # No minimum/maximum: Gradio would refuse out-of-range input with a passing toast.
                max_tokens = gr.Number(value=DEFAULT_MAX_TOKENS, precision=0, label="Max tokens per user",
                                       elem_id="sd-load-max-tokens")
                if preset is None:
                    first = "json_reformat" if "json_reformat" in presets else next(iter(presets), FREE_PROMPT)
                    preset = gr.Dropdown(choices=[(p.title, n) for n, p in presets.items()], value=first,
                                         label="Preset", elem_id="sd-load-preset")
                    prompt = temperature = None
                else:
                    gr.HTML('<div class="sd-legend">Prompt: the Race tab\'s preset, prompt and temperature '
                            "above</div>")
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
                      registry=registry or RaceRegistry(), presets=presets, users=users, order=order,
                      max_tokens=max_tokens, preset=preset, run=run,
                      prompt=prompt if prompt is not None else gr.State(None),
                      temperature=temperature if temperature is not None else gr.State(None),
                      stop=stop, status=status, crossover=crossover, per_user_plot=per_user_plot,
                      total_plot=total_plot, table=table, export=export, exported=exported,
                      last_load=gr.State(None), workload=workload if workload is not None else gr.State(None))
    wire(panel)
    return panel


def wire(panel: LoadPanel) -> None:
    """Wire the section's Run, Stop and Download buttons to their handlers."""
    panel.run.click(panel.on_run, inputs=panel.run_inputs, outputs=panel.live_outputs,
                    # Streams are limited by the page's budget (each step waits its turn there),
                    # not by Gradio's race slots: a waiting sweep says why on its status line.
                    concurrency_limit=None, concurrency_id="load", show_progress="hidden")
    panel.stop.click(panel.on_stop, queue=False, show_progress="hidden")
    panel.export.click(panel.on_export, inputs=[panel.last_load], outputs=[panel.exported, panel.status],
                       show_progress="minimal")


def _session(request: gr.Request | None) -> str:
    return (request.session_hash if request is not None else None) or "no-session"
