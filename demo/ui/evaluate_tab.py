"""The "Evaluate" tab: a small sweep from the page, with a progress bar, the same charts and
verdict as report.html, and the full report to download. The sweep itself is demo.sweep;
this module only lays out inputs and shows what the sweep returns.

An uploaded workload file (demo.workload, the CLI's loader and limits) is measured with the
chosen presets, or alone; the tab then shows the report's plain-language summary, each
workload's segments with the routing sentence (demo.sweep.segments), its profile and its capacity
and cost (demo.sweep.report_workload). The loaded workload
also goes into the page's shared state, so the Race tab can race any of its requests.

With several arms (the settings' arms, as on the Race tab: ``Settings.arm_endpoints()``), the
sweep measures each against the baseline; the tab shows each workload's one line saying which
arm to enable up to which concurrency, every arm's verdict (demo.sweep.verdict, the report's
HTML) and a table row per arm of each cell. With one arm, the tab shows the pair.

Load "requests per second" (beside "users", the concurrency): the uploaded workload open-loop at
each rate of the rates textbox (demo/sweep/rates.py, the CLI's ``sweep --rate``); the tab shows the
report's capacity sentence, rate table and chart, from the same functions (it computes nothing).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from pydantic import ValidationError

from demo.errors import BadInput
from demo.fmt import esc, fmt_percent, fmt_speedup, fmt_temperature, or_na, validation_summary
from demo.live.budget import StreamBudget, sweep_streams, waiting_text
from demo.live.status import internal_error_text
from demo.load.engine import LoadResult, LoadSpec
from demo.load.rate_models import RateLoad, make_rate_load
from demo.presets import Preset, load_presets, resolve_presets
from demo.settings import Settings
from demo.slo import Slo
from demo.sweep import figures
from demo.sweep.models import SweepResult, SweepSpec
from demo.sweep.rates import (
    check_workload,
    new_load_result,
    rate_figures,
    rate_text_html,
    run_rate_sweep_of,
)
from demo.sweep.report import VERDICT_CSS, finalize, write_outputs
from demo.sweep.report import verdicts_html as workload_verdicts_html
from demo.sweep.report_workload import capacity_html, profile_html, segments_html, summary_paragraph
from demo.sweep.runner import SweepProgress, new_result, run_sweep, settings_arms, spec_arms, sweep_spec
from demo.sweep.verdict import VERDICT_BASIS
from demo.view import run_status_html
from demo.workload import Workload, WorkloadError, open_workload

log = logging.getLogger(__name__)

# A page sweep stays small: the audience waits for it. The CLI has no such cap.
MAX_BATCHES = 48
DEFAULT_PRESETS = ["json_reformat", "poetry"]
# Open loop on the page: the choice, and at most this many requests over every step and server.
LOAD_KINDS = ["users", "requests per second"]
MAX_RATE_REQUESTS = 240
# The inputs make_rate_load's BadInput names, as the page labels them.
RATE_LABELS = {"rate": "Rate", "duration": "Requests per step", "slo-ttft-p": "SLO percentile",
               "slo-itl-p": "SLO percentile", "slo-e2e-p": "SLO percentile", "slo-ttft-ms": "SLO TTFT",
               "slo-itl-ms": "SLO ITL"}
TABLE_HEADERS = ["preset", "T", "concurrency", "status", "speedup", "throughput ratio", "acceptance",
                 "tokens/step (theory)", "baseline tok/s", "speculative tok/s", "prefill share", "errors"]


def several_arms(result: SweepResult) -> bool:
    """Whether the sweep measured more than one arm (its table then has an arm column)."""
    return len(spec_arms(result.spec)) > 1 or any(len(c.arms) > 1 for c in result.cells)


def table_headers(several: bool) -> list[str]:
    """The table's headers: TABLE_HEADERS, with an arm column after concurrency for several arms."""
    return [*TABLE_HEADERS[:3], "arm", *TABLE_HEADERS[3:]] if several else list(TABLE_HEADERS)


