"""Plotly figures of a sweep, shared by report.html and the Evaluate tab. They plot the
figures demo.sweep.pooling pooled; the one subtraction here (decode time = e2e p50 - TTFT p50)
splits a bar into its two parts.
"""

from __future__ import annotations

import plotly.graph_objects as go

from demo import palette
from demo.charts import COLORS, empty_figure, layout
from demo.fmt import fmt_percent, fmt_speedup, fmt_temperature
from demo.sweep.models import CellResult, SweepResult, WorkloadVerdict

PALETTE = [palette.ACCENT, palette.BLUE, palette.GREEN, palette.ALERT, palette.VIOLET, palette.TEXT, palette.BASELINE]
_LAYOUT = layout(
    margin=dict(l=70, r=20, t=60, b=60),
    height=380,
    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1.0),
)


def _empty(title: str, message: str) -> go.Figure:
    return empty_figure(title, message, _LAYOUT)


def workload_name(cell: CellResult, arm: str | None = None) -> str:
    """The series' name: the workload, and the arm (a sweep of several)."""
    return f"{cell.settings.preset} {fmt_temperature(cell.settings.temperature)}" + (f" {arm}" if arm else "")


def throughput_figure(result: SweepResult) -> go.Figure:
    """The throughput ratio (aggregate output tokens/s, speculative over baseline) by workload and
    concurrency, bars span the repeats: what the verdict rests on."""
    title = "Throughput ratio by preset and concurrency"
    several = any(len(c.arms) > 1 for c in result.cells)
    # With several arms, a series per workload and arm (each arm's cells seen as a one-arm cell).
    named = ([(workload_name(c, a), c.arm_view(a)) for c in result.cells for a in c.arms] if several
             else [(workload_name(c), c) for c in result.cells])
    named = [(n, c) for n, c in named if c.throughput_ratio is not None]
    if not named:
        return _empty(title, "n/a: no cell produced a throughput ratio")
    fig = go.Figure()
    names = list(dict.fromkeys(n for n, _ in named))
    for i, name in enumerate(names):
        mine = sorted((c for n, c in named if n == name), key=lambda c: c.settings.concurrency)
        spans = [s for c in mine if (s := c.throughput_ratio) is not None]  # all of them: cells were filtered above
        med = [s.median for s in spans]
        fig.add_trace(go.Bar(
            name=name, x=[str(c.settings.concurrency) for c in mine], y=med,
            marker_color=PALETTE[i % len(PALETTE)],
            text=[fmt_speedup(m) for m in med], textposition="outside",
            error_y=dict(type="data", symmetric=False,
                         array=[s.max - s.median for s in spans],
                         arrayminus=[s.median - s.min for s in spans]),
        ))
    fig.add_hline(y=1.0, line_dash="dash", line_color=palette.TEXT_DIM, annotation_text="no gain",
                  annotation_position="top left")
    fig.update_layout(title=title, xaxis_title="concurrent requests",
                      yaxis_title="throughput ratio (x, output tokens/s)", barmode="group", **_LAYOUT)
    return fig


def cell_acceptance_figure(result: SweepResult) -> go.Figure:
    """Acceptance rate by temperature, one line per preset (pooled over concurrencies)."""
    title = "Acceptance by temperature"
    # Each request's own temperature (a workload file) has no place on a temperature axis.
    # With several arms, a line per preset and arm (each arm's own verdict holds its acceptance).
    every = [a for v in result.verdicts for a in (v.per_arm or [v])]
    points = [v for v in every if v.acceptance_rate is not None and v.temperature is not None]
    if not points:
        return _empty(title, "n/a: no acceptance figures (see the cells' reasons)")
    fig = go.Figure()

    def series(v: WorkloadVerdict) -> str:
        return v.preset + (f" {v.arm}" if v.arm else "")

    presets = list(dict.fromkeys(series(v) for v in points))
    for i, p in enumerate(presets):
        mine = sorted((v for v in points if series(v) == p), key=lambda v: v.temperature or 0.0)
        rates = [r for v in mine if (r := v.acceptance_rate) is not None]  # all of them: filtered above
        fig.add_trace(go.Scatter(
            name=p, x=[v.temperature for v in mine], y=[r * 100 for r in rates],
            mode="lines+markers+text", text=[fmt_percent(r) for r in rates],
            textposition="top center", marker=dict(size=12), line=dict(width=3, color=PALETTE[i % len(PALETTE)]),
        ))
    fig.update_layout(title=title, xaxis_title="temperature", yaxis_title="accepted drafted tokens (%)",
                      yaxis_range=[0, 110], **_LAYOUT)
    return fig


def time_split_figure(result: SweepResult) -> go.Figure:
    """Where a request's time goes: time to first token (prefill) vs decode, p50 per request."""
    title = "Time to first token vs decode (p50 per request)"
    rows = []
    for c in result.cells:
        # With several arms, a bar per arm, named by the arm.
        sides = ([("base", c.baseline), *((name, a.side) for name, a in c.arms.items())] if len(c.arms) > 1
                 else [("base", c.baseline), ("spec", c.speculative)])
        for short, side in sides:
            if side.ttft_p50_s is not None and side.e2e_p50_s is not None:
                rows.append((f"{workload_name(c)} c={c.settings.concurrency} {short}", side.side,
                             side.ttft_p50_s, max(0.0, side.e2e_p50_s - side.ttft_p50_s)))
    if not rows:
        return _empty(title, "n/a: no request finished")
    x = [r[0] for r in rows]
    fig = go.Figure([
        go.Bar(name="time to first token (prefill)", x=x, y=[r[2] for r in rows], marker_color=palette.BLUE),
        go.Bar(name="decode", x=x, y=[r[3] for r in rows],
               marker_color=[COLORS[r[1]] for r in rows]),
    ])
    fig.update_layout(title=title, barmode="stack", yaxis_title="seconds", **_LAYOUT)
    fig.update_xaxes(tickangle=-30)
    return fig


def all_figures(result: SweepResult) -> list[tuple[str, go.Figure]]:
    """The report's figures as (key, figure) pairs: throughput ratio, acceptance and time split."""
    return [("throughput", throughput_figure(result)), ("acceptance", cell_acceptance_figure(result)),
            ("time-split", time_split_figure(result))]
