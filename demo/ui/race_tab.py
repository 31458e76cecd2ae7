"""The "Race" tab: controls on the left, the headline and both panes on the right; charts,
servers and the run history below the fold. Reads top to bottom like the page.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from demo import charts, view
from demo.presets import Preset, load_presets
from demo.results import RaceResult
from demo.server_info import ServerInfo, probe_servers
from demo.settings import Settings
from demo.ui import handlers
from demo.ui.handlers import FREE_PROMPT
from demo.ui.outputs import StreamOutputs, frame_updates
from demo.ui.session import RaceRegistry

log = logging.getLogger(__name__)


def _preset_choices(presets: dict[str, Preset]) -> list[tuple[str, str]]:
    return [(p.title, name) for name, p in presets.items()] + [(FREE_PROMPT, FREE_PROMPT)]


def build(settings: Settings, registry: RaceRegistry) -> dict[str, Any]:
    """Lay out the tab inside the current gr.Blocks and wire its events; returns the components."""
    presets, preset_errors = load_presets(settings.presets_dir)
    # The copy-heavy JSON preset shows the effect best: open on it when it is there.
    first = presets.get("json_reformat") or next(iter(presets.values()), None)

    if preset_errors:
        gr.HTML('<div class="sd-banner" role="alert"><ul>' + "".join(
            f"<li>Preset file {view.esc(e.file)} skipped: {view.esc(e.message)}</li>" for e in preset_errors
        ) + "</ul></div>")

    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280, elem_id="sd-controls"):
            preset_dd = gr.Dropdown(choices=_preset_choices(presets), value=first.name if first else FREE_PROMPT,
                                    label="Preset", elem_id="sd-preset")
            expect = gr.HTML(_expect_html(first), elem_id="sd-expect")
            prompt = gr.Textbox(value=handlers.preset_user_text(first) if first else "", label="Prompt",
                                lines=4, max_lines=4, elem_id="sd-prompt")
            with gr.Row():
                temperature = gr.Slider(0.0, 2.0, value=first.temperature if first else 0.0, step=0.1,
                                        label="Temperature", elem_id="sd-temperature", min_width=120)
                # No minimum/maximum here: Gradio would refuse out-of-range input with a passing
                # toast and leave the status on "waiting"; handlers.build_request says it on the page.
                max_tokens = gr.Number(value=first.max_tokens if first else 256,
                                       precision=0, label="Max tokens", elem_id="sd-max-tokens", min_width=100)
            mode = gr.Radio([("Race", "simultaneous"), ("Sequential A/B", "sequential")],
                            value="simultaneous", label="Mode", elem_id="sd-mode")
            with gr.Row():
                start = gr.Button("▶ Start", variant="primary", elem_id="sd-start", min_width=100)
                stop = gr.Button("■ Stop", variant="stop", elem_id="sd-stop", min_width=100)
            gr.HTML('<div class="sd-legend">Keys: Ctrl+Enter start · Esc stop</div>')

        with gr.Column(scale=3):
            banner = gr.HTML(elem_id="sd-banner")
            with gr.Row(equal_height=True):
                with gr.Column(scale=0, min_width=290):
                    speedup = gr.HTML(view.speedup_html(None), elem_id="sd-speedup")
                with gr.Column(scale=3, min_width=300):
                    mode_box = gr.HTML(view.order_html("simultaneous"), elem_id="sd-mode-label")
                    run_status = gr.HTML(view.run_status_html("idle"), elem_id="sd-run-status")
                with gr.Column(scale=0, min_width=230):
                    badge = gr.HTML(view.identical_badge_html(None), elem_id="sd-badge")
            with gr.Row(equal_height=True):
                panes = {}
                for side in ("baseline", "speculative"):
                    with gr.Column(elem_id=f"sd-pane-{side}", min_width=360):
                        title = gr.HTML(view.pane_title_html("Baseline") if side == "baseline"
                                        else handlers.spec_title(settings, None, None), elem_id=f"sd-title-{side}")
                        status = gr.HTML("", elem_id=f"sd-status-{side}")
                        tiles = gr.HTML("", elem_id=f"sd-tiles-{side}")
                        text = gr.HTML(_placeholder(side), elem_id=f"sd-text-{side}")
                        panes[side] = (title, status, tiles, text)
            gr.HTML(view.burst_legend_html())

    with gr.Row():
        race_plot = gr.Plot(charts.race_figure(None), show_label=False, elem_id="sd-race-plot")
    with gr.Row():
        acc_plot = gr.Plot(charts.acceptance_figure(None), show_label=False, elem_id="sd-acc-plot")
        chunk_plot = gr.Plot(charts.chunk_figure(None), show_label=False, elem_id="sd-chunk-plot")
    with gr.Accordion("Servers", open=True):
        servers = gr.HTML(elem_id="sd-servers")
        refresh = gr.Button("Refresh servers", size="sm", elem_id="sd-refresh")
    with gr.Accordion("Run history (this session)", open=True):
        history_df = gr.Dataframe(headers=view.HISTORY_HEADERS, value=[], interactive=False,
                                  wrap=True, elem_id="sd-history")
        download = gr.DownloadButton("Download CSV", value=None, elem_id="sd-download", size="sm")

    history = gr.State([])  # list[dict]: HistoryRow dumps, oldest first
    infos_state = gr.State([])  # list[dict]: ServerInfo dumps from the last probe

    # ------------------------------------------------------------ events

    def on_preset(name: str) -> tuple[Any, ...]:
        preset = presets.get(name)
        if preset is None:  # free prompt: keep what is typed, clear the expectation
            return gr.skip(), gr.skip(), gr.skip(), _expect_html(None)
        return (handlers.preset_user_text(preset), preset.temperature, preset.max_tokens,
                _expect_html(preset))

    preset_dd.change(on_preset, inputs=[preset_dd], outputs=[prompt, temperature, max_tokens, expect],
                     queue=False, show_progress="hidden")

    async def on_probe() -> tuple[Any, ...]:
        infos = await probe_servers(settings)
        return _server_outputs(infos, settings)

    server_outputs = [banner, servers, panes["speculative"][0], infos_state]
    # The race's end (a Finished), handed from the streaming event to the one that draws the rest.
    finished = gr.State(None)

    async def on_arm(request: gr.Request) -> tuple[Any, ...]:
        registry.arm(_session(request))
        start_view = handlers.result_view(None)
        return (view.run_status_html("waiting", f"this page runs {settings.max_concurrent_races} at a time"),
                start_view.badge, start_view.acceptance_figure, start_view.chunk_figure, None)

    # Every frame sets each of these (see demo.ui.outputs); the rest of the page is drawn
    # once the race is over, by on_finish.
    live_panes = {side: comps[1:] for side, comps in panes.items()}  # (status, tiles, text)
    live_outputs = [run_status, speedup, *[c for comps in live_panes.values() for c in comps], race_plot]

    async def on_race(preset_name: str, prompt_text: str, temp: float, max_tok: float, mode_value: str,
                      request: gr.Request):
        session = _session(request)
        control = registry.get(session) or registry.arm(session)
        stream = StreamOutputs(live_outputs, no_resend=[race_plot])
        try:
            if control.stop.is_set():  # Stop was pressed while this race waited in the queue
                yield {run_status: view.run_status_html("stopped", "before it started")}
                return
            try:
                req = handlers.build_request(presets, preset_name, prompt_text, temp, max_tok, mode_value)
            except ValueError as e:
                yield {run_status: view.run_status_html("error", str(e))}
                return
            try:
                result: RaceResult | None = None
                async for frame in handlers.race_frames(req, settings, control):
                    if frame.result is not None:
                        result = frame.result
                    yield [*stream.values(frame_updates(frame, live_panes, speedup, race_plot, run_status)),
                           gr.skip()]
                if result is None:  # race_frames has said why, in a final status
                    return
                saved = await handlers.save(result, settings)
                # The final status goes up with the rest (on_finish): "done" means all is drawn.
                yield {finished: Finished(result, handlers.final_status(result, saved, control.stopped_because))}
            except Exception as e:  # a bug, not a server fault: say so where the presenter looks
                log.exception("the race failed")
                yield {run_status: view.run_status_html("error", handlers.internal_error_text(e))}
        finally:
            registry.drop(session, control)

    async def on_finish(end: Finished | None, rows: list[dict], infos: list[dict]) -> dict[Any, Any]:
        if end is None:  # stopped before it started, refused, or failed: on_race has said so
            return {}
        result = end.result
        try:
            shown = handlers.result_view(result)
            rows = [*rows, view.history_row(result).model_dump()]
            out: dict[Any, Any] = {
                run_status: end.status,
                badge: shown.badge, acc_plot: shown.acceptance_figure, chunk_plot: shown.chunk_figure,
                history: rows,
                history_df: view.history_table([view.HistoryRow(**r) for r in rows]),
                download: _write_csv(rows),
                panes["speculative"][0]: handlers.spec_title(settings, [ServerInfo(**i) for i in infos], result),
            }
            if result.baseline.error or result.speculative.error:
                # A side failed: re-probe so the banner says which server is down and what to do.
                banner_html, servers_html, _title, infos_dump = await on_probe()
                out.update({banner: banner_html, servers: servers_html, infos_state: infos_dump})
            return out
        except Exception as e:  # a bug: the race itself is shown and saved; say what is missing
            log.exception("drawing the race's result failed")
            return {run_status: view.run_status_html("error", handlers.internal_error_text(e))}

    async def on_stop(request: gr.Request) -> None:
        registry.stop(_session(request))

    arm = start.click(on_arm, outputs=[run_status, badge, acc_plot, chunk_plot, finished], queue=False,
                      show_progress="hidden")
    race_inputs = [preset_dd, prompt, temperature, max_tokens, mode]
    race_event = arm.then(on_race, inputs=race_inputs, outputs=[*live_outputs, finished],
                          concurrency_limit=settings.max_concurrent_races, concurrency_id="race",
                          # Our own status line says "waiting" / "racing": Gradio's overlay would dim it.
                          show_progress="hidden")
    finish_outputs = [run_status, badge, acc_plot, chunk_plot, history, history_df, download,
                      banner, servers, infos_state, panes["speculative"][0]]
    race_event.then(on_finish, inputs=[finished, history, infos_state], outputs=finish_outputs,
                    concurrency_limit=None, show_progress="hidden")
    stop.click(on_stop, queue=False, show_progress="hidden")
    refresh.click(on_probe, outputs=server_outputs, show_progress="minimal")
    mode.change(lambda m: view.order_html(m), inputs=[mode], outputs=[mode_box], queue=False,
                show_progress="hidden")

    return {"probe": (on_probe, server_outputs), "race_event": race_event, "start": start, "stop": stop}


class Finished(NamedTuple):
    """A race that has a result: what on_finish draws, and the final status it shows with it."""

    result: RaceResult
    status: str


def _session(request: gr.Request | None) -> str:
    return (request.session_hash if request is not None else None) or "no-session"


def _placeholder(side: str) -> str:
    # Not class "sd-text": that holds the model's answer only (tests read it).
    return (f'<div class="sd-idle" data-side="{side}"><div class="sd-text-body sd-placeholder">'
            f"Press Start: the {side} server's answer streams here.</div></div>")


def _expect_html(preset: Preset | None) -> str:
    if preset is None:
        return '<div class="sd-expect"></div>'
    text = view.esc(preset.expect)
    return f'<div class="sd-expect" title="{text}">What to expect: {text}</div>'


def _server_outputs(infos: list[ServerInfo], settings: Settings) -> tuple[Any, ...]:
    return (view.server_banner_html(infos), view.server_panel_html(infos),
            handlers.spec_title(settings, infos, None),
            [i.model_dump() for i in infos])


def _write_csv(rows: list[dict]) -> str:
    # Gradio copies files a handler returns into its own cache; this temp file is the source.
    with tempfile.NamedTemporaryFile("w", prefix="specdemo-history-", suffix=".csv", delete=False,
                                     encoding="utf-8", newline="") as f:
        f.write(view.history_csv([view.HistoryRow(**r) for r in rows]))
    return str(Path(f.name))
