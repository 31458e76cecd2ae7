"""An open-loop sweep's figures and page (load.html and load.png of ``load --rate --out DIR``): latency
percentiles against the offered rate and goodput (or, without an SLO, completed requests/s) against it,
one line per server; the capacity sentence, the crossovers and a table of every step. They draw
demo/load/rate.py's records and compute nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from markupsafe import Markup

from demo import palette
from demo.charts import COLORS, empty_figure, figures_html, layout
from demo.fmt import esc, fmt_speedup, or_na
from demo.load.rate_models import QUEUE_SOURCE, RUNNING_SOURCE, RateLoad, RateSide
from demo.load.rate_view import HEAD, rate_side_cells
from demo.pages import render, report_assets

if TYPE_CHECKING:
    from demo.load.engine import LoadResult

# The legend below the axis: six ITL lines wrap to three rows in the page's half-width panel, over the title.
_LAYOUT = layout(margin=dict(l=70, r=20, t=80, b=150), height=490,
                 legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0.0))
X_TITLE = "offered load (requests/s)"
DASHES = {"p50": "solid", "p95": "dash", "p99": "dot"}


def _servers(result: LoadResult) -> list[tuple[str, str, list[tuple[float, RateSide]]]]:
    """(name, colour, [(rate, figures)]) per server: the baseline, then each arm."""
    names = list(dict.fromkeys(n for s in result.rate_steps for n in s.arms))
    out = [("baseline", COLORS["baseline"], [(s.rate_requests_per_s, s.baseline) for s in result.rate_steps])]
    for i, n in enumerate(names):
        color = COLORS["speculative"] if len(names) == 1 else palette.arm_color(i)
        out.append((n, color, [(s.rate_requests_per_s, s.arms[n].side) for s in result.rate_steps if n in s.arms]))
    return out


def _x_axis(result: LoadResult, **extra: Any) -> dict[str, Any]:
    rates = [s.rate_requests_per_s for s in result.rate_steps]
    return dict(title=dict(text=X_TITLE), type="log", tickvals=rates, ticktext=[f"{r:g}" for r in rates], **extra)


def _latency_traces(result: LoadResult, axes: str = "") -> list[go.Scatter]:
    traces = []
    for name, color, pts in _servers(result):
        for p, dash in DASHES.items():
            xy = [(r, s.itl_s.get(p)) for r, s in pts if s.itl_s.get(p) is not None]
            traces.append(go.Scatter(x=[r for r, _ in xy], y=[v * 1000 for _, v in xy if v is not None],
                                     name=f"{name} ITL {p}", mode="lines+markers", legendgroup=name,
                                     line=dict(color=color, width=3, dash=dash), marker=dict(size=8),
                                     **({"xaxis": f"x{axes}", "yaxis": f"y{axes}"} if axes else {})))
    return traces


def _good_field(result: LoadResult) -> tuple[str, str]:
    rate = result.spec.rate
    if rate is not None and rate.slo.given:
        return "goodput_requests_per_s", f"goodput (req/s within {rate.slo.describe()})"
    return "completed_requests_per_s", "completed req/s (no SLO given: every finished request)"


def _goodput_traces(result: LoadResult, axes: str = "") -> list[go.Scatter]:
    field, _ = _good_field(result)
    where = {"xaxis": f"x{axes}", "yaxis": f"y{axes}"} if axes else {}
    rates = [s.rate_requests_per_s for s in result.rate_steps]
    traces = [go.Scatter(x=rates, y=[s.baseline.offered_requests_per_s for s in result.rate_steps], name="offered",
                         mode="lines", line=dict(color=palette.TEXT_DIM, dash="dot", width=2), **where)]
    for name, color, pts in _servers(result):
        xy = [(r, getattr(s, field)) for r, s in pts if getattr(s, field) is not None]
        traces.append(go.Scatter(x=[r for r, _ in xy], y=[v for _, v in xy], name=name, mode="lines+markers",
                                 line=dict(color=color, width=4), marker=dict(size=10), legendgroup=name,
                                 showlegend=not axes, **where))
    return traces


def latency_figure(result: LoadResult | None) -> go.Figure:
    """ITL p50, p95 and p99 (ms) against the offered rate, per server (None: the empty chart, before a sweep)."""
    title = "Inter-token latency against the offered rate"
    if result is None or not result.rate_steps:
        return empty_figure(title, "each step's point appears here as it ends", _LAYOUT)
    return go.Figure(data=_latency_traces(result), layout=dict(
        _LAYOUT, title=dict(text=title, x=0.01, xanchor="left",
                            subtitle=dict(text="solid p50, dashed p95, dotted p99")),
        xaxis=_x_axis(result), yaxis=dict(title=dict(text="ITL (ms)"), rangemode="tozero")))


def goodput_figure(result: LoadResult | None) -> go.Figure:
    """Goodput (or completed req/s) against the offered rate, per server, with the offered line (None: the
    empty chart, before a sweep)."""
    title = "What the servers delivered"
    if result is None or not result.rate_steps:
        return empty_figure(title, "each step's point appears here as it ends", _LAYOUT)
    _, y_title = _good_field(result)
    return go.Figure(data=_goodput_traces(result), layout=dict(
        _LAYOUT, title=dict(text=title, x=0.01, xanchor="left"), xaxis=_x_axis(result),
        yaxis=dict(title=dict(text=y_title), rangemode="tozero")))


def rate_slide(result: LoadResult, width_px: int, height_px: int) -> go.Figure:
    """Both figures side by side on one slide, the capacity sentence as its title (load.png)."""
    s = result.rate_summary
    sentence = s.capacity_text if s is not None else "no step measured yet"
    _, y_title = _good_field(result)
    return go.Figure(data=[*_latency_traces(result), *_goodput_traces(result, axes="2")], layout=dict(
        layout(margin=dict(l=80, r=30, t=140, b=80), width=width_px, height=height_px, font=dict(size=18),
               legend=dict(orientation="h", yanchor="bottom", y=-0.3, xanchor="center", x=0.5)),
        title=dict(text=f"{result.spec.workload}: {sentence}", x=0.5, font=dict(size=20)),
        xaxis=_x_axis(result, domain=[0.0, 0.46]), xaxis2=_x_axis(result, domain=[0.54, 1.0], anchor="y2"),
        yaxis=dict(title=dict(text="ITL (ms)"), rangemode="tozero"),
        yaxis2=dict(title=dict(text=y_title), rangemode="tozero", anchor="x2")))


def rate_table_html(result: LoadResult) -> str:
    """Every step as an escaped HTML table: a row per server, the arms' ratios and the notes."""
    rows = []
    width = len(HEAD)
    for step in result.rate_steps:
        for i, side in enumerate(step.servers()):
            first = f"{step.rate_requests_per_s:g}" if step.label is None else step.label
            cells = [first if i == 0 else "", side.name, *rate_side_cells(side)]
            rows.append("<tr>" + "".join(f'<td{" class=l" if j == 1 else ""}>{esc(c)}</td>'
                                         for j, c in enumerate(cells)) + "</tr>")
        notes = [f"{n}: speedup {or_na(fmt_speedup(a.speedup))}, throughput ratio "
                 f"{or_na(fmt_speedup(a.throughput_ratio))}, goodput ratio {or_na(fmt_speedup(a.goodput_ratio))}"
                 for n, a in step.arms.items()]
        notes += [f"saturated ({s.name}): {s.saturation_note}" for s in step.servers() if s.saturated]
        notes += [f"error ({s.name}): {e}" for s in step.servers() for e in s.errors]
        rows += [f'<tr><td></td><td class="l" colspan="{width - 1}">{esc(n)}</td></tr>' for n in notes]
    header = "".join(f"<th>{esc(h)}</th>" for h in HEAD)
    return f'<div class="scroll"><table><tr>{header}</tr>{"".join(rows)}</table></div>'


