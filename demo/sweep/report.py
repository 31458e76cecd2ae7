"""The sweep's outputs: results.json (the schema'd record), results.csv (one row per cell)
and report.html (self-contained: Plotly's JS inlined once, no network, model output escaped).
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from common.files import atomic_write
from demo.assets import stylesheet
from demo.charts import figures_html
from demo.fmt import TIMES, csv_cell, esc, fmt_temperature
from demo.pages import render, report_assets
from demo.sweep.figures import all_figures
from demo.sweep.models import CellResult, CellSettings, Spread, SweepResult, WorkloadVerdict
from demo.sweep.pooling import assemble_cell, summarize_workloads
from demo.sweep.rates import load_result, rate_section_html
from demo.sweep.report_workload import summary_paragraph, workload_sections
from demo.sweep.schedule import sweep_recommendation
from demo.sweep.segments import session_replay, workload_routing
from demo.sweep.tables import schedule_html
from demo.sweep.verdict import VERDICT_BASIS, verdicts

DECISION_LABELS = {"enable": "ENABLE", "don't": "DON'T", "depends": "DEPENDS", "unknown": "NO VERDICT"}


def finalize(result: SweepResult) -> SweepResult:
    """Verdicts, workload profiles, capacity and segments from the cells so far, and the end time (also for
    an interrupted sweep)."""
    result.verdicts = verdicts(result)
    result.workloads = summarize_workloads(result)
    result.segments, result.routing = workload_routing(result)
    result.sessions = session_replay(result)
    result.recommendation = sweep_recommendation(result)
    result.finished_at = datetime.now(UTC)
    return result


def write_outputs(result: SweepResult, out_dir: Path) -> dict[str, Path]:
    """Write results.json, results.csv and report.html; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "html": out_dir / "report.html"}
    # Each file whole or not at all: a reader (or a Ctrl-C) never sees half of one.
    atomic_write(paths["json"], result.model_dump_json(indent=1))
    atomic_write(paths["csv"], results_csv(result))
    atomic_write(paths["html"], report_html(result))
    return paths


# --------------------------------------------------------------------------- CSV


def _sp(s: Spread | None, part: str) -> float | None:
    return None if s is None else getattr(s, part)


def cell_row(c: CellResult) -> dict[str, Any]:
    """One CSV row for a cell: settings, status, speedups, acceptance, each side's figures and the errors.

    With several arms, each arm's own figures follow in ``arm_NAME_`` columns (the others hold the first arm)."""
    st = c.settings
    row: dict[str, Any] = {
        "preset": st.preset, "kind": st.kind, "requests": st.requests, "temperature": st.temperature,
        "concurrency": st.concurrency,
        "max_tokens": st.max_tokens, "repeats": st.repeats, "order": st.order, "status": c.status,
        "speedup_median": _sp(c.speedup, "median"), "speedup_min": _sp(c.speedup, "min"),
        "speedup_max": _sp(c.speedup, "max"),
        "throughput_ratio_median": _sp(c.throughput_ratio, "median"),
        "throughput_ratio_min": _sp(c.throughput_ratio, "min"),
        "throughput_ratio_max": _sp(c.throughput_ratio, "max"), "e2e_speedup": c.e2e_speedup,
        "acceptance_rate": c.acceptance_rate, "mean_acceptance_length": c.mean_acceptance_length,
        "efficiency": c.efficiency,
        "expected_tokens_per_step": c.expected_tokens_per_step, "num_spec_tokens": c.num_spec_tokens,
        "acceptance_source": c.acceptance_source, "identical_text": c.identical_text,
    }
    for side in (c.baseline, c.speculative):
        p = side.side + "_"
        row.update({
            p + "output_tokens_per_s": _sp(side.output_tokens_per_s, "median"),
            p + "decode_tokens_per_s": _sp(side.decode_tokens_per_s, "median"),
            p + "ttft_p50_s": side.ttft_p50_s, p + "ttft_p95_s": side.ttft_p95_s,
            p + "itl_p50_s": side.itl_p50_s, p + "itl_p95_s": side.itl_p95_s,
            p + "e2e_p50_s": side.e2e_p50_s, p + "e2e_p95_s": side.e2e_p95_s,
            p + "prefill_share": side.prefill_share, p + "kv_cache_usage_peak_perc": side.kv_cache_usage_peak_perc,
            p + "ok_requests": side.ok_requests, p + "requests": side.requests,
        })
    if len(c.arms) > 1:  # every arm's own figures, by name (the columns above hold the first arm)
        for name, a in c.arms.items():
            p = f"arm_{name}_"
            row.update({p + "speedup_median": _sp(a.speedup, "median"),
                        p + "throughput_ratio_median": _sp(a.throughput_ratio, "median"),
                        p + "e2e_speedup": a.e2e_speedup, p + "acceptance_rate": a.acceptance_rate,
                        p + "mean_acceptance_length": a.mean_acceptance_length,
                        p + "output_tokens_per_s": _sp(a.side.output_tokens_per_s, "median"),
                        p + "decode_tokens_per_s": _sp(a.side.decode_tokens_per_s, "median"),
                        p + "identical_text": a.identical_text})
    row["errors"] = " | ".join(c.errors)
    return row