def cell_rows(result: SweepResult) -> list[list[str]]:
    """The Evaluate tab's table: one row of shown text per cell (per cell and arm, with several
    arms: each arm's figures against the same baseline), under table_headers(several_arms(result))."""
    arms = several_arms(result)
    rows = []
    for cell in result.cells:
        views = [(name, cell.arm_view(name)) for name in cell.arms] if arms else [(None, cell)]
        for name, c in views:
            st = c.settings
            steps = "n/a" if c.mean_acceptance_length is None else (
                f"{c.mean_acceptance_length:.2f} ({c.expected_tokens_per_step:.2f})"
                if c.expected_tokens_per_step is not None else f"{c.mean_acceptance_length:.2f}")
            b, s = c.baseline.output_tokens_per_s, c.speculative.output_tokens_per_s
            head = [st.preset, fmt_temperature(st.temperature).removeprefix("T="), str(st.concurrency)]
            rows.append([*head, *([name] if name is not None else []), c.status,
                         or_na(fmt_speedup(c.speedup.median if c.speedup else None)),
                         or_na(fmt_speedup(c.throughput_ratio.median if c.throughput_ratio else None)),
                         or_na(fmt_percent(c.acceptance_rate)), steps,
                         "n/a" if b is None else f"{b.median:.1f}", "n/a" if s is None else f"{s.median:.1f}",
                         or_na(fmt_percent(c.baseline.prefill_share)), " | ".join(c.errors)])
    return rows


def verdicts_html(result: SweepResult) -> str:
    """Each workload's verdict as report.html shows it: one arm's; with several arms, the one line
    saying which arm to enable up to which concurrency (WorkloadVerdict.methods_line), then every
    arm's verdict."""
    body = ("".join(workload_verdicts_html(v) for v in result.verdicts)
            or '<p class="sv-muted">No cell was measured.</p>')
    note = ('<p class="sv-muted">Interrupted: the verdict uses the cells measured so far.</p>'
            if result.interrupted else "")
    names = f'<p class="sv-muted sv-ratio-names">{esc(VERDICT_BASIS)}</p>' if result.verdicts else ""
    return f"<style>{VERDICT_CSS}</style><div class=\"sd-eval-verdicts\">{note}{body}{names}</div>"


WORKLOAD_SUFFIXES = [".jsonl", ".json", ".csv", ".txt", ".md"]
WORKLOAD_HELP = ("Your workload (optional), in the form you already have, recognised by its content: a .jsonl "
                 "file (one request a line: {\"messages\": [...]} or {\"prompt\": \"...\"}, optional id, tag, "
                 "max_tokens, temperature and sampling), OpenAI Batch API lines, OpenAI request bodies one a line, "
                 "ShareGPT conversations (.json or .jsonl), a .csv with a prompt column, or one .txt/.md prompt. "
                 "A folder of prompts is CLI-only: `python -m demo sweep --workload FOLDER`. See docs/workloads.md.")