MIN_STEPS_FOR_CAPACITY = 2  # the panel states capacity and crossovers once this many rates are measured


def rate_capacity_html(result: LoadResult | None) -> str:
    """The load panel's lines for an open-loop sweep (escaped HTML): the capacity sentence and each arm's
    crossover in req/s once two rates are measured, the sweep's stop note; what is missing, before."""
    steps = result.rate_steps if result is not None else []
    s = result.rate_summary if result is not None else None
    if result is None or not steps:
        lines = ["Press Run sweep: the capacity and the crossover in requests/s are read off the rate steps as "
                 "they end."]
        state = "idle"
    elif len(steps) < MIN_STEPS_FOR_CAPACITY or s is None:
        lines = [f"{len(steps)} rate measured: the capacity and the crossover need {MIN_STEPS_FOR_CAPACITY}."]
        state = "so-far"
    else:
        rate = result.spec.rate
        running = rate is not None and len(steps) < len(rate.rates) and not result.interrupted and not s.stopped_note
        lines = [("So far: " if running else "Capacity: ") + s.capacity_text + "."]
        lines += [f"{n}: {c.text}." for n, c in s.crossovers.items()]
        state = "so-far" if running else "final"
    if s is not None and s.stopped_note:
        lines.append(s.stopped_note[0].upper() + s.stopped_note[1:] + ".")
    body = "".join(f'<div class="sd-load-sentence">{esc(line)}</div>' for line in lines)
    return f'<div class="sd-load-crossover" data-state="{state}" data-mode="rate">{body}</div>'