def results_csv(result: SweepResult) -> str:
    """The sweep as CSV text (results.csv): a header, then one row per cell; the header alone for no cells."""
    out = io.StringIO()
    rows = [cell_row(c) for c in result.cells]
    fields = list(rows[0]) if rows else cell_row_fields()
    w = csv.writer(out)
    w.writerow(fields)
    for r in rows:
        w.writerow([csv_cell(r[f]) for f in fields])
    return out.getvalue()


def cell_row_fields() -> list[str]:
    """The CSV header, from an empty cell (so an empty sweep still writes one)."""
    dummy = CellSettings(preset="x", temperature=0, concurrency=1, max_tokens=1, api="chat", repeats=1,
                         warmup=0, order="sequential", baseline_url="", speculative_url="")
    return list(cell_row(assemble_cell(dummy, [], [])))


# --------------------------------------------------------------------------- HTML

# The verdict's look, shared with the Evaluate tab, and the report's (demo/static/, on the palette).
VERDICT_CSS = stylesheet("verdict.css")



def verdicts_html(v: WorkloadVerdict) -> str:
    """A workload's verdict: one arm's; with several arms, the methods line, then each arm's verdict."""
    if not v.per_arm:
        return verdict_html(v)
    line = (f'<p class="sv-methods" data-preset="{esc(v.preset)}" data-temperature="{esc(v.temperature)}">'
            f"<b>{esc(v.title)}</b> at {esc(fmt_temperature(v.temperature))}: {esc(v.methods_line or '')}</p>")
    return line + "".join(verdict_html(a) for a in v.per_arm)


def verdict_html(v: WorkloadVerdict) -> str:
    """One verdict (a workload for one arm) as escaped HTML: decision, headline, checklist and the theory line."""
    cls = {"enable": "sv-d-enable", "don't": "sv-d-dont", "depends": "sv-d-depends",
           "unknown": "sv-d-unknown"}[v.decision]
    items = "".join(f'<li><span class="sv-st sv-st-{esc(i.status)}">{esc(i.name)}: {esc(i.status)}</span>'
                    f" — {esc(i.text)}</li>" for i in v.checklist)
    theory = ""
    if v.expected_tokens_per_step is not None or v.measured_tokens_per_step is not None:
        e = f"{v.expected_tokens_per_step:.2f}" if v.expected_tokens_per_step is not None else "n/a"
        m = f"{v.measured_tokens_per_step:.2f}" if v.measured_tokens_per_step is not None else "n/a"
        a = f"{v.acceptance_rate:.2f}" if v.acceptance_rate is not None else "n/a"
        k = v.num_spec_tokens if v.num_spec_tokens is not None else "n/a"
        theory = (f'<p class="sv-muted">Tokens per verification step: measured <b>{esc(m)}</b>; theory '
                  f"(1 - a<sup>k+1</sup>) / (1 - a) with a = {esc(a)}, k = {esc(k)}: <b>{esc(e)}</b>. "
                  "(The theory assumes each draft token is accepted independently; real drafts are not.)</p>")
    arm = f' data-arm="{esc(v.arm)}"' if v.arm else ""
    reconcile = f'<p class="sv-reconcile">{esc(v.reconcile)}</p>' if v.reconcile else ""
    return (f'<div class="sv-verdict" data-preset="{esc(v.preset)}" data-temperature="{esc(v.temperature)}"{arm} '
            f'data-decision="{esc(v.decision)}"><span class="sv-decision {cls}">{esc(DECISION_LABELS[v.decision])}'
            f'</span><b>{esc(v.title)}</b> at {esc(fmt_temperature(v.temperature))}'
            f'<p>{esc(v.headline)}</p>{reconcile}<ul class="sv-check">{items}</ul>{theory}</div>')


SIDE_HEADS = ["output tok/s", "decode tok/s", "TTFT p50", "TTFT p95", "ITL p50", "ITL p95", "e2e p50",
              "e2e p95", "prefill share", "KV peak", "ok"]


