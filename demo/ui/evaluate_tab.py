"""The "Evaluate" tab: a small sweep from the page, with a progress bar, the same charts and
verdict as report.html, and the full report to download. The sweep itself is demo.sweep;
this module only lays out inputs and shows what the sweep returns.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr

from demo.cli_args import UsageError
from demo.fmt import fmt_percent, fmt_speedup, or_na
from demo.presets import load_presets
from demo.settings import Settings
from demo.sweep import figures
from demo.sweep.cli import make_spec
from demo.sweep.models import SweepResult, SweepSpec
from demo.sweep.plan import UnknownPresetError, resolve_presets
from demo.sweep.report import VERDICT_CSS, finalize, verdict_html, write_outputs
from demo.sweep.runner import Progress, new_result, run_sweep
from demo.ui.race_stream import internal_error_text
from demo.view import run_status_html

log = logging.getLogger(__name__)

# A page sweep stays small: the audience waits for it. The CLI has no such cap.
MAX_BATCHES = 48
DEFAULT_PRESETS = ["json_reformat", "poetry"]
TABLE_HEADERS = ["preset", "T", "concurrency", "status", "speedup", "decode speedup", "acceptance",
                 "tokens/step (theory)", "baseline tok/s", "speculative tok/s", "prefill share", "errors"]


def cells_table(result: SweepResult) -> list[list[str]]:
    rows = []
    for c in result.cells:
        st = c.settings
        steps = "n/a" if c.mean_acceptance_length is None else (
            f"{c.mean_acceptance_length:.2f} ({c.expected_tokens_per_step:.2f})"
            if c.expected_tokens_per_step is not None else f"{c.mean_acceptance_length:.2f}")
        b, s = c.baseline.output_tokens_per_s, c.speculative.output_tokens_per_s
        rows.append([st.preset, f"{st.temperature:g}", str(st.concurrency), c.status,
                     or_na(fmt_speedup(c.speedup.median if c.speedup else None)),
                     or_na(fmt_speedup(c.decode_speedup.median if c.decode_speedup else None)),
                     or_na(fmt_percent(c.acceptance_rate)), steps,
                     "n/a" if b is None else f"{b.median:.1f}", "n/a" if s is None else f"{s.median:.1f}",
                     or_na(fmt_percent(c.baseline.prefill_share)), " | ".join(c.errors)])
    return rows


def verdicts_html(result: SweepResult) -> str:
    body = "".join(verdict_html(v) for v in result.verdicts) or '<p class="sv-muted">No cell was measured.</p>'
    note = ('<p class="sv-muted">Interrupted: the verdict uses the cells measured so far.</p>'
            if result.interrupted else "")
    return f"<style>{VERDICT_CSS}</style><div class=\"sd-eval-verdicts\">{note}{body}</div>"


def build(settings: Settings) -> None:
    """Lay out the tab inside the current gr.Tab and wire its events."""
    presets, _errors = load_presets(settings.presets_dir)
    choices = [(p.title, name) for name, p in presets.items()]
    default = [n for n in DEFAULT_PRESETS if n in presets] or list(presets)[:1]

    gr.Markdown(
        "### Is it worth it for my workload?\n"
        "Each cell sends the same prompt to both servers, `concurrency` requests at once: the baseline "
        "batch first, then the speculative batch (each server alone: the fair A/B), repeated. "
        "The verdict follows the checklist: structured output (acceptance), memory headroom (KV cache), "
        "concurrency, and how much of the time is prefill. For a full sweep use "
        "`python -m demo sweep` (see docs/evaluator.md).")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280):
            preset_cb = gr.CheckboxGroup(choices=choices, value=default, label="Presets", elem_id="sd-eval-presets")
            concurrency = gr.Textbox(value="1,2", label="Concurrency (comma-separated)", elem_id="sd-eval-conc")
            temperatures = gr.Textbox(value="", label="Temperatures (blank: each preset's own)",
                                      placeholder="e.g. 0,0.7,1.0", elem_id="sd-eval-temps")
            with gr.Row():
                repeats = gr.Number(value=1, minimum=1, maximum=10, precision=0, label="Repeats", min_width=90,
                                    elem_id="sd-eval-repeats")
                warmup = gr.Number(value=1, minimum=0, maximum=5, precision=0, label="Warm-up", min_width=90,
                                   elem_id="sd-eval-warmup")
                max_tokens = gr.Number(value=128, minimum=1, maximum=4096, precision=0, label="Max tokens",
                                       min_width=90, elem_id="sd-eval-max-tokens")
            with gr.Row():
                run = gr.Button("▶ Run sweep", variant="primary", elem_id="sd-eval-run", min_width=120)
                stop = gr.Button("■ Stop", variant="stop", elem_id="sd-eval-stop", min_width=100)
            status = gr.HTML(run_status_html("idle", text="Ready: pick presets and press Run sweep"),
                             elem_id="sd-eval-status")
            report = gr.File(label="Full report (report.html, results.json, results.csv)", file_count="multiple",
                             interactive=False, elem_id="sd-eval-report")
        with gr.Column(scale=3):
            verdict = gr.HTML(elem_id="sd-eval-verdict")
            speedup_plot = gr.Plot(figures.speedup_figure(_empty()), label="Speedup", elem_id="sd-eval-speedup")
            with gr.Row():
                acc_plot = gr.Plot(figures.acceptance_figure(_empty()), label="Acceptance",
                                   elem_id="sd-eval-acceptance")
                split_plot = gr.Plot(figures.time_split_figure(_empty()), label="TTFT vs decode",
                                     elem_id="sd-eval-split")
            table = gr.Dataframe(headers=TABLE_HEADERS, value=[], interactive=False, wrap=True,
                                 elem_id="sd-eval-table")

    async def on_run(names: list[str], conc: str, temps: str, reps: float, warm: float, max_tok: float,
                     progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008 (Gradio's idiom)
        try:
            spec = make_spec(settings, list(names or []), conc, temps, int(reps or 1), int(warm or 0),
                             int(max_tok) if max_tok else None)
            chosen = resolve_presets(spec.presets, settings.presets_dir)
        except (UsageError, UnknownPresetError, ValueError) as e:
            msg = str(e) if names else "Pick at least one preset."
            return (run_status_html("error", text=msg),
                    gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip())
        n_temps = len(spec.temperatures) if spec.temperatures else 1
        batches = len(spec.presets) * n_temps * len(spec.concurrency) * spec.repeats * 2
        if batches > MAX_BATCHES:
            return (run_status_html("error", text=f"That sweep has {batches} batches; the page runs at most "
                                    f"{MAX_BATCHES}. Use fewer cells or repeats, or `python -m demo sweep`."),
                    gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip())
        result = new_result(spec, chosen)

        def on_progress(p: Progress) -> None:
            progress(p.done / p.total if p.total else 1.0, desc=p.label)

        try:
            await run_sweep(spec, settings, result, chosen, on_progress=on_progress)
            finalize(result)
            out = Path(tempfile.mkdtemp(prefix="specdemo-sweep-"))
            paths = write_outputs(result, out)
        except Exception as e:  # a bug or a full disk: said where the user looks, traceback in the log
            log.exception("the sweep failed")
            return (run_status_html("error", text=internal_error_text(e)),
                    gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip())
        failed = sum(c.status == "failed" for c in result.cells)
        done = f"Done: {len(result.cells)} cell(s)" + (f", {failed} failed (see the table)" if failed else "")
        return (run_status_html("done" if not failed else "error", text=done), verdicts_html(result),
                figures.speedup_figure(result), figures.acceptance_figure(result),
                figures.time_split_figure(result), cells_table(result),
                [str(paths["html"]), str(paths["json"]), str(paths["csv"])])

    event = run.click(on_run, inputs=[preset_cb, concurrency, temperatures, repeats, warmup, max_tokens],
                      outputs=[status, verdict, speedup_plot, acc_plot, split_plot, table, report],
                      concurrency_limit=1, concurrency_id="sweep", show_progress="full",
                      show_progress_on=[status])
    stop.click(lambda: run_status_html("stopped",
                                       text="Stopped: the sweep was cancelled (both servers' requests closed)."),
               outputs=[status], cancels=[event], queue=False)


def _empty() -> SweepResult:
    """An empty sweep: the charts' placeholders before the first run."""
    return SweepResult(spec=SweepSpec(baseline_url="", speculative_url="", presets=["-"]))