def summary_html(result: LoadResult) -> str:
    """The capacity sentence (``id="capacity"``), how each capacity was found (or why not), the crossovers
    in req/s and why the sweep stopped early: load.html's and report.html's words over the rate steps."""
    s = result.rate_summary
    html = f'<p class="lead" id="capacity">{esc(s.capacity_text if s else "no step measured yet")}.</p>'
    if s is not None:
        html += "<ul>" + "".join(f"<li>{esc(n)}: {esc(c.method or c.na_reason or '')}</li>"
                                 for n, c in s.capacity.items()) + "</ul>"
        html += '<ul id="crossovers">' + "".join(f"<li>{esc(n)}: {esc(c.text)}</li>"
                                                 for n, c in s.crossovers.items()) + "</ul>"
        if s.stopped_note:
            html += f"<p>{esc(s.stopped_note)}.</p>"
    return html


def schedule_html(rate: RateLoad) -> str:
    """A rate sweep's schedule in words (escaped HTML): "0.5, 1, 2 req/s, poisson arrivals (seed 0), 20
    requests per step", gamma's burstiness named; load.html's and report.html's."""
    length = f"{rate.duration_s:g} s of arrivals" if rate.duration_s else f"{rate.requests} requests"
    law = rate.arrivals + (f" (burstiness {rate.burstiness:g})" if rate.arrivals == "gamma" else "")
    rates = ", ".join(f"{r:g}" for r in rate.rates)
    return f"{esc(rates)} req/s, {esc(law)} arrivals (seed {rate.seed}), {esc(length)} per step"


def rate_html(result: LoadResult) -> str:
    """load.html of an open-loop sweep (templates/rate.html.j2): the capacity sentence, the crossovers, both
    figures and every step. Every value is autoescaped; the Markup ones are each safe for the reason given."""
    rate = result.spec.rate
    assert rate is not None
    return render(
        "rate.html.j2", **report_assets(), workload=result.spec.workload,
        when=result.started_at.strftime("%Y-%m-%d %H:%M UTC"), rate=rate, replay=rate.replay,
        max_tokens=result.spec.max_tokens, queue_source=QUEUE_SOURCE, running_source=RUNNING_SOURCE,
        interrupted=result.interrupted,
        # summary_html, schedule_html and rate_table_html escape every value they show (demo.fmt.esc);
        # figures_html is Plotly's own divs and JSON.
        summary=Markup(summary_html(result)), schedule=Markup(schedule_html(rate)),
        figs=Markup(figures_html((("latency", latency_figure(result)), ("goodput", goodput_figure(result))))),
        table=Markup(rate_table_html(result)))