def server_rows(result: SweepResult) -> list[dict[str, object]]:
    """The servers table's rows, in words: who, URL, state at start (with vLLM's version), model and draft settings."""
    rows: list[dict[str, object]] = []
    for s in result.servers:
        spec = "none (baseline)" if s.side == "baseline" else (
            f"{s.spec_method or 'method n/a'}, k={s.spec_num_tokens if s.spec_num_tokens is not None else 'n/a'}")
        state = "up" if s.healthy else f"down: {s.error}"
        key = s.arm if s.arm in result.server_versions else s.side
        if key in result.server_versions:
            state += f" (vLLM {result.server_versions[key]})"
        rows.append({"who": s.side + (f" ({s.arm})" if s.arm else ""), "url": s.url, "state": state,
                     "model": s.model or "n/a", "max_model_len": s.max_model_len or "n/a", "spec": spec})
    return rows


def settings_rows(result: SweepResult) -> list[tuple[str, object]]:
    """The sweep's settings and the machine, a (name, value) row each."""
    sp = result.spec
    m = result.machine
    temps = ", ".join(f"{t:g}" for t in sp.temperatures) if sp.temperatures is not None else "each preset's own"
    rate = (result.rate or {}).get("rate")
    rows = [
        ("presets", ", ".join(sp.presets) or "none"),
        ("workload file", f"{sp.workload.name} ({sp.workload.requests} requests)" if sp.workload else "none"),
        ("concurrency", ", ".join(map(str, sp.concurrency))) if rate is None else
        ("requests per second (open loop)", ", ".join(f"{r:g}" for r in rate["rates"])),
        ("temperatures", temps + ("; the workload file's requests: each their own" if sp.workload else "")),
        ("repeats", sp.repeats), ("warm-up batches per cell", sp.warmup),
        ("max tokens", sp.max_tokens or "each preset's (request's) own"),
        ("redacted", "yes: no prompt or answer text in any output" if sp.redact else "no"),
        ("order", "sequential A/B: baseline batch, then speculative batch, each server alone"
         if sp.order == "sequential" else "simultaneous: both batches at once (they compete)"),
    ]
    if rate is not None:  # an open-loop step sends each request once, at its own temperature, no warm-up
        length = f"{rate['duration_s']:g} s of arrivals" if rate.get("duration_s") else f"{rate['requests']} requests"
        rows = [r for r in rows if r[0] not in ("temperatures", "repeats", "warm-up batches per cell", "order")]
        rows += [("each step", f"{length}, {rate['arrivals']} arrivals (seed {rate['seed']}), bound: the window "
                  f"plus {rate['drain_s']:g} s"),
                 ("order", "sequential: the step's schedule to the baseline, then to each arm, each server alone")]
    if m is not None:
        rows += [("machine", m.platform), ("python", m.python), ("CPUs", m.cpu_count or "n/a"),
                 ("memory", f"{m.memory_total_gb} GB" if m.memory_total_gb else "n/a"),
                 ("GPUs", ", ".join(m.gpus) or "none seen by nvidia-smi")]
    return rows


def report_html(result: SweepResult) -> str:
    """The whole report.html (templates/report.html.j2): one self-contained page with verdicts, figures,
    tables and settings. Every value is autoescaped; the Markup ones below are each safe for the reason given."""
    # An open-loop sweep (results.json "rate") shows its rate steps where a concurrency sweep has its cells.
    rated = load_result(result)
    rec = result.recommendation if rated is None or rated.rate_summary is None else rated.rate_summary.recommendation
    return render(
        "report.html.j2",
        **report_assets(),
        when=result.started_at.strftime("%Y-%m-%d %H:%M UTC"), rated=rated is not None,
        steps=0 if rated is None else len(rated.rate_steps), interrupted=result.interrupted,
        # summary_paragraph, verdicts_html, workload_sections, schedule_html and rate_section_html escape
        # every value they show (demo.fmt.esc); figures_html is Plotly's own div and JSON.
        summary=Markup(summary_paragraph(result)) if rated is None else "",
        count=f"{len(result.cells)} cell(s)" if rated is None else f"{len(rated.rate_steps)} rate step(s)",
        verdict_basis=VERDICT_BASIS,
        per=("Each is given per repeat: the median, and the range over repeats." if rated is None else
             "Each is given per rate step, over the step's finished requests."),
        verdicts=[Markup(verdicts_html(v)) for v in result.verdicts],
        workload_sections=Markup(workload_sections(result)),
        schedule=Markup(schedule_html(rec)),
        rate_section=Markup(rate_section_html(result)) if rated is not None else "",
        figs=Markup(figures_html(all_figures(result))) if rated is None else "",
        cells=result.cells, several_arms=any(len(c.arms) > 1 for c in result.cells), side_heads=SIDE_HEADS,
        times=TIMES, redact=result.spec.redact, server_rows=server_rows(result), settings_rows=settings_rows(result))
