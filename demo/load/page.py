"""A load sweep's files (``python -m demo load --out DIR`` and the page's Download button):
load.json (every figure), load.html (one self-contained page: the two curves, the crossover's
sentence and a table of every step; no network, Plotly is inline as in the evaluator's report)
and load.png (both curves on one 16:9 slide, demo/load/png.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from plotly.offline import get_plotlyjs

from common.files import atomic_write
from demo.assets import REPORT_CSP as CSP
from demo.assets import REPORT_CSS as CSS
from demo.charts import figures_html
from demo.fmt import esc, fmt_number, fmt_percent, fmt_speedup, or_na
from demo.load.engine import SIDES, LoadResult, LoadSide
from demo.load.figures import SLIDE_HEIGHT_PX, SLIDE_WIDTH_PX, per_user_figure, slide_figure, total_figure
from demo.load.png import PngUnavailable, figure_png
from demo.load.rate_page import rate_html, rate_slide
from demo.sweep.tables import schedule_html

FILES = ("load.json", "load.html", "load.png")


class Written(NamedTuple):
    """The files written, and why the PNG is not among them when it is not (one line)."""

    paths: list[Path]
    png_note: str | None = None


def write_files(result: LoadResult, out: Path, png: bool = True) -> Written:
    """load.json and load.html into ``out`` (created), and load.png with ``png`` (seconds: a
    browser renders it). Each file is written whole. OSError when ``out`` cannot be written; a
    PNG that cannot be made here is a note, never a failure."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / FILES[0], out / FILES[1]]
    atomic_write(paths[0], result.model_dump_json(indent=1))
    atomic_write(paths[1], rate_html(result) if result.spec.rate is not None else load_html(result))
    if not png:
        return Written(paths)
    try:
        slide = (rate_slide(result, SLIDE_WIDTH_PX, SLIDE_HEIGHT_PX) if result.spec.rate is not None
                 else slide_figure(result))
        data = figure_png(slide, SLIDE_WIDTH_PX, SLIDE_HEIGHT_PX)
    except PngUnavailable as e:
        return Written(paths, str(e))
    atomic_write(out / FILES[2], data)
    return Written([*paths, out / FILES[2]])


def _cells(s: LoadSide) -> str:
    ms = [None if v is None else v * 1000 for v in (s.ttft_p95_s, s.itl_p95_s)]
    values = [fmt_number(s.per_user_decode_tokens_per_s, 1), fmt_number(s.per_user_decode_tokens_per_s_min, 1),
              fmt_number(s.per_user_decode_tokens_per_s_max, 1), fmt_number(s.output_tokens_per_s, 1),
              fmt_number(ms[0], 0), fmt_number(ms[1], 0), fmt_number(s.num_requests_waiting_peak, 0),
              fmt_percent(s.kv_cache_usage_peak_perc, 0), fmt_number(s.num_preemptions, 0)]
    return "".join(f"<td>{esc(or_na(v))}</td>" for v in values)


def steps_table(result: LoadResult) -> str:
    """The steps as an escaped HTML table: a row per server per step with its figures and the speedups."""
    head = ("users", "side", "per-user decode tok/s", "slowest", "fastest", "total output tok/s", "TTFT p95 ms",
            "ITL p95 ms", "queue peak", "KV-cache peak", "preemptions", "speedup (per-user)", "throughput ratio")
    rows = []
    for step in result.steps:
        several = len(step.arms) > 1
        sides: list[tuple[str, LoadSide, str]] = (
            [("baseline", step.baseline, "")]
            + [(n, a.side, f"<td>{esc(or_na(fmt_speedup(a.speedup)))}</td>"
                           f"<td>{esc(or_na(fmt_speedup(a.throughput_ratio)))}</td>") for n, a in step.arms.items()]
            if several else [(side, getattr(step, side), "") for side in SIDES])
        span = len(sides)
        for i, (name, side, own) in enumerate(sides):
            if several:  # each arm's own ratios on its row; none on the baseline's
                ratio = own or "<td></td><td></td>"
            elif i == 0:
                ratio = (f'<td rowspan="{span}">{esc(or_na(fmt_speedup(step.speedup)))}</td>'
                         f'<td rowspan="{span}">{esc(or_na(fmt_speedup(step.throughput_ratio)))}</td>')
            else:
                ratio = ""
            users = f'<td rowspan="{span}">{step.users}</td>' if i == 0 else ""
            rows.append(f'<tr>{users}<td class="l">{esc(name)}</td>{_cells(side)}{ratio}</tr>')
        rows += [f'<tr><td></td><td class="l err" colspan="{len(head) - 1}">{esc(e)}</td></tr>' for e in step.errors]
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<div class="scroll"><table><tr>{header}</tr>{"".join(rows)}</table></div>'


def load_html(result: LoadResult) -> str:
    """The saved load sweep's page (load.html): figures, steps table, crossover and settings, self-contained."""
    figs = figures_html((("per-user", per_user_figure(result)), ("total", total_figure(result))))
    sp = result.spec
    when = result.started_at.strftime("%Y-%m-%d %H:%M UTC")
    order = ("sequential A/B: baseline batch, then speculative, each server alone" if sp.order == "sequential"
             else "simultaneous: both batches at once (they compete)")
    slo = ""
    if sp.slo is not None and result.slo_users:
        slo = "".join(f"<li>{esc(side)}: " + (f"up to {n} users" if (n := result.slo_users.get(side)) is not None
                                               else "no measured count") + "</li>" for side in SIDES)
        slo = f"<h2>Within {esc(sp.slo.describe())}</h2><ul>{slo}</ul>"
    lead = f'<p class="lead" id="crossover">{esc(result.crossover.text)}.</p>'
    if len(result.crossovers) > 1:
        lead = (f'<p class="lead" id="arms">{esc(result.arms_text)}.</p><ul id="crossovers">'
                + "".join(f'<li data-arm="{esc(n)}">{esc(n)}: {esc(c.text)}</li>' for n, c in result.crossovers.items())
                + "</ul>")
    if sp.slo is not None and len(result.crossovers) > 1 and result.slo_users:
        slo = "".join(f"<li>{esc(who)}: " + (f"up to {n} users" if n is not None else "no measured count") + "</li>"
                      for who, n in result.slo_users.items() if who != "speculative")
        slo = f"<h2>Within {esc(sp.slo.describe())}</h2><ul>{slo}</ul>"
    banner = '<p class="banner">Interrupted: the steps below are those measured.</p>' if result.interrupted else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Speculative decoding under load: {esc(sp.workload)}, {esc(when)}</title>
<style>{CSS}</style>
<script>{get_plotlyjs()}</script>
</head><body><main>
<h1>Where speculation stops paying: {esc(sp.workload)}</h1>
{lead}
<p class="muted">Load sweep of {esc(when)}: users {esc(", ".join(map(str, sp.users)))}; {sp.max_tokens} tokens;
{esc(order)}; {sp.repeats} repeat(s), {sp.warmup} warm-up batch(es) per step. Speedup = per-user decode
tokens/s (median over users), speculative over baseline; throughput ratio = total output tokens/s over
total.</p>
{banner}
{figs}
{slo}
<h2>Recommended schedule</h2>
{schedule_html(result.recommendation)}
<h2>Every step</h2>
{steps_table(result)}
</main></body></html>
"""