def batches_of(spec: SweepSpec, workload: Workload | None) -> int:
    """Batches the page would wait for: a preset batch is one round at its concurrency; a workload
    cell sends every request once, ``concurrency`` at a time; each round on the baseline and every arm."""
    n_temps = len(spec.temperatures) if spec.temperatures else 1
    rounds = len(spec.presets) * n_temps * len(spec.concurrency)
    if workload is not None:
        rounds += sum(-(-len(workload.requests) // c) for c in spec.concurrency)
    return rounds * spec.repeats * (1 + len(spec_arms(spec)))  # the baseline's batch, then each arm's


def load_upload(path: str | None, settings: Settings, sample_n: float | None = None,
                seed: float | None = None) -> tuple[Workload | None, list[str]]:
    """The uploaded file through the CLI's loader: the workload (None when none was given) and the
    lines to show: one per skipped line. ``sample_n`` 0 or None keeps every request. Raises
    WorkloadError (one line) when it cannot be used. A lone .txt/.md prompt is loaded as a folder
    of one file, as the CLI would load its folder."""
    if not path:
        return None, []
    src = Path(path)
    if src.suffix.lower() in (".txt", ".md"):
        folder = Path(tempfile.mkdtemp(prefix="specdemo-upload-")) / src.stem
        folder.mkdir()
        (folder / src.name).symlink_to(src.resolve())  # the loader checks its size and encoding
        src = folder
    if sample_n is not None and sample_n < 0:
        raise WorkloadError(f"Sample N must be 0 (every request) or more, not {sample_n:g}")
    n = int(sample_n) if sample_n else None
    workload = open_workload(src, settings, sample_n=n, seed=int(seed or 0))
    return workload, [f"skipped {i}" for i in workload.issues]


def upload_status_html(workload: Workload | None, lines: list[str]) -> str:
    """What the upload gave, one line each: the loader's summary ("12 requests read (OpenAI batch),
    2 skipped", then each ignored field), then every skipped line."""
    if workload is None:
        return ""
    head, *ignored = workload.summary_lines()
    head_html = f'<div class="sd-upload-ok">{esc(workload.name)}: {esc(head)}.</div>'
    rest = "".join(f'<div class="sd-upload-issue">{esc(line)}</div>' for line in [*ignored, *lines])
    return f'<div class="sd-upload" data-requests="{len(workload.requests)}">{head_html}{rest}</div>'


def upload_error_html(e: WorkloadError) -> str:
    """A rejected upload as escaped HTML: the loader's one-line error."""
    return f'<div class="sd-upload" data-error="true"><div class="sd-upload-error">{esc(str(e))}</div></div>'


def workload_html(result: SweepResult) -> str:
    """The workload file's segments (the routing sentence and a row per segment), then each
    workload's profile and capacity: report.html's sections."""
    if not result.workloads:
        return ""
    profiles = "".join(profile_html(w) for w in result.workloads)
    capacities = "".join(capacity_html(w) for w in result.workloads)
    return (f'<div class="sd-eval-workloads">{segments_html(result)}<h3>Which requests gain</h3>{profiles}'
            f"<h3>Capacity and cost</h3>{capacities}</div>")


INTRO = ("### Is it worth it for my workload?\n"
         "Each cell sends the same prompt to both servers, `concurrency` requests at once: the baseline "
         "batch first, then the speculative batch (each server alone: the fair A/B), repeated. "
         "The verdict follows the checklist: structured output (acceptance), memory headroom (KV cache), "
         "concurrency, and how much of the time is prefill. For a full sweep use "
         "`python -m demo sweep` (see docs/evaluator.md).")


def intro_text(settings: Settings) -> str:
    """INTRO; with several arms, a line naming them (the settings' arms, in order)."""
    arms = settings_arms(settings)
    if len(arms) <= 1:
        return INTRO
    names = ", ".join(f"`{a.name}`" for a in arms)
    return (INTRO + f"\n\n**{len(arms)} arms**: {names}. Each cell runs the baseline batch, then each arm's "
            "batch alone; each arm gets its verdict, and one line per workload says which arm to enable up to "
            "which concurrency.")


@dataclass(frozen=True, eq=False)
class EvaluateTab:
    """The tab's components (page order), what its handlers need, and the handlers."""

    settings: Settings
    budget: StreamBudget  # the page's one budget of streams (demo.ui.app): a sweep holds its share while it runs
    # the sweep's settings
    presets: gr.CheckboxGroup
    concurrency: gr.Textbox
    temperatures: gr.Textbox
    repeats: gr.Number
    warmup: gr.Number
    max_tokens: gr.Number
    # closed loop (users: the concurrency above) or open loop (requests per second)
    load_kind: gr.Radio
    rate_row: gr.Row  # the rates' inputs, shown for requests per second
    rates: gr.Textbox
    rate_requests: gr.Number
    slo_percentile: gr.Number
    # the workload upload, its sample and the capacity inputs
    upload: gr.File
    upload_status: gr.HTML
    sample_n: gr.Number
    seed: gr.Number
    slo_ttft: gr.Number
    slo_itl: gr.Number
    price: gr.Number
    redact: gr.Checkbox
    # run
    run: gr.Button
    stop: gr.Button
    status: gr.HTML
    report: gr.File
    # the results
    summary: gr.HTML
    verdict: gr.HTML
    workloads: gr.HTML
    throughput_plot: gr.Plot
    acc_plot: gr.Plot
    split_plot: gr.Plot
    table: gr.Dataframe
    # an open-loop sweep's results: the capacity sentence and table, then its chart
    rate_view: gr.HTML
    rate_latency_plot: gr.Plot
    rate_goodput_plot: gr.Plot
    # session state
    workload: gr.State  # dict | None: the uploaded Workload, shared with the Race tab (see demo.ui.app)

    # ------------------------------------------------------------ output lists

    @property
    def run_inputs(self) -> list[Any]:
        """The Run button's inputs, in ``on_run``'s parameter order."""
        return [self.presets, self.concurrency, self.temperatures, self.repeats, self.warmup, self.max_tokens,
                self.upload, self.sample_n, self.seed, self.slo_ttft, self.slo_itl, self.price, self.redact,
                self.load_kind, self.rates, self.rate_requests, self.slo_percentile]

    @property
    def run_outputs(self) -> list[Any]:
        """The Run button's outputs, in the order ``on_run`` returns them."""
        return [self.status, self.upload_status, self.summary, self.verdict, self.workloads, self.throughput_plot,
                self.acc_plot, self.split_plot, self.table, self.report, self.rate_view, self.rate_latency_plot,
                self.rate_goodput_plot]

    def failed(self, text: str, upload_html: Any = None) -> tuple[Any, ...]:
        """The run's outputs for a sweep that did not run: the status (and the upload's), the rest kept."""
        keep = [gr.skip()] * (len(self.run_outputs) - 2)
        return (run_status_html("error", text=text), gr.skip() if upload_html is None else upload_html, *keep)

    # ------------------------------------------------------------ handlers

    def _sweep_asked(self, names: list[str], conc: str, temps: str, reps: float, warm: float, max_tok: float,
                     workload: Workload | None, ttft_ms: float | None, itl_ms: float | None, gpu_price: float | None,
                     redacted: bool) -> tuple[SweepSpec, dict[str, Preset]]:
        """The sweep the inputs ask for, and its presets. Raises ValueError with the one line that says
        why it cannot run (a bad SLO, a bad field, an unknown preset, more batches than the page runs)."""
        try:
            slo = Slo.of_ms(ttft_ms or None, itl_ms or None) if (ttft_ms or itl_ms) else None
        except ValidationError as e:
            raise ValueError(f"SLO: {validation_summary(e)}") from None
        try:
            spec = sweep_spec(self.settings, list(names or []), conc, temps, int(reps or 1), int(warm or 0),
                              int(max_tok) if max_tok else None, workload=workload, redact=bool(redacted),
                              slo=slo, gpu_hour_price=gpu_price or None)
            chosen = resolve_presets(spec.presets, self.settings.presets_dir)
        except ValueError as e:  # BadInput (flag-free words), NotFound (a preset), a pydantic error
            raise ValueError(str(e).splitlines()[0]) from None
        batches = batches_of(spec, workload)
        if batches > MAX_BATCHES:
            hint = " or a smaller Sample N" if workload is not None else ""
            raise ValueError(f"That sweep has {batches} batches; the page runs at most {MAX_BATCHES}. Use "
                             f"fewer cells or repeats{hint}, or `python -m demo sweep`.")
        return spec, chosen

    async def on_run(self, names: list[str], conc: str, temps: str, reps: float, warm: float, max_tok: float,
                     path: str | None, n: float | None, seed_value: float | None, ttft_ms: float | None,
                     itl_ms: float | None, gpu_price: float | None, redacted: bool, load_kind: str = "users",
                     rates: str = "", rate_requests: float | None = None, slo_p: float | None = None,
                     progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008 (Gradio's idiom)
        """Run pressed: check the inputs and the upload, run the sweep when the page's stream budget allows.

        Returns ``run_outputs``: the status, summary, verdicts, workload sections, figures, table and the report
        files to download; or, when the sweep cannot run or fails, the status with the one-line reason (the other
        outputs are kept)."""
        try:
            workload, lines = load_upload(path, self.settings, n, seed_value)
        except WorkloadError as e:
            return self.failed(str(e), upload_error_html(e))
        except OSError as e:  # the upload vanished from Gradio's cache
            return self.failed(f"cannot read the uploaded file: {e.strerror or e}; upload it again")
        if load_kind == LOAD_KINDS[1]:
            return await self._run_rates(workload, lines, rates, rate_requests, ttft_ms, itl_ms, slo_p, max_tok,
                                         bool(redacted), progress)
        if not names and workload is None:
            return self.failed("Pick at least one preset, or upload a workload file.")
        try:
            spec, chosen = self._sweep_asked(names, conc, temps, reps, warm, max_tok, workload, ttft_ms, itl_ms,
                                             gpu_price, redacted)
        except ValueError as e:
            return self.failed(str(e))
        result = new_result(spec, chosen)
        streams = sweep_streams(spec)
        try:
            ticket = self.budget.ask(streams)
        except ValueError:
            return self.failed(f"Concurrency {max(spec.concurrency)} needs {streams} streams at once, over the "
                               f"page's budget of {self.budget.total} (SPECDEMO_MAX_STREAMS): use a lower "
                               "concurrency, or `python -m demo sweep`.")

        def on_progress(p: SweepProgress) -> None:
            progress(p.done / p.total if p.total else 1.0, desc=p.label)

        try:
            while not await ticket.wait(1.0):  # other viewers' races and sweeps hold the streams
                progress(0.0, desc=waiting_text(ticket))
            await run_sweep(spec, self.settings, result, chosen, on_progress=on_progress, workload=workload)
            finalize(result)
            paths = write_outputs(result, Path(tempfile.mkdtemp(prefix="specdemo-sweep-")))
            return self._finished(result, workload, lines, [str(paths[k]) for k in ("html", "json", "csv")])
        except Exception as e:  # a bug or a full disk: said where the user looks, traceback in the log
            log.exception("the sweep failed")
            return self.failed(internal_error_text(e))
        finally:  # done, failed or cancelled (Stop): the streams go back to the page
            ticket.release()

    def _finished(self, result: SweepResult, workload: Workload | None, lines: list[str],
                  files: list[str]) -> tuple[Any, ...]:
        """The run's outputs for a finished sweep, in run_outputs' order."""
        failed_cells = sum(c.status == "failed" for c in result.cells)
        done = f"Done: {len(result.cells)} cell(s)" + (
            f", {failed_cells} failed (see the table)" if failed_cells else "")
        return (run_status_html("done" if not failed_cells else "error", text=done),
                upload_status_html(workload, lines) if workload is not None else gr.skip(),
                summary_paragraph(result) if result.workloads else "", verdicts_html(result),
                workload_html(result), figures.throughput_figure(result), figures.cell_acceptance_figure(result),
                figures.time_split_figure(result), self._table(result), files, "", *_rate_plots(None))

    async def _run_rates(self, workload: Workload | None, lines: list[str], rates: str, n: float | None,
                         ttft_ms: float | None, itl_ms: float | None, slo_p: float | None, max_tok: float,
                         redacted: bool, progress: gr.Progress) -> tuple[Any, ...]:
        """Run pressed with "requests per second": the uploaded workload's requests open-loop at each rate
        (demo/sweep/rates.py, the CLI's sweep --rate), then the report's capacity sentence, table and chart.
        Bad input (a rate <= 0, a percentile outside (0, 100), no file) is the status's one line."""
        if workload is None:
            return self.failed("Requests per second sends your workload's requests: upload a workload file.")
        if n is None or n != int(n) or n < 1:
            return self.failed(f"Requests per step must be a whole number of at least 1, not {n}.")
        p = 95.0 if slo_p is None else float(slo_p)
        try:
            load = make_rate_load(rates, requests=int(n), slo_ms={"ttft": ttft_ms or None, "itl": itl_ms or None},
                                  slo_percentile={"ttft": p, "itl": p})
            check_workload(workload)
            spec = sweep_spec(self.settings, [], "1", "", 1, 0, int(max_tok) if max_tok else None, workload=workload,
                             redact=redacted)
            rated = new_load_result(spec, load, workload, spec.max_tokens)
        except BadInput as e:
            what = RATE_LABELS.get(e.field or "", e.field)
            return self.failed(f"{what} {e.problem}" if what and e.problem else str(e).splitlines()[0])
        servers = 1 + len(spec_arms(spec))
        total = len(load.rates) * int(n) * servers
        if total > MAX_RATE_REQUESTS:
            return self.failed(f"That sweep sends {total} requests; the page sends at most {MAX_RATE_REQUESTS}. "
                               "Use fewer rates or requests per step, or `python -m demo sweep --rate`.")
        result = new_result(spec, {})
        ticket = self.budget.ask(min(int(n), self.budget.total))
        started = 0

        def on_progress(label: str) -> None:
            nonlocal started
            progress(started / (len(load.rates) * servers), desc=label)
            started += 1

        try:
            while not await ticket.wait(1.0):
                progress(0.0, desc=waiting_text(ticket))
            await run_rate_sweep_of(spec, load, workload, self.settings, result, rated, max_tokens=spec.max_tokens,
                                    on_progress=on_progress)
            finalize(result)
            paths = write_outputs(result, Path(tempfile.mkdtemp(prefix="specdemo-sweep-")))
        except Exception as e:  # a bug or a full disk: said where the user looks, traceback in the log
            log.exception("the rate sweep failed")
            return self.failed(internal_error_text(e))
        finally:
            ticket.release()
        saturated = sum(s.saturated for step in rated.rate_steps for s in step.servers())
        done = f"Done: {len(rated.rate_steps)} rate step(s)" + (
            f", {saturated} saturated server step(s) (see the table)" if saturated else "")
        empty = _empty()  # the concurrency sweep's outputs show nothing from an earlier run
        return (run_status_html("done", text=done), upload_status_html(workload, lines), "", "", "",
                figures.throughput_figure(empty), figures.cell_acceptance_figure(empty),
                figures.time_split_figure(empty),
                [], [str(paths[k]) for k in ("html", "json", "csv")], rate_text_html(rated), *_rate_plots(rated))

    def _table(self, result: SweepResult) -> Any:
        """The table's rows; with several arms, with its arm column (new headers)."""
        rows = cell_rows(result)
        if not several_arms(result):
            return rows
        return gr.Dataframe(value=rows, headers=table_headers(True))

    def on_upload(self, path: str | None, n: float | None, seed_value: float | None) -> tuple[Any, Any]:
        """The upload (or a new sample) loaded at once: its status here, its requests for the Race tab."""
        try:
            workload, lines = load_upload(path, self.settings, n, seed_value)
        except WorkloadError as e:
            return upload_error_html(e), None
        except OSError as e:
            return (upload_error_html(WorkloadError(f"cannot read the uploaded file: {e.strerror or e}; "
                                                    "upload it again")), None)
        return upload_status_html(workload, lines), (None if workload is None else workload.model_dump())


# ---------------------------------------------------------------- layout


def build(settings: Settings, workload_state: gr.State | None = None,
          budget: StreamBudget | None = None) -> EvaluateTab:
    """Lay out the tab inside the current gr.Tab and wire its events. ``workload_state`` is the
    page's shared uploaded workload (the Race tab reads it); a page without one gets its own.
    ``budget`` is the page's one budget of streams (its own when none is given)."""
    presets, _errors = load_presets(settings.presets_dir)
    choices = [(p.title, name) for name, p in presets.items()]
    default = [n for n in DEFAULT_PRESETS if n in presets] or list(presets)[:1]
    gr.Markdown(intro_text(settings))
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280):
            controls = _controls(choices, default)
            with gr.Accordion("Your workload (upload)", open=True):
                upload = _upload(settings)
            run = _run()
        with gr.Column(scale=3):
            results = _results(len(settings_arms(settings)) > 1)
    tab = EvaluateTab(settings=settings, budget=budget or StreamBudget(settings.stream_budget()),
                      **controls, **upload, **run, **results,
                      workload=workload_state if workload_state is not None else gr.State(None))
    wire(tab)
    return tab


def _controls(choices: list[tuple[str, str]], default: list[str]) -> dict[str, Any]:
    c: dict[str, Any] = {}
    c["presets"] = gr.CheckboxGroup(choices=choices, value=default, label="Presets", elem_id="sd-eval-presets")
    c["load_kind"] = gr.Radio(choices=LOAD_KINDS, value=LOAD_KINDS[0], label="Load: users (concurrency) or "
                              "requests per second (open loop, your workload's requests)", elem_id="sd-eval-kind")
    c["concurrency"] = gr.Textbox(value="1,2", label="Concurrency (comma-separated)", elem_id="sd-eval-conc")
    with gr.Row(visible=False) as c["rate_row"]:
        c["rates"] = gr.Textbox(value="0.5,1,2", label="Requests per second (comma-separated)",
                                elem_id="sd-eval-rates", min_width=160)
        c["rate_requests"] = gr.Number(value=8, precision=0, label="Requests per step", min_width=90,
                                       elem_id="sd-eval-rate-requests")
        c["slo_percentile"] = gr.Number(value=95, label="SLO percentile (1-99)", min_width=90,
                                        elem_id="sd-eval-slo-p")
    c["temperatures"] = gr.Textbox(value="", label="Temperatures (blank: each preset's own)",
                                   placeholder="e.g. 0,0.7,1.0", elem_id="sd-eval-temps")
    with gr.Row():
        c["repeats"] = gr.Number(value=1, minimum=1, maximum=10, precision=0, label="Repeats", min_width=90,
                                 elem_id="sd-eval-repeats")
        c["warmup"] = gr.Number(value=1, minimum=0, maximum=5, precision=0, label="Warm-up", min_width=90,
                                elem_id="sd-eval-warmup")
        c["max_tokens"] = gr.Number(value=128, minimum=1, maximum=4096, precision=0, label="Max tokens",
                                    min_width=90, elem_id="sd-eval-max-tokens")
    return c


def _upload(settings: Settings) -> dict[str, Any]:
    c: dict[str, Any] = {}
    c["upload"] = gr.File(label="Workload file (.jsonl, .json, .csv, .txt, .md)", file_types=WORKLOAD_SUFFIXES,
                          file_count="single", type="filepath", elem_id="sd-eval-upload")
    gr.Markdown(WORKLOAD_HELP, elem_classes=["sd-upload-help"])
    c["upload_status"] = gr.HTML("", elem_id="sd-eval-upload-status")
    with gr.Row():
        # No minimum: Gradio would refuse with a passing toast; load_upload says it here.
        c["sample_n"] = gr.Number(value=0, precision=0, label="Sample N (0: all)", min_width=90,
                                  elem_id="sd-eval-sample")
        c["seed"] = gr.Number(value=0, precision=0, label="Seed", min_width=90, elem_id="sd-eval-seed")
    with gr.Row():
        c["slo_ttft"] = gr.Number(value=0, label="SLO TTFT p95 ms (0: none)", min_width=90,
                                  elem_id="sd-eval-slo-ttft")
        c["slo_itl"] = gr.Number(value=0, label="SLO ITL p95 ms (0: none)", min_width=90,
                                 elem_id="sd-eval-slo-itl")
        c["price"] = gr.Number(value=settings.gpu_hour_price or 0, label="GPU-hour price (0: none)",
                               min_width=90, elem_id="sd-eval-price")
    c["redact"] = gr.Checkbox(value=False, label="Redact: no prompt or answer text in the report",
                              elem_id="sd-eval-redact")
    return c


def _run() -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Row():
        c["run"] = gr.Button("▶ Run sweep", variant="primary", elem_id="sd-eval-run", min_width=120)
        c["stop"] = gr.Button("■ Stop", variant="stop", elem_id="sd-eval-stop", min_width=100)
    c["status"] = gr.HTML(run_status_html("idle", text="Ready: pick presets and press Run sweep"),
                          elem_id="sd-eval-status")
    c["report"] = gr.File(label="Full report (report.html, results.json, results.csv)", file_count="multiple",
                          interactive=False, elem_id="sd-eval-report")
    return c


def _results(several: bool) -> dict[str, Any]:
    c: dict[str, Any] = {}
    c["summary"] = gr.HTML(elem_id="sd-eval-summary")
    c["verdict"] = gr.HTML(elem_id="sd-eval-verdict")
    c["workloads"] = gr.HTML(elem_id="sd-eval-workloads")
    c["throughput_plot"] = gr.Plot(figures.throughput_figure(_empty()), label="Throughput ratio",
                                   elem_id="sd-eval-throughput")
    with gr.Row():
        c["acc_plot"] = gr.Plot(figures.cell_acceptance_figure(_empty()), label="Acceptance",
                                elem_id="sd-eval-acceptance")
        c["split_plot"] = gr.Plot(figures.time_split_figure(_empty()), label="TTFT vs decode",
                                  elem_id="sd-eval-split")
    c["table"] = gr.Dataframe(headers=table_headers(several), value=[], interactive=False, wrap=True,
                              elem_id="sd-eval-table")
    c["rate_view"] = gr.HTML(elem_id="sd-eval-rate")
    latency, goodput = _rate_plots(None)
    with gr.Row():
        c["rate_latency_plot"] = gr.Plot(latency, label="ITL against the offered rate", elem_id="sd-eval-rate-latency")
        c["rate_goodput_plot"] = gr.Plot(goodput, label="Goodput against the offered rate",
                                         elem_id="sd-eval-rate-goodput")
    return c


def wire(tab: EvaluateTab) -> None:
    """The tab's events: an upload (or a new sample) loads at once; Run sweeps; Stop cancels it."""
    for trigger in (tab.upload.change, tab.sample_n.submit, tab.seed.submit):
        trigger(tab.on_upload, inputs=[tab.upload, tab.sample_n, tab.seed], outputs=[tab.upload_status, tab.workload],
                show_progress="hidden")
    tab.load_kind.change(on_load_kind, inputs=[tab.load_kind], outputs=[tab.rate_row, tab.concurrency],
                         show_progress="hidden")
    event = tab.run.click(tab.on_run, inputs=tab.run_inputs, outputs=tab.run_outputs, concurrency_limit=1,
                          concurrency_id="sweep", show_progress="full", show_progress_on=[tab.status])
    tab.stop.click(on_stop, outputs=[tab.status], cancels=[event], queue=False)


def on_load_kind(kind: str) -> tuple[Any, Any]:
    """The load's choice changed: the rates' row shows for requests per second, the concurrency for users."""
    rate = kind == LOAD_KINDS[1]
    return gr.update(visible=rate), gr.update(visible=not rate)


def _rate_plots(rated: LoadResult | None) -> list[Any]:
    """The rate chart (demo/load/rate_page.py's two figures); their placeholders before an open-loop sweep."""
    if rated is None:
        rated = LoadResult(spec=LoadSpec(rate=RateLoad(rates=[1], requests=1), workload="-", max_tokens=1,
                                         temperature=0, baseline_url="", speculative_url=""))
    return [fig for _, fig in rate_figures(rated)]


def on_stop() -> str:
    """Stop pressed: the "stopped" status (Gradio cancels the running sweep)."""
    return run_status_html("stopped", text="Stopped: the sweep was cancelled (both servers' requests closed).")


def _empty() -> SweepResult:
    """An empty sweep: the charts' placeholders before the first run."""
    return SweepResult(spec=SweepSpec(baseline_url="", speculative_url="", presets=["-"]))
